"""The local job history (BigQuery's ``jobs.get`` and ``jobs.list``): one row per finished job
in ``_bq_platform_jobs``, written in the job's own transaction; its primary key makes a job ID
usable once (HTTP 409).
"""

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import duckdb

from bq_platform.lib.warehouse import rules
from bq_platform.lib.warehouse.base import JobConflictError
from bq_platform.lib.warehouse.duckdb.sql import rollback, utc, utc_now
from bq_platform.lib.warehouse.job_model import Job, JobStatus

JOBS_TABLE = "_bq_platform_jobs"

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

#: The columns :func:`_status` reads, in its order.
_STATUS_COLUMNS = "job_id, state, error_reason, error_message, output_rows, labels, finished_at"


def exists(con: duckdb.DuckDBPyConnection, job_id: str) -> bool:
    """True if the history holds a job with this ID."""
    row = con.execute(f"SELECT count(*) FROM {JOBS_TABLE} WHERE job_id = ?", [job_id]).fetchone()
    return bool(row and row[0])


def read_status(con: duckdb.DuckDBPyConnection, job_id: str) -> JobStatus | None:
    """The recorded status of a job; None if no job has this ID."""
    row = con.execute(
        f"SELECT {_STATUS_COLUMNS} FROM {JOBS_TABLE} WHERE job_id = ?", [job_id]
    ).fetchone()
    return None if row is None else _status(row)


def read_statuses(con: duckdb.DuckDBPyConnection, job_ids: Sequence[str]) -> dict[str, JobStatus]:
    """The recorded status of each job of ``job_ids`` that exists, in one statement."""
    rows = con.execute(
        f"SELECT {_STATUS_COLUMNS} FROM {JOBS_TABLE} WHERE job_id = ANY(?)", [list(job_ids)]
    ).fetchall()
    return {row[0]: _status(row) for row in rows}


def record(
    con: duckdb.DuckDBPyConnection,
    job: Job,
    kind: str,
    created_at: dt.datetime,
    output_rows: int | None,
    reason: str | None,
    message: str | None,
) -> JobStatus:
    """Insert the ``load`` or ``copy`` job's DONE row in ``con``'s transaction; that status.
    A failed job has ``output_rows`` None and BigQuery's error ``reason`` and ``message``.
    Raises JobConflictError (transaction rolled back) if the ID is recorded already."""
    table, day = rules.split_destination(job.destination)
    partition = f"{day:%Y%m%d}" if day else str(job.labels.get("partition", ""))
    labels = dict(sorted(job.labels.items()))
    ended = utc_now()
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
        rollback(con)
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


def count_submitted(
    con: duckdb.DuckDBPyConnection, tables: Sequence[str], day: dt.date
) -> dict[str, int]:
    """Recorded jobs (failed ones too) per destination table of ``tables`` created on UTC
    ``day``, in one ``GROUP BY`` statement; a table without jobs is left out."""
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    rows = con.execute(
        f"SELECT destination, count(*) FROM {JOBS_TABLE} WHERE destination = ANY(?) "
        "AND created_at >= ? AND created_at < ? GROUP BY destination",
        [list(tables), start, start + dt.timedelta(days=1)],
    ).fetchall()
    return {table: int(count) for table, count in rows}


def _status(row: Sequence[Any]) -> JobStatus:
    """A job's status from its history row (:data:`_STATUS_COLUMNS`)."""
    return JobStatus(
        job_id=row[0],
        state=row[1],
        error_reason=row[2],
        error_message=row[3],
        output_rows=row[4],
        labels=json.loads(row[5]),
        ended=utc(row[6]),
    )
