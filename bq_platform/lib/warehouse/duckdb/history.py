"""The job half of the DuckDB backend: run jobs and keep BigQuery's job history.

:class:`DuckDBJobHistory` is mixed into :class:`~bq_platform.lib.warehouse.duckdb.warehouse.
DuckDBWarehouse`. Jobs (:mod:`bq_platform.lib.warehouse.duckdb.jobs`) run on worker threads
(:mod:`bq_platform.lib.warehouse.duckdb.background`) or, with one worker, before
``submit_job`` returns; each in one transaction with its row in ``_bq_platform_jobs``,
BigQuery's job history: a failed job
leaves the destination as it was and is recorded DONE with BigQuery's error reason; reusing a
job ID raises :class:`~bq_platform.lib.warehouse.base.JobConflictError` (HTTP 409).
"""

import datetime as dt
import json
import logging
from collections.abc import Sequence
from typing import Any

import duckdb

from bq_platform.lib.warehouse import rules

from bq_platform.lib.warehouse.duckdb import jobs as duckdb_jobs
from bq_platform.lib.warehouse.base import (
    Job,
    JobConflictError,
    JobStatus,
    LoadJob,
    WarehouseError,
)
from bq_platform.lib.warehouse.duckdb.layout import read_spec
from bq_platform.lib.warehouse.duckdb.sql import _now, _rollback, _utc
from bq_platform.lib.warehouse.schema import TableSpec

log = logging.getLogger(__name__)

JOBS_TABLE = "_bq_platform_jobs"

#: BigQuery's job history: one row per job, written in the job's own transaction.
JOBS_DDL = f"""CREATE TABLE IF NOT EXISTS {JOBS_TABLE} (
    job_id VARCHAR PRIMARY KEY,
    job_type VARCHAR NOT NULL,
    destination VARCHAR NOT NULL,
    "partition" VARCHAR NOT NULL,
    state VARCHAR NOT NULL,
    error_reason VARCHAR,
    error_message VARCHAR,
    output_rows BIGINT,
    labels JSON NOT NULL,
    created_at TIMESTAMP WITH TIME ZONE NOT NULL,
    finished_at TIMESTAMP WITH TIME ZONE)"""


class DuckDBJobHistory:
    """Jobs of :class:`~bq_platform.lib.warehouse.duckdb.warehouse.DuckDBWarehouse` (a mixin)."""

    def get_job(self, job_id: str) -> JobStatus | None:
        """Look a job up in the job history; None if no job has this ID.

        A job still running on a worker (:mod:`~bq_platform.lib.warehouse.duckdb.background`)
        is RUNNING, as BigQuery reports it.
        """
        if self._background.running(job_id):
            return JobStatus(job_id=job_id, state="RUNNING")
        with self._connect() as con:
            row = con.execute(
                f"SELECT {_STATUS_COLUMNS} FROM {JOBS_TABLE} WHERE job_id = ?", [job_id]
            ).fetchone()
        return None if row is None else _status(row)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobStatus | None]:
        """:meth:`get_job` of each ID in one statement (a batch's 144 lookups one by one took
        ~0.1 s of the step's main thread while its loads ran; issue 9)."""
        ids = list(dict.fromkeys(job_ids))
        found: dict[str, JobStatus | None] = {
            i: JobStatus(job_id=i, state="RUNNING") if self._background.running(i) else None
            for i in ids
        }
        asked = [i for i, status in found.items() if status is None]
        if asked:
            with self._connect() as con:
                rows = con.execute(
                    f"SELECT {_STATUS_COLUMNS} FROM {JOBS_TABLE} WHERE job_id = ANY(?)", [asked]
                ).fetchall()
            found.update({row[0]: _status(row) for row in rows})
        return found

    def _insert_job(self, job: Job) -> JobStatus:
        """Run a validated load or copy job; return its status.

        With one worker (``concurrent_jobs=1``) the job runs before this returns, DONE. With
        more, it runs on a worker thread and is returned RUNNING (BigQuery's jobs are
        asynchronous too); :meth:`wait_job` gives its DONE status.

        The job's data change and its history row commit in one transaction. If the job
        fails, the data change is rolled back (the destination is unchanged) and a DONE row
        with BigQuery's error reason is recorded; a failed job is returned, not raised.

        Raises:
            JobConflictError: if a job with this ID exists already (HTTP 409).
            WarehouseError: if the file stays locked or the history cannot be written.
        """
        created_at = _now()
        with self._connect() as con:
            exists = con.execute(
                f"SELECT count(*) FROM {JOBS_TABLE} WHERE job_id = ?", [job.job_id]
            ).fetchone()
            if (exists and exists[0]) or self._background.known(job.job_id):
                raise JobConflictError(
                    f"job {job.job_id} already exists (409 duplicate); look it up instead"
                )
            if self._background.workers == 1:
                return self._execute_job(con, job, created_at)
        table, _ = rules.split_destination(job.destination)
        self._background.start(
            job.job_id,
            table,
            lambda cursor: self._execute_job(cursor, job, created_at),
            self._job_connection,
        )
        return JobStatus(job_id=job.job_id, state="RUNNING")

    def _execute_job(
        self, con: duckdb.DuckDBPyConnection, job: Job, created_at: dt.datetime
    ) -> JobStatus:
        """Run ``job`` and record it, in one transaction on ``con``; its DONE status."""
        kind = "load" if isinstance(job, LoadJob) else "copy"
        rows: int | None = None
        reason = message = None
        con.begin()
        try:
            run = duckdb_jobs.run_load if isinstance(job, LoadJob) else duckdb_jobs.run_copy
            rows = run(con, job, lambda name: self._spec_or_none(con, name))  # type: ignore[arg-type]
        except Exception as exc:  # every failure becomes a failed job, as in BigQuery
            _rollback(con)
            reason, message = duckdb_jobs.classify(exc)
            message = f"{kind} job {job.job_id} -> {job.destination}: {message}"
            log.warning("%s", message, exc_info=exc if reason == "internalError" else None)
            con.begin()
        status = self._record_job(con, job, kind, created_at, rows, reason, message)
        con.commit()
        if reason is None:
            log.debug("%s job %s -> %s: %d rows", kind, job.job_id, job.destination, rows)
        return status

    def _spec_or_none(self, con: duckdb.DuckDBPyConnection, table: str) -> TableSpec | None:
        found = read_spec(con, table)
        return found[0] if found else None

    @staticmethod
    def _record_job(
        con: duckdb.DuckDBPyConnection,
        job: Job,
        kind: str,
        created_at: dt.datetime,
        output_rows: int | None,
        reason: str | None,
        message: str | None,
    ) -> JobStatus:
        """Insert the job's DONE history row inside the caller's transaction."""
        table, day = rules.split_destination(job.destination)
        partition = f"{day:%Y%m%d}" if day else str(job.labels.get("partition", ""))
        labels = dict(sorted(job.labels.items()))
        ended = _now()
        try:
            con.execute(
                f"INSERT INTO {JOBS_TABLE} VALUES (?, ?, ?, ?, 'DONE', ?, ?, ?, ?, ?, ?)",
                [
                    job.job_id,
                    kind,
                    table,
                    partition,
                    reason,
                    message,
                    output_rows,
                    json.dumps(labels),
                    created_at,
                    ended,
                ],
            )
        except duckdb.ConstraintException as exc:
            _rollback(con)
            raise JobConflictError(f"job {job.job_id} already exists (409 duplicate)") from exc
        return JobStatus(
            job_id=job.job_id,
            state="DONE",
            error_reason=reason,
            error_message=message,
            output_rows=output_rows,
            labels=labels,
            ended=ended,
        )

    def wait_job(self, job_id: str, timeout_s: float = 3600.0) -> JobStatus:
        """Wait for a job running on a worker, or look a finished one up; its DONE status.

        Raises:
            TimeoutError: if the job runs longer than ``timeout_s`` seconds.
            WarehouseError: if no job has this ID, or its history row could not be written.
        """
        status = self._background.wait(job_id, timeout_s)
        if status is None:
            status = self.get_job(job_id)
        if status is None:
            raise WarehouseError(f"no job {job_id!r} in the warehouse's job history")
        return status

    def jobs_submitted(self, table: str, day: dt.date) -> int:
        """Jobs (failed ones too, as BigQuery counts them) with destination ``table`` created
        on UTC ``day``, from the job history, plus those still running on a worker (counted
        first: one that ends meanwhile counts twice, so a budget errs on the safe side)."""
        return self.jobs_submitted_to([table], day)[table]

    def jobs_submitted_to(self, tables: Sequence[str], day: dt.date) -> dict[str, int]:
        """:meth:`jobs_submitted` of each table in one ``GROUP BY`` statement."""
        names = list(dict.fromkeys(tables))
        counts = {table: self._background.in_flight(table) for table in names}
        if not names:
            return counts
        start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
        with self._connect() as con:
            rows = con.execute(
                f"SELECT destination, count(*) FROM {JOBS_TABLE} WHERE destination = ANY(?) "
                "AND created_at >= ? AND created_at < ? GROUP BY destination",
                [names, start, start + dt.timedelta(days=1)],
            ).fetchall()
        for table, count in rows:
            counts[table] += int(count)
        return counts


#: The job history's columns :func:`_status` reads, in its order.
_STATUS_COLUMNS = "job_id, state, error_reason, error_message, output_rows, labels, finished_at"


def _status(row: Sequence[Any]) -> JobStatus:
    """A job's status from its history row (:data:`_STATUS_COLUMNS`)."""
    return JobStatus(
        job_id=row[0],
        state=row[1],
        error_reason=row[2],
        error_message=row[3],
        output_rows=row[4],
        labels=json.loads(row[5]),
        ended=_utc(row[6]),
    )
