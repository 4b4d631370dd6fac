"""The warehouse interface: BigQuery's job model, which the local DuckDB warehouse imitates.

:class:`Warehouse` holds what every engine shares: BigQuery's rules checked before anything is
sent, tables ensured once per spec fingerprint (BigQuery allows about 5 metadata updates per
10 s per table: cloud.google.com/bigquery/quotas#standard_tables), the append-only publish
ledger, counts from metadata (0 bytes billed). A backend keeps BigQuery's semantics: a job ID
is used once (HTTP 409); ``WRITE_TRUNCATE`` replaces a table or ``table$YYYYMMDD`` atomically
and fails if a row belongs to another day.
"""

import abc
import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from bq_platform.lib.warehouse import ledger, rules
from bq_platform.lib.warehouse.compare import SpecDifference, compare
from bq_platform.lib.warehouse.job_model import (
    CopyJob,
    Job,
    JobStatus,
    LoadJob,
    job_tables,
    validate_job,
)
from bq_platform.lib.warehouse.ledger import PublishRecord
from bq_platform.lib.warehouse.rollup_compare import RollupComparison
from bq_platform.lib.warehouse.rules import RuleViolation
from bq_platform.lib.warehouse.schema import TableSpec

#: The columns :meth:`Warehouse.published_sample_rows` reads: what the traffic classifier
#: needs of a row, and the classification it was published with.
SAMPLE_PREVIEW_COLUMNS: tuple[str, ...] = (
    "site",
    "event_date",
    "event_ts",
    "visitor_id",
    "page_path",
    "user_agent",
    "traffic_class",
    "bot_reason",
)

__all__ = [
    "CopyJob",
    "Job",
    "JobConflictError",
    "JobFailedError",
    "JobStatus",
    "LoadJob",
    "PublishRecord",
    "RuleViolation",
    "SchemaMismatchError",
    "TableExistsError",
    "TableInfo",
    "Warehouse",
    "WarehouseError",
]


class WarehouseError(RuntimeError):
    """A warehouse operation failed; the message names the table or job and what to do."""


class JobConflictError(WarehouseError):
    """A job with this ID already exists (BigQuery answers HTTP 409 ``duplicate``)."""


class TableExistsError(WarehouseError):
    """A table create found the table already there (HTTP 409); someone else created it."""


class JobFailedError(WarehouseError):
    """A job we submitted finished with an error. ``status`` holds the job's error result."""

    def __init__(self, message: str, status: "JobStatus") -> None:
        super().__init__(message)
        self.status = status


class QuotaExceededError(WarehouseError):
    """BigQuery refused a job, or failed it, with ``quotaExceeded``: a quota that BigQuery
    replenishes over time, not a fault of the job. The job's destination is unchanged; the
    step is worth running again after :data:`~bq_platform.lib.warehouse.rules.
    QUOTA_EXCEEDED_WAIT_S` (``bq_platform.defs.errors`` asks Dagster for exactly that)."""


class SchemaMismatchError(WarehouseError):
    """An existing table's schema or layout differs from its spec in a non-additive way."""


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """Metadata of a table (``table``: no decorator; ``created``: UTC) and its ``rows``, or
    the partition's when asked with ``$YYYYMMDD``. No scan, 0 bytes billed."""

    table: str
    created: dt.datetime
    rows: int


class Warehouse(abc.ABC):
    """Tables and jobs. Backends: DuckDB (local) and BigQuery (production); subclasses call
    ``super().__init__()`` and implement the abstract methods."""

    def __init__(self) -> None:
        self._ensured: dict[str, TableSpec] = {}

    # -- tables ------------------------------------------------------------------------------

    def ensure_table(self, spec: TableSpec) -> None:
        """Create the table if missing, else check it against ``spec``; cached per fingerprint.

        Additive changes (new NULLABLE columns at the end, clustering, labels,
        ``require_partition_filter``) are patched; anything else raises.

        Raises:
            RuleViolation: if BigQuery would refuse ``spec`` (nothing is sent).
            SchemaMismatchError: if the table exists with an incompatible schema or layout.
            WarehouseError: if a create answered 409 but the table cannot be read back.
        """
        self.ensure_tables([spec])

    def ensure_tables(self, specs: Sequence[TableSpec]) -> None:
        """:meth:`ensure_table` of each spec; the missing tables are created together. Raises
        as :meth:`ensure_table` for the first spec that fails (nothing is created then), and
        ValueError if two specs of one table differ."""
        to_read: list[TableSpec] = []
        seen: dict[str, str] = {}
        for spec in specs:
            rules.check_table_spec(spec)
            fingerprint = spec.fingerprint()
            if spec.name in seen:
                if seen[spec.name] != fingerprint:
                    raise ValueError(f"two different specs of table {spec.name} in one call")
                continue
            seen[spec.name] = fingerprint
            cached = self._ensured.get(spec.name)
            if cached is None or cached.fingerprint() != fingerprint:
                to_read.append(spec)
        missing: list[TableSpec] = []
        existing_of = self._describe_tables([spec.name for spec in to_read]) if to_read else {}
        for spec in to_read:
            existing = existing_of[spec.name]
            if existing is None:
                missing.append(spec)
            else:
                self._check_existing(spec, existing)
        for spec in self._create_tables(missing):
            existing = self._describe_table(spec.name)
            if existing is None:
                raise WarehouseError(
                    f"table {spec.name} was reported to exist (409) but cannot be read; "
                    "is another process creating and deleting it?"
                )
            self._check_existing(spec, existing)

    def _create_tables(self, specs: Sequence[TableSpec]) -> list[TableSpec]:
        """Create each table of ``specs`` and mark it ensured; return the specs whose table
        another client created first (HTTP 409), for the caller to read back and check."""
        existed = []
        for spec in specs:
            try:
                self._create_table(spec)
            except TableExistsError:
                existed.append(spec)
                continue
            self._ensured[spec.name] = spec
        return existed

    def _check_existing(self, spec: TableSpec, existing: TableSpec) -> None:
        """Patch additive changes and mark it ensured; SchemaMismatchError if not additive."""
        diff = compare(existing, spec)
        if diff.errors:
            raise SchemaMismatchError(
                f"table {spec.name} does not match its spec: {'; '.join(diff.errors)}. Only "
                "new NULLABLE columns at the end (and clustering, labels, "
                "require_partition_filter) are applied automatically; migrate the table as "
                "docs/operations.md says under 'Schema changes that need a migration' (or "
                "restore the spec) and re-run. No job was submitted."
            )
        if diff.needs_patch:
            self._patch_table(spec, diff)
        self._ensured[spec.name] = spec

    def ensured_tables(self) -> list[str]:
        """Tables ensured (created, checked or patched) by this warehouse object, in order."""
        return list(self._ensured)

    def forget_table(self, table: str) -> None:
        """Drop ``table`` from the ensure cache (after it was dropped or expired)."""
        self._ensured.pop(table, None)

    def table_spec(self, table: str) -> TableSpec | None:
        """The spec of ``table``: as ensured in this run, else read back; None if missing."""
        return self._ensured.get(table) or self._describe_table(table)

    def table_specs(self, tables: Sequence[str]) -> dict[str, TableSpec | None]:
        """:meth:`table_spec` of each table, those not ensured read back together. Raises
        ValueError for a name the backend reserves."""
        specs: dict[str, TableSpec | None] = {}
        for table in tables:
            specs.setdefault(table, self._ensured.get(table))
        unknown = [table for table, spec in specs.items() if spec is None]
        if unknown:
            specs.update(self._describe_tables(unknown))
        return specs

    def table_exists(self, table: str) -> bool:
        """True if the table exists (a metadata read)."""
        return self.table_info(table) is not None

    def table_rows(self, table: str) -> int | None:
        """Rows in a table from metadata (no scan); None if the table does not exist."""
        info = self.table_info(table)
        return None if info is None else info.rows

    def tables_rows(self, tables: Sequence[str]) -> dict[str, int | None]:
        """:meth:`table_rows` of each table (or ``table$YYYYMMDD`` partition), each name once."""
        return {table: self.table_rows(table) for table in dict.fromkeys(tables)}

    def partition_rows(self, table: str, day: dt.date) -> int:
        """Rows of one day partition from metadata (no scan); 0 if table or partition is empty."""
        info = self.table_info(f"{table}${day:%Y%m%d}")
        return 0 if info is None else info.rows

    @abc.abstractmethod
    def table_info(self, destination: str) -> TableInfo | None:
        """Metadata of ``table`` or of ``table$YYYYMMDD`` (that partition's rows); None if the
        table does not exist. Bills 0 bytes: BigQuery ``tables.get``, never a query."""

    @abc.abstractmethod
    def _describe_table(self, table: str) -> TableSpec | None:
        """Read an existing table back as a spec (one metadata request); None if missing."""

    def _describe_tables(self, tables: Sequence[str]) -> dict[str, TableSpec | None]:
        """:meth:`_describe_table` of each table, each once."""
        return {table: self._describe_table(table) for table in dict.fromkeys(tables)}

    @abc.abstractmethod
    def _create_table(self, spec: TableSpec) -> None:
        """Create the table from ``spec``. Raises :class:`TableExistsError` on 409."""

    @abc.abstractmethod
    def _patch_table(self, spec: TableSpec, diff: SpecDifference) -> None:
        """Apply ``diff.added_columns`` and ``diff.patch_fields`` to the existing table."""

    # -- jobs --------------------------------------------------------------------------------

    def validate_job(self, job: Job) -> None:
        """Check ``job`` against BigQuery's rules (:func:`validate_job`) with the specs of its
        destination and sources as ensured in this run or read back."""
        specs = self.table_specs(job_tables(job))
        validate_job(job, specs.__getitem__)

    def submit_job(self, job: Job) -> JobStatus:
        """Validate ``job`` and submit it under its own ID; its status (maybe RUNNING). Raises
        RuleViolation if BigQuery would refuse it (nothing sent), JobConflictError on 409."""
        self.validate_job(job)
        return self._insert_job(job)

    @abc.abstractmethod
    def _insert_job(self, job: Job) -> JobStatus:
        """Send or run a validated job. Raises :class:`JobConflictError` on 409."""

    @abc.abstractmethod
    def get_job(self, job_id: str) -> JobStatus | None:
        """Look a job up by ID; None if no such job exists."""

    #: Whether a step paces its jobs into one table to the backend's table-update rate
    #: (:mod:`bq_platform.lib.publish.table_update_rate`); BigQuery's is a quota, a local
    #: backend has none.
    paces_table_updates: bool = False

    def get_existing_job(self, job_id: str) -> JobStatus | None:
        """:meth:`get_job` for a job that should exist: the ID was just inserted, or its insert
        answered 409. None means it is still not found: its ID is held by a job the backend
        no longer shows. This one answers at once; a backend whose lookups can lag behind its
        inserts (BigQuery) retries a miss for a while."""
        return self.get_job(job_id)

    @abc.abstractmethod
    def wait_job(self, job_id: str, timeout_s: float = 3600.0) -> JobStatus:
        """The job's status once DONE; TimeoutError if not DONE within ``timeout_s`` seconds."""

    @abc.abstractmethod
    def jobs_submitted(self, table: str, day: dt.date) -> int:
        """Jobs submitted with ``table`` as destination on UTC ``day`` (for budgets)."""

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobStatus | None]:
        """:meth:`get_job` of each ID, each once."""
        return {job_id: self.get_job(job_id) for job_id in dict.fromkeys(job_ids)}

    def jobs_submitted_to(self, tables: Sequence[str], day: dt.date) -> dict[str, int]:
        """:meth:`jobs_submitted` of each table, each once."""
        return {table: self.jobs_submitted(table, day) for table in dict.fromkeys(tables)}

    # -- publish ledger ----------------------------------------------------------------------

    def read_publish_record(self, destination: str, partition: str) -> PublishRecord | None:
        """The latest :class:`PublishRecord` for a destination partition, or None."""
        rules.check_table_name(destination)
        ensured = ledger.PUBLISH_LEDGER_TABLE in self._ensured  # exists: no metadata read
        if not ensured and self.table_info(ledger.PUBLISH_LEDGER_TABLE) is None:
            return None
        return ledger.latest(self._ledger_rows(destination, partition))

    def write_publish_records(self, records: Sequence[PublishRecord]) -> None:
        """Append ``records`` in one INSERT (none: nothing); each supersedes its partition's
        earlier rows. Raises ValueError if a ``published_at`` is naive (nothing is written)."""
        if not records:
            return
        for record in records:
            rules.check_table_name(record.destination)
        rows = [ledger.to_row(record) for record in records]
        self.ensure_table(ledger.publish_ledger_spec())
        self._append_ledger_rows(rows)

    @abc.abstractmethod
    def _ledger_rows(self, destination: str, partition: str) -> list[dict[str, Any]]:
        """Ledger rows of one destination partition (latest first if cheap), as dicts."""

    @abc.abstractmethod
    def _append_ledger_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append ledger rows in one INSERT statement (never a mutating statement)."""

    # -- audit -------------------------------------------------------------------------------

    @abc.abstractmethod
    def replace_audit_rows(
        self, hours: Sequence[dt.datetime], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Atomically replace ``pageviews_audit`` rows of ``hours`` (UTC) with ``rows``."""

    @abc.abstractmethod
    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        """``pageviews_audit`` rows with ``start <= hour < end`` (UTC), ordered by hour, site."""

    def audited_builds(self, start: dt.datetime, end: dt.datetime) -> set[tuple[dt.datetime, str]]:
        """``(hour, fingerprint)`` of the ``pageviews_audit`` rows with ``start <= hour < end``
        (UTC): which build each audited hour's rows come from."""
        return {(row["hour"], row["fingerprint"]) for row in self.audit_rows(start, end)}

    # -- published sample --------------------------------------------------------------------

    def published_sample_rows(self, first: dt.date, last: dt.date) -> list[dict[str, Any]]:
        """The ``pageviews_sample`` rows with ``first <= event_date <= last`` (UTC days), each a
        dict of :data:`SAMPLE_PREVIEW_COLUMNS` (``event_ts`` aware UTC, ``event_date`` a
        date), ordered by site, event_ts; empty if the table does not exist. Reads what is
        published, for the reclassification preview; the backends say what it costs.

        Raises:
            NotImplementedError: a warehouse that cannot read rows back.
            ValueError: ``last`` is before ``first``.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot read the published sample")

    # -- rollup checks -----------------------------------------------------------------------

    def compare_rollup(self, table: str, day: dt.date, human_class: str) -> RollupComparison:
        """Compare the ``table$YYYYMMDD`` partition of a daily rollup with the ``pageviews``
        rows of ``day`` (UTC) aggregated as the rollup defines it, ``human_class`` being the
        traffic class counted as human (:mod:`bq_platform.lib.warehouse.rollup_compare`); one
        read-only statement, the day a parameter.

        Raises:
            NotImplementedError: a warehouse that cannot run a query.
            ValueError: ``table`` is not a rollup table.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot compare rollups")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default does nothing."""
