"""Jobs of the local warehouse on worker threads, as BigQuery runs jobs server-side.

``jobs.insert`` returns while the job is PENDING and the caller polls ``jobs.get``
(cloud.google.com/bigquery/docs/managing-jobs), so a step submits all its jobs before waiting
for any. Here each worker has its own connection (DuckDB runs one process's transactions
concurrently: duckdb.org/docs/stable/connect/concurrency). A job commits with its history row,
so a process killed mid-job leaves no trace of it and a re-run submits it again.
"""

import concurrent.futures
import threading
from collections.abc import Callable

import duckdb

from bq_platform.lib.warehouse.base import JobStatus


class BackgroundJobs:
    """Runs jobs on ``workers`` threads, each with its own connection, from the first
    :meth:`start` to :meth:`close`. It holds no reference to the warehouse, so an unclosed
    warehouse is still freed, and its file released, when unreferenced."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()
        #: job ID -> (destination table, future of its DONE status), until waited for.
        self._jobs: dict[str, tuple[str, concurrent.futures.Future[JobStatus]]] = {}

    def start(
        self,
        job_id: str,
        table: str,
        run: Callable[[duckdb.DuckDBPyConnection], JobStatus],
        open_cursor: Callable[[], duckdb.DuckDBPyConnection],
    ) -> None:
        """Run ``run(connection)``, which returns the DONE status, on a worker; ``open_cursor``
        gives a worker its connection (called on the worker's thread)."""
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.workers, thread_name_prefix="duckdb-job"
                )
            self._jobs[job_id] = (table, self._pool.submit(self._run, run, open_cursor))

    def _run(
        self,
        run: Callable[[duckdb.DuckDBPyConnection], JobStatus],
        open_cursor: Callable[[], duckdb.DuckDBPyConnection],
    ) -> JobStatus:
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._local.cursor = open_cursor()
            with self._lock:
                self._cursors.append(cursor)
        return run(cursor)

    def running(self, job_id: str) -> bool:
        """True while the job runs (its status is not yet in the job history)."""
        found = self._jobs.get(job_id)
        return found is not None and not found[1].done()

    def known(self, job_id: str) -> bool:
        """True if the job was started here and not yet waited for."""
        return job_id in self._jobs

    def in_flight(self, table: str) -> int:
        """Jobs with destination ``table`` still running (for job budgets)."""
        return sum(1 for t, f in list(self._jobs.values()) if t == table and not f.done())

    def wait(self, job_id: str, timeout_s: float) -> JobStatus | None:
        """The job's DONE status once it ends; None if not started here. Raises TimeoutError
        after ``timeout_s`` seconds (the job keeps running), or what the job raised."""
        found = self._jobs.get(job_id)
        if found is None:
            return None
        status = found[1].result(timeout=timeout_s)
        self._jobs.pop(job_id, None)
        return status

    def close(self) -> None:
        """Wait for every running job, then close the workers' connections (idempotent)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        with self._lock:
            cursors, self._cursors = self._cursors, []
            self._jobs.clear()
        for cursor in cursors:
            cursor.close()
