"""BigQuery warehouse: the production backend of :class:`Warehouse`.

The rules, the schema comparison, the ensure cache and the publish ledger are the base
class's (:mod:`bq_platform.lib.warehouse.base`); this module supplies BigQuery's side of them
through the official client:

Tables
    The dataset's tables are listed once per warehouse object (``tables.list``, a dataset
    request); then a table costs one metadata request per run (issue 9): ``tables.insert``
    when it is new, ``tables.get`` when it exists (plus one ``tables.patch`` if the spec
    appends NULLABLE columns or changes clustering, labels or ``require_partition_filter``).
    Their answers (schema, rows, creation time) are kept per object (:mod:`.bigquery_cache`);
    a table it never ensures is read once, when first asked. BigQuery allows about 5 metadata
    updates per 10 s per table (cloud.google.com/bigquery/quotas#standard_tables). Counted per
    table in :attr:`BigQueryWarehouse.metadata_requests` (target: 1 per run).

Counts
    :meth:`BigQueryWarehouse.table_info` answers ``rows`` and ``created`` from the cache: the
    ``numRows``/``creationTime`` of the table's one metadata request, updated by the jobs this
    object runs (a ``WRITE_TRUNCATE`` job's output rows). What is unknown is read with
    ``tables.get``, for a whole table or one partition (``table$YYYYMMDD``: BigQuery's
    ``tables.get`` takes the partition decorator and returns that partition's ``numRows``;
    ``bq show 'dataset.table$YYYYMMDD'``). A partition's count is a separate request per
    partition, counted in :attr:`BigQueryWarehouse.partition_reads`, not in
    ``metadata_requests``. No query, 0 bytes billed, and no limit on the number of tables
    (``INFORMATION_SCHEMA.PARTITIONS`` reads at most 1,000 tables per query and bills at
    least 10 MB). A table listed as missing when this object listed the dataset is missing
    for this run unless this object creates it.

Jobs
    Loads (Parquet from ``gs://`` URIs, explicit schema, ``CREATE_NEVER``) and copies (stage
    tables -> ``pageviews$YYYYMMDD``, ``CREATE_NEVER``) are inserted with the caller's
    deterministic job ID; a 409 raises :class:`JobConflictError` and the state machine adopts
    the job. Job IDs are unique per *project*: ``job_id_prefix`` keeps environments that share
    a project apart, and :meth:`~BigQueryWarehouse.get_job` refuses a job that writes another
    dataset.

Job budget (:meth:`~BigQueryWarehouse.jobs_submitted`)
    ``jobs.list`` over the UTC day, counting jobs whose destination is the table, failed ones
    included (they count toward the per-table quota). Listing needs ``bigquery.jobs.list``,
    which ``roles/bigquery.user`` has and ``roles/bigquery.jobUser`` does not
    (cloud.google.com/bigquery/docs/access-control); docs/production.md lists the roles.

Ledger and audit
    The publish ledger is append-only (one ``INSERT`` per record: INSERT statements never
    conflict) and read with ``tabledata.list`` (free), once per warehouse object; the audit
    rows are read with ``tabledata.list`` of their day partitions (:mod:`.bigquery_sql`). The
    audit rows of some hours are replaced by one ``MERGE ... ON FALSE``
    statement (atomic); concurrent MERGEs on one table fail with "Could not serialize access
    ...", which :func:`bq_platform.lib.gcp_retries.is_retryable_job_error` retries, bounded.

SQL takes every value as a query parameter; identifiers come from configuration and are
validated before they are put in backquotes.
"""

import collections
import datetime as dt
import logging

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry_module
from google.cloud import bigquery

from bq_platform.lib.gcp_retries import api_retry, query_job_retry
from bq_platform.lib.warehouse import rules, schema
from bq_platform.lib.warehouse.base import (
    TableExistsError,
    TableInfo,
    Warehouse,
    WarehouseError,
)
from bq_platform.lib.warehouse.bigquery.cache import TableCache
from bq_platform.lib.warehouse.bigquery.client import (
    DATASET_RE,
    JOB_ID_PREFIX_RE,
    LOCATION_RE,
    PROJECT_RE,
    check_identifier,
)
from bq_platform.lib.warehouse.bigquery.jobs import BigQueryJobs, schema_fields
from bq_platform.lib.warehouse.bigquery.sql import BigQuerySql
from bq_platform.lib.warehouse.compare import SpecDifference
from bq_platform.lib.warehouse.ledger import LedgerIndex
from bq_platform.lib.warehouse.schema import Column, TableSpec

log = logging.getLogger(__name__)


def spec_of(table: bigquery.Table) -> TableSpec:
    """Read a BigQuery table resource back as a :class:`TableSpec` (what :func:`compare` needs).

    Raises:
        WarehouseError: if the table is range- or non-DAY-partitioned (never created by us).
    """
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


class BigQueryWarehouse(BigQueryJobs, BigQuerySql, Warehouse):
    """Tables and jobs in one BigQuery dataset.

    Args:
        client: a ``google.cloud.bigquery.Client`` (see
            :func:`bq_platform.lib.warehouse.bigquery.client.bigquery_client`).
        project: project that holds the dataset and runs the jobs.
        dataset: dataset name; created in ``location`` if missing.
        location: dataset and job location (``US``, ``EU``, ``europe-west1``...).
        retry: retry for every API call; default :func:`bq_platform.lib.gcp_retries.api_retry`.
        job_retry: resubmission policy for our idempotent query jobs.
        request_timeout_s: HTTP timeout of each request, seconds.
        poll_initial_s / poll_max_s: first and largest interval between ``jobs.get`` polls in
            :meth:`wait_job`, seconds (the interval grows by 1.5x per poll).
        count_all_users: count every principal's jobs in :meth:`jobs_submitted` (needs
            ``bigquery.jobs.listAll``); default only this principal's.
        job_id_prefix: prepended to every job ID sent to BigQuery (and removed from the IDs
            returned), so environments sharing a project never share job IDs.

    Attributes:
        metadata_requests: whole-table ``tables.get``/``insert``/``patch`` requests per
            table (ensure, counts, existence): 1 per table per run, plus a patch when needed.
        partition_reads: ``tables.get`` requests of ``table$YYYYMMDD`` per table (one per
            partition count the cache does not know).
        rows_listed: ``tabledata.list`` reads (ledger, audit partitions) per table; free.
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
        super().__init__()
        self.client = client
        self.project = check_identifier(project, PROJECT_RE, "project ID")
        self.dataset = check_identifier(dataset, DATASET_RE, "dataset name")
        self.location = check_identifier(location, LOCATION_RE, "location")
        self.retry = retry if retry is not None else api_retry()
        self.job_retry = job_retry if job_retry is not None else query_job_retry()
        self.request_timeout_s = request_timeout_s
        self.poll_initial_s = poll_initial_s
        self.poll_max_s = poll_max_s
        self.count_all_users = count_all_users
        self.job_id_prefix = check_identifier(job_id_prefix, JOB_ID_PREFIX_RE, "job ID prefix")
        self.metadata_requests: collections.Counter[str] = collections.Counter()
        self.partition_reads: collections.Counter[str] = collections.Counter()
        self.rows_listed: collections.Counter[str] = collections.Counter()
        self.dataset_requests = 0
        self._dataset_ready = False
        self._existing_tables: set[str] | None = None
        self._job_index: dict[dt.date, dict[str, tuple[str, str, str]]] = {}
        self._listed_until: dict[dt.date, dt.datetime] = {}
        self._cache = TableCache()
        self._our_jobs: dict[str, tuple[str, str]] = {}
        self._ledger_index: LedgerIndex | None = None

    # -- names -------------------------------------------------------------------------------

    def table_id(self, table: str) -> str:
        """Fully qualified ``project.dataset.table[$YYYYMMDD]`` for API calls.

        Raises:
            RuleViolation: if ``table`` is not a valid name with an optional day decorator.
        """
        name, day = rules.split_destination(table)
        suffix = f"${day:%Y%m%d}" if day is not None else ""
        return f"{self.project}.{self.dataset}.{name}{suffix}"

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
            table.time_partitioning = bigquery.TimePartitioning(
                type_=bigquery.TimePartitioningType.DAY, field=spec.partition_field
            )
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
        """Rows and creation time of a table or a ``table$YYYYMMDD`` partition.

        From the cache when known (see the module docstring), else one ``tables.get``
        (remembered). None if the table does not exist; no request for a table the dataset
        listing did not show.
        """
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

    def close(self) -> None:
        """Close the client's HTTP session."""
        self.client.close()
