"""The lookup-before-submit state machine (:mod:`bq_platform.lib.jobs`).

Against :class:`FakeWarehouse` (the real :class:`Warehouse` base over dicts: its rules, ensure
cache and publish ledger run as in production) for the paths DuckDB cannot produce: a job still
RUNNING, a 409 on insert, transient job failures; and end to end against the DuckDB warehouse
for expired, dropped and overwritten tables.
"""

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bq_platform.lib import jobs
from bq_platform.lib.jobids import job_id, sha256_json
from bq_platform.lib.jobs import (
    MAX_GENERATIONS,
    MAX_JOB_RETRIES,
    JobOutcome,
    decide,
    first_decision,
    run_idempotent_job,
)
from bq_platform.lib.quota import JobBudget, QuotaBudgetExceededError
from bq_platform.lib.warehouse.base import (
    CopyJob,
    Job,
    JobConflictError,
    JobFailedError,
    JobStatus,
    LoadJob,
    TableExistsError,
    TableInfo,
    Warehouse,
    split_decorator,
)
from bq_platform.lib.warehouse.compare import SpecDifference
from bq_platform.lib.warehouse.duckdb import DuckDBWarehouse
from bq_platform.lib.warehouse.schema import PAGEVIEW_COLUMNS, TableSpec, pageviews_spec, stage_spec

UTC = dt.UTC
HOUR = dt.datetime(1995, 8, 1, 4, tzinfo=UTC)
DAY = HOUR.date()
FP_A = sha256_json("content A")
FP_B = sha256_json("content B")
DAY_PARTITION = "19950801"
DEST = f"pageviews${DAY_PARTITION}"
STAGE = stage_spec("full", HOUR)
#: The fake's clock: tables are created at T_CREATED, jobs end at T_ENDED.
T_CREATED = dt.datetime(2024, 1, 1, tzinfo=UTC)
T_ENDED = dt.datetime(2024, 1, 2, tzinfo=UTC)
T_RECREATED = dt.datetime(2024, 1, 3, tzinfo=UTC)


def ok(jid: str, rows: int = 7) -> JobStatus:
    return JobStatus(jid, "DONE", output_rows=rows, ended=T_ENDED)


def failed(jid: str, reason: str = "invalid") -> JobStatus:
    return JobStatus(jid, "DONE", error_reason=reason, error_message="bad input", ended=T_ENDED)


def cid(fingerprint: str, generation: int) -> str:
    return job_id("copy", "pageviews", DAY_PARTITION, fingerprint, generation)


def copy_maker(fingerprint: str) -> Callable[[int], CopyJob]:
    """``make_job`` for the day's copy of the stage table into ``pageviews$19950801``."""
    return lambda generation: CopyJob(
        job_id=cid(fingerprint, generation), sources=(STAGE.name,), destination=DEST
    )


class FakeWarehouse(Warehouse):
    """The :class:`Warehouse` base over dicts; each backend call is appended to :attr:`calls`.

    ``pageviews`` and the stage table exist from the start (created at :data:`T_CREATED`).

    Attributes:
        jobs: job ID -> status, as :meth:`get_job` finds it.
        submit_results: job ID -> status :meth:`_insert_job` returns (default: DONE, 7 rows).
        conflicts: job ID -> status of the job "another run" submitted first: inserting it
            raises :class:`JobConflictError` and the job appears with that status.
        wait_results: job ID -> status :meth:`wait_job` ends with (default: DONE, 7 rows).
        rows: destination (``pageviews$19950801``) -> rows, set by each succeeded job.
        used_today: what :meth:`jobs_submitted` answers.
    """

    def __init__(self) -> None:
        super().__init__()
        self.specs: dict[str, TableSpec] = {}
        self.created: dict[str, dt.datetime] = {}
        self.rows: dict[str, int] = {}
        self.ledger: list[dict[str, Any]] = []
        self.jobs: dict[str, JobStatus] = {}
        self.destinations: dict[str, str] = {}
        self.submit_results: dict[str, JobStatus] = {}
        self.conflicts: dict[str, JobStatus] = {}
        self.wait_results: dict[str, JobStatus] = {}
        self.used_today = 0
        self.clock = T_CREATED
        self.calls: list[tuple[str, str]] = []
        self.ensure_table(pageviews_spec())
        self.ensure_table(STAGE)
        self.calls.clear()

    def names(self, *only: str) -> list[str]:
        return [name for name, _ in self.calls if not only or name in only]

    def seed(self, status: JobStatus, destination: str = DEST) -> None:
        """A job found in the job history; a succeeded one wrote its rows."""
        self.jobs[status.job_id] = status
        self.destinations[status.job_id] = destination
        self._finish(status)

    def recreate(self, spec: TableSpec) -> None:
        """The table expired or was dropped, and ``ensure_table`` made it again, empty."""
        del self.specs[spec.name]
        self.forget_table(spec.name)
        self.rows = {d: n for d, n in self.rows.items() if split_decorator(d)[0] != spec.name}
        self.clock = T_RECREATED
        self.ensure_table(spec)

    def _finish(self, status: JobStatus) -> None:
        if status.succeeded and status.output_rows is not None:
            self.rows[self.destinations.get(status.job_id, DEST)] = status.output_rows

    def table_info(self, destination: str) -> TableInfo | None:
        self.calls.append(("table_info", destination))
        table, _ = split_decorator(destination)
        if table not in self.specs:
            return None
        return TableInfo(table, self.created[table], self.rows.get(destination, 0))

    def _describe_table(self, table: str) -> TableSpec | None:
        self.calls.append(("_describe_table", table))
        return self.specs.get(table)

    def _create_table(self, spec: TableSpec) -> None:
        self.calls.append(("_create_table", spec.name))
        if spec.name in self.specs:
            raise TableExistsError(spec.name)
        self.specs[spec.name] = spec
        self.created[spec.name] = self.clock

    def _patch_table(self, spec: TableSpec, diff: SpecDifference) -> None:
        self.calls.append(("_patch_table", spec.name))
        self.specs[spec.name] = spec

    def _insert_job(self, job: Job) -> JobStatus:
        self.calls.append(("_insert_job", job.job_id))
        self.destinations[job.job_id] = job.destination
        if job.job_id in self.conflicts:
            self.seed(self.conflicts[job.job_id], job.destination)
            raise JobConflictError(f"409: {job.job_id}")
        status = self.submit_results.get(job.job_id, ok(job.job_id))
        self.seed(status, job.destination)
        return status

    def get_job(self, job_id: str) -> JobStatus | None:
        self.calls.append(("get_job", job_id))
        return self.jobs.get(job_id)

    def wait_job(self, job_id: str, timeout_s: float = 3600.0) -> JobStatus:
        self.calls.append(("wait_job", job_id))
        status = self.wait_results.get(job_id, ok(job_id))
        self.seed(status, self.destinations.get(job_id, DEST))
        return status

    def jobs_submitted(self, table: str, day: dt.date) -> int:
        self.calls.append(("jobs_submitted", table))
        return self.used_today

    def _ledger_rows(self, destination: str, partition: str) -> list[dict[str, Any]]:
        self.calls.append(("_ledger_rows", f"{destination}/{partition}"))
        return [
            r
            for r in self.ledger
            if (r["destination"], r["partition_key"]) == (destination, partition)
        ]

    def _append_ledger_row(self, row: Mapping[str, Any]) -> None:
        self.calls.append(("_append_ledger_row", str(row["job_id"])))
        self.ledger.append(dict(row))

    def replace_audit_rows(
        self, hours: Sequence[dt.datetime], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        raise NotImplementedError

    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        raise NotImplementedError

    def record(self) -> tuple[str, str, int] | None:
        found = self.read_publish_record("pageviews", DAY_PARTITION)
        return None if found is None else (found.job_id, found.fingerprint, found.rows)


def run(
    wh: Warehouse,
    fingerprint: str,
    budget: JobBudget | None = None,
    sleeps: list[float] | None = None,
) -> JobOutcome:
    return run_idempotent_job(
        wh,
        copy_maker(fingerprint),
        fingerprint=fingerprint,
        partition=DAY_PARTITION,
        budget=budget,
        sleep=(sleeps if sleeps is not None else []).append,
    )


JOB_CALLS = ("get_job", "jobs_submitted", "_insert_job", "wait_job", "_append_ledger_row")

# ----------------------------------------------------------------------- with the fake


def test_new_job_is_submitted_and_recorded() -> None:
    wh = FakeWarehouse()
    outcome = run(wh, FP_A, JobBudget(per_table_per_day=10))

    assert outcome == JobOutcome(cid(FP_A, 0), "submitted", 0, 7)
    assert wh.names(*JOB_CALLS) == [
        "get_job",
        "jobs_submitted",
        "_insert_job",
        "_append_ledger_row",
    ]
    assert ("jobs_submitted", "pageviews") in wh.calls  # the decorator is stripped
    assert wh.record() == (cid(FP_A, 0), FP_A, 7)
    assert wh.ledger[0]["published_at"].tzinfo is not None


def test_running_job_is_adopted_and_waited_for() -> None:
    wh = FakeWarehouse()
    wh.seed(JobStatus(cid(FP_A, 0), "RUNNING"))
    wh.wait_results[cid(FP_A, 0)] = ok(cid(FP_A, 0), rows=11)

    assert run(wh, FP_A) == JobOutcome(cid(FP_A, 0), "adopted", 0, 11)
    assert "_insert_job" not in wh.names()
    assert ("wait_job", cid(FP_A, 0)) in wh.calls
    assert wh.record() == (cid(FP_A, 0), FP_A, 11)


@pytest.mark.parametrize("state", ["PENDING", "RUNNING", "DONE"])
def test_conflict_on_insert_adopts_the_other_runs_job(state: str) -> None:
    wh = FakeWarehouse()
    wh.conflicts[cid(FP_A, 0)] = JobStatus(cid(FP_A, 0), state, output_rows=5, ended=T_ENDED)  # type: ignore[arg-type]
    wh.wait_results[cid(FP_A, 0)] = ok(cid(FP_A, 0), rows=5)

    assert run(wh, FP_A) == JobOutcome(cid(FP_A, 0), "adopted", 0, 5)
    waited = ["wait_job"] if state != "DONE" else []
    assert wh.names(*JOB_CALLS) == [
        "get_job",
        "_insert_job",
        "get_job",
        *waited,
        "_append_ledger_row",
    ]


def test_old_failed_job_leads_to_generation_1() -> None:
    wh = FakeWarehouse()
    wh.seed(failed(cid(FP_A, 0)))

    assert run(wh, FP_A) == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    assert wh.names("_insert_job") == ["_insert_job"]
    assert wh.record() == (cid(FP_A, 1), FP_A, 7)


def test_someone_elses_failed_job_leads_to_next_generation_without_backoff() -> None:
    wh = FakeWarehouse()
    wh.seed(JobStatus(cid(FP_A, 0), "RUNNING"))
    wh.wait_results[cid(FP_A, 0)] = failed(cid(FP_A, 0), "backendError")
    sleeps: list[float] = []

    assert run(wh, FP_A, sleeps=sleeps) == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    assert sleeps == []


def test_our_failed_job_raises_and_records_nothing() -> None:
    wh = FakeWarehouse()
    wh.submit_results[cid(FP_A, 0)] = failed(cid(FP_A, 0))
    sleeps: list[float] = []

    with pytest.raises(JobFailedError, match="invalid: bad input") as err:
        run(wh, FP_A, sleeps=sleeps)

    assert err.value.status == failed(cid(FP_A, 0))
    assert "next generation" in str(err.value)
    assert wh.record() is None and wh.ledger == []
    assert sleeps == []


def test_same_fingerprint_rerun_is_skipped_without_submission() -> None:
    wh = FakeWarehouse()
    first = run(wh, FP_A)
    wh.calls.clear()

    assert run(wh, FP_A) == JobOutcome(first.job_id, "skipped", 0, 7)
    assert wh.names(*JOB_CALLS) == ["get_job"]
    assert ("table_info", DEST) in wh.calls  # metadata only: no query, no scan


def test_skipped_job_without_record_gets_its_record() -> None:
    # A crash between the job and the publish record: the next run writes the record.
    wh = FakeWarehouse()
    wh.seed(ok(cid(FP_A, 0), rows=3))

    assert run(wh, FP_A) == JobOutcome(cid(FP_A, 0), "skipped", 0, 3)
    assert wh.record() == (cid(FP_A, 0), FP_A, 3)


def test_reverted_content_runs_next_generation_and_then_skips() -> None:
    wh = FakeWarehouse()
    assert run(wh, FP_A).job_id == cid(FP_A, 0)
    assert run(wh, FP_B).job_id == cid(FP_B, 0)

    # Back to A: its g0 succeeded long ago, but the partition holds B now.
    assert run(wh, FP_A) == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    assert wh.record() == (cid(FP_A, 1), FP_A, 7)

    # A again: nothing to do; the outcome names the job that holds the content, and the
    # ledger gets no new row.
    wh.calls.clear()
    assert run(wh, FP_A) == JobOutcome(cid(FP_A, 1), "skipped", 1, 7)
    assert wh.names("_insert_job", "_append_ledger_row") == []
    assert len(wh.ledger) == 3


def test_table_created_after_the_job_ended_runs_next_generation() -> None:
    # A stage table expired (or pageviews was dropped) and ensure_table made it again, empty:
    # the old job is still DONE in the job history, but the table no longer holds its rows.
    wh = FakeWarehouse()
    run(wh, FP_A)
    wh.recreate(pageviews_spec())
    wh.calls.clear()

    assert run(wh, FP_A) == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    assert wh.names("_insert_job") == ["_insert_job"]
    assert wh.record() == (cid(FP_A, 1), FP_A, 7)


def test_rows_other_than_the_jobs_output_run_next_generation() -> None:
    wh = FakeWarehouse()
    run(wh, FP_A)
    wh.rows[DEST] = 9  # someone wrote into the partition since

    assert run(wh, FP_A) == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    assert wh.rows[DEST] == 7


def test_decide_explains_and_submits_nothing() -> None:
    wh = FakeWarehouse()
    make = copy_maker(FP_A)

    def verdict() -> tuple[str, str]:
        found = decide(wh, make, 0, fingerprint=FP_A, partition=DAY_PARTITION)
        return found.verdict, found.reason

    assert verdict() == ("submit", "not found: submit")
    wh.seed(JobStatus(cid(FP_A, 0), "RUNNING"))
    assert verdict()[0] == "wait"
    wh.seed(ok(cid(FP_A, 0)))
    assert verdict() == ("skip", "already done for this content")
    wh.rows[DEST] = 8
    assert verdict() == ("next", f"succeeded before, but {DEST} holds 8 rows, the job wrote 7")
    del wh.specs["pageviews"]
    assert verdict() == (
        "next",
        "succeeded before, but table pageviews no longer exists (expired or dropped)",
    )
    wh.specs["pageviews"] = pageviews_spec()
    wh.created["pageviews"] = T_RECREATED
    assert "was created again at 2024-01-03 00:00:00 UTC" in verdict()[1]
    wh.seed(failed(cid(FP_A, 0), "backendError"))
    assert verdict() == ("next", "failed earlier (backendError)")
    first = first_decision(wh, make, fingerprint=FP_A, partition=DAY_PARTITION)
    assert (first.generation, first.verdict) == (1, "submit")
    assert wh.names("_insert_job", "wait_job", "_append_ledger_row", "_create_table") == []


@pytest.mark.parametrize("reason", ["backendError", "rateLimitExceeded", "internalError"])
def test_transient_job_failure_backs_off_and_runs_next_generation(
    reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    wh = FakeWarehouse()
    wh.submit_results[cid(FP_A, 0)] = failed(cid(FP_A, 0), reason)
    sleeps: list[float] = []

    with caplog.at_level(logging.WARNING, logger="bq_platform.lib.jobs"):
        outcome = run(wh, FP_A, sleeps=sleeps)

    assert outcome == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    assert wh.names("_insert_job") == ["_insert_job", "_insert_job"]
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= jobs.RETRY_BACKOFF_BASE_S * 2
    assert f"failed with {reason} (transient): retry 1 of {MAX_JOB_RETRIES}" in caplog.text
    assert wh.record() == (cid(FP_A, 1), FP_A, 7)


def test_transient_job_failures_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs.random, "uniform", lambda low, high: high)
    wh = FakeWarehouse()
    for generation in range(MAX_GENERATIONS):
        wh.submit_results[cid(FP_A, generation)] = failed(cid(FP_A, generation), "backendError")
    sleeps: list[float] = []

    with pytest.raises(JobFailedError, match="backendError") as err:
        run(wh, FP_A, sleeps=sleeps)

    assert err.value.status.job_id == cid(FP_A, MAX_JOB_RETRIES)
    assert len(wh.names("_insert_job")) == MAX_JOB_RETRIES + 1
    assert sleeps == [
        min(jobs.RETRY_BACKOFF_BASE_S * 2**n, jobs.RETRY_BACKOFF_CAP_S)
        for n in range(1, MAX_JOB_RETRIES + 1)
    ]
    assert wh.ledger == []


def test_quota_exceeded_is_not_retried() -> None:
    wh = FakeWarehouse()
    wh.submit_results[cid(FP_A, 0)] = failed(cid(FP_A, 0), "quotaExceeded")
    sleeps: list[float] = []

    with pytest.raises(JobFailedError, match="quotaExceeded"):
        run(wh, FP_A, sleeps=sleeps)

    assert wh.names("_insert_job") == ["_insert_job"]
    assert sleeps == []


def test_budget_exceeded_submits_nothing() -> None:
    wh = FakeWarehouse()
    wh.used_today = 3

    with pytest.raises(QuotaBudgetExceededError, match="'pageviews'.*3 jobs"):
        run(wh, FP_A, JobBudget(per_table_per_day=3))

    assert "_insert_job" not in wh.names()
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
        wh.seed(failed(cid(FP_A, generation)))

    with pytest.raises(RuntimeError, match=f"{MAX_GENERATIONS} generations"):
        run(wh, FP_A)
    assert "_insert_job" not in wh.names()


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
            "http_method": "GET",
            "http_protocol": "HTTP/1.0",
            "status": 200,
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
