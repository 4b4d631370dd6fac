"""The lookup-before-submit state machine that makes every warehouse job idempotent.

For generation g = 0, 1, ...: build the job's deterministic ID (:mod:`bq_platform.lib.jobids`)
and look it up:

- not found -> check the budget, submit; a 409 on insert means another run submitted it: adopt;
- PENDING/RUNNING -> adopt it and wait;
- DONE, succeeded -> skip, if the destination table still exists and its publish record
  names this content (or no record exists yet: a crash between job and record); if the table
  is gone (an expired stage table) or has since received other content, the old job no
  longer describes it -> next generation;
- DONE, failed -> next generation.

A job *we* submitted that fails raises :class:`JobFailedError`: resubmitting the same content
in a loop would fail the same way. The rules come from DESIGN.md ("Deterministic job IDs").
"""

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from typing import Literal

from bq_platform.lib.quota import JobBudget
from bq_platform.lib.warehouse.base import (
    Job,
    JobConflictError,
    JobFailedError,
    PublishRecord,
    Warehouse,
    split_decorator,
)

MAX_GENERATIONS = 50

Action = Literal["submitted", "adopted", "skipped"]


@dataclasses.dataclass(frozen=True)
class JobOutcome:
    """Result of :func:`run_idempotent_job`.

    Attributes:
        job_id: the job that holds the destination's content now.
        action: ``submitted`` (we ran it), ``adopted`` (someone else's run, we waited),
            ``skipped`` (already done for this content).
        generation: generation of ``job_id``.
        rows: rows the job wrote (from the job or the publish record).
    """

    job_id: str
    action: Action
    generation: int
    rows: int | None


def _generation_of(job_id: str, default: int) -> int:
    """The generation in a job ID's ``_g<generation>`` suffix (:mod:`bq_platform.lib.jobids`)."""
    _, sep, tail = job_id.rpartition("_g")
    return int(tail) if sep and tail.isdigit() else default


def run_idempotent_job(
    warehouse: Warehouse,
    make_job: Callable[[int], Job],
    *,
    fingerprint: str,
    partition: str,
    budget: JobBudget | None = None,
    wait_timeout_s: float = 3600.0,
    log: logging.Logger | None = None,
) -> JobOutcome:
    """Make sure content ``fingerprint`` is in ``make_job(g).destination``; run it at most once.

    Args:
        warehouse: where the job runs.
        make_job: builds the job for a generation; its ``job_id`` must embed ``fingerprint``
            and the generation.
        fingerprint: content fingerprint (hex) the job ID is built from.
        partition: ``YYYYMMDD``/``YYYYMMDDHH`` key of the publish record.
        budget: per-table daily budget checked before every submission.
        wait_timeout_s: how long to wait for a running job, seconds.
        log: logger for progress lines.

    Returns:
        The :class:`JobOutcome`.

    Raises:
        JobFailedError: if the job this call submitted finished with an error.
        QuotaBudgetExceededError: if the budget refuses the submission.
        RuntimeError: if :data:`MAX_GENERATIONS` generations all failed.
    """
    log = log or logging.getLogger(__name__)
    for generation in range(MAX_GENERATIONS):
        job = make_job(generation)
        table, _ = split_decorator(job.destination)
        status = warehouse.get_job(job.job_id)
        action: Action
        if status is None:
            if budget is not None:
                budget.check(warehouse, job.destination)
            try:
                status = warehouse.submit_job(job)
                action = "submitted"
                log.info("submitted job %s -> %s", job.job_id, job.destination)
            except JobConflictError:
                log.info("job %s exists already (409): adopting it", job.job_id)
                found = warehouse.get_job(job.job_id)
                if found is None:
                    raise
                status, action = found, "adopted"
        elif not status.done:
            action = "adopted"
            log.info("job %s is %s: adopting it and waiting", job.job_id, status.state)
        else:
            action = "skipped"

        if not status.done:
            status = warehouse.wait_job(job.job_id, timeout_s=wait_timeout_s)

        if not status.succeeded:
            if action == "submitted":
                raise JobFailedError(
                    f"job {job.job_id} -> {job.destination} failed: {status.error_reason}: "
                    f"{status.error_message}. The destination is unchanged; fix the cause and "
                    "re-run (the next attempt uses the next generation of this job ID).",
                    status,
                )
            log.warning(
                "job %s had failed earlier (%s); trying generation %d",
                job.job_id,
                status.error_reason,
                generation + 1,
            )
            continue

        if action == "skipped" and not warehouse.table_exists(table):
            # The job wrote it, but the table is gone since (a stage table expired, or was
            # dropped by hand): the old job no longer describes the destination.
            log.info(
                "job %s succeeded before, but table %s no longer exists: running generation %d",
                job.job_id,
                table,
                generation + 1,
            )
            continue
        record = warehouse.read_publish_record(table, partition)
        if action == "skipped" and record is not None and record.job_id != job.job_id:
            if record.fingerprint == fingerprint:
                # Same content, published by another generation's job: nothing to do.
                return JobOutcome(
                    record.job_id,
                    "skipped",
                    _generation_of(record.job_id, generation),
                    record.rows,
                )
            log.info(
                "job %s succeeded before, but %s$%s now holds %s from %s: running generation %d",
                job.job_id,
                table,
                partition,
                record.fingerprint[:12],
                record.job_id,
                generation + 1,
            )
            continue
        rows = (
            status.output_rows
            if status.output_rows is not None
            else (record.rows if record is not None else None)
        )
        if record is None or record.job_id != job.job_id:
            warehouse.write_publish_record(
                PublishRecord(
                    destination=table,
                    partition=partition,
                    job_id=job.job_id,
                    fingerprint=fingerprint,
                    rows=rows or 0,
                    published_at=dt.datetime.now(dt.UTC),
                )
            )
        if action == "skipped":
            log.info("job %s already done for this content: skipped", job.job_id)
        return JobOutcome(job.job_id, action, generation, rows)
    raise RuntimeError(
        f"{MAX_GENERATIONS} generations of the job for {partition} failed; inspect the jobs "
        f"with prefix {make_job(0).job_id.rsplit('_g', 1)[0]} in the warehouse"
    )
