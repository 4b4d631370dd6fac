"""The lookup-before-submit state machine (:mod:`bq_platform.lib.publish.idempotent_jobs`), against
:class:`~bq_platform_tests.lib.fake_warehouse.FakeWarehouse`: lookups, adoption, 409s, stale
jobs (table recreated, rows changed, content superseded), transient-failure retries, budgets.
The same machine end to end on DuckDB: ``test_jobs_duckdb.py``.
"""

import logging

import pytest

from bq_platform.lib.publish import idempotent_jobs as jobs
from bq_platform.lib.publish.idempotent_jobs import MAX_JOB_RETRIES, JobOutcome
from bq_platform.lib.publish.job_decisions import MAX_GENERATIONS, decide, first_decision
from bq_platform.lib.publish.quota import JobBudget, QuotaBudgetExceededError
from bq_platform.lib.warehouse.base import JobFailedError, JobStatus, QuotaExceededError
from bq_platform.lib.warehouse.schema import pageviews_spec
from bq_platform_tests.lib.fake_warehouse import (
    DAY_PARTITION,
    DEST,
    FP_A,
    FP_B,
    JOB_CALLS,
    T_ENDED,
    T_RECREATED,
    FakeWarehouse,
    cid,
    copy_maker,
    failed,
    ok,
    run,
)


def test_new_job_is_submitted_and_recorded() -> None:
    wh = FakeWarehouse()
    outcome = run(wh, FP_A, JobBudget(per_table_per_day=10))

    assert outcome == JobOutcome(cid(FP_A, 0), "submitted", 0, 7)
    assert wh.names(*JOB_CALLS) == [
        "get_job",
        "jobs_submitted",
        "_insert_job",
        "_append_ledger_rows",
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


def test_a_409_whose_job_cannot_be_read_moves_to_the_next_generation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An ID held by a job past BigQuery's job history: its insert answers 409 and jobs.get
    404, for ever. The next generation is a new ID, so the content is published once."""
    wh = FakeWarehouse()
    wh.unreadable.add(cid(FP_A, 0))

    with caplog.at_level(logging.WARNING, logger="bq_platform.lib.publish.idempotent_jobs"):
        outcome = run(wh, FP_A)

    assert outcome == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    assert wh.calls_of("_insert_job") == [
        ("_insert_job", cid(FP_A, 0)),
        ("_insert_job", cid(FP_A, 1)),
    ]
    assert "the ID is held by a job past BigQuery's job history; trying generation 1" in (
        caplog.text
    )
    assert wh.record() == (cid(FP_A, 1), FP_A, 7)
    # a re-run, and the plan, start from the generation the publish record names
    wh.calls.clear()
    assert run(wh, FP_A) == JobOutcome(cid(FP_A, 1), "skipped", 1, 7)
    assert wh.names("_insert_job") == []
    plan = first_decision(wh, copy_maker(FP_A), fingerprint=FP_A, partition=DAY_PARTITION)
    assert (plan.generation, plan.verdict) == (1, "skip")


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
        "_append_ledger_rows",
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
    assert wh.names("_insert_job", "_append_ledger_rows") == []
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
    assert wh.names("_insert_job", "wait_job", "_append_ledger_rows", "_create_table") == []


@pytest.mark.parametrize(
    "reason",
    [
        "backendError",
        "rateLimitExceeded",
        "internalError",
        # the job reasons google-cloud-bigquery's DEFAULT_JOB_RETRY resubmits a job for
        "jobBackendError",
        "jobInternalError",
        "jobRateLimitExceeded",
    ],
)
def test_transient_job_failure_backs_off_and_runs_next_generation(
    reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    wh = FakeWarehouse()
    wh.submit_results[cid(FP_A, 0)] = failed(cid(FP_A, 0), reason)
    sleeps: list[float] = []

    with caplog.at_level(logging.WARNING, logger="bq_platform.lib.publish.idempotent_jobs"):
        outcome = run(wh, FP_A, sleeps=sleeps)

    assert outcome == JobOutcome(cid(FP_A, 1), "submitted", 1, 7)
    assert wh.names("_insert_job") == ["_insert_job", "_insert_job"]
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= jobs.RETRY_BACKOFF_BASE_S * 2
    assert f"failed with {reason} (transient): retry 1 of {MAX_JOB_RETRIES}" in caplog.text
    assert wh.record() == (cid(FP_A, 1), FP_A, 7)


def test_transient_job_failures_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "full_jitter", lambda cap_s: cap_s)  # the longest delay
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


def test_quota_exceeded_is_not_retried_in_the_step() -> None:
    """A spent quota is no fault of the job: the step ends with QuotaExceededError (Dagster
    runs it again after BigQuery's advised wait, ``defs/errors.py``), not a new generation."""
    wh = FakeWarehouse()
    wh.submit_results[cid(FP_A, 0)] = failed(cid(FP_A, 0), "quotaExceeded")
    sleeps: list[float] = []

    with pytest.raises(QuotaExceededError, match="quotaExceeded"):
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


class _Recorder(logging.Handler):
    """Records the messages a step's log (Dagster's ``context.log`` in the assets) receives."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _step_log() -> tuple[logging.Logger, _Recorder]:
    logger = logging.getLogger("bq_platform_tests.step_log")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.handlers = [recorder := _Recorder()]
    return logger, recorder


def test_submits_and_skips_stay_out_of_the_step_log(caplog: pytest.LogCaptureFixture) -> None:
    """Each line in a step's log is an event in Dagster's event log: a submitted or
    skipped job is progress for the module logger, an adoption stays in the step's log."""
    step_log, recorder = _step_log()
    wh = FakeWarehouse()
    make = copy_maker(FP_A)
    with caplog.at_level(logging.DEBUG, logger="bq_platform.lib.publish.idempotent_jobs"):
        for _ in range(2):  # submitted, then skipped
            jobs.run_idempotent_job(
                wh, make, fingerprint=FP_A, partition=DAY_PARTITION, log=step_log
            )
    assert recorder.messages == []
    assert f"submitted job {cid(FP_A, 0)}" in caplog.text
    assert "already done for this content: skipped" in caplog.text

    wh = FakeWarehouse()
    wh.conflicts[cid(FP_A, 0)] = ok(cid(FP_A, 0), rows=5)
    jobs.run_idempotent_job(wh, make, fingerprint=FP_A, partition=DAY_PARTITION, log=step_log)
    assert recorder.messages == [f"job {cid(FP_A, 0)} exists already (409): adopting it"]
