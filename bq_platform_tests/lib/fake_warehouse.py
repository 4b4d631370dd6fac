"""A hand-written warehouse for the tests of the job state machine
(:mod:`bq_platform.lib.publish.idempotent_jobs`).

:class:`FakeWarehouse` is the real :class:`~bq_platform.lib.warehouse.base.Warehouse` base over
dicts: its rules, ensure cache and publish ledger run as in production, while jobs, tables and
their rows are set by the test. It produces what DuckDB cannot: a job still RUNNING, a 409 on
insert, transient job failures, a table recreated at a chosen time.
"""

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bq_platform.lib.core.job_ids import job_id, sha256_json
from bq_platform.lib.publish.idempotent_jobs import JobOutcome, run_idempotent_job
from bq_platform.lib.publish.quota import JobBudget
from bq_platform.lib.warehouse.base import (
    CopyJob,
    Job,
    JobConflictError,
    JobStatus,
    TableExistsError,
    TableInfo,
    Warehouse,
)
from bq_platform.lib.warehouse.compare import SpecDifference
from bq_platform.lib.warehouse.rules import split_destination
from bq_platform.lib.warehouse.schema import TableSpec, pageviews_spec, stage_spec

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
        unreadable: job IDs whose insert answers 409 and whose lookup finds nothing, as for
            an ID held by a job past BigQuery's job history.
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
        self.unreadable: set[str] = set()
        self.wait_results: dict[str, JobStatus] = {}
        self.used_today = 0
        self.clock = T_CREATED
        self.calls: list[tuple[str, str]] = []
        self.ensure_table(pageviews_spec())
        self.ensure_table(STAGE)
        self.calls.clear()

    def names(self, *only: str) -> list[str]:
        return [name for name, _ in self.calls if not only or name in only]

    def calls_of(self, *only: str) -> list[tuple[str, str]]:
        """The calls named ``only``, with their argument, in order."""
        return [call for call in self.calls if call[0] in only]

    def seed(self, status: JobStatus, destination: str = DEST) -> None:
        """A job found in the job history; a succeeded one wrote its rows."""
        self.jobs[status.job_id] = status
        self.destinations[status.job_id] = destination
        self._finish(status)

    def recreate(self, spec: TableSpec) -> None:
        """The table expired or was dropped, and ``ensure_table`` made it again, empty."""
        del self.specs[spec.name]
        self.forget_table(spec.name)
        self.rows = {d: n for d, n in self.rows.items() if split_destination(d)[0] != spec.name}
        self.clock = T_RECREATED
        self.ensure_table(spec)

    def _finish(self, status: JobStatus) -> None:
        if status.succeeded and status.output_rows is not None:
            self.rows[self.destinations.get(status.job_id, DEST)] = status.output_rows

    def table_info(self, destination: str) -> TableInfo | None:
        self.calls.append(("table_info", destination))
        table, _ = split_destination(destination)
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
        if job.job_id in self.unreadable:
            raise JobConflictError(f"409: {job.job_id}")
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

    def _append_ledger_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.calls.append(("_append_ledger_rows", ",".join(str(r["job_id"]) for r in rows)))
        self.ledger.extend(dict(row) for row in rows)

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


JOB_CALLS = ("get_job", "jobs_submitted", "_insert_job", "wait_job", "_append_ledger_rows")
