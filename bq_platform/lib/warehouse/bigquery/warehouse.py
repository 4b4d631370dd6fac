"""BigQuery warehouse: the production backend of :class:`Warehouse`, through the official client.

- Tables: the dataset is listed once per object (one Dagster run); then a table costs one
  ``tables.get`` or ``tables.insert``, plus a ``tables.patch`` for an additive change. A table
  listed as missing stays missing for the run unless this object creates it.
- Counts come from what the object knows (:mod:`.cache`), else from ``tables.get`` of the table
  or of ``table$YYYYMMDD`` (that partition's ``numRows``): never a query.
- Jobs are inserted under the caller's deterministic ID with ``CREATE_NEVER``; job IDs are
  unique per project, hence ``job_id_prefix``. The job budget counts ``jobs.list`` of the UTC
  day, which needs ``bigquery.jobs.list`` (``roles/bigquery.user``, not
  ``roles/bigquery.jobUser``; cloud.google.com/bigquery/docs/access-control).
- The ledger is appended by ``INSERT``, which never conflicts
  (cloud.google.com/bigquery/docs/data-manipulation-language), and read whole once per object:
  another process's record is seen by the next run (the warehouse pool and the run lock
  serialize publishes). Audit rows are replaced by atomic ``MERGE ... ON FALSE`` statements of
  whole hours, each request under BigQuery's 10 MB. Rows are
  read with ``tabledata.list``, which is free (cloud.google.com/bigquery/pricing, "Free
  operations"); a query bills at least 10 MB per table.

Every SQL value is a query parameter; identifiers come from validated configuration.
"""

import collections
import datetime as dt
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry_module
from google.cloud import bigquery

from bq_platform.lib.warehouse import ledger, rollup_compare, rules, schema
from bq_platform.lib.warehouse.base import (
    SAMPLE_PREVIEW_COLUMNS,
    CopyJob,
    Job,
    JobConflictError,
    JobStatus,
    LoadJob,
    QuotaExceededError,
    TableExistsError,
    TableInfo,
    Warehouse,
    WarehouseError,
)
from bq_platform.lib.warehouse.bigquery import retries
from bq_platform.lib.warehouse.bigquery.cache import TableCache
from bq_platform.lib.warehouse.bigquery.client import (
    DATASET_RE,
    JOB_ID_PREFIX_RE,
    LOCATION_RE,
    PROJECT_RE,
    check_identifier,
)
from bq_platform.lib.warehouse.compare import SpecDifference
from bq_platform.lib.warehouse.rollup_compare import RollupComparison
from bq_platform.lib.warehouse.schema import AUDIT_TABLE, Column, TableSpec, audit_spec

log = logging.getLogger(__name__)

#: How far back an incremental ``jobs.list`` re-reads, to cover clock skew and late listing.
JOB_LIST_OVERLAP = dt.timedelta(minutes=10)
#: ``jobs.list`` page size (BigQuery returns at most 1,000 jobs per page).
JOB_LIST_PAGE_SIZE = 1000
#: Rows per ``tabledata.list`` page (BigQuery also cuts a page at about 10 MB;
#: cloud.google.com/bigquery/docs/paging-results).
LIST_PAGE_SIZE = 10_000
#: How long a job that was just inserted, or whose insert answered 409, may answer 404 to
#: ``jobs.get`` before it counts as gone, seconds: google-cloud-bigquery allows its own
#: conflicts a third of its 10-minute default retry deadline (``google.cloud.bigquery.retry``).
EXISTING_JOB_GRACE_S = 200.0


def schema_fields(columns: Iterable[Column]) -> list[bigquery.SchemaField]:
    """BigQuery schema fields for spec columns (explicit schema, never autodetect)."""
    fields = []
    for c in columns:
        # An explicit description=None would be sent as JSON null ("clear the description").
        extra = {"description": c.description} if c.description else {}
        fields.append(bigquery.SchemaField(c.name, c.type, mode=c.mode, **extra))
    return fields


def spec_of(table: bigquery.Table) -> TableSpec:
    """A table resource as a :class:`TableSpec`; WarehouseError if it is range- or
    non-DAY-partitioned (never created by us)."""
    partitioning = table.time_partitioning
    field = None
    if table.range_partitioning is not None or (
        partitioning is not None and (partitioning.type_ or "DAY") != "DAY"
    ):
        raise WarehouseError(
            f"table {table.table_id} is partitioned in a way our specs never use (range or "
            "non-DAY time partitioning); migrate it"
        )
    if partitioning is not None:
        field = partitioning.field or "_PARTITIONTIME"
    resource = table.to_api_repr()
    rpf = bool(
        resource.get("requirePartitionFilter")
        or (resource.get("timePartitioning") or {}).get("requirePartitionFilter")
    )
    return TableSpec(
        name=table.table_id,
        columns=tuple(
            Column(f.name, schema.normalize_type(f.field_type), schema.normalize_mode(f.mode))
            for f in table.schema or ()
        ),
        partition_field=field,
        clustering=tuple(table.clustering_fields or ()),
        require_partition_filter=rpf,
        labels=dict(table.labels or {}),
        description=table.description or "",
    )


def copied_rows(job: bigquery.CopyJob) -> int | None:
    """``statistics.copy.copiedRows`` of a copy job (REST ``JobStatistics5``); None if absent.

    google-cloud-bigquery has no property for it (the Java client added one,
    googleapis/java-bigquery#3206) and ``CopyJob.to_api_repr()`` leaves the statistics out, so
    it is read from the job's resource as the client keeps it.
    """
    statistics = job._properties.get("statistics", {})  # noqa: SLF001 - no public accessor
    copied = statistics.get("copy", {}).get("copiedRows")
    return int(copied) if copied is not None else None


def _row_struct(columns: Sequence[Column], row: Mapping[str, Any]) -> bigquery.StructQueryParameter:
    """One row as an unnamed ``STRUCT`` query parameter, for ``UNNEST(@rows)``."""
    return bigquery.StructQueryParameter(
        None,
        *[
            bigquery.ScalarQueryParameter(c.name, schema.normalize_type(c.type), row[c.name])
            for c in columns
        ],
    )


class BigQueryWarehouse(Warehouse):
    """Tables and jobs in one BigQuery dataset, created in ``location`` if missing.

    Args:
        client: see :func:`.client.bigquery_client`.
        retry: of every API call; default :func:`.retries.api_retry`.
        job_retry: resubmits our query jobs; default :func:`.retries.query_job_retry`. It
            also bounds the re-runs of a DML statement that lost a concurrent update.
        request_timeout_s: HTTP timeout of each request, seconds.
        poll_initial_s, poll_max_s: first and largest wait between ``jobs.get`` polls,
            seconds (x1.5 per poll).
        existing_job_grace_s: how long :meth:`get_existing_job` retries a 404, seconds.
        max_request_bytes: the largest DML request :meth:`replace_audit_rows` sends, bytes.
        count_all_users: :meth:`jobs_submitted` counts every principal's jobs (needs
            ``bigquery.jobs.listAll``); default this principal's.
        job_id_prefix: prepended to every job ID sent, removed from those returned.

    Raises:
        ValueError: if ``project``, ``dataset``, ``location`` or ``job_id_prefix`` is not a
            valid BigQuery identifier.

    Attributes:
        metadata_requests, partition_reads, rows_listed: requests per table: whole-table
            ``tables.get``/``insert``/``patch``; ``tables.get`` of ``$YYYYMMDD``;
            ``tabledata.list``.
        dataset_requests: ``datasets.get``/``insert`` and ``tables.list`` requests.
    """

    def __init__(
        self,
        client: bigquery.Client,
        project: str,
        dataset: str,
        location: str = "US",
        *,
        retry: api_retry_module.Retry | None = None,
        job_retry: api_retry_module.Retry | None = None,
        request_timeout_s: float = 60.0,
        poll_initial_s: float = 1.0,
        poll_max_s: float = 10.0,
        existing_job_grace_s: float = EXISTING_JOB_GRACE_S,
        max_request_bytes: int = rules.MAX_REQUEST_BYTES,
        count_all_users: bool = False,
        job_id_prefix: str = "",
    ) -> None:
        super().__init__()
        self.client = client
        self.project = check_identifier(project, PROJECT_RE, "project ID")
        self.dataset = check_identifier(dataset, DATASET_RE, "dataset name")
        self.location = check_identifier(location, LOCATION_RE, "location")
        self.retry = retry if retry is not None else retries.api_retry()
        self.job_retry = job_retry if job_retry is not None else retries.query_job_retry()
        self.conflict_retry = self.job_retry.with_predicate(retries.is_concurrent_update_conflict)
        self.request_timeout_s = request_timeout_s
        self.poll_initial_s = poll_initial_s
        self.poll_max_s = poll_max_s
        self.existing_job_grace_s = existing_job_grace_s
        self.max_request_bytes = max_request_bytes
        self.count_all_users = count_all_users
        self.job_id_prefix = check_identifier(job_id_prefix, JOB_ID_PREFIX_RE, "job ID prefix")
        self.metadata_requests: collections.Counter[str] = collections.Counter()
        self.partition_reads: collections.Counter[str] = collections.Counter()
        self.rows_listed: collections.Counter[str] = collections.Counter()
        self.dataset_requests = 0
        self._dataset_ready = False
        self._existing_tables: set[str] | None = None
        #: UTC day -> BigQuery job ID -> (project, dataset, table) of the jobs listed or sent.
        self._job_index: dict[dt.date, dict[str, tuple[str, str, str]]] = {}
        self._listed_until: dict[dt.date, dt.datetime] = {}
        self._cache = TableCache()
        #: caller's job ID -> (destination, write disposition) of jobs this object inserted
        #: and has not yet seen DONE.
        self._our_jobs: dict[str, tuple[str, str]] = {}
        self._ledger_index: ledger.LedgerIndex | None = None

    # -- names -------------------------------------------------------------------------------

    def table_id(self, table: str) -> str:
        """``project.dataset.table[$YYYYMMDD]``; RuleViolation if ``table`` is not valid."""
        name, day = rules.split_destination(table)
        suffix = f"${day:%Y%m%d}" if day is not None else ""
        return f"{self.project}.{self.dataset}.{name}{suffix}"

    def _sql_table(self, table: str) -> str:
        """Backquoted table reference for SQL; ``table`` is validated, never user data."""
        rules.check_table_name(table)
        return f"`{self.project}.{self.dataset}.{table}`"

    def _bq_job_id(self, job_id: str) -> str:
        return rules.check_job_id(f"{self.job_id_prefix}{job_id}")

    def _caller_job_id(self, bq_job_id: str) -> str:
        prefix = self.job_id_prefix
        return bq_job_id[len(prefix) :] if prefix and bq_job_id.startswith(prefix) else bq_job_id

    # -- dataset and tables ------------------------------------------------------------------

    def _ensure_dataset(self) -> None:
        if self._dataset_ready:
            return
        ref = f"{self.project}.{self.dataset}"
        try:
            self.dataset_requests += 1
            found = self.client.get_dataset(ref, retry=self.retry, timeout=self.request_timeout_s)
        except api_exceptions.NotFound:
            dataset = bigquery.Dataset(ref)
            dataset.location = self.location
            dataset.labels = {"app": "bq_platform"}
            try:
                self.dataset_requests += 1
                found = self.client.create_dataset(
                    dataset, retry=self.retry, timeout=self.request_timeout_s
                )
            except api_exceptions.Conflict:
                self.dataset_requests += 1
                found = self.client.get_dataset(
                    ref, retry=self.retry, timeout=self.request_timeout_s
                )
        if found.location and found.location.lower() != self.location.lower():
            raise WarehouseError(
                f"dataset {ref} is in location {found.location}, but BQ_PLATFORM_BQ_LOCATION "
                f"is {self.location}; jobs must run where the dataset is. Fix the setting."
            )
        _refuse_dataset_expirations(ref, found)
        self._dataset_ready = True

    def _existing(self) -> set[str]:
        """Names of the dataset's tables, listed once per warehouse object."""
        if self._existing_tables is None:
            self._ensure_dataset()
            self.dataset_requests += 1
            tables = self.client.list_tables(
                f"{self.project}.{self.dataset}",
                page_size=1000,
                retry=self.retry,
                timeout=self.request_timeout_s,
            )
            self._existing_tables = {t.table_id for t in tables}
        return self._existing_tables

    def _get_table(self, table: str) -> bigquery.Table | None:
        """One whole-table ``tables.get``, remembered; None (and forgotten) if missing."""
        self.metadata_requests[table] += 1
        try:
            found = self.client.get_table(
                self.table_id(table), retry=self.retry, timeout=self.request_timeout_s
            )
        except api_exceptions.NotFound:
            self._existing().discard(table)
            self._cache.forget(table)
            return None
        self._cache.remember(table, found)
        return found

    def _describe_table(self, table: str) -> TableSpec | None:
        if table not in self._existing():
            return None
        found = self._cache.resource(table) or self._get_table(table)
        return None if found is None else spec_of(found)

    def _new_table(self, spec: TableSpec) -> bigquery.Table:
        table = bigquery.Table(self.table_id(spec.name), schema=schema_fields(spec.columns))
        if spec.partition_field:
            table.time_partitioning = _time_partitioning(spec)
            # Top-level field; timePartitioning.requirePartitionFilter is deprecated.
            table.require_partition_filter = spec.require_partition_filter
        if spec.clustering:
            table.clustering_fields = list(spec.clustering)
        if spec.expiration_days is not None:
            table.expires = dt.datetime.now(dt.UTC) + dt.timedelta(days=spec.expiration_days)
        table.labels = dict(spec.labels)
        table.description = spec.description or None
        return table

    def _create_table(self, spec: TableSpec) -> None:
        self.metadata_requests[spec.name] += 1
        try:
            created = self.client.create_table(
                self._new_table(spec), retry=self.retry, timeout=self.request_timeout_s
            )
        except api_exceptions.Conflict as exc:
            self._existing().add(spec.name)
            self._cache.forget(spec.name)
            raise TableExistsError(f"table {self.table_id(spec.name)} exists (409)") from exc
        self._existing().add(spec.name)
        self._cache.remember(spec.name, created)
        log.info("created table %s", self.table_id(spec.name))

    def _patch_table(self, spec: TableSpec, diff: SpecDifference) -> None:
        table = self._new_table(spec)
        fields = []
        if diff.added_columns:
            fields.append("schema")
        for name in diff.patch_fields:
            fields.append({"clustering": "clustering_fields"}.get(name, name))
        self.metadata_requests[spec.name] += 1
        patched = self.client.update_table(
            table, fields, retry=self.retry, timeout=self.request_timeout_s
        )
        self._cache.remember(spec.name, patched)
        log.info("patched table %s: %s", self.table_id(spec.name), ", ".join(fields))

    def table_info(self, destination: str) -> TableInfo | None:
        """From what this object knows, else one ``tables.get`` (remembered); no request for a
        table the dataset listing did not show."""
        name, day = rules.split_destination(destination)
        if name not in self._existing():
            return None
        known = self._cache.info(destination)
        if known is not None:
            return known
        if day is None:
            if self._get_table(name) is None:
                return None
            return self._cache.info(destination)
        self.partition_reads[name] += 1
        try:
            found = self.client.get_table(
                self.table_id(destination), retry=self.retry, timeout=self.request_timeout_s
            )
        except api_exceptions.NotFound:
            self._existing().discard(name)
            self._cache.forget(name)
            return None
        created = found.created or dt.datetime.now(dt.UTC)
        self._cache.remember_partition(name, day, created, int(found.num_rows or 0))
        return self._cache.info(destination)

    def forget_table(self, table: str) -> None:
        """Drop ``table`` from the ensure cache and from what this object knows of it."""
        super().forget_table(table)
        self._cache.forget(table)

    # -- jobs --------------------------------------------------------------------------------

    def _status(self, job: Any) -> JobStatus:
        error = job.error_result or {}
        rows: int | None = None
        if isinstance(job, bigquery.LoadJob):
            rows = job.output_rows
        elif isinstance(job, bigquery.CopyJob):
            rows = copied_rows(job)
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
        """After a DONE job: one of ours sets its destination's rows; another run's job that
        ended after the destination was read makes its counts unknown."""
        if not status.done:
            return
        ours = self._our_jobs.pop(status.job_id, None)
        if ours is not None:
            if status.succeeded:
                self._cache.job_wrote(ours[0], ours[1], status.output_rows)
            return
        if destination is not None and status.succeeded:
            self._cache.changed(destination.split("$", 1)[0], status.ended)

    def get_job(self, job_id: str) -> JobStatus | None:
        """``jobs.get`` by the caller's ID; None on 404. Raises WarehouseError if the job
        writes into another project or dataset."""
        try:
            return self._get_job(job_id)
        except api_exceptions.NotFound:
            return None

    paces_table_updates = True  # 5 updates per table per 10 s (rules.TABLE_UPDATES_PER_WINDOW)

    def get_existing_job(self, job_id: str) -> JobStatus | None:
        """``jobs.get`` of a job just inserted or whose insert answered 409: a 404 is retried
        (backoff from 1 s to 10 s) for up to :attr:`existing_job_grace_s` seconds, then None.

        BigQuery can answer 404 for a job that exists right after ``jobs.insert`` or after a
        409; google-cloud-bigquery retries exactly this for its own conflicts
        (googleapis/python-bigquery#2134). A 404 that outlasts the grace is a job ID held by a
        job past BigQuery's job history (about six months,
        cloud.google.com/bigquery/docs/managing-jobs)."""
        not_found = api_retry_module.Retry(
            predicate=api_retry_module.if_exception_type(api_exceptions.NotFound),
            initial=1.0,
            maximum=10.0,
            timeout=self.existing_job_grace_s,
        )
        try:
            return not_found(self._get_job)(job_id)
        except (api_exceptions.NotFound, api_exceptions.RetryError):
            return None

    def _get_job(self, job_id: str) -> JobStatus:
        """``jobs.get`` by the caller's ID; raises NotFound on 404 (see :meth:`get_job`)."""
        job = self.client.get_job(
            self._bq_job_id(job_id),
            project=self.project,
            location=self.location,
            retry=self.retry,
            timeout=self.request_timeout_s,
        )
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
        """``jobs.insert``. Raises ValueError for a load source that is not ``gs://``,
        JobConflictError on 409, WarehouseError with BigQuery's reason if it refuses the job."""
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
            if reason == rules.QUOTA_EXCEEDED:
                raise QuotaExceededError(
                    f"BigQuery refused job {job.job_id} -> {destination}: quotaExceeded: {exc}"
                ) from exc
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
        # The destination's layout, stated as Beam, dbt and the Spark connector state it: a
        # write into a partition of a clustered table has been refused without it
        # (apache/beam#34571); it must equal the table's (Job#JobConfigurationLoad).
        if job.spec.partition_field:
            config.time_partitioning = _time_partitioning(job.spec)
        if job.spec.clustering:
            config.clustering_fields = list(job.spec.clustering)
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
        """Poll ``jobs.get``. After a TimeoutError the job keeps running in BigQuery and a
        re-run adopts it; WarehouseError if the job does not exist."""
        deadline = time.monotonic() + timeout_s
        delay = self.poll_initial_s
        while True:
            status = self.get_job(job_id)
            if status is None:  # just inserted: jobs.get may lag behind the insert
                status = self.get_existing_job(job_id)
            if status is None:
                raise WarehouseError(
                    f"job {job_id} not found in {self.project}/{self.location} after "
                    f"{self.existing_job_grace_s:.0f} s of retries"
                )
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
        """``jobs.list`` of the day (failed jobs too); later calls list only what is new, with
        :data:`JOB_LIST_OVERLAP`."""
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

    # -- rows: SQL writes, tabledata.list reads ----------------------------------------------

    def _run_dml(self, sql: str, params: Sequence[Any]) -> None:
        """Run one DML statement as a query job and wait; :attr:`conflict_retry` runs it again
        when it lost a concurrent update."""
        self.conflict_retry(lambda: self._query_job(sql, params))()

    def _list_rows(self, destination: str, columns: Sequence[Column]) -> list[dict[str, Any]]:
        """``tabledata.list`` of a table or ``table$YYYYMMDD`` as dicts of ``columns`` (asked by
        name); ``[]`` if the table is gone."""
        name, _ = rules.split_destination(destination)
        self.rows_listed[name] += 1
        try:
            rows = self.client.list_rows(
                self.table_id(destination),
                selected_fields=schema_fields(columns),  # given: no tables.get for the schema
                page_size=LIST_PAGE_SIZE,
                retry=self.retry,
                timeout=self.request_timeout_s,
            )
            return [dict(row.items()) for row in rows]
        except api_exceptions.NotFound:
            return []

    def _ledger(self) -> ledger.LedgerIndex:
        """The ledger's latest rows, read once per warehouse object."""
        if self._ledger_index is None:
            name = ledger.PUBLISH_LEDGER_TABLE
            exists = name in self._existing()
            rows = self._list_rows(name, ledger.LEDGER_COLUMNS) if exists else []
            self._ledger_index = ledger.LedgerIndex(rows)
        return self._ledger_index

    def _ledger_rows(self, destination: str, partition: str) -> list[dict[str, Any]]:
        return self._ledger().rows(destination, partition)

    def _append_ledger_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """One ``INSERT ... SELECT FROM UNNEST(@rows)``: one query job whatever the rows."""
        names = [c.name for c in ledger.LEDGER_COLUMNS]
        sql = (
            f"INSERT INTO {self._sql_table(ledger.PUBLISH_LEDGER_TABLE)} ({', '.join(names)}) "
            f"SELECT {', '.join(f'r.{n}' for n in names)} FROM UNNEST(@rows) AS r"
        )
        structs = [_row_struct(ledger.LEDGER_COLUMNS, row) for row in rows]
        self._run_dml(sql, [bigquery.ArrayQueryParameter("rows", "STRUCT", structs)])
        self._cache.appended(ledger.PUBLISH_LEDGER_TABLE, len(rows))
        if self._ledger_index is not None:
            for row in rows:
                self._ledger_index.add(row)

    def replace_audit_rows(
        self, hours: Sequence[dt.datetime], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Replace the audit rows of ``hours`` by ``rows``: one ``MERGE ... ON FALSE`` per
        group of whole hours, with the rows as an ``ARRAY<STRUCT>`` parameter (an hour group
        without rows: a ``DELETE``). Each statement replaces its hours atomically, and its
        request stays under :attr:`max_request_bytes` (BigQuery's 10 MB; about 650 bytes a
        row). Raises ValueError if an hour is not aware UTC, a row misses a column or is of an
        hour not in ``hours``, or one hour's rows alone exceed the request size (nothing is
        sent then)."""
        spec = audit_spec()
        self.ensure_table(spec)
        hour_set = set()
        for hour in hours:
            if hour.tzinfo is None or hour.utcoffset() != dt.timedelta(0):
                raise ValueError(f"audit hours must be timezone-aware UTC, got {hour!r}")
            hour_set.add(hour.astimezone(dt.UTC))
        if not hour_set:
            return
        by_hour: dict[dt.datetime, list[bigquery.StructQueryParameter]] = {
            h: [] for h in sorted(hour_set)
        }
        for row in rows:
            missing = [c.name for c in spec.columns if c.name not in row]
            if missing:
                raise ValueError(f"audit row {dict(row)!r} misses columns {missing}")
            hour = row["hour"].astimezone(dt.UTC)
            if hour not in hour_set:
                raise ValueError(f"audit row for {row['hour']} is not in the replaced hours")
            by_hour[hour].append(_row_struct(spec.columns, row))
        # A statement's request: the MERGE's text and fixed parts, then per hour its rows and
        # its hour and date parameter values.
        first = next(iter(by_hour))
        base = _request_bytes(*self._audit_statement({first: by_hour[first][:1]}))
        sizes = {
            hour: sum(_value_bytes(s) for s in structs) + 64 for hour, structs in by_hour.items()
        }
        groups: list[dict[dt.datetime, list[bigquery.StructQueryParameter]]] = [{}]
        used = base
        for hour, structs in by_hour.items():
            if base + sizes[hour] > self.max_request_bytes:
                raise ValueError(
                    f"the {len(structs)} audit rows of hour {hour:%Y-%m-%dT%H} make a "
                    f"{base + sizes[hour]:,}-byte request, over BigQuery's "
                    f"{self.max_request_bytes:,}; nothing was sent"
                )
            if groups[-1] and used + sizes[hour] > self.max_request_bytes:
                groups.append({})
                used = base
            groups[-1][hour] = structs
            used += sizes[hour]
        for group in groups:
            self._run_dml(*self._audit_statement(group))
        self._cache.changed(AUDIT_TABLE)

    def _audit_statement(
        self, rows_by_hour: Mapping[dt.datetime, list[bigquery.StructQueryParameter]]
    ) -> tuple[str, list[Any]]:
        """The SQL and parameters that replace the audit rows of ``rows_by_hour``'s hours."""
        spec = audit_spec()
        struct_values = [s for structs in rows_by_hour.values() for s in structs]
        ordered_hours = sorted(rows_by_hour)
        params: list[Any] = [
            bigquery.ArrayQueryParameter("hours", "TIMESTAMP", ordered_hours),
            bigquery.ArrayQueryParameter(
                "event_dates", "DATE", sorted({h.date() for h in ordered_hours})
            ),
        ]
        table = self._sql_table(AUDIT_TABLE)
        names = [c.name for c in spec.columns]
        if struct_values:
            params.append(bigquery.ArrayQueryParameter("rows", "STRUCT", struct_values))
            sql = (
                f"MERGE {table} AS t USING (SELECT "
                + ", ".join(f"r.{n} AS {n}" for n in names)
                + " FROM UNNEST(@rows) AS r) AS s ON FALSE "
                "WHEN NOT MATCHED BY SOURCE AND t.event_date IN UNNEST(@event_dates) "
                "AND t.hour IN UNNEST(@hours) THEN DELETE "
                "WHEN NOT MATCHED THEN INSERT (" + ", ".join(names) + ") "
                "VALUES (" + ", ".join(f"s.{n}" for n in names) + ")"
            )
        else:
            sql = (
                f"DELETE FROM {table} "
                "WHERE event_date IN UNNEST(@event_dates) AND hour IN UNNEST(@hours)"
            )
        return sql, params

    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        """One ``tabledata.list`` per ``event_date`` partition of the range, hours filtered here."""
        spec = audit_spec()
        start_utc, end_utc = start.astimezone(dt.UTC), end.astimezone(dt.UTC)
        if end_utc <= start_utc or AUDIT_TABLE not in self._existing():
            return []
        rows: list[dict[str, Any]] = []
        day, last = start_utc.date(), (end_utc - dt.timedelta(microseconds=1)).date()
        while day <= last:
            rows += self._list_rows(f"{AUDIT_TABLE}${day:%Y%m%d}", spec.columns)
            day += dt.timedelta(days=1)
        rows = [r for r in rows if start_utc <= r["hour"] < end_utc]
        return sorted(rows, key=lambda r: (r["hour"], r["site"]))

    def published_sample_rows(self, first: dt.date, last: dt.date) -> list[dict[str, Any]]:
        """One query job over the days' partitions of ``pageviews_sample``: it bills the bytes
        of these columns in those partitions (at least 10 MB), as any query
        (cloud.google.com/bigquery/pricing); empty, with no job, if the table does not exist."""
        if last < first:
            raise ValueError(f"last day {last} is before first day {first}")
        table = schema.PAGEVIEWS_SAMPLE_TABLE
        if table not in self._existing():
            return []
        return self._query_rows(
            f"SELECT {', '.join(SAMPLE_PREVIEW_COLUMNS)} FROM {self._sql_table(table)} "
            "WHERE event_date BETWEEN @first AND @last ORDER BY site, event_ts",
            [
                bigquery.ScalarQueryParameter("first", "DATE", first),
                bigquery.ScalarQueryParameter("last", "DATE", last),
            ],
        )

    def compare_rollup(self, table: str, day: dt.date, human_class: str) -> RollupComparison:
        """One query job (the day and the class as parameters); it bills the day's
        ``site``, ``page_path``, ``traffic_class`` and ``visitor_id`` of ``pageviews`` and the
        rollup's partition (at least 10 MB per table; cloud.google.com/bigquery/pricing).
        Raises WarehouseError if ``pageviews`` or ``table`` is missing."""
        for name in (schema.PAGEVIEWS_TABLE, table):
            if name not in self._existing():
                raise WarehouseError(f"table {self.table_id(name)} does not exist: publish {day}")
        sql = rollup_compare.comparison_sql(table, self._sql_table, lambda name: f"@{name}")
        rows = self._query_rows(
            sql,
            [
                bigquery.ScalarQueryParameter("day", "DATE", day),
                bigquery.ScalarQueryParameter("human", "STRING", human_class),
            ],
        )
        return rollup_compare.comparison_result(table, day, rows)

    def _query_rows(
        self, sql: str, parameters: list[bigquery.ScalarQueryParameter]
    ) -> list[dict[str, Any]]:
        """The rows of one read-only query job (:meth:`_query_job`), as dicts."""
        return [dict(row.items()) for row in self._query_job(sql, parameters)]

    def _query_job(self, sql: str, parameters: Sequence[Any]) -> bigquery.table.RowIterator:
        """Run one query job in standard SQL with named ``parameters``, labelled
        ``app=bq_platform``, retried with the client's retry objects, and wait for its rows."""
        config = bigquery.QueryJobConfig(
            query_parameters=list(parameters),
            use_legacy_sql=False,
            labels={"app": "bq_platform"},
        )
        job = self.client.query(
            sql,
            job_config=config,
            project=self.project,
            location=self.location,
            retry=self.retry,
            timeout=self.request_timeout_s,
            job_retry=self.job_retry,
        )
        return job.result(retry=self.retry, timeout=self.request_timeout_s * 10)

    def close(self) -> None:
        """Close the client's HTTP session."""
        self.client.close()


def _time_partitioning(spec: TableSpec) -> bigquery.TimePartitioning:
    """Daily partitioning on ``spec.partition_field`` (a DATE column), as tables are created
    and as loads state it."""
    return bigquery.TimePartitioning(
        type_=bigquery.TimePartitioningType.DAY, field=spec.partition_field
    )


def _refuse_dataset_expirations(ref: str, dataset: bigquery.Dataset) -> None:
    """Raise WarehouseError if ``dataset`` gives the tables created in it an expiration.

    A dataset's ``defaultTableExpirationMs`` and ``defaultPartitionExpirationMs`` apply to the
    tables created after them (cloud.google.com/bigquery/docs/updating-datasets); the BigQuery
    sandbox sets a 60-day default and organisation policies often set one. A published table
    would then delete itself, or each of its partitions that many days after its date, so a
    backfilled old day would publish 0 rows while every check passes. Published tables never
    expire, so the run stops before it creates or writes anything."""
    defaults = {
        "defaultTableExpirationMs": dataset.default_table_expiration_ms,
        "defaultPartitionExpirationMs": dataset.default_partition_expiration_ms,
    }
    found = {name: int(ms) for name, ms in defaults.items() if ms}
    if found:
        settings = ", ".join(
            f"{name} = {ms} ms ({ms / 86_400_000:g} days)" for name, ms in found.items()
        )
        raise WarehouseError(
            f"dataset {ref} sets {settings}: tables this pipeline creates there would expire, "
            "and a backfilled day older than the partition expiration would publish 0 rows. "
            "Clear these dataset defaults (console: the dataset's details; API: datasets.patch, "
            "or Client.update_dataset with the fields set to None; "
            "cloud.google.com/bigquery/docs/updating-datasets), or use a dataset without them, "
            "then re-run. Nothing was created or written."
        )


def _json_bytes(params: Sequence[Any]) -> int:
    """The bytes of query parameters as the client serializes them (``to_api_repr``)."""
    return len(json.dumps([p.to_api_repr() for p in params], default=str).encode())


def _value_bytes(struct: bigquery.StructQueryParameter) -> int:
    """The bytes one row adds to an ``ARRAY<STRUCT>`` parameter: its value (the type is
    sent once per array), and a comma."""
    return len(json.dumps(struct.to_api_repr()["parameterValue"], default=str).encode()) + 1


def _request_bytes(sql: str, params: Sequence[Any]) -> int:
    """The bytes a query job's SQL and parameters take in its ``jobs.insert`` request, plus
    1 KiB for the rest of the resource (reference, labels, flags)."""
    return len(sql.encode()) + _json_bytes(params) + 1024
