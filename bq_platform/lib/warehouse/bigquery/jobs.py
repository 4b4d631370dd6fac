"""The job half of the BigQuery backend: insert, look up, wait for and count jobs.

:class:`BigQueryJobs` is mixed into :class:`~bq_platform.lib.warehouse.bigquery.warehouse.
BigQueryWarehouse`, which provides ``client``, ``project``, ``dataset``, ``location``,
``retry``, ``request_timeout_s``, ``poll_*_s``, ``job_id_prefix``, ``count_all_users``,
``table_id`` and the job index. Loads send Parquet ``gs://`` URIs with an explicit schema and
``CREATE_NEVER``; copies ``CREATE_NEVER`` too. A 409 on insert raises
:class:`JobConflictError` (the state machine adopts the job). Counting jobs for the budget
uses ``jobs.list`` (needs ``bigquery.jobs.list``: ``roles/bigquery.user``, not
``roles/bigquery.jobUser``; cloud.google.com/bigquery/docs/access-control).
"""

import datetime as dt
import time
from collections.abc import Iterable
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import bigquery

from bq_platform.lib.warehouse import rules
from bq_platform.lib.warehouse.base import (
    CopyJob,
    Job,
    JobConflictError,
    JobStatus,
    LoadJob,
    WarehouseError,
)
from bq_platform.lib.warehouse.bigquery.cache import TableCache
from bq_platform.lib.warehouse.schema import Column

#: How far back an incremental ``jobs.list`` re-reads, to cover clock skew and late listing.
JOB_LIST_OVERLAP = dt.timedelta(minutes=10)
#: ``jobs.list`` page size (BigQuery returns at most 1,000 jobs per page anyway).
JOB_LIST_PAGE_SIZE = 1000


def schema_fields(columns: Iterable[Column]) -> list[bigquery.SchemaField]:
    """BigQuery schema fields for spec columns (explicit schema, never autodetect)."""
    fields = []
    for c in columns:
        # An explicit description=None would be sent as JSON null ("clear the description").
        extra = {"description": c.description} if c.description else {}
        fields.append(bigquery.SchemaField(c.name, c.type, mode=c.mode, **extra))
    return fields


class BigQueryJobs:
    """Jobs of :class:`~bq_platform.lib.warehouse.bigquery.warehouse.BigQueryWarehouse` (a mixin)."""

    client: bigquery.Client
    project: str
    dataset: str
    location: str
    retry: Any
    request_timeout_s: float
    poll_initial_s: float
    poll_max_s: float
    count_all_users: bool
    job_id_prefix: str
    _job_index: dict[dt.date, dict[str, tuple[str, str, str]]]
    _listed_until: dict[dt.date, dt.datetime]
    _cache: TableCache
    #: caller's job ID -> (destination, write disposition) of jobs this object inserted and
    #: has not yet seen DONE.
    _our_jobs: dict[str, tuple[str, str]]

    def _status(self, job: Any) -> JobStatus:
        error = job.error_result or {}
        rows: int | None = None
        if isinstance(job, bigquery.LoadJob):
            rows = job.output_rows
        elif isinstance(job, bigquery.CopyJob):
            # statistics.copy.copiedRows (REST JobStatistics5); the client has no property.
            copied = job._properties.get("statistics", {}).get("copy", {}).get("copiedRows")
            rows = int(copied) if copied is not None else None
        state = job.state if job.state in ("PENDING", "RUNNING", "DONE") else "PENDING"
        return JobStatus(
            job_id=self._caller_job_id(job.job_id),
            state=state,
            error_reason=error.get("reason") if error else None,
            error_message=error.get("message") if error else None,
            output_rows=rows,
            labels=dict(job.labels or {}),
            ended=job.ended,
        )

    def _job_observed(self, status: JobStatus, destination: str | None) -> None:
        """Bring the table cache up to date with a job seen DONE (insert or ``jobs.get``).

        A job this object submitted updates what its destination holds
        (:meth:`TableCache.job_wrote`); another run's job that ended after the destination
        was read makes its counts unknown.
        """
        if not status.done:
            return
        ours = self._our_jobs.pop(status.job_id, None)
        if ours is not None:
            if status.succeeded:
                self._cache.job_wrote(ours[0], ours[1], status.output_rows)
            return
        if destination is not None and status.succeeded:
            self._cache.changed(destination.split("$", 1)[0], status.ended)

    def _bq_job_id(self, job_id: str) -> str:
        return rules.check_job_id(f"{self.job_id_prefix}{job_id}")

    def _caller_job_id(self, bq_job_id: str) -> str:
        prefix = self.job_id_prefix
        return bq_job_id[len(prefix) :] if prefix and bq_job_id.startswith(prefix) else bq_job_id

    def get_job(self, job_id: str) -> JobStatus | None:
        """Look a job up by the caller's ID (``jobs.get``); None if it does not exist.

        Raises:
            WarehouseError: if the job exists but writes into another project or dataset.
        """
        try:
            job = self.client.get_job(
                self._bq_job_id(job_id),
                project=self.project,
                location=self.location,
                retry=self.retry,
                timeout=self.request_timeout_s,
            )
        except api_exceptions.NotFound:
            return None
        destination = getattr(job, "destination", None)
        if destination is not None and (destination.project, destination.dataset_id) != (
            self.project,
            self.dataset,
        ):
            raise WarehouseError(
                f"job {self._bq_job_id(job_id)} exists but writes into "
                f"{destination.project}.{destination.dataset_id}, not {self.project}."
                f"{self.dataset}: job IDs are unique per project, so another environment "
                "computed the same ID. Give each environment its own job ID prefix "
                "(BQ_PLATFORM_BQ_JOB_PREFIX) and re-run."
            )
        status = self._status(job)
        table_id = getattr(destination, "table_id", None)
        self._job_observed(status, table_id if isinstance(table_id, str) else None)
        return status

    def _insert_job(self, job: Job) -> JobStatus:
        """Insert a validated load or copy job (``jobs.insert``).

        Raises:
            JobConflictError: if a job with this ID exists (HTTP 409).
            WarehouseError: if BigQuery refuses the job (the message names the job, its
                destination and BigQuery's reason).
        """
        destination = self.table_id(job.destination)
        try:
            if isinstance(job, LoadJob):
                submitted = self._insert_load(job, destination)
            else:
                submitted = self._insert_copy(job, destination)
        except api_exceptions.Conflict as exc:
            raise JobConflictError(
                f"job {job.job_id} already exists (409); another run submitted it"
            ) from exc
        except api_exceptions.GoogleAPIError as exc:
            reasons = getattr(exc, "errors", None) or [{}]
            reason = reasons[0].get("reason") if isinstance(reasons[0], dict) else None
            raise WarehouseError(
                f"BigQuery refused job {job.job_id} -> {destination}: {reason or 'error'}: {exc}"
            ) from exc
        table, _ = rules.split_destination(job.destination)
        day = (submitted.created or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).date()
        self._job_index.setdefault(day, {})[submitted.job_id] = (self.project, self.dataset, table)
        self._our_jobs[job.job_id] = (job.destination, job.write_disposition)
        status = self._status(submitted)
        self._job_observed(status, job.destination)
        return status

    def _insert_load(self, job: LoadJob, destination: str) -> bigquery.LoadJob:
        for uri in job.source_uris:
            if not uri.startswith("gs://"):
                raise ValueError(f"load job {job.job_id}: BigQuery loads gs:// URIs, got {uri!r}")
        config = bigquery.LoadJobConfig(
            schema=schema_fields(job.spec.columns),
            source_format=bigquery.SourceFormat.PARQUET,
            write_disposition=job.write_disposition,
            create_disposition=bigquery.CreateDisposition.CREATE_NEVER,
            labels=dict(job.labels),
        )
        return self.client.load_table_from_uri(
            list(job.source_uris),
            destination,
            job_id=self._bq_job_id(job.job_id),
            project=self.project,
            location=self.location,
            job_config=config,
            retry=self.retry,
            timeout=self.request_timeout_s,
        )

    def _insert_copy(self, job: CopyJob, destination: str) -> bigquery.CopyJob:
        config = bigquery.CopyJobConfig(
            write_disposition=job.write_disposition,
            create_disposition=bigquery.CreateDisposition.CREATE_NEVER,
            labels=dict(job.labels),
        )
        return self.client.copy_table(
            [self.table_id(s) for s in job.sources],
            destination,
            job_id=self._bq_job_id(job.job_id),
            project=self.project,
            location=self.location,
            job_config=config,
            retry=self.retry,
            timeout=self.request_timeout_s,
        )

    def wait_job(self, job_id: str, timeout_s: float = 3600.0) -> JobStatus:
        """Poll ``jobs.get`` until the job is DONE, backing off from 1 s to 10 s between polls.

        Raises:
            TimeoutError: if the job is not DONE after ``timeout_s`` seconds (it keeps running
                in BigQuery; a re-run adopts it).
            WarehouseError: if the job does not exist.
        """
        deadline = time.monotonic() + timeout_s
        delay = self.poll_initial_s
        while True:
            status = self.get_job(job_id)
            if status is None:
                raise WarehouseError(f"job {job_id} not found in {self.project}/{self.location}")
            if status.done:
                return status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"job {job_id} still {status.state} after {timeout_s:.0f} s; it keeps "
                    "running in BigQuery and a re-run will adopt it"
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 1.5, self.poll_max_s)

    def jobs_submitted(self, table: str, day: dt.date) -> int:
        """Jobs with ``table`` as destination created on UTC ``day`` (``jobs.list``)."""
        name = rules.check_table_name(table)
        start = dt.datetime.combine(day, dt.time(0), tzinfo=dt.UTC)
        end = start + dt.timedelta(days=1)
        since = self._listed_until.get(day)
        since = max(start, since - JOB_LIST_OVERLAP) if since else start
        listed_at = dt.datetime.now(dt.UTC)
        index = self._job_index.setdefault(day, {})
        jobs = self.client.list_jobs(
            project=self.project,
            all_users=self.count_all_users,
            min_creation_time=since,
            max_creation_time=end,
            page_size=JOB_LIST_PAGE_SIZE,
            retry=self.retry,
            timeout=self.request_timeout_s,
        )
        for job in jobs:
            created = job.created
            if created is not None and not start <= created < end:
                continue  # bqemulator ignores the creation-time window; real BigQuery applies it
            destination = getattr(job, "destination", None)
            table_id = getattr(destination, "table_id", None)
            if isinstance(table_id, str):
                index[job.job_id] = (
                    destination.project,
                    destination.dataset_id,
                    table_id.split("$", 1)[0],
                )
        self._listed_until[day] = listed_at
        wanted = (self.project, self.dataset, name)
        return sum(1 for destination in index.values() if destination == wanted)
