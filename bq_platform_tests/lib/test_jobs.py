"""The lookup-before-submit state machine (:func:`run_idempotent_job`).

End to end against the DuckDB warehouse, and against :class:`FakeWarehouse` (a hand-written
fake that records calls) for the paths DuckDB cannot produce: a job still RUNNING, a 409 on
insert, a job someone else submitted that failed.
"""

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bq_platform.lib.jobids import job_id, sha256_json
from bq_platform.lib.jobs import MAX_GENERATIONS, JobOutcome, run_idempotent_job
from bq_platform.lib.quota import JobBudget, QuotaBudgetExceededError
from bq_platform.lib.warehouse.base import (
    CopyJob,
    Job,
    JobConflictError,
    JobFailedError,
    JobStatus,
    LoadJob,
    PublishRecord,
    Warehouse,
)
from bq_platform.lib.warehouse.duckdb import DuckDBWarehouse
from bq_platform.lib.warehouse.schema import PAGEVIEW_COLUMNS, TableSpec, pageviews_spec, stage_spec

UTC = dt.UTC
HOUR = dt.datetime(1995, 8, 1, 4, tzinfo=UTC)
DAY = HOUR.date()
FP_A = sha256_json("content A")
FP_B = sha256_json("content B")
DAY_PARTITION = "19950801"


def ok(jid: str, rows: int = 7) -> JobStatus:
    return JobStatus(jid, "DONE", output_rows=rows)


def failed(jid: str, reason: str = "invalid") -> JobStatus:
    return JobStatus(jid, "DONE", error_reason=reason, error_message="bad input")


def copy_maker(fingerprint: str) -> Any:
    """``make_job`` for the day's copy into ``pageviews$19950801``."""

    def make_job(generation: int) -> CopyJob:
        return CopyJob(
            job_id=job_id("copy", "pageviews", DAY_PARTITION, fingerprint, generation),
            sources=("pageviews_stage_1995080104",),
            destination=f"pageviews${DAY_PARTITION}",
        )

    return make_job


def cid(fingerprint: str, generation: int) -> str:
    return job_id("copy", "pageviews", DAY_PARTITION, fingerprint, generation)


class FakeWarehouse(Warehouse):
    """Jobs and publish records in dicts; every call is appended to :attr:`calls`.

    Attributes:
        jobs: job ID -> status, as :meth:`get_job` finds it.
        submit_results: job ID -> status :meth:`submit_job` returns (default: DONE, 7 rows).
        conflicts: job ID -> status of the job "another run" submitted first: submitting
            it raises :class:`JobConflictError` and the job appears with that status.
        wait_results: job ID -> status :meth:`wait_job` ends with (default: DONE, 7 rows).
        used_today: what :meth:`jobs_submitted` answers.
    """

    def __init__(self) -> None:
        self.jobs: dict[str, JobStatus] = {}
        self.submit_results: dict[str, JobStatus] = {}
        self.conflicts: dict[str, JobStatus] = {}
        self.wait_results: dict[str, JobStatus] = {}
        self.records: dict[tuple[str, str], PublishRecord] = {}
        self.used_today = 0
        self.dropped_tables: set[str] = set()
        self.calls: list[tuple[str, str]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def get_job(self, job_id: str) -> JobStatus | None:
        self.calls.append(("get_job", job_id))
        return self.jobs.get(job_id)

    def submit_job(self, job: Job) -> JobStatus:
        self.calls.append(("submit_job", job.job_id))
        if job.job_id in self.conflicts:
            self.jobs[job.job_id] = self.conflicts[job.job_id]
            raise JobConflictError(f"409: {job.job_id}")
        status = self.submit_results.get(job.job_id, ok(job.job_id))
        self.jobs[job.job_id] = status
        return status

    def wait_job(self, job_id: str, timeout_s: float = 3600.0) -> JobStatus:
        self.calls.append(("wait_job", job_id))
        status = self.wait_results.get(job_id, ok(job_id))
        self.jobs[job_id] = status
        return status

    def jobs_submitted(self, table: str, day: dt.date) -> int:
        self.calls.append(("jobs_submitted", table))
        return self.used_today

    def read_publish_record(self, destination: str, partition: str) -> PublishRecord | None:
        self.calls.append(("read_publish_record", f"{destination}/{partition}"))
        return self.records.get((destination, partition))

    def write_publish_record(self, record: PublishRecord) -> None:
        self.calls.append(("write_publish_record", record.job_id))
        self.records[(record.destination, record.partition)] = record

    def record(self) -> PublishRecord | None:
        return self.records.get(("pageviews", DAY_PARTITION))

    # Not used by the state machine.
    def ensure_table(self, spec: TableSpec) -> None:
        raise NotImplementedError

    def table_exists(self, table: str) -> bool:
        self.calls.append(("table_exists", table))
        return table not in self.dropped_tables

    def table_rows(self, table: str) -> int | None:
        raise NotImplementedError

    def partition_rows(self, table: str, day: dt.date) -> int:
        raise NotImplementedError

    def replace_audit_rows(
        self, hours: Sequence[dt.datetime], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        raise NotImplementedError

    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        raise NotImplementedError


def run(wh: Warehouse, fingerprint: str, budget: JobBudget | None = None) -> JobOutcome:
    return run_idempotent_job(
        wh,
        copy_maker(fingerprint),
        fingerprint=fingerprint,
        partition=DAY_PARTITION,
        budget=budget,
    )


# ----------------------------------------------------------------------- with the fake


def test_new_job_is_submitted_and_recorded() -> None:
    wh = FakeWarehouse()
    outcome = run(wh, FP_A, JobBudget(per_table_per_day=10))

    assert outcome == JobOutcome(cid(FP_A, 0), "submitted", 0, 7)
    assert wh.names() == [
        "get_job",
        "jobs_submitted",
        "submit_job",
        "read_publish_record",
        "write_publish_record",
    ]
    assert ("jobs_submitted", "pageviews") in wh.calls  # the decorator is stripped
    record = wh.record()
    assert record is not None
    assert (record.job_id, record.fingerprint, record.rows) == (cid(FP_A, 0), FP_A, 7)
    assert record.published_at.tzinfo is not None


def test_running_job_is_adopted_and_waited_for() -> None:
    wh = FakeWarehouse()
    wh.jobs[cid(FP_A, 0)] = JobStatus(cid(FP_A, 0), "RUNNING")
    wh.wait_results[cid(FP_A, 0)] = ok(cid(FP_A, 0), rows=11)

    outcome = run(wh, FP_A)

    assert outcome == JobOutcome(cid(FP_A, 0), "adopted", 0, 11)
    assert "submit_job" not in wh.names()
    assert ("wait_job", cid(FP_A, 0)) in wh.calls
    record = wh.record()
    assert record is not None and (record.job_id, record.rows) == (cid(FP_A, 0), 11)


@pytest.mark.parametrize("state", ["PENDING", "RUNNING", "DONE"])
def test_conflict_on_submit_adopts_the_other_runs_job(state: str) -> None:
    wh = FakeWarehouse()
    wh.conflicts[cid(FP_A, 0)] = JobStatus(cid(FP_A, 0), state, output_rows=5)  # type: ignore[arg-type]
    wh.wait_results[cid(FP_A, 0)] = ok(cid(FP_A, 0), rows=5)

    outcome = run(wh, FP_A)

    assert outcome == JobOutcome(cid(FP_A, 0), "adopted", 0, 5)
    waited = ["wait_job"] if state != "DONE" else []
    assert wh.names() == [
        "get_job",
        "submit_job",
        "get_job",
        *waited,
        "read_publish_record",
        "write_publish_record",
    ]


def test_old_failed_job_leads_to_generation_1() -> None:
    wh = FakeWarehouse()
    wh.jobs[cid(FP_A, 0)] = failed(cid(FP_A, 0))

    outcome = run(wh, FP_A)

    assert outcome == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    assert [c for c in wh.calls if c[0] == "submit_job"] == [("submit_job", cid(FP_A, 1))]
    record = wh.record()
    assert record is not None and record.job_id == cid(FP_A, 1)


def test_someone_elses_failed_job_leads_to_next_generation() -> None:
    wh = FakeWarehouse()
    wh.jobs[cid(FP_A, 0)] = JobStatus(cid(FP_A, 0), "RUNNING")
    wh.wait_results[cid(FP_A, 0)] = failed(cid(FP_A, 0), "backendError")

    outcome = run(wh, FP_A)

    assert outcome == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)


def test_our_failed_job_raises_and_records_nothing() -> None:
    wh = FakeWarehouse()
    wh.submit_results[cid(FP_A, 0)] = failed(cid(FP_A, 0))

    with pytest.raises(JobFailedError, match="invalid: bad input") as err:
        run(wh, FP_A)

    assert err.value.status == failed(cid(FP_A, 0))
    assert "next generation" in str(err.value)
    assert wh.record() is None
    assert "write_publish_record" not in wh.names()


def test_same_fingerprint_rerun_is_skipped_without_submission() -> None:
    wh = FakeWarehouse()
    first = run(wh, FP_A)
    wh.calls.clear()

    second = run(wh, FP_A)

    assert second == JobOutcome(first.job_id, "skipped", 0, 7)
    assert wh.names() == ["get_job", "table_exists", "read_publish_record"]


def test_done_job_whose_table_is_gone_runs_next_generation() -> None:
    # A stage table expired (7 days) after its load: skipping would leave no table.
    wh = FakeWarehouse()
    run(wh, FP_A)
    wh.dropped_tables.add("pageviews")
    wh.calls.clear()

    again = run(wh, FP_A)

    assert again == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    assert ("submit_job", cid(FP_A, 1)) in wh.calls


def test_skipped_job_without_record_gets_its_record() -> None:
    # A crash between the job and the publish record: the next run writes the record.
    wh = FakeWarehouse()
    wh.jobs[cid(FP_A, 0)] = ok(cid(FP_A, 0), rows=3)

    assert run(wh, FP_A) == JobOutcome(cid(FP_A, 0), "skipped", 0, 3)
    record = wh.record()
    assert record is not None and (record.job_id, record.rows) == (cid(FP_A, 0), 3)


def test_reverted_content_runs_next_generation_and_then_skips() -> None:
    wh = FakeWarehouse()
    assert run(wh, FP_A).job_id == cid(FP_A, 0)
    assert run(wh, FP_B).job_id == cid(FP_B, 0)

    # Back to A: its g0 succeeded long ago, but the partition holds B now.
    reverted = run(wh, FP_A)
    assert reverted == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    record = wh.record()
    assert record is not None and (record.job_id, record.fingerprint) == (cid(FP_A, 1), FP_A)

    # A again: nothing to do; the outcome names the job that holds the content.
    wh.calls.clear()
    again = run(wh, FP_A)
    assert again == JobOutcome(cid(FP_A, 1), "skipped", 1, 7)
    assert "submit_job" not in wh.names() and "write_publish_record" not in wh.names()


def test_budget_exceeded_submits_nothing() -> None:
    wh = FakeWarehouse()
    wh.used_today = 3

    with pytest.raises(QuotaBudgetExceededError, match="'pageviews'.*3 jobs"):
        run(wh, FP_A, JobBudget(per_table_per_day=3))

    assert "submit_job" not in wh.names()
    assert wh.record() is None
    assert run(wh, FP_A, JobBudget(per_table_per_day=4)).action == "submitted"


def test_budget_is_not_consulted_when_nothing_is_submitted() -> None:
    wh = FakeWarehouse()
    run(wh, FP_A)
    wh.used_today = 10**6
    assert run(wh, FP_A, JobBudget(per_table_per_day=1)).action == "skipped"


def test_every_generation_failed_gives_up() -> None:
    wh = FakeWarehouse()
    for generation in range(MAX_GENERATIONS):
        wh.jobs[cid(FP_A, generation)] = failed(cid(FP_A, generation))

    with pytest.raises(RuntimeError, match=f"{MAX_GENERATIONS} generations"):
        run(wh, FP_A)
    assert "submit_job" not in wh.names()


# ----------------------------------------------------------------------- against DuckDB

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
            "query_string": None,
            "http_method": "GET",
            "http_protocol": "HTTP/1.0",
            "status": 200,
            "response_bytes": None,
            "referrer": None,
            "user_agent": None,
        }
        for i in range(n)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    return str(path)


def load_stage(
    wh: DuckDBWarehouse, uris: Sequence[str], fingerprint: str, budget: JobBudget | None = None
) -> JobOutcome:
    spec = stage_spec("full", HOUR)
    wh.ensure_table(spec)
    partition = f"{HOUR:%Y%m%d%H}"

    def make_job(generation: int) -> LoadJob:
        return LoadJob(
            job_id=job_id("load", spec.name, partition, fingerprint, generation),
            destination=spec.name,
            source_uris=tuple(uris),
            spec=spec,
            labels={"fingerprint": fingerprint[:40]},
        )

    return run_idempotent_job(
        wh, make_job, fingerprint=fingerprint, partition=partition, budget=budget
    )


@pytest.fixture
def duck(tmp_path: Path) -> DuckDBWarehouse:
    return DuckDBWarehouse(tmp_path / "warehouse.duckdb", lock_timeout_s=10)


def test_duckdb_load_runs_once_per_content(duck: DuckDBWarehouse, tmp_path: Path) -> None:
    table = stage_spec("full", HOUR).name
    files_a = [write_hour(tmp_path / "a" / "part-0.parquet", HOUR, 3, "a")]
    files_b = [write_hour(tmp_path / "b" / "part-0.parquet", HOUR, 5, "b")]
    today = dt.datetime.now(UTC).date()

    first = load_stage(duck, files_a, FP_A)
    second = load_stage(duck, files_a, FP_A)
    third = load_stage(duck, files_b, FP_B)

    assert (first.action, first.rows, first.generation) == ("submitted", 3, 0)
    assert (second.action, second.job_id, second.rows) == ("skipped", first.job_id, 3)
    assert (third.action, third.rows) == ("submitted", 5)
    assert duck.table_rows(table) == 5
    assert duck.jobs_submitted(table, today) == 2
    record = duck.read_publish_record(table, "1995080104")
    assert record is not None and (record.job_id, record.fingerprint, record.rows) == (
        third.job_id,
        FP_B,
        5,
    )
    job = duck.get_job(third.job_id)
    assert job is not None and job.labels == {"fingerprint": FP_B[:40]}


def test_duckdb_failed_load_raises_then_next_generation_succeeds(
    duck: DuckDBWarehouse, tmp_path: Path
) -> None:
    table = stage_spec("full", HOUR).name
    write_hour(tmp_path / "old.parquet", HOUR, 2, "old")
    assert load_stage(duck, [str(tmp_path / "old.parquet")], FP_B).action == "submitted"
    missing = tmp_path / "new" / "part-0.parquet"

    with pytest.raises(JobFailedError, match="notFound") as err:
        load_stage(duck, [str(missing)], FP_A)
    assert err.value.status.error_reason == "notFound"
    assert duck.table_rows(table) == 2  # unchanged
    record = duck.read_publish_record(table, "1995080104")
    assert record is not None and record.fingerprint == FP_B

    write_hour(missing, HOUR, 4, "new")  # the operator fixes the input and re-runs
    outcome = load_stage(duck, [str(missing)], FP_A)
    assert (outcome.action, outcome.generation, outcome.rows) == ("submitted", 1, 4)
    assert outcome.job_id.endswith("_g1")
    assert duck.table_rows(table) == 4


def test_duckdb_budget_refuses_before_submitting(duck: DuckDBWarehouse, tmp_path: Path) -> None:
    table = stage_spec("full", HOUR).name
    budget = JobBudget(per_table_per_day=1)
    load_stage(duck, [write_hour(tmp_path / "a.parquet", HOUR, 1, "a")], FP_A, budget)

    with pytest.raises(QuotaBudgetExceededError, match=table):
        load_stage(duck, [write_hour(tmp_path / "b.parquet", HOUR, 2, "b")], FP_B, budget)

    assert duck.jobs_submitted(table, dt.datetime.now(UTC).date()) == 1
    assert duck.table_rows(table) == 1


def test_duckdb_publish_day_revert_and_rerun(duck: DuckDBWarehouse, tmp_path: Path) -> None:
    duck.ensure_table(pageviews_spec())
    stage = stage_spec("full", HOUR)
    duck.ensure_table(stage)
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
