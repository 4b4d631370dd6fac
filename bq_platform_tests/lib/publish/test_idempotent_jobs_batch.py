"""Many idempotent jobs at once
(:func:`bq_platform.lib.publish.idempotent_jobs.run_idempotent_jobs`): every job
is submitted before any is waited for, so BigQuery runs them side by side; a failure of one
still lets the others finish and be recorded, and a re-run completes the rest.

Against :class:`~bq_platform_tests.lib.fake_warehouse.FakeWarehouse`, whose jobs can stay
PENDING after ``jobs.insert`` as BigQuery's do (the local DuckDB warehouse runs a job before
``submit_job`` returns, so it cannot show the order).
"""

import logging
from collections.abc import Callable

import pytest

from bq_platform.lib.core.job_ids import job_id
from bq_platform.lib.publish.idempotent_jobs import JobOutcome, JobRequest, run_idempotent_jobs
from bq_platform.lib.publish.quota import JobBudget, QuotaBudgetExceededError
from bq_platform.lib.warehouse.base import CopyJob, Job, JobFailedError, JobStatus
from bq_platform.lib.warehouse.ledger import PUBLISH_LEDGER_TABLE
from bq_platform_tests.lib.fake_warehouse import FP_A, STAGE, FakeWarehouse, failed, ok

DAYS = ("19950801", "19950802", "19950803")


def jid(day: str, generation: int = 0) -> str:
    return job_id("copy", "pageviews", day, FP_A, generation)


def request(day: str) -> JobRequest:
    def make(generation: int) -> CopyJob:
        return CopyJob(
            job_id=jid(day, generation), sources=(STAGE.name,), destination=f"pageviews${day}"
        )

    return JobRequest(make, FP_A, day)


def pending(job: str) -> JobStatus:
    return JobStatus(job, "PENDING")


class CountingWarehouse(FakeWarehouse):
    """Counts its own submissions as today's jobs, as ``jobs.list`` would."""

    def _insert_job(self, job: Job) -> JobStatus:
        self.used_today += 1
        return super()._insert_job(job)


def recorded(wh: FakeWarehouse) -> dict[str, str]:
    """Partition -> job ID of the publish records written."""
    return {row["partition_key"]: row["job_id"] for row in wh.ledger}


def run_all(wh: FakeWarehouse, budget: JobBudget | None = None, sleeps: list | None = None):
    sleep: Callable[[float], None] = (sleeps if sleeps is not None else []).append
    return run_idempotent_jobs(wh, [request(d) for d in DAYS], budget=budget, sleep=sleep)


def test_every_job_is_submitted_before_any_is_waited_for() -> None:
    wh = FakeWarehouse()
    for n, day in enumerate(DAYS):
        wh.submit_results[jid(day)] = pending(jid(day))
        wh.wait_results[jid(day)] = ok(jid(day), rows=10 + n)

    outcomes = run_all(wh)

    assert outcomes == [JobOutcome(jid(d), "submitted", 0, 10 + n) for n, d in enumerate(DAYS)]
    assert wh.calls_of("_insert_job", "wait_job") == [
        *[("_insert_job", jid(d)) for d in DAYS],
        *[("wait_job", jid(d)) for d in DAYS],
    ]
    assert recorded(wh) == {d: jid(d) for d in DAYS}


def test_jobs_done_at_submission_are_not_waited_for() -> None:
    """A warehouse that runs the job inside ``submit_job`` (DuckDB) is never polled."""
    wh = FakeWarehouse()
    assert [o.action for o in run_all(wh)] == ["submitted"] * 3
    assert wh.names("wait_job") == []
    assert run_all(wh) == [JobOutcome(jid(d), "skipped", 0, 7) for d in DAYS]


def test_a_failed_job_lets_the_others_finish_and_a_rerun_completes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    wh = FakeWarehouse()
    for day in DAYS:
        wh.submit_results[jid(day)] = pending(jid(day))
    wh.wait_results[jid(DAYS[0])] = failed(jid(DAYS[0]), "invalid")
    wh.wait_results[jid(DAYS[2])] = failed(jid(DAYS[2]), "invalid")

    with caplog.at_level(logging.WARNING, logger="bq_platform.lib.publish.idempotent_jobs"):
        with pytest.raises(JobFailedError, match=f"{jid(DAYS[0])} .* failed: invalid"):
            run_all(wh)

    assert recorded(wh) == {DAYS[1]: jid(DAYS[1])}  # the good job was waited for and recorded
    assert f"another job failed too: job {jid(DAYS[2])}" in caplog.text  # logged, not raised
    # after the fix, a re-run skips the recorded day and runs the failed ones' next generation
    outcomes = run_all(wh)
    assert [(o.job_id, o.action) for o in outcomes] == [
        (jid(DAYS[0], 1), "submitted"),
        (jid(DAYS[1]), "skipped"),
        (jid(DAYS[2], 1), "submitted"),
    ]
    assert recorded(wh) == {
        DAYS[0]: jid(DAYS[0], 1),
        DAYS[1]: jid(DAYS[1]),
        DAYS[2]: jid(DAYS[2], 1),
    }


def test_a_refused_submission_stops_the_rest_and_finishes_the_started() -> None:
    wh = CountingWarehouse()
    for day in DAYS:
        wh.submit_results[jid(day)] = pending(jid(day))

    with pytest.raises(QuotaBudgetExceededError, match="'pageviews'"):
        run_all(wh, JobBudget(per_table_per_day=1))

    assert wh.names("_insert_job") == ["_insert_job"]  # nothing after the refused one
    assert wh.calls_of("wait_job") == [("wait_job", jid(DAYS[0]))]
    assert recorded(wh) == {DAYS[0]: jid(DAYS[0])}


def test_a_batch_looks_its_jobs_and_budgets_up_before_submitting_and_counts_its_own() -> None:
    # Generation 0 of every job, and each destination table's jobs today, are read before the
    # first insert (DuckDB answers each set in one statement); the batch then counts what it
    # submits, a 409 included. This warehouse's jobs.list never sees them (used_today stays 0):
    # only the batch's own count refuses the third copy into pageviews.
    wh = FakeWarehouse()
    wh.conflicts[jid(DAYS[0])] = ok(jid(DAYS[0]))  # another run inserted it meanwhile

    with pytest.raises(QuotaBudgetExceededError, match="'pageviews' is spent: 2 jobs"):
        run_all(wh, JobBudget(per_table_per_day=2))

    first_insert = wh.names().index("_insert_job")
    before = wh.calls[:first_insert]
    # the publish records (which generation to look up first) come from the ledger
    assert {c for c in before if c[0] == "table_info"} == {("table_info", PUBLISH_LEDGER_TABLE)}
    assert [c for c in before if c[0] != "table_info"] == [
        *[("get_job", jid(d)) for d in DAYS],
        ("jobs_submitted", "pageviews"),
    ]
    assert wh.calls_of("_insert_job") == [("_insert_job", jid(d)) for d in DAYS[:2]]
    later = [c for c in wh.calls[first_insert:] if c[0] in ("get_job", "jobs_submitted")]
    assert later == [("get_job", jid(DAYS[0]))]  # the 409's job read back, nothing else


def test_a_transient_failure_is_retried_while_waiting() -> None:
    wh = FakeWarehouse()
    for day in DAYS:
        wh.submit_results[jid(day)] = pending(jid(day))
    wh.wait_results[jid(DAYS[0])] = failed(jid(DAYS[0]), "backendError")
    sleeps: list[float] = []

    outcomes = run_all(wh, sleeps=sleeps)

    assert [o.job_id for o in outcomes] == [jid(DAYS[0], 1), jid(DAYS[1]), jid(DAYS[2])]
    assert len(sleeps) == 1
    # the retry is submitted after the first phase, while the others' turn to wait comes
    assert [c for c in wh.calls_of("_insert_job", "wait_job")][3:5] == [
        ("wait_job", jid(DAYS[0])),
        ("_insert_job", jid(DAYS[0], 1)),
    ]
    assert recorded(wh) == {DAYS[0]: jid(DAYS[0], 1), DAYS[1]: jid(DAYS[1]), DAYS[2]: jid(DAYS[2])}


def test_a_batch_records_its_jobs_in_one_append_after_the_last_wait() -> None:
    """One INSERT for the step's publish records: on BigQuery one DML job, not one per load."""
    wh = FakeWarehouse()
    for day in DAYS:
        wh.submit_results[jid(day)] = pending(jid(day))
        wh.wait_results[jid(day)] = ok(jid(day))

    run_all(wh)

    assert wh.calls_of("wait_job", "_append_ledger_rows") == [
        *[("wait_job", jid(d)) for d in DAYS],
        ("_append_ledger_rows", ",".join(jid(d) for d in DAYS)),
    ]


class LedgerDown(FakeWarehouse):
    """The process dies while appending the publish records (after every job is DONE)."""

    down = True

    def _append_ledger_rows(self, rows) -> None:
        if self.down:
            raise SystemExit("killed")
        super()._append_ledger_rows(rows)


def test_jobs_done_but_not_recorded_are_recorded_by_the_rerun_without_new_jobs() -> None:
    wh = LedgerDown()
    with pytest.raises(SystemExit):
        run_all(wh)
    assert wh.ledger == [] and wh.names("_insert_job") == ["_insert_job"] * 3

    wh.down = False
    outcomes = run_all(wh)

    assert [(o.job_id, o.action) for o in outcomes] == [(jid(d), "skipped") for d in DAYS]
    assert wh.names("_insert_job") == ["_insert_job"] * 3  # nothing submitted again
    assert recorded(wh) == {d: jid(d) for d in DAYS}


def test_a_batch_into_one_table_keeps_bigquery_s_table_update_rate() -> None:
    """BigQuery allows 5 updates of a table every 10 s: a week of days copied into pageviews
    waits before its 6th and 7th copy; a backend without that quota does not wait."""
    week = [f"199508{d:02d}" for d in range(1, 8)]
    wh = FakeWarehouse()
    wh.paces_table_updates = True
    sleeps: list[float] = []
    outcomes = run_idempotent_jobs(wh, [request(d) for d in week], sleep=sleeps.append)
    assert [o.action for o in outcomes] == ["submitted"] * 7
    assert sleeps == [pytest.approx(10.0, abs=1.0)] * 2

    local = FakeWarehouse()
    sleeps.clear()
    run_idempotent_jobs(local, [request(d) for d in week], sleep=sleeps.append)
    assert sleeps == []
