"""The read-only half of the job state machine (:mod:`bq_platform.lib.publish.idempotent_jobs`):
what to do with one generation of a job, from its status, its destination's metadata and the
publish record. It submits nothing, so ``bq-platform plan`` uses it as is.
"""

import dataclasses
from collections.abc import Callable
from typing import Literal

from bq_platform.lib.warehouse.base import Job, JobStatus, Warehouse
from bq_platform.lib.warehouse.rules import split_destination

#: Generations of one job's ID tried before giving up (each failed or superseded one is kept).
MAX_GENERATIONS = 50
Verdict = Literal["submit", "wait", "skip", "next"]


@dataclasses.dataclass(frozen=True)
class Decision:
    """What the state machine does with one generation of a job (see :func:`decide`).

    Attributes:
        verdict: ``submit`` (not found), ``wait`` (pending or running: adopt it), ``skip``
            (done, and the destination still holds its output), ``next`` (failed, or its
            output is gone or superseded: try the next generation).
        reason: why, for logs and ``bq-platform plan``.
    """

    job: Job
    generation: int
    verdict: Verdict
    status: JobStatus | None
    reason: str


def stale_reason(
    warehouse: Warehouse, job: Job, status: JobStatus, fingerprint: str, partition: str
) -> str | None:
    """Why a succeeded job no longer describes its destination (table recreated or expired,
    rows changed, another content published since), or None; metadata only, 0 bytes billed."""
    table, _ = split_destination(job.destination)
    info = warehouse.table_info(job.destination)
    if info is None:
        return f"table {table} no longer exists (expired or dropped)"
    if status.ended is not None and info.created > status.ended:
        return (
            f"table {table} was created again at {info.created:%Y-%m-%d %H:%M:%S} UTC, after "
            "the job ended"
        )
    if status.output_rows is not None and info.rows != status.output_rows:
        return f"{job.destination} holds {info.rows} rows, the job wrote {status.output_rows}"
    record = warehouse.read_publish_record(table, partition)
    if record is not None and record.job_id != job.job_id and record.fingerprint != fingerprint:
        return f"{table}${partition} holds {record.fingerprint[:12]} from {record.job_id} since"
    return None


def decide(
    warehouse: Warehouse,
    make_job: Callable[[int], Job],
    generation: int,
    *,
    fingerprint: str,
    partition: str,
    lookup: Callable[[str], JobStatus | None] | None = None,
) -> Decision:
    """Look generation ``generation`` of a job up (``jobs.get``, or ``lookup`` with a status
    the caller read already) and decide what to do with it; read-only."""
    job = make_job(generation)
    status = (lookup or warehouse.get_job)(job.job_id)
    if status is None:
        return Decision(job, generation, "submit", None, "not found: submit")
    if not status.done:
        return Decision(job, generation, "wait", status, f"{status.state}: adopt and wait")
    if not status.succeeded:
        return Decision(job, generation, "next", status, f"failed earlier ({status.error_reason})")
    stale = stale_reason(warehouse, job, status, fingerprint, partition)
    if stale is not None:
        return Decision(job, generation, "next", status, f"succeeded before, but {stale}")
    return Decision(job, generation, "skip", status, "already done for this content")


def generation_of(job_id: str) -> int | None:
    """The generation in a job ID's ``_g<generation>`` suffix, or None when it has none."""
    _, sep, tail = job_id.rpartition("_g")
    return int(tail) if sep and tail.isdigit() else None


def first_generation(
    warehouse: Warehouse, make_job: Callable[[int], Job], *, fingerprint: str, partition: str
) -> int:
    """The generation to look up first: the one whose job the publish record names, when the
    record holds this ``fingerprint``; else 0.

    The generations before it were spent when that job was chosen (failed, superseded, or
    held by a job past BigQuery's job history of about six months, whose ID answers 409 to
    an insert and 404 to ``jobs.get`` for ever), so a re-run does not try them again."""
    table, _ = split_destination(make_job(0).destination)
    record = warehouse.read_publish_record(table, partition)
    if record is None or record.fingerprint != fingerprint:
        return 0
    generation = generation_of(record.job_id)
    if generation is None or generation >= MAX_GENERATIONS:
        return 0
    return generation if make_job(generation).job_id == record.job_id else 0


def first_decision(
    warehouse: Warehouse, make_job: Callable[[int], Job], *, fingerprint: str, partition: str
) -> Decision:
    """The first generation from :func:`first_generation` whose verdict is not ``next`` (what
    a run would do now); ``RuntimeError`` if all :data:`MAX_GENERATIONS` are spent."""
    start = first_generation(warehouse, make_job, fingerprint=fingerprint, partition=partition)
    for generation in range(start, MAX_GENERATIONS):
        decision = decide(
            warehouse, make_job, generation, fingerprint=fingerprint, partition=partition
        )
        if decision.verdict != "next":
            return decision
    raise exhausted_error(make_job, partition)


def exhausted_error(make_job: Callable[[int], Job], partition: str) -> RuntimeError:
    """The error to raise when all :data:`MAX_GENERATIONS` generations of a job are spent."""
    return RuntimeError(
        f"{MAX_GENERATIONS} generations of the job for {partition} failed; inspect the jobs "
        f"with prefix {make_job(0).job_id.rsplit('_g', 1)[0]} in the warehouse"
    )
