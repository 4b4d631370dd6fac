"""The lookup-before-submit state machine that makes every warehouse job idempotent.

For generation g = 0, 1, ...: build the job's deterministic ID (:mod:`bq_platform.lib.core.job_ids`)
and look it up (:func:`~bq_platform.lib.publish.job_decisions.decide`):

- not found -> check the budget, submit; a 409 on insert means another run submitted it:
  adopt it; if the job still cannot be read (:meth:`~bq_platform.lib.warehouse.base.Warehouse.
  get_existing_job`), its ID is held by a job past the backend's job history: next generation;
- PENDING/RUNNING -> adopt it and wait;
- DONE, succeeded -> skip while the destination still holds what the job wrote
  (:func:`~bq_platform.lib.publish.job_decisions.stale_reason`), else next generation:
  BigQuery keeps finished jobs for six months, longer than a stage table lives;
- DONE, failed -> next generation.

A job *we* submitted that fails with a reason of :data:`RETRYABLE_JOB_REASONS` is retried as
the next generation after a backoff with full jitter (cloud.google.com/bigquery/docs/
error-messages); ``quotaExceeded`` raises :class:`~bq_platform.lib.warehouse.base.
QuotaExceededError` (the step is run again later); any other failure raises
:class:`JobFailedError`.
"""

import dataclasses
import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Generator, Sequence
from typing import Literal

from google.cloud.bigquery.retry import job_retry_reasons

from bq_platform.lib.publish.job_decisions import (
    MAX_GENERATIONS,
    decide,
    exhausted_error,
    first_generation,
    generation_of,
)
from bq_platform.lib.publish.quota import JobBudget
from bq_platform.lib.publish.table_update_rate import TableUpdatePacer
from bq_platform.lib.warehouse.base import (
    Job,
    JobConflictError,
    JobFailedError,
    JobStatus,
    PublishRecord,
    QuotaExceededError,
    Warehouse,
)
from bq_platform.lib.warehouse.rules import QUOTA_EXCEEDED, split_destination

#: Job error reasons worth a new generation after a backoff: the error-messages page's
#: transient reasons, and the job reasons google-cloud-bigquery's ``DEFAULT_JOB_RETRY``
#: resubmits a job for (``google.cloud.bigquery.retry.job_retry_reasons``).
RETRYABLE_JOB_REASONS = frozenset(
    {"backendError", "internalError", "rateLimitExceeded", *job_retry_reasons}
)
#: Transient failures of one job retried before the step fails.
MAX_JOB_RETRIES = 3
#: Backoff before the n-th retry: uniform in [0, min(BASE * 2**n, CAP)] seconds (full jitter).
RETRY_BACKOFF_BASE_S = 2.0
RETRY_BACKOFF_CAP_S = 60.0


def full_jitter(cap_s: float) -> float:
    """A backoff delay drawn uniformly from [0, ``cap_s``] seconds (full jitter)."""
    return random.uniform(0, cap_s)


#: Per-job progress (submitted, skipped) goes here at DEBUG; adoptions, retries and failures
#: go to the caller's ``log`` (visible in the UI).
_progress = logging.getLogger(__name__)

Action = Literal["submitted", "adopted", "skipped"]


@dataclasses.dataclass(frozen=True)
class JobOutcome:
    """Result of :func:`run_idempotent_job`.

    Attributes:
        job_id: the job that holds the destination's content now.
        action: ``submitted`` (we ran it), ``adopted`` (someone else's run, we waited),
            ``skipped`` (already done for this content).
    """

    job_id: str
    action: Action
    generation: int
    rows: int | None


@dataclasses.dataclass
class _BatchReads:
    """What :func:`run_idempotent_jobs` reads for all its jobs before it submits any: the
    status of each one's first generation
    (:func:`~bq_platform.lib.publish.job_decisions.first_generation`), and with a budget each
    table's job count on UTC ``day``. Used while ``active`` (the first phase); later lookups
    are made one by one."""

    statuses: dict[str, JobStatus | None]
    used: dict[str, int] | None
    day: dt.date
    active: bool = True

    @classmethod
    def read(
        cls, warehouse: Warehouse, requests: Sequence["JobRequest"], budget: JobBudget | None
    ) -> "_BatchReads":
        jobs = [
            request.make_job(
                first_generation(
                    warehouse,
                    request.make_job,
                    fingerprint=request.fingerprint,
                    partition=request.partition,
                )
            )
            for request in requests
        ]
        day = dt.datetime.now(dt.UTC).date()
        tables = [split_destination(job.destination)[0] for job in jobs]
        return cls(
            statuses=warehouse.get_jobs([job.job_id for job in jobs]),
            used=None if budget is None else warehouse.jobs_submitted_to(tables, day),
            day=day,
        )

    def status(self, warehouse: Warehouse, job_id: str) -> JobStatus | None:
        """The first generation's status as read for the batch (once), else ``jobs.get``."""
        if self.active and job_id in self.statuses:
            return self.statuses.pop(job_id)
        return warehouse.get_job(job_id)

    def check_budget(self, warehouse: Warehouse, budget: JobBudget, destination: str) -> None:
        """The budget's check, with the batch's count while it is active.

        Raises:
            QuotaBudgetExceededError: if one more job would exceed the budget.
        """
        table, _ = split_destination(destination)
        if self.active and self.used is not None and table in self.used:
            budget.check_used(table, self.day, self.used[table])
        else:
            budget.check(warehouse, destination)

    def submitted(self, destination: str) -> None:
        """Count one more job of ``destination``'s table (submitted, or found existing)."""
        table, _ = split_destination(destination)
        if self.active and self.used is not None and table in self.used:
            self.used[table] += 1


@dataclasses.dataclass(frozen=True)
class _Done:
    """A finished state machine: its outcome, and the publish record to write (None when the
    ledger already names the job)."""

    outcome: JobOutcome
    record: PublishRecord | None = None


def run_idempotent_job(
    warehouse: Warehouse,
    make_job: Callable[[int], Job],
    *,
    fingerprint: str,
    partition: str,
    budget: JobBudget | None = None,
    wait_timeout_s: float = 3600.0,
    log: logging.Logger | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> JobOutcome:
    """Make sure content ``fingerprint`` is in ``make_job(g).destination``; run it at most once.

    Args:
        make_job: builds the job for a generation; its ``job_id`` must embed ``fingerprint``
            and the generation.
        fingerprint: content fingerprint (hex) the job ID is built from.
        partition: ``YYYYMMDD``/``YYYYMMDDHH`` key of the publish record.
        budget: per-table daily budget checked before every submission.
        log: for adoptions, new generations, retries and failures.

    Raises:
        JobFailedError: if the job this call submitted failed for a non-transient reason, or
            for a transient one :data:`MAX_JOB_RETRIES` times.
        QuotaBudgetExceededError: if the budget refuses the submission.
        RuleViolation: if BigQuery would refuse the job (nothing was submitted).
        RuntimeError: if :data:`MAX_GENERATIONS` generations are spent.
    """
    request = JobRequest(make_job, fingerprint, partition)
    machine = _job_machine(warehouse, request, budget, log or _progress, sleep)
    done = _finish(warehouse, machine, None, wait_timeout_s)
    warehouse.write_publish_records([done.record] if done.record else [])
    return done.outcome


@dataclasses.dataclass(frozen=True)
class JobRequest:
    """One job for :func:`run_idempotent_jobs` (arguments as :func:`run_idempotent_job`'s)."""

    make_job: Callable[[int], Job]
    fingerprint: str
    partition: str


def run_idempotent_jobs(
    warehouse: Warehouse,
    requests: Sequence[JobRequest],
    *,
    budget: JobBudget | None = None,
    wait_timeout_s: float = 3600.0,
    log: logging.Logger | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[JobOutcome]:
    """:func:`run_idempotent_job` for many jobs: every job is submitted before any is waited for.

    BigQuery runs jobs asynchronously (cloud.google.com/bigquery/docs/managing-jobs): the first
    phase submits (or adopts) every job, paced per destination table where the warehouse
    says so (:mod:`~bq_platform.lib.publish.table_update_rate`), the second waits for each
    in order and retries
    transient failures. The publish records are appended in one INSERT at the end (a re-run
    records jobs a killed process left unrecorded). Returns one outcome per request, in order.

    Raises:
        The first error of any job (see :func:`run_idempotent_job`), after every job already
        submitted has been waited for and recorded; an error while submitting stops further
        submissions.
    """
    log = log or _progress
    started: list[tuple[Generator[str, JobStatus, _Done], str | _Done]] = []
    first_error: BaseException | None = None
    reads = _BatchReads.read(warehouse, requests, budget)
    pacer = TableUpdatePacer(sleep=sleep) if warehouse.paces_table_updates else None
    for request in requests:
        machine = _job_machine(warehouse, request, budget, log, sleep, reads, pacer)
        try:
            started.append((machine, next(machine)))
        except StopIteration as stop:
            started.append((machine, stop.value))
        except Exception as exc:
            first_error = exc
            break
    reads.active = False
    finished: list[_Done] = []
    for machine, state in started:
        if isinstance(state, _Done):
            finished.append(state)
            continue
        try:
            finished.append(_finish(warehouse, machine, state, wait_timeout_s))
        except Exception as exc:
            if first_error is None:
                first_error = exc
            else:
                log.warning("another job failed too: %s", exc)
    try:
        warehouse.write_publish_records([d.record for d in finished if d.record is not None])
    except Exception as exc:
        if first_error is None:
            raise
        log.warning("recording the finished jobs failed too: %s", exc)
    if first_error is not None:
        raise first_error
    return [done.outcome for done in finished]


def _finish(
    warehouse: Warehouse,
    machine: Generator[str, JobStatus, _Done],
    waiting_for: str | None,
    wait_timeout_s: float,
) -> _Done:
    """Run ``machine`` to its outcome, waiting for each job ID it yields."""
    try:
        job_id = next(machine) if waiting_for is None else waiting_for
        while True:
            job_id = machine.send(warehouse.wait_job(job_id, timeout_s=wait_timeout_s))
    except StopIteration as stop:
        return stop.value


def _job_machine(
    warehouse: Warehouse,
    request: JobRequest,
    budget: JobBudget | None,
    log: logging.Logger,
    sleep: Callable[[float], None],
    reads: _BatchReads | None = None,
    pacer: TableUpdatePacer | None = None,
) -> Generator[str, JobStatus, _Done]:
    """The state machine of one job (module docstring): yields a job ID to wait for, is sent
    its final status, and returns the :class:`_Done` with the record to write."""
    make_job, fingerprint, partition = request.make_job, request.fingerprint, request.partition
    retries = 0
    start = first_generation(warehouse, make_job, fingerprint=fingerprint, partition=partition)
    for generation in range(start, MAX_GENERATIONS):
        decision = decide(
            warehouse,
            make_job,
            generation,
            fingerprint=fingerprint,
            partition=partition,
            lookup=None if reads is None else lambda job_id: reads.status(warehouse, job_id),
        )
        job, status = decision.job, decision.status
        if decision.verdict == "next":
            log.info(
                "job %s: %s; trying generation %d", job.job_id, decision.reason, generation + 1
            )
            continue
        action: Action
        if decision.verdict == "submit":
            if budget is not None and reads is not None:
                reads.check_budget(warehouse, budget, job.destination)
            elif budget is not None:
                budget.check(warehouse, job.destination)
            if pacer is not None:
                waited = pacer.wait(split_destination(job.destination)[0])
                if waited:
                    _progress.debug("paced job %s by %.1f s (table updates)", job.job_id, waited)
            try:
                status = warehouse.submit_job(job)
                action = "submitted"
                _progress.debug("submitted job %s -> %s", job.job_id, job.destination)
            except JobConflictError:
                status = warehouse.get_existing_job(job.job_id)
                if status is None:
                    log.warning(
                        "job %s: its insert answered 409 but the job cannot be read: the ID is "
                        "held by a job past BigQuery's job history; trying generation %d",
                        job.job_id,
                        generation + 1,
                    )
                    continue
                log.info("job %s exists already (409): adopting it", job.job_id)
                action = "adopted"
            if reads is not None:
                reads.submitted(job.destination)
        elif decision.verdict == "wait":
            action = "adopted"
            log.info("job %s is %s: adopting it and waiting", job.job_id, decision.reason)
        else:
            action = "skipped"
        assert status is not None
        if not status.done:
            status = yield job.job_id
        if not status.succeeded:
            if action != "submitted":
                log.warning("adopted job %s failed (%s)", job.job_id, status.error_reason)
                continue
            if status.error_reason in RETRYABLE_JOB_REASONS and retries < MAX_JOB_RETRIES:
                retries += 1
                delay = full_jitter(min(RETRY_BACKOFF_BASE_S * 2**retries, RETRY_BACKOFF_CAP_S))
                log.warning(
                    "job %s failed with %s (transient): retry %d of %d as generation %d in %.1f s",
                    job.job_id,
                    status.error_reason,
                    retries,
                    MAX_JOB_RETRIES,
                    generation + 1,
                    delay,
                )
                sleep(delay)
                continue
            if status.error_reason == QUOTA_EXCEEDED:
                raise QuotaExceededError(
                    f"job {job.job_id} -> {job.destination} failed with quotaExceeded: "
                    f"{status.error_message}. The destination is unchanged; the step is run "
                    "again once the quota has had time to replenish."
                )
            raise JobFailedError(
                f"job {job.job_id} -> {job.destination} failed: {status.error_reason}: "
                f"{status.error_message}. The destination is unchanged; fix the cause and "
                "re-run (the next attempt uses the next generation of this job ID).",
                status,
            )
        table, _ = split_destination(job.destination)
        record = warehouse.read_publish_record(table, partition)
        if action == "skipped" and record is not None and record.fingerprint == fingerprint:
            if record.job_id != job.job_id:  # same content, published by a later generation
                gen = generation_of(record.job_id)
                gen = generation if gen is None else gen
                return _Done(JobOutcome(record.job_id, "skipped", gen, record.rows))
        rows = status.output_rows
        if rows is None and record is not None and record.fingerprint == fingerprint:
            rows = record.rows
        new_record = None
        if record is None or record.job_id != job.job_id:
            new_record = PublishRecord(
                destination=table,
                partition=partition,
                job_id=job.job_id,
                fingerprint=fingerprint,
                rows=rows or 0,
                published_at=dt.datetime.now(dt.UTC),
            )
        if action == "skipped":
            _progress.debug("job %s already done for this content: skipped", job.job_id)
        return _Done(JobOutcome(job.job_id, action, generation, rows), new_record)
    raise exhausted_error(make_job, partition)
