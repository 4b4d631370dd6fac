"""Pageview rows, Parquet files and jobs for the DuckDB warehouse tests.

Small Parquet inputs are written with pyarrow (TIMESTAMP_MICROS, UTC, as Spark writes them).
"""

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bq_platform.lib.warehouse.base import (
    LoadJob,
)
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.schema import (
    PAGEVIEW_COLUMNS,
    TableSpec,
    stage_spec,
)

UTC = dt.UTC
HOUR = dt.datetime(1995, 8, 1, 4, tzinfo=UTC)
DAY1 = dt.date(1995, 8, 1)
DAY2 = dt.date(1995, 8, 2)
ARROW = {
    "STRING": pa.string(),
    "INT64": pa.int64(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "DATE": pa.date32(),
}
PAGEVIEW_SCHEMA = pa.schema([pa.field(c.name, ARROW[c.type]) for c in PAGEVIEW_COLUMNS])


def pageviews(hour: dt.datetime, n: int, *, site: str = "epa.gov", tag: str = "a") -> list[dict]:
    """``n`` pageview rows in ``hour``; ``tag`` makes event IDs differ between versions."""
    return [
        {
            "event_id": f"{tag}-{hour:%Y%m%d%H}-{i}",
            "event_ts": hour + dt.timedelta(minutes=i),
            "event_date": hour.date(),
            "site": site,
            "visitor_id": f"v{i % 3}",
            "page_path": f"/page/{i}.html",
            "query_string": None,
            "http_method": "GET",
            "http_protocol": "HTTP/1.0",
            "status": 200,
            "response_bytes": 100 + i,
            "referrer": None,
            "user_agent": None,
            "traffic_class": "human",
        }
        for i in range(n)
    ]


def write_parquet(path: Path, rows: Sequence[dict], schema: pa.Schema = PAGEVIEW_SCHEMA) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), path)
    return str(path)


def load(
    job_id: str,
    spec: TableSpec,
    uris: Sequence[str],
    destination: str | None = None,
    disposition: str = "WRITE_TRUNCATE",
) -> LoadJob:
    return LoadJob(
        job_id=job_id,
        destination=destination or spec.name,
        source_uris=tuple(uris),
        spec=spec,
        write_disposition=disposition,  # type: ignore[arg-type]
        labels={"app": "bq_platform", "partition": f"{HOUR:%Y%m%d%H}"},
    )


def stage(
    wh: DuckDBWarehouse, tmp_path: Path, hour: dt.datetime, rows: list[dict], job: str
) -> str:
    """Load ``rows`` into the hour's stage table; return the table name."""
    spec = stage_spec("full", hour)
    wh.ensure_table(spec)
    uri = write_parquet(tmp_path / "in" / job / f"hour={hour:%Y-%m-%dT%H}" / "part-0.parquet", rows)
    status = wh.submit_job(load(job, spec, [uri]))
    assert status.succeeded, status
    return spec.name


def event_ids(wh: DuckDBWarehouse, table: str) -> list[str]:
    return [r["event_id"] for r in wh.query(f"SELECT event_id FROM {table} ORDER BY event_id")]
