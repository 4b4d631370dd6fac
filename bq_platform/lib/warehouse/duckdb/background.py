"""Jobs of the local DuckDB warehouse run on worker threads, as BigQuery runs jobs server-side.

BigQuery's ``jobs.insert`` returns while the job is PENDING; the caller polls ``jobs.get``
(cloud.google.com/bigquery/docs/managing-jobs). :func:`bq_platform.lib.publish.idempotent_jobs.run_idempotent_jobs`
submits every job of a step before waiting for any, so that BigQuery runs them side by side.
:class:`BackgroundJobs` gives the local warehouse the same shape: a submitted job runs on one of
``workers`` threads, each with its own DuckDB connection to the same database (DuckDB runs
transactions of one process concurrently, duckdb.org/docs/stable/connect/concurrency), while
the caller's thread looks up and submits the next job.

Measured (issue 9, docs/PERFORMANCE.md): the 72 hourly stage loads of the bench's 1x input.

A job's data change and its history row still commit in one transaction on the worker's
connection, so a process killed mid-job leaves no trace of it (DuckDB rolls the open
transaction back), and a re-run submits it again.
"""

import concurrent.futures
import threading
from collections.abc import Callable

import duckdb

from bq_platform.lib.warehouse.base import JobStatus


class BackgroundJobs:
    """Runs jobs on ``workers`` threads, each with its own DuckDB connection.

    It holds no reference to the warehouse (so an unclosed warehouse is still freed, and its
    file released, as soon as it is unreferenced); the worker threads and their connections
    exist from the first :meth:`start` to :meth:`close`.

    Args:
        workers: threads (the warehouse checks it is at least 1); with DuckDB's
            ``threads = 1`` each job uses one core.
    """

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
        """Run ``run(connection)`` on a worker; its result is the job's DONE status.

        ``open_cursor`` gives a worker without a connection a new one to the warehouse's
        database, set up for jobs (called from that worker's thread).
        """
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
        """The job's DONE status once it ends; None if it was not started here.

        Raises:
            TimeoutError: if it runs longer than ``timeout_s`` seconds (it keeps running).
            Exception: what the job raised (for example a WarehouseError while recording it).
        """
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
