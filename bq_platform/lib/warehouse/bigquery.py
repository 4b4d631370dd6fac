"""BigQuery warehouse: the production implementation of :class:`Warehouse`.

Tables
    :meth:`BigQueryWarehouse.ensure_table` creates a table from its :class:`TableSpec` (explicit
    schema, DAY partitioning on ``partition_field``, clustering, ``require_partition_filter``,
    expiration for stage tables, labels, description) or reads an existing one back and compares
    it with the spec. New NULLABLE columns at the end of the spec (and missing spec labels) are
    applied with ONE ``tables.patch``; any other difference raises
    :class:`SchemaMismatchError` before a job is submitted. The result is cached per
    ``(table, spec.fingerprint())`` for the life of the warehouse object (one Dagster run), and
    the existing tables of the dataset are listed once (``tables.list``, a dataset request), so a
    run makes exactly one table-metadata request per table: ``tables.insert`` for a new table,
    ``tables.get`` for an existing one (a second one only if another run created the table in
    between: the insert answers 409, which counts as success, and the table is read back).
    BigQuery allows about 5 metadata updates per 10 s per table
    (cloud.google.com/bigquery/quotas#standard_tables); checking a table per partition or per
    flush is the classic way to get the 403 ``rateLimitExceeded`` storm. The requests are
    counted per table in :attr:`BigQueryWarehouse.metadata_requests`.

Jobs
    Loads (Parquet from ``gs://`` URIs, explicit schema from the spec, ``CREATE_NEVER``) and
    copies (stage tables -> ``pageviews$YYYYMMDD``) are submitted with the caller's
    deterministic job ID through ``load_table_from_uri``/``copy_table`` with the retry of
    :mod:`bq_platform.lib.retries`; a 409 on insert raises :class:`JobConflictError` (the state
    machine in :mod:`bq_platform.lib.jobs` adopts the existing job). An insert whose response
    was lost and is retried also ends in that 409, which is why adoption matters. Job IDs are
    unique per *project*: :meth:`~BigQueryWarehouse.get_job` refuses a found job that writes
    into another dataset (another environment with the same content would otherwise make this
    one skip its work), and ``job_id_prefix`` keeps environments that share a project apart.

Counts for checks
    :meth:`~BigQueryWarehouse.table_rows` reads ``numRows`` from table metadata
    (``tables.get``: no query, no bytes billed); :meth:`~BigQueryWarehouse.partition_rows` reads
    ``INFORMATION_SCHEMA.PARTITIONS`` (metadata only, never a ``COUNT(*)`` over the data).

Job budget (:meth:`~BigQueryWarehouse.jobs_submitted`)
    Choice: ``jobs.list`` with ``minCreationTime``/``maxCreationTime`` set to the UTC day,
    counting jobs whose destination is the table (decorators stripped), failed jobs included
    (they count toward BigQuery's per-table quota too: cloud.google.com/bigquery/docs/
    optimize-load-jobs). The listing is incremental within a warehouse object (only jobs created
    since the last listing, minus a 10-minute overlap, are fetched again). By default only the
    caller's own jobs are listed (``allUsers=false`` needs only ``bigquery.jobs.list``); set
    ``count_all_users=True`` (needs ``bigquery.jobs.listAll``) to count other principals' jobs
    on the same tables as well. Rejected alternative: a ledger row per submission, which would
    add a DML statement (and its latency and concurrency limits) to every job.

Publish records
    Choice: a ledger table ``_bq_platform_published`` in the dataset, one row per destination
    partition (``destination``, ``partition_key``, ``job_id``, ``fingerprint``,
    ``row_count``, ``published_at``), replaced atomically by one parameterized ``MERGE``
    statement. A single DML statement is atomic in BigQuery, so no ``BEGIN ... COMMIT`` script
    is needed (and bqemulator does not bind query parameters inside scripts, so a script could
    not be tested offline). Every job also carries labels (asset, partition, run ID,
    fingerprint; :func:`bq_platform.lib.jobids.job_labels`), kept with the job for 180 days.
    No per-publish *table* labels: a day-partitioned table would need one label per partition
    (BigQuery allows 64 labels of <= 63 characters, and the sample stage tables' job IDs are
    66 characters long), each label write is a ``tables.patch`` that counts toward the 5 per
    10 s metadata-update limit and would break the one-request-per-table rule above, and stage
    tables expire after 7 days, taking their labels with them. Auditors query the ledger.

Audit rows
    :meth:`~BigQueryWarehouse.replace_audit_rows` replaces the rows of some hours with one
    parameterized ``MERGE ... ON FALSE WHEN NOT MATCHED BY SOURCE AND <hours> THEN DELETE WHEN
    NOT MATCHED THEN INSERT`` (BigQuery's documented pattern for an atomic replace), the rows
    passed as one ``ARRAY<STRUCT>`` query parameter.

SQL takes every value as a query parameter; identifiers (project, dataset, table names) come
from configuration and are validated with :data:`PROJECT_RE`, :data:`DATASET_RE` and
:data:`TABLE_RE` before they are put in backquotes.
"""

import collections
import dataclasses
import datetime as dt
import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry_module
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import bigquery

from bq_platform.lib.retries import api_retry, query_job_retry
from bq_platform.lib.warehouse.base import (
    CopyJob,
    Job,
    JobConflictError,
    JobStatus,
    LoadJob,
    PublishRecord,
    SchemaMismatchError,
    Warehouse,
    WarehouseError,
    split_decorator,
)
from bq_platform.lib.warehouse.schema import AUDIT_TABLE, Column, TableSpec, audit_spec

log = logging.getLogger(__name__)

#: GCP project IDs: 6-30 characters, lowercase letters, digits, hyphens, starting with a letter;
#: optionally domain-scoped (``example.com:my-project``).
#: (cloud.google.com/resource-manager/docs/creating-managing-projects#before_you_begin)
PROJECT_RE = re.compile(r"^(?:[a-z0-9.\-]+:)?[a-z][a-z0-9\-]{4,28}[a-z0-9]$")
#: Dataset names: letters, digits, underscores, up to 1,024 characters
#: (cloud.google.com/bigquery/docs/datasets#dataset-naming).
DATASET_RE = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
#: Table names we accept: a stricter subset of BigQuery's (ASCII letters, digits, underscores).
TABLE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,1023}$")
#: Job ID prefixes: job IDs may hold letters, digits, ``_`` and ``-``
#: (cloud.google.com/bigquery/docs/running-jobs#generate-jobid).
JOB_ID_PREFIX_RE = re.compile(r"^[A-Za-z0-9_\-]{0,100}$")
#: Locations: ``US``, ``EU``, ``europe-west1``...
LOCATION_RE = re.compile(r"^[A-Za-z0-9\-]{2,64}$")
#: Label keys and values (cloud.google.com/bigquery/docs/labels-intro#requirements); we accept
#: only the ASCII subset, which is what :func:`bq_platform.lib.jobids.label_value` produces.
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_\-]{0,62}$")
LABEL_VALUE_RE = re.compile(r"^[a-z0-9_\-]{0,63}$")
MAX_LABELS = 64

#: URIs per load job (cloud.google.com/bigquery/quotas#load_jobs).
MAX_LOAD_URIS = 10_000
#: Source tables per copy job (cloud.google.com/bigquery/quotas#copy_jobs).
MAX_COPY_SOURCES = 1_200

#: The publish-record ledger (see the module docstring).
PUBLISH_LEDGER_TABLE = "_bq_platform_published"

#: How far back an incremental ``jobs.list`` re-reads, to cover clock skew and late listing.
JOB_LIST_OVERLAP = dt.timedelta(minutes=10)
#: ``jobs.list`` page size (BigQuery returns at most 1,000 jobs per page anyway).
JOB_LIST_PAGE_SIZE = 1000

#: Legacy type names that the API may return for the standard SQL names our specs use.
_TYPE_ALIASES = {
    "INTEGER": "INT64",
    "FLOAT": "FLOAT64",
    "BOOLEAN": "BOOL",
    "RECORD": "STRUCT",
    "DECIMAL": "NUMERIC",
    "BIGDECIMAL": "BIGNUMERIC",
}


def _norm_type(type_name: str | None) -> str:
    name = (type_name or "STRING").upper()
    return _TYPE_ALIASES.get(name, name)


def _norm_mode(mode: str | None) -> str:
    return (mode or "NULLABLE").upper()


def _check(value: str, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"invalid BigQuery {what}: {value!r} (must match {pattern.pattern})")
    return value


def validate_labels(labels: Mapping[str, str], where: str) -> dict[str, str]:
    """Return ``labels`` as a dict if every key and value is a valid BigQuery label.

    A value of None is refused here: the API would answer HTTP 500 to it (bqemulator does),
    which a retry policy would then repeat until its deadline.

    Raises:
        ValueError: naming ``where`` and the offending label.
    """
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{where}: {len(labels)} labels, BigQuery allows {MAX_LABELS}")
    out = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
            raise ValueError(f"{where}: invalid label key {key!r} (lowercase, <= 63 chars)")
        if not isinstance(value, str) or not LABEL_VALUE_RE.match(value):
            raise ValueError(
                f"{where}: invalid value {value!r} for label {key!r} "
                "(a string of lowercase letters, digits, '_' or '-', <= 63 chars)"
            )
        out[key] = value
    return out


def schema_fields(columns: Iterable[Column]) -> list[bigquery.SchemaField]:
    """BigQuery schema fields for spec columns (explicit schema, never autodetect)."""
    fields = []
    for c in columns:
        # An explicit description=None would be sent as JSON null ("clear the description").
        extra = {"description": c.description} if c.description else {}
        fields.append(bigquery.SchemaField(c.name, c.type, mode=c.mode, **extra))
    return fields


def publish_ledger_spec() -> TableSpec:
    """The ledger of what was last published per destination partition (module docstring)."""
    return TableSpec(
        name=PUBLISH_LEDGER_TABLE,
        columns=(
            Column("destination", "STRING", "REQUIRED", "Destination table, no decorator."),
            Column("partition_key", "STRING", "REQUIRED", "YYYYMMDD, YYYYMMDDHH or ''."),
            Column("job_id", "STRING", "REQUIRED", "Job that wrote the partition."),
            Column("fingerprint", "STRING", "REQUIRED", "Content fingerprint of the job ID."),
            Column("row_count", "INT64", "REQUIRED", "Rows the job wrote."),
            Column("published_at", "TIMESTAMP", "REQUIRED", "UTC time of the record."),
        ),
        clustering=("destination", "partition_key"),
        labels={"app": "bq_platform", "role": "ledger"},
        description="What bq_platform last published into each destination partition.",
    )


@dataclasses.dataclass(frozen=True)
class _Differences:
    """Result of comparing an existing table with its spec."""

    errors: tuple[str, ...]
    added_columns: tuple[Column, ...]
    missing_labels: Mapping[str, str]


def _compare(table: bigquery.Table, spec: TableSpec) -> _Differences:
    """Compare ``table`` (as read from BigQuery) with ``spec``.

    Compared: columns (name, type, mode, order), DAY partitioning field, clustering,
    ``require_partition_filter``, and the presence of the spec's labels. Not compared:
    descriptions (not part of the fingerprint), expiration (an absolute time set at creation),
    extra labels that others added.
    """
    errors: list[str] = []
    actual = list(table.schema or ())
    wanted = list(spec.columns)
    for i, field in enumerate(actual):
        if i >= len(wanted):
            errors.append(f"column {field.name!r} exists in the table but not in the spec")
            continue
        column = wanted[i]
        have = (field.name, _norm_type(field.field_type), _norm_mode(field.mode))
        want = (column.name, _norm_type(column.type), _norm_mode(column.mode))
        if have != want:
            errors.append(
                f"column {i + 1} is {have[0]} {have[1]} {have[2]}, the spec says "
                f"{want[0]} {want[1]} {want[2]}"
            )
    added = tuple(wanted[len(actual) :])
    for column in added:
        if _norm_mode(column.mode) != "NULLABLE":
            errors.append(
                f"new column {column.name!r} is {column.mode}: only NULLABLE columns can be "
                "added to an existing table"
            )

    partitioning = table.time_partitioning
    have_field = None
    if partitioning is not None:
        have_field = partitioning.field or "_PARTITIONTIME"
        if (partitioning.type_ or "DAY") != "DAY":
            errors.append(f"partitioning is {partitioning.type_}, the spec says DAY")
    if table.range_partitioning is not None:
        errors.append("the table is range-partitioned, the spec says otherwise")
    if have_field != spec.partition_field:
        errors.append(
            f"partitioned on {have_field or 'nothing'}, the spec says "
            f"{spec.partition_field or 'unpartitioned'}"
        )
    clustering = tuple(table.clustering_fields or ())
    if clustering != tuple(spec.clustering):
        errors.append(f"clustered by {list(clustering)}, the spec says {list(spec.clustering)}")

    resource = table.to_api_repr()
    rpf = bool(
        resource.get("requirePartitionFilter")
        or (resource.get("timePartitioning") or {}).get("requirePartitionFilter")
    )
    if rpf != spec.require_partition_filter:
        errors.append(
            f"require_partition_filter is {rpf}, the spec says {spec.require_partition_filter}"
        )

    labels = dict(table.labels or {})
    missing = {k: v for k, v in spec.labels.items() if labels.get(k) != v}
    return _Differences(tuple(errors), added if not errors else (), missing)


def _job_destination(job: Any) -> tuple[str, str, str] | None:
    """``(project, dataset, table)`` (decorator stripped) of a listed job's destination, or None.

    Load, copy and query jobs expose ``destination``; DML targets are not counted (the budget
    is for the tables our jobs write: stage tables and the published tables).
    """
    destination = getattr(job, "destination", None)
    table_id = getattr(destination, "table_id", None)
    if not isinstance(table_id, str):
        return None
    return (destination.project, destination.dataset_id, table_id.split("$", 1)[0])


class BigQueryWarehouse(Warehouse):
    """Tables and jobs in one BigQuery dataset.

    Args:
        client: a ``google.cloud.bigquery.Client`` (see :func:`bigquery_client`).
        project: project that holds the dataset and runs the jobs.
        dataset: dataset name; created in ``location`` if missing.
        location: dataset and job location (``US``, ``EU``, ``europe-west1``...).
        retry: retry for every API call; default :func:`bq_platform.lib.retries.api_retry`
            (5 minutes). Tests pass a short one.
        job_retry: resubmission policy for our idempotent query jobs; default
            :func:`bq_platform.lib.retries.query_job_retry`.
        request_timeout_s: HTTP timeout of each request, seconds.
        poll_initial_s / poll_max_s: first and largest interval between ``jobs.get`` polls in
            :meth:`wait_job`, seconds (the interval grows by 1.5x per poll).
        count_all_users: count every principal's jobs in :meth:`jobs_submitted` (needs
            ``bigquery.jobs.listAll``); default only this principal's.
        job_id_prefix: prepended to every job ID sent to BigQuery (and removed from the IDs
            returned). Job IDs are unique per *project*, not per dataset, so two environments
            with datasets in one project must use different prefixes (e.g. the dataset name
            and ``_``); otherwise the second would find the first one's jobs. :meth:`get_job`
            refuses such a foreign job loudly instead of letting it skip work.

    Attributes:
        metadata_requests: table-metadata requests (``tables.get``/``insert``/``patch``) made by
            :meth:`ensure_table`, per table name: 1 per table per run (module docstring).
        metadata_reads: ``tables.get`` requests made for row counts and existence checks, per
            table (reads; they do not count toward the metadata-update rate limit).
        dataset_requests: dataset-level requests (``datasets.get``/``insert``, ``tables.list``).
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
        count_all_users: bool = False,
        job_id_prefix: str = "",
    ) -> None:
        self.client = client
        self.project = _check(project, PROJECT_RE, "project ID")
        self.dataset = _check(dataset, DATASET_RE, "dataset name")
        self.location = _check(location, LOCATION_RE, "location")
        self.retry = retry if retry is not None else api_retry()
        self.job_retry = job_retry if job_retry is not None else query_job_retry()
        self.request_timeout_s = request_timeout_s
        self.poll_initial_s = poll_initial_s
        self.poll_max_s = poll_max_s
        self.count_all_users = count_all_users
        self.job_id_prefix = _check(job_id_prefix, JOB_ID_PREFIX_RE, "job ID prefix")
        self.metadata_requests: collections.Counter[str] = collections.Counter()
        self.metadata_reads: collections.Counter[str] = collections.Counter()
        self.dataset_requests = 0
        self._ensured: dict[str, str] = {}
        self._dataset_ready = False
        self._existing_tables: set[str] | None = None
        self._job_index: dict[dt.date, dict[str, tuple[str, str, str]]] = {}
        self._listed_until: dict[dt.date, dt.datetime] = {}

    # -- names -------------------------------------------------------------------------------

    def table_id(self, table: str) -> str:
        """Fully qualified ``project.dataset.table[$YYYYMMDD]`` for API calls.

        Raises:
            ValueError: if ``table`` is not a valid name with an optional day decorator.
        """
        name, day = split_decorator(table)
        _check(name, TABLE_RE, "table name")
        suffix = f"${day:%Y%m%d}" if day is not None else ""
        return f"{self.project}.{self.dataset}.{name}{suffix}"

    def _sql_table(self, table: str) -> str:
        """Backquoted table reference for SQL; ``table`` is validated, never user data."""
        _check(table, TABLE_RE, "table name")
        return f"`{self.project}.{self.dataset}.{table}`"

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
        self._dataset_ready = True

    def _existing(self) -> set[str]:
        if self._existing_tables is None:
            self.dataset_requests += 1
            tables = self.client.list_tables(
                f"{self.project}.{self.dataset}",
                page_size=1000,
                retry=self.retry,
                timeout=self.request_timeout_s,
            )
            self._existing_tables = {t.table_id for t in tables}
        return self._existing_tables

    def _new_table(self, spec: TableSpec) -> bigquery.Table:
        if spec.require_partition_filter and not spec.partition_field:
            raise ValueError(f"{spec.name}: require_partition_filter needs a partition_field")
        table = bigquery.Table(self.table_id(spec.name), schema=schema_fields(spec.columns))
        if spec.partition_field:
            table.time_partitioning = bigquery.TimePartitioning(
                type_=bigquery.TimePartitioningType.DAY, field=spec.partition_field
            )
            # Top-level field; timePartitioning.requirePartitionFilter is deprecated.
            table.require_partition_filter = spec.require_partition_filter
        if spec.clustering:
            table.clustering_fields = list(spec.clustering)
        if spec.expiration_days is not None:
            table.expires = dt.datetime.now(dt.UTC) + dt.timedelta(days=spec.expiration_days)
        table.labels = validate_labels(spec.labels, f"table {spec.name}")
        table.description = spec.description or None
        return table

    def ensure_table(self, spec: TableSpec) -> None:
        """Create the table or check it against ``spec``; at most once per run and fingerprint.

        Raises:
            SchemaMismatchError: if the existing table differs in a non-additive way (columns
                changed/removed/reordered, REQUIRED column added, partitioning, clustering or
                require_partition_filter). Nothing is changed in that case.
            ValueError: if the spec has an invalid name or labels.
            WarehouseError: if the dataset is in another location.
        """
        self._ensure_table(spec, attempts_left=2)

    def _ensure_table(self, spec: TableSpec, attempts_left: int) -> None:
        name = _check(spec.name, TABLE_RE, "table name")
        fingerprint = spec.fingerprint()
        if self._ensured.get(name) == fingerprint:
            return
        self._ensure_dataset()
        existing = self._existing()
        if name not in existing:
            try:
                self.metadata_requests[name] += 1
                self.client.create_table(
                    self._new_table(spec), retry=self.retry, timeout=self.request_timeout_s
                )
                log.info("created table %s", self.table_id(name))
                existing.add(name)
                self._ensured[name] = fingerprint
                return
            except api_exceptions.Conflict:
                log.info("table %s was created concurrently (409): checking it", name)
        try:
            self.metadata_requests[name] += 1
            table = self.client.get_table(
                self.table_id(name), retry=self.retry, timeout=self.request_timeout_s
            )
        except api_exceptions.NotFound:
            # Listed (or 409 on create), but gone since, e.g. an expired stage table: create it
            # again, once; a table that keeps appearing and vanishing is someone else's fight.
            existing.discard(name)
            if attempts_left <= 1:
                raise WarehouseError(
                    f"table {self.table_id(name)} exists and vanishes again; is another process "
                    "deleting it?"
                ) from None
            self._ensure_table(spec, attempts_left - 1)
            return
        existing.add(name)
        diff = _compare(table, spec)
        if diff.errors:
            raise SchemaMismatchError(
                f"table {self.table_id(name)} does not match its spec: "
                + "; ".join(diff.errors)
                + ". Only new NULLABLE columns at the end are applied automatically; migrate "
                "the table (or restore the spec) and re-run. No job was submitted."
            )
        fields = []
        if diff.added_columns:
            table.schema = list(table.schema) + schema_fields(diff.added_columns)
            fields.append("schema")
        if diff.missing_labels:
            table.labels = {**(table.labels or {}), **validate_labels(diff.missing_labels, name)}
            fields.append("labels")
        if fields:
            self.metadata_requests[name] += 1
            self.client.update_table(
                table, fields, retry=self.retry, timeout=self.request_timeout_s
            )
            log.info(
                "updated table %s: %s (added columns: %s)",
                self.table_id(name),
                ", ".join(fields),
                [c.name for c in diff.added_columns] or "none",
            )
        self._ensured[name] = fingerprint

    def table_exists(self, table: str) -> bool:
        name = _check(table, TABLE_RE, "table name")
        self.metadata_reads[name] += 1
        try:
            self.client.get_table(
                self.table_id(name), retry=self.retry, timeout=self.request_timeout_s
            )
        except api_exceptions.NotFound:
            return False
        return True

    def table_rows(self, table: str) -> int | None:
        """Rows in a table from its metadata (``numRows``): no query, 0 bytes billed."""
        name = _check(table, TABLE_RE, "table name")
        self.metadata_reads[name] += 1
        try:
            found = self.client.get_table(
                self.table_id(name), retry=self.retry, timeout=self.request_timeout_s
            )
        except api_exceptions.NotFound:
            return None
        return int(found.num_rows or 0)

    def partition_rows(self, table: str, day: dt.date) -> int:
        """Rows in one day partition from ``INFORMATION_SCHEMA.PARTITIONS`` (metadata, no scan).

        Returns 0 if the table or the partition does not exist.
        """
        _check(table, TABLE_RE, "table name")
        sql = (
            "SELECT COALESCE(SUM(total_rows), 0) AS total_rows "
            f"FROM `{self.project}.{self.dataset}.INFORMATION_SCHEMA.PARTITIONS` "
            "WHERE table_name = @table_name AND partition_id = @partition_id"
        )
        rows = self._query(
            sql,
            [
                bigquery.ScalarQueryParameter("table_name", "STRING", table),
                bigquery.ScalarQueryParameter("partition_id", "STRING", f"{day:%Y%m%d}"),
            ],
        )
        return int(rows[0]["total_rows"] or 0) if rows else 0

    # -- jobs --------------------------------------------------------------------------------

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
        )

    def _bq_job_id(self, job_id: str) -> str:
        return f"{self.job_id_prefix}{job_id}"

    def _caller_job_id(self, bq_job_id: str) -> str:
        prefix = self.job_id_prefix
        return bq_job_id[len(prefix) :] if prefix and bq_job_id.startswith(prefix) else bq_job_id

    def get_job(self, job_id: str) -> JobStatus | None:
        """Look a job up by the caller's ID; None if it does not exist.

        Raises:
            WarehouseError: if the job exists but writes into another project or dataset (job
                IDs are project-wide: another environment's job must not pass for ours).
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
        return self._status(job)

    def submit_job(self, job: Job) -> JobStatus:
        """Insert a load or copy job with its deterministic ID (``jobs.insert``).

        Raises:
            JobConflictError: if a job with this ID exists (HTTP 409).
            ValueError: if the job is malformed (non-``gs://`` or too many URIs, bad labels).
            WarehouseError: if BigQuery refuses the job for another reason (the message names
                the job, its destination and BigQuery's reason).
        """
        labels = validate_labels(job.labels, f"job {job.job_id}")
        destination = self.table_id(job.destination)
        try:
            if isinstance(job, LoadJob):
                submitted = self._submit_load(job, destination, labels)
            elif isinstance(job, CopyJob):
                submitted = self._submit_copy(job, destination, labels)
            else:  # pragma: no cover - Job is a closed union
                raise TypeError(f"unknown job type {type(job).__name__}")
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
        table, _ = split_decorator(job.destination)
        self._remember_job(submitted.job_id, table, submitted.created)
        return self._status(submitted)

    def _submit_load(
        self, job: LoadJob, destination: str, labels: dict[str, str]
    ) -> bigquery.LoadJob:
        uris = list(job.source_uris)
        if not uris:
            raise ValueError(f"load job {job.job_id} has no source URIs")
        if len(uris) > MAX_LOAD_URIS:
            raise ValueError(
                f"load job {job.job_id} names {len(uris)} files; BigQuery accepts at most "
                f"{MAX_LOAD_URIS:,} URIs per load job. Use one wildcard URI per hour "
                "(e.g. gs://bucket/staging/.../hour=.../part-*.parquet) instead."
            )
        for uri in uris:
            if not uri.startswith("gs://") or uri.count("*") > 1:
                raise ValueError(
                    f"load job {job.job_id}: BigQuery loads gs:// URIs with at most one "
                    f"wildcard, got {uri!r}"
                )
        split_table, _ = split_decorator(job.destination)
        if split_table != job.spec.name:
            raise ValueError(
                f"load job {job.job_id}: destination {job.destination} is not table {job.spec.name}"
            )
        config = bigquery.LoadJobConfig(
            schema=schema_fields(job.spec.columns),
            source_format=bigquery.SourceFormat.PARQUET,
            write_disposition=job.write_disposition,
            create_disposition=bigquery.CreateDisposition.CREATE_NEVER,
            labels=labels,
        )
        return self.client.load_table_from_uri(
            uris,
            destination,
            job_id=self._bq_job_id(job.job_id),
            project=self.project,
            location=self.location,
            job_config=config,
            retry=self.retry,
            timeout=self.request_timeout_s,
        )

    def _submit_copy(
        self, job: CopyJob, destination: str, labels: dict[str, str]
    ) -> bigquery.CopyJob:
        if not job.sources:
            raise ValueError(f"copy job {job.job_id} has no source tables")
        if len(job.sources) > MAX_COPY_SOURCES:
            raise ValueError(
                f"copy job {job.job_id} has {len(job.sources)} sources; BigQuery allows "
                f"{MAX_COPY_SOURCES:,} per copy job"
            )
        sources = [self.table_id(_check(s, TABLE_RE, "table name")) for s in job.sources]
        config = bigquery.CopyJobConfig(
            write_disposition=job.write_disposition,
            create_disposition=bigquery.CreateDisposition.CREATE_NEVER,
            labels=labels,
        )
        return self.client.copy_table(
            sources,
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

    # -- job budget --------------------------------------------------------------------------

    def _remember_job(self, job_id: str, table: str, created: dt.datetime | None) -> None:
        day = (created or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).date()
        self._job_index.setdefault(day, {})[job_id] = (self.project, self.dataset, table)

    def jobs_submitted(self, table: str, day: dt.date) -> int:
        """Jobs with ``table`` as destination created on UTC ``day`` (module docstring)."""
        name = _check(table, TABLE_RE, "table name")
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
            destination = _job_destination(job)
            if destination is not None:
                index[job.job_id] = destination
        self._listed_until[day] = listed_at
        wanted = (self.project, self.dataset, name)
        return sum(1 for destination in index.values() if destination == wanted)

    # -- queries -----------------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any], *, dml: bool = False) -> list[bigquery.Row]:
        config = bigquery.QueryJobConfig(
            query_parameters=list(params),
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
        result = job.result(retry=self.retry, timeout=self.request_timeout_s * 10)
        return [] if dml else list(result)

    # -- publish records ---------------------------------------------------------------------

    def read_publish_record(self, destination: str, partition: str) -> PublishRecord | None:
        _check(destination, TABLE_RE, "table name")
        self.ensure_table(publish_ledger_spec())
        sql = (
            "SELECT destination, partition_key, job_id, fingerprint, row_count, published_at "
            f"FROM {self._sql_table(PUBLISH_LEDGER_TABLE)} "
            "WHERE destination = @destination AND partition_key = @partition_key "
            "ORDER BY published_at DESC LIMIT 1"
        )
        rows = self._query(
            sql,
            [
                bigquery.ScalarQueryParameter("destination", "STRING", destination),
                bigquery.ScalarQueryParameter("partition_key", "STRING", partition),
            ],
        )
        if not rows:
            return None
        row = rows[0]
        published_at = row["published_at"]
        if published_at.tzinfo is None:
            published_at = published_at.replace(tzinfo=dt.UTC)
        return PublishRecord(
            destination=row["destination"],
            partition=row["partition_key"],
            job_id=row["job_id"],
            fingerprint=row["fingerprint"],
            rows=int(row["row_count"]),
            published_at=published_at,
        )

    def write_publish_record(self, record: PublishRecord) -> None:
        """Replace the ledger row of ``record``'s destination partition (one atomic MERGE)."""
        _check(record.destination, TABLE_RE, "table name")
        self.ensure_table(publish_ledger_spec())
        sql = (
            f"MERGE {self._sql_table(PUBLISH_LEDGER_TABLE)} AS t "
            "USING (SELECT @destination AS destination, @partition_key AS partition_key, "
            "@job_id AS job_id, @fingerprint AS fingerprint, @row_count AS row_count, "
            "@published_at AS published_at) AS s "
            "ON t.destination = s.destination AND t.partition_key = s.partition_key "
            "WHEN MATCHED THEN UPDATE SET job_id = s.job_id, fingerprint = s.fingerprint, "
            "row_count = s.row_count, published_at = s.published_at "
            "WHEN NOT MATCHED THEN INSERT "
            "(destination, partition_key, job_id, fingerprint, row_count, published_at) "
            "VALUES (s.destination, s.partition_key, s.job_id, s.fingerprint, s.row_count, "
            "s.published_at)"
        )
        self._query(
            sql,
            [
                bigquery.ScalarQueryParameter("destination", "STRING", record.destination),
                bigquery.ScalarQueryParameter("partition_key", "STRING", record.partition),
                bigquery.ScalarQueryParameter("job_id", "STRING", record.job_id),
                bigquery.ScalarQueryParameter("fingerprint", "STRING", record.fingerprint),
                bigquery.ScalarQueryParameter("row_count", "INT64", int(record.rows)),
                bigquery.ScalarQueryParameter(
                    "published_at", "TIMESTAMP", record.published_at.astimezone(dt.UTC)
                ),
            ],
            dml=True,
        )

    # -- audit -------------------------------------------------------------------------------

    def replace_audit_rows(
        self, hours: Sequence[dt.datetime], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Atomically replace the ``pageviews_audit`` rows of ``hours`` with ``rows``.

        One ``MERGE ... ON FALSE`` statement deletes the old rows of those hours and inserts the
        new ones, so readers see either all old or all new rows. Re-running with the same
        arguments leaves the same rows.

        Raises:
            ValueError: if an hour is naive/not UTC, or a row misses a column or belongs to an
                hour that is not in ``hours`` (it would survive the next replace as a duplicate).
        """
        spec = audit_spec()
        self.ensure_table(spec)
        hour_set = set()
        for hour in hours:
            if hour.tzinfo is None or hour.utcoffset() != dt.timedelta(0):
                raise ValueError(f"audit hours must be timezone-aware UTC, got {hour!r}")
            hour_set.add(hour.astimezone(dt.UTC))
        if not hour_set:
            return
        struct_values = []
        for row in rows:
            missing = [c.name for c in spec.columns if c.name not in row]
            if missing:
                raise ValueError(f"audit row {dict(row)!r} misses columns {missing}")
            if row["hour"].astimezone(dt.UTC) not in hour_set:
                raise ValueError(f"audit row for {row['hour']} is not in the replaced hours")
            struct_values.append(
                bigquery.StructQueryParameter(
                    None,
                    *[
                        bigquery.ScalarQueryParameter(c.name, _norm_type(c.type), row[c.name])
                        for c in spec.columns
                    ],
                )
            )
        ordered_hours = sorted(hour_set)
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
                f"MERGE {table} AS t "
                "USING (SELECT "
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
        self._query(sql, params, dml=True)

    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        """``pageviews_audit`` rows with ``start <= hour < end``, ordered by hour and site.

        The query also filters ``event_date`` so that BigQuery prunes partitions.
        """
        spec = audit_spec()
        self.ensure_table(spec)
        start_utc, end_utc = start.astimezone(dt.UTC), end.astimezone(dt.UTC)
        sql = (
            "SELECT "
            + ", ".join(c.name for c in spec.columns)
            + f" FROM {self._sql_table(AUDIT_TABLE)} "
            "WHERE event_date BETWEEN @start_date AND @end_date "
            "AND hour >= @start AND hour < @end ORDER BY hour, site"
        )
        rows = self._query(
            sql,
            [
                bigquery.ScalarQueryParameter("start_date", "DATE", start_utc.date()),
                bigquery.ScalarQueryParameter("end_date", "DATE", end_utc.date()),
                bigquery.ScalarQueryParameter("start", "TIMESTAMP", start_utc),
                bigquery.ScalarQueryParameter("end", "TIMESTAMP", end_utc),
            ],
        )
        return [dict(row.items()) for row in rows]

    def close(self) -> None:
        """Close the client's HTTP session."""
        self.client.close()


def bigquery_client(
    project: str,
    location: str,
    api_endpoint: str | None = None,
    credentials: Credentials | None = None,
) -> bigquery.Client:
    """Build a ``google.cloud.bigquery.Client``.

    Production (``api_endpoint`` None): Application Default Credentials unless ``credentials``
    is given (``GOOGLE_APPLICATION_CREDENTIALS``, the metadata server, or ``gcloud auth
    application-default login``). Emulator: ``client_options={"api_endpoint": ...}`` and
    anonymous credentials, the only way to reach bqemulator (``dagster_gcp.BigQueryResource``
    has no endpoint option).

    Args:
        project: project that runs the jobs.
        location: default job location.
        api_endpoint: base URL of a BigQuery emulator, e.g. ``http://127.0.0.1:9050``.
        credentials: explicit credentials.

    Returns:
        The client.
    """
    _check(project, PROJECT_RE, "project ID")
    _check(location, LOCATION_RE, "location")
    if api_endpoint:
        return bigquery.Client(
            project=project,
            location=location,
            credentials=credentials or AnonymousCredentials(),
            client_options={"api_endpoint": api_endpoint},
        )
    return bigquery.Client(project=project, location=location, credentials=credentials)
