"""The two backends the warehouse contract suite runs on, behind one small test interface.

- :class:`DuckDBBackend`: :class:`~bq_platform.lib.warehouse.duckdb.warehouse.DuckDBWarehouse` on a
  temporary file; Parquet files are local paths.
- :class:`BigQueryBackend`: the production
  :class:`~bq_platform.lib.warehouse.bigquery.warehouse.BigQueryWarehouse` on bqemulator, through a
  :class:`~bq_platform_tests.http_recording.RecordingSession` answered by
  :class:`~bq_platform_tests.bigquery_shim.BigQueryShim` where the emulator lacks a BigQuery
  behaviour; Parquet files are uploaded to gcp-storage-emulator with google-cloud-storage and
  loaded from their ``gs://`` URIs.

A backend makes a new warehouse object per "run" (:meth:`Backend.warehouse`), so the ensure
cache and the table listing start empty as in a new process. The helpers at the end build the
jobs the contract tests run (hourly loads into stage tables, the daily copy).
"""

import abc
import datetime as dt
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bq_platform.lib.core.job_ids import job_id, job_labels, sha256_json
from bq_platform.lib.publish.idempotent_jobs import JobOutcome, run_idempotent_job
from bq_platform.lib.warehouse.base import CopyJob, LoadJob, Warehouse
from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse
from bq_platform.lib.warehouse.duckdb.history import JOBS_TABLE
from bq_platform.lib.warehouse.duckdb.layout import TABLES_TABLE
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.schema import PAGEVIEW_COLUMNS, TableSpec, pageviews_spec, stage_spec
from bq_platform_tests.bigquery_shim import BigQueryShim
from bq_platform_tests.emulators import BigQueryEmulator, GCSEmulator
from bq_platform_tests.http_recording import RecordingSession

RUN_ID = "run-contract"

_ARROW_TYPES = {
    "STRING": pa.string(),
    "INT64": pa.int64(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "DATE": pa.date32(),
}
PAGEVIEW_ARROW_SCHEMA = pa.schema(
    [
        pa.field(c.name, _ARROW_TYPES[c.type], nullable=c.mode != "REQUIRED")
        for c in PAGEVIEW_COLUMNS
    ]
)


def pageview_parquet(hour: dt.datetime, rows: int, tag: str = "a", site: str = "epa.gov") -> bytes:
    """Parquet bytes of ``rows`` pageviews in UTC ``hour`` (PAGEVIEW_COLUMNS, in order).

    ``tag`` goes into every ``event_id`` (``<YYYYMMDDHH>-<tag>-<i>``), so two contents of one
    hour are told apart by their rows.
    """
    ts = [hour + dt.timedelta(seconds=i) for i in range(rows)]
    data: dict[str, list[Any]] = {c.name: [None] * rows for c in PAGEVIEW_COLUMNS}
    data.update(
        event_id=[f"{hour:%Y%m%d%H}-{tag}-{i}" for i in range(rows)],
        event_ts=ts,
        event_date=[t.date() for t in ts],
        site=[site] * rows,
        visitor_id=[f"v{i % 3}" for i in range(rows)],
        page_path=[f"/page/{i}.html" for i in range(rows)],
        http_method=["GET"] * rows,
        http_protocol=["HTTP/1.0"] * rows,
        status=[200] * rows,
        response_bytes=[1000 + i for i in range(rows)],
        traffic_class=["human"] * rows,
    )
    buffer = io.BytesIO()
    pq.write_table(pa.table(data, schema=PAGEVIEW_ARROW_SCHEMA), buffer)
    return buffer.getvalue()


class Backend(abc.ABC):
    """One warehouse backend under test."""

    name: str

    @abc.abstractmethod
    def warehouse(self) -> Warehouse:
        """A new warehouse object: a new run, with empty caches."""

    @abc.abstractmethod
    def put_file(self, key: str, data: bytes) -> str:
        """Store a Parquet file where load jobs read it; return its URI (or path)."""

    @abc.abstractmethod
    def uri(self, key: str) -> str:
        """The URI ``put_file(key, ...)`` returns (the file need not exist yet)."""

    @abc.abstractmethod
    def drop_table(self, table: str) -> None:
        """Drop a table behind the warehouse's back (expiry, or an operator's ``bq rm``)."""

    @abc.abstractmethod
    def event_ids(self, table: str) -> list[str]:
        """The ``event_id`` of every row of ``table``, sorted (the test's own scan)."""

    @abc.abstractmethod
    def activity(self, warehouse: Warehouse) -> int:
        """How much ``warehouse`` has sent or run so far (BigQuery: HTTP requests; DuckDB: jobs
        run and tables created), to prove a refused request sent nothing."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the backend opened."""


class DuckDBBackend(Backend):
    """The local warehouse on a temporary file."""

    name = "duckdb"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "warehouse.duckdb"
        self.opened: list[DuckDBWarehouse] = []

    def warehouse(self) -> DuckDBWarehouse:
        warehouse = DuckDBWarehouse(self.path, lock_timeout_s=5.0)
        self.opened.append(warehouse)
        return warehouse

    def uri(self, key: str) -> str:
        return str(self.root / "files" / key)

    def put_file(self, key: str, data: bytes) -> str:
        path = Path(self.uri(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return str(path)

    def drop_table(self, table: str) -> None:
        self.warehouse().drop_table(table)

    def event_ids(self, table: str) -> list[str]:
        rows = self.warehouse().query(f'SELECT event_id FROM "{table}"')  # noqa: S608 - test names
        return sorted(r["event_id"] for r in rows)

    def activity(self, warehouse: Warehouse) -> int:
        assert isinstance(warehouse, DuckDBWarehouse)
        (jobs,) = warehouse.query(f"SELECT count(*) AS n FROM {JOBS_TABLE}")
        (tables,) = warehouse.query(f"SELECT count(*) AS n FROM {TABLES_TABLE}")
        return int(jobs["n"]) + int(tables["n"])

    def close(self) -> None:
        for warehouse in self.opened:
            warehouse.close()


class BigQueryBackend(Backend):
    """The production adapter on bqemulator, answered by the shim where the emulator lacks
    BigQuery's behaviour, with gs:// files in gcp-storage-emulator."""

    name = "bigquery"

    def __init__(self, bq: BigQueryEmulator, gcs: GCSEmulator, bucket: str, dataset: str) -> None:
        self.bq, self.dataset, self.bucket = bq, dataset, bucket
        self.gcs = gcs.client()
        self.shim = BigQueryShim(bq.endpoint, bq.project)
        self.sessions: list[RecordingSession] = []

    def warehouse(self) -> BigQueryWarehouse:
        session = self.shim.session()
        self.sessions.append(session)
        # job IDs are project-wide and the tests share one project: a prefix per dataset
        return self.bq.warehouse(self.dataset, session, job_id_prefix=f"{self.dataset}_")

    def session_of(self, warehouse: Warehouse) -> RecordingSession:
        """The recording session ``warehouse`` sends through."""
        assert isinstance(warehouse, BigQueryWarehouse)
        return warehouse.client._http

    def uri(self, key: str) -> str:
        return f"gs://{self.bucket}/{key}"

    def put_file(self, key: str, data: bytes) -> str:
        assert "=" not in key  # GAP-HIVE: the emulator reads key=value folders as columns
        self.gcs.bucket(self.bucket).blob(key).upload_from_string(data)
        return self.uri(key)

    def drop_table(self, table: str) -> None:
        self.shim.backend.delete_table(f"{self.bq.project}.{self.dataset}.{table}")

    def event_ids(self, table: str) -> list[str]:
        sql = f"SELECT event_id FROM `{self.bq.project}.{self.dataset}.{table}`"
        return sorted(r["event_id"] for r in self.shim.backend.query(sql).result())

    def activity(self, warehouse: Warehouse) -> int:
        return len(self.session_of(warehouse).calls)

    def close(self) -> None:
        for session in self.sessions:
            session.close()
        self.shim.close()


# -- helpers of the contract tests -------------------------------------------------------


def load_factory(
    hour: dt.datetime, uris: list[str], fingerprint: str, table: str | None = None
) -> Callable[[int], LoadJob]:
    """The WRITE_TRUNCATE load of ``uris`` into ``hour``'s stage table, per generation."""
    spec = stage_spec("full", hour)
    partition = f"{hour:%Y%m%d%H}"

    def make(generation: int) -> LoadJob:
        return LoadJob(
            job_id=job_id("load", spec.name, partition, fingerprint, generation),
            destination=table or spec.name,
            source_uris=tuple(uris),
            spec=spec,
            labels=job_labels("stage_tables", partition, RUN_ID, fingerprint),
        )

    return make


def load_hour(
    backend: Backend,
    warehouse: Warehouse,
    hour: dt.datetime,
    rows: int,
    tag: str = "a",
    day_of_rows: dt.datetime | None = None,
) -> JobOutcome:
    """Load ``rows`` pageviews (event_ids tagged ``tag``; timestamps in ``day_of_rows`` if
    given) into ``hour``'s stage table through the job state machine."""
    key = f"staging/{hour:%Y%m%d%H}-{tag}/part-0.parquet"
    uri = backend.put_file(key, pageview_parquet(day_of_rows or hour, rows, tag))
    fingerprint = sha256_json([hour.isoformat(), tag, rows])
    make = load_factory(hour, [uri], fingerprint)
    warehouse.ensure_table(stage_spec("full", hour))
    return run_idempotent_job(
        warehouse, make, fingerprint=fingerprint, partition=f"{hour:%Y%m%d%H}"
    )


def stage(backend: Backend, warehouse: Warehouse, hour: dt.datetime, rows: int) -> None:
    """Fill ``hour``'s stage table with one job, without the state machine (test set-up)."""
    uri = backend.put_file(f"staging/{hour:%Y%m%d%H}/p.parquet", pageview_parquet(hour, rows))
    warehouse.ensure_table(stage_spec("full", hour))
    job = load_factory(hour, [uri], sha256_json([hour.isoformat(), rows]))(0)
    assert warehouse.submit_job(job).succeeded


def publish(
    warehouse: Warehouse,
    day: dt.date,
    hours: list[dt.datetime],
    fingerprint: str,
    decorate: bool = True,
) -> JobOutcome:
    """One WRITE_TRUNCATE copy of the hours' stage tables into ``pageviews$YYYYMMDD``.

    Each source names its partition of ``day`` (``stage$YYYYMMDD``, as
    :func:`bq_platform.lib.publish.protocol.day_copy_plan` does) unless ``decorate`` is False.
    """
    spec = pageviews_spec(require_partition_filter=False)  # GAP-RPF: the emulator drops it
    warehouse.ensure_table(spec)
    partition = f"{day:%Y%m%d}"

    def make(generation: int) -> CopyJob:
        return CopyJob(
            job_id=job_id("copy", spec.name, partition, fingerprint, generation),
            sources=tuple(
                stage_spec("full", h).name + (f"${partition}" if decorate else "") for h in hours
            ),
            destination=f"{spec.name}${partition}",
            labels=job_labels("pageviews", partition, RUN_ID, fingerprint),
        )

    return run_idempotent_job(warehouse, make, fingerprint=fingerprint, partition=partition)


def layout(spec: TableSpec | None) -> tuple[Any, ...]:
    """What the contract compares of a table: name, columns, partitioning, clustering, labels
    (not descriptions, expiration or ``require_partition_filter``: GAP-RPF/GAP-EXPIRES)."""
    assert spec is not None
    columns = tuple((c.name, c.type, c.mode) for c in spec.columns)
    return (spec.name, columns, spec.partition_field, tuple(spec.clustering), dict(spec.labels))
