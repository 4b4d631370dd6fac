"""The job state machine (:mod:`bq_platform.lib.publish.idempotent_jobs`) end to end on the DuckDB
warehouse:
loads and the day's copy run once per content, and run again when the table that held their
output expired, was dropped, or was written by someone else.
"""

import dataclasses
import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bq_platform.lib.core.job_ids import job_id
from bq_platform.lib.publish.idempotent_jobs import JobOutcome, run_idempotent_job
from bq_platform.lib.publish.quota import JobBudget, QuotaBudgetExceededError
from bq_platform.lib.warehouse.base import JobFailedError, LoadJob
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.schema import PAGEVIEW_COLUMNS, pageviews_spec
from bq_platform_tests.lib.fake_warehouse import (
    DAY,
    DAY_PARTITION,
    FP_A,
    FP_B,
    HOUR,
    STAGE,
    UTC,
    cid,
    run,
)

ARROW = {
    "STRING": pa.string(),
    "INT64": pa.int64(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "DATE": pa.date32(),
}
SCHEMA = pa.schema([pa.field(c.name, ARROW[c.type]) for c in PAGEVIEW_COLUMNS])


def write_hour(path: Path, hour: dt.datetime, n: int, tag: str) -> str:
    rows = [
        {
            "event_id": f"{tag}-{i}",
            "event_ts": hour + dt.timedelta(seconds=i),
            "event_date": hour.date(),
            "site": "epa.gov",
            "visitor_id": "v",
            "page_path": "/",
            "http_method": "GET",
            "http_protocol": "HTTP/1.0",
            "status": 200,
            "traffic_class": "human",
        }
        for i in range(n)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    return str(path)


def load_job(uris: Sequence[str], fingerprint: str, generation: int) -> LoadJob:
    return LoadJob(
        job_id=job_id("load", STAGE.name, f"{HOUR:%Y%m%d%H}", fingerprint, generation),
        destination=STAGE.name,
        source_uris=tuple(uris),
        spec=STAGE,
        labels={"fingerprint": fingerprint[:40]},
    )


def load_stage(
    wh: DuckDBWarehouse, uris: Sequence[str], fingerprint: str, budget: JobBudget | None = None
) -> JobOutcome:
    wh.ensure_table(STAGE)
    return run_idempotent_job(
        wh,
        lambda generation: load_job(uris, fingerprint, generation),
        fingerprint=fingerprint,
        partition=f"{HOUR:%Y%m%d%H}",
        budget=budget,
    )


@pytest.fixture
def duck(tmp_path: Path) -> DuckDBWarehouse:
    return DuckDBWarehouse(tmp_path / "warehouse.duckdb", lock_timeout_s=10)


def test_duckdb_load_runs_once_per_content(duck: DuckDBWarehouse, tmp_path: Path) -> None:
    files_a = [write_hour(tmp_path / "a" / "part-0.parquet", HOUR, 3, "a")]
    files_b = [write_hour(tmp_path / "b" / "part-0.parquet", HOUR, 5, "b")]
    today = dt.datetime.now(UTC).date()

    first = load_stage(duck, files_a, FP_A)
    second = load_stage(duck, files_a, FP_A)
    third = load_stage(duck, files_b, FP_B)

    assert (first.action, first.rows, first.generation) == ("submitted", 3, 0)
    assert (second.action, second.job_id, second.rows) == ("skipped", first.job_id, 3)
    assert (third.action, third.rows) == ("submitted", 5)
    assert duck.table_rows(STAGE.name) == 5
    assert duck.jobs_submitted(STAGE.name, today) == 2
    record = duck.read_publish_record(STAGE.name, "1995080104")
    assert record is not None and (record.job_id, record.fingerprint, record.rows) == (
        third.job_id,
        FP_B,
        5,
    )
    job = duck.get_job(third.job_id)
    assert job is not None and job.labels == {"fingerprint": FP_B[:40]}


def test_duckdb_expired_stage_table_is_loaded_again(duck: DuckDBWarehouse, tmp_path: Path) -> None:
    files = [write_hour(tmp_path / "a.parquet", HOUR, 3, "a")]
    assert load_stage(duck, files, FP_A).action == "submitted"
    assert duck.drop_expired_tables(dt.datetime.now(UTC) + dt.timedelta(days=8)) == [STAGE.name]

    again = load_stage(duck, files, FP_A)  # ensure_table recreates it, empty

    assert (again.action, again.generation, again.rows) == ("submitted", 1, 3)
    assert duck.table_rows(STAGE.name) == 3
    assert load_stage(duck, files, FP_A).action == "skipped"


def test_duckdb_dropped_pageviews_is_published_again(duck: DuckDBWarehouse, tmp_path: Path) -> None:
    duck.ensure_table(pageviews_spec())
    load_stage(duck, [write_hour(tmp_path / "a.parquet", HOUR, 3, "a")], FP_A)
    assert run(duck, FP_A).action == "submitted"
    duck.drop_table("pageviews")
    duck.ensure_table(pageviews_spec())

    again = run(duck, FP_A)

    assert (again.action, again.job_id) == ("submitted", cid(FP_A, 1))
    assert duck.partition_rows("pageviews", DAY) == 3


def test_duckdb_table_written_by_someone_else_is_loaded_again(
    duck: DuckDBWarehouse, tmp_path: Path
) -> None:
    files = [write_hour(tmp_path / "a.parquet", HOUR, 3, "a")]
    assert load_stage(duck, files, FP_A).action == "submitted"
    extra = [write_hour(tmp_path / "x.parquet", HOUR, 2, "x")]
    appended = dataclasses.replace(
        load_job(extra, FP_B, 0), job_id="manual_append", write_disposition="WRITE_APPEND"
    )
    assert duck.submit_job(appended).succeeded
    assert duck.table_rows(STAGE.name) == 5

    again = load_stage(duck, files, FP_A)

    assert (again.action, again.generation) == ("submitted", 1)
    assert duck.table_rows(STAGE.name) == 3


def test_duckdb_failed_load_raises_then_next_generation_succeeds(
    duck: DuckDBWarehouse, tmp_path: Path
) -> None:
    write_hour(tmp_path / "old.parquet", HOUR, 2, "old")
    assert load_stage(duck, [str(tmp_path / "old.parquet")], FP_B).action == "submitted"
    missing = tmp_path / "new" / "part-0.parquet"

    with pytest.raises(JobFailedError, match="notFound") as err:
        load_stage(duck, [str(missing)], FP_A)
    assert err.value.status.error_reason == "notFound"
    assert duck.table_rows(STAGE.name) == 2  # unchanged
    record = duck.read_publish_record(STAGE.name, "1995080104")
    assert record is not None and record.fingerprint == FP_B

    write_hour(missing, HOUR, 4, "new")  # the operator fixes the input and re-runs
    outcome = load_stage(duck, [str(missing)], FP_A)
    assert (outcome.action, outcome.generation, outcome.rows) == ("submitted", 1, 4)
    assert outcome.job_id.endswith("_g1")
    assert duck.table_rows(STAGE.name) == 4


def test_duckdb_budget_refuses_before_submitting(duck: DuckDBWarehouse, tmp_path: Path) -> None:
    budget = JobBudget(per_table_per_day=1)
    load_stage(duck, [write_hour(tmp_path / "a.parquet", HOUR, 1, "a")], FP_A, budget)

    with pytest.raises(QuotaBudgetExceededError, match=STAGE.name):
        load_stage(duck, [write_hour(tmp_path / "b.parquet", HOUR, 2, "b")], FP_B, budget)

    assert duck.jobs_submitted(STAGE.name, dt.datetime.now(UTC).date()) == 1
    assert duck.table_rows(STAGE.name) == 1


def test_duckdb_publish_day_revert_and_rerun(duck: DuckDBWarehouse, tmp_path: Path) -> None:
    duck.ensure_table(pageviews_spec())
    file_a = write_hour(tmp_path / "a.parquet", HOUR, 3, "a")
    file_b = write_hour(tmp_path / "b.parquet", HOUR, 2, "b")

    def publish(file: str, fingerprint: str) -> JobOutcome:
        load_stage(duck, [file], fingerprint)
        return run(duck, fingerprint)

    outcomes = [
        publish(file_a, FP_A),
        publish(file_b, FP_B),
        publish(file_a, FP_A),
        publish(file_a, FP_A),
    ]

    assert [(o.action, o.generation) for o in outcomes] == [
        ("submitted", 0),
        ("submitted", 0),
        ("submitted", 1),
        ("skipped", 1),
    ]
    assert outcomes[3].job_id == outcomes[2].job_id == cid(FP_A, 1)
    assert duck.partition_rows("pageviews", DAY) == 3
    ids = [r["event_id"] for r in duck.query("SELECT event_id FROM pageviews ORDER BY 1")]
    assert ids == ["a-0", "a-1", "a-2"]
    record = duck.read_publish_record("pageviews", DAY_PARTITION)
    assert record is not None and dataclasses.astuple(record)[:5] == (
        "pageviews",
        DAY_PARTITION,
        cid(FP_A, 1),
        FP_A,
        3,
    )
