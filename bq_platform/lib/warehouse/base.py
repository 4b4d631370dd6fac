"""The warehouse interface: BigQuery's job model, which the local DuckDB warehouse imitates.

The pipeline talks to a warehouse only through :class:`Warehouse`. What is the same for every
engine lives here, once:

- **ensure table**: the spec is checked against BigQuery's rules
  (:func:`bq_platform.lib.warehouse.rules.check_table_spec`), the existing table is read back
  as a spec and compared with :func:`bq_platform.lib.warehouse.compare.compare` (one
  comparison, BigQuery's), new NULLABLE columns and layout changes are patched, anything else
  raises :class:`SchemaMismatchError`; cached per table and spec fingerprint, so a run makes
  one metadata request per table (BigQuery allows ~5 metadata updates per 10 s per table:
  cloud.google.com/bigquery/quotas#standard_tables);
- **submit job**: every load and copy job (:mod:`.job_model`) is checked against BigQuery's
  rules with the specs of its destination and sources before it is sent or run
  (:meth:`Warehouse.validate_job`);
- **publish ledger**: append-only rows read back latest-wins (:mod:`.ledger`), so concurrent
  runs never run a mutating DML statement on it;
- **counts** come from metadata (:meth:`Warehouse.table_info`): no scan, 0 bytes billed.

A backend supplies only what differs between engines: reading, creating and patching a table,
inserting and looking up jobs, appending and reading ledger rows, the audit table's SQL.

Semantics every backend keeps (they are BigQuery's):

- a job ID is used once: submitting an existing ID raises :class:`JobConflictError` (HTTP 409);
- ``WRITE_TRUNCATE`` replaces the destination (a whole table, or one day partition when the
  destination has a partition decorator ``table$YYYYMMDD``) atomically: a failed job leaves it
  as it was;
- a write into ``table$YYYYMMDD`` fails if a row's partition column is another day.
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
from bq_platform.lib.warehouse.rules import RuleViolation
from bq_platform.lib.warehouse.schema import TableSpec

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


class SchemaMismatchError(WarehouseError):
    """An existing table's schema or layout differs from its spec in a non-additive way."""


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """Metadata of a table, or of one day partition of it (no scan, 0 bytes billed).

    Attributes:
        table: table name, without decorator.
        created: UTC creation time of the table.
        rows: rows in the table, or in the partition when asked with ``$YYYYMMDD``.
    """

    table: str
    created: dt.datetime
    rows: int


class Warehouse(abc.ABC):
    """Tables and jobs. Backends: DuckDB (local) and BigQuery (production).

    Subclasses call ``super().__init__()`` and implement the abstract methods; the rules, the
    schema comparison, the ensure cache and the publish ledger are this class's.
    """

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
        """:meth:`ensure_table` for each spec: one metadata read per table not ensured yet,
        then the missing tables are created together (:meth:`_create_tables`).

        Raises:
            RuleViolation / SchemaMismatchError: as :meth:`ensure_table`, for the first spec
                that fails; no missing table is created then.
            ValueError: if two specs name the same table but differ (a spec repeated as is,
                such as the published table of each day's copy, is ensured once).
        """
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
        """Create each table of ``specs`` (:meth:`_create_table`) and mark it ensured.

        Returns:
            The specs whose table another client created first (HTTP 409), for the caller to
            read back and check.
        """
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
        """Compare an existing table with ``spec``; patch additive changes, mark it ensured.

        Raises:
            SchemaMismatchError: if the difference is not additive.
        """
        diff = compare(existing, spec)
        if diff.errors:
            raise SchemaMismatchError(
                f"table {spec.name} does not match its spec: {'; '.join(diff.errors)}. Only "
                "new NULLABLE columns at the end (and clustering, labels, "
                "require_partition_filter) are applied automatically; migrate the table (or "
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
        """:meth:`table_spec` of each table (each name once), the ones not ensured in this run
        read back together (:meth:`_describe_tables`).

        Raises:
            ValueError: if a name is reserved by the backend (DuckDB's internal tables).
        """
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
        """:meth:`table_rows` of each table (or ``table$YYYYMMDD`` partition), each name once:
        one metadata request per table, or fewer where the backend can answer several at once
        (DuckDB: two statements)."""
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
        """:meth:`_describe_table` of each table, each once (one metadata request per table
        on BigQuery); a backend that can read several tables in one statement overrides it."""
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
        """Validate ``job`` (:meth:`validate_job`), then submit it with its own ID.

        Returns:
            Its status (it may still be running).

        Raises:
            RuleViolation: if BigQuery would refuse the job (nothing is sent).
            JobConflictError: if a job with this ID already exists.
        """
        self.validate_job(job)
        return self._insert_job(job)

    @abc.abstractmethod
    def _insert_job(self, job: Job) -> JobStatus:
        """Send or run a validated job. Raises :class:`JobConflictError` on 409."""

    @abc.abstractmethod
    def get_job(self, job_id: str) -> JobStatus | None:
        """Look a job up by ID; None if no such job exists."""

    @abc.abstractmethod
    def wait_job(self, job_id: str, timeout_s: float = 3600.0) -> JobStatus:
        """Block until the job is DONE (or ``timeout_s`` seconds pass) and return its status.

        Raises:
            TimeoutError: if the job is not DONE within ``timeout_s``.
        """

    @abc.abstractmethod
    def jobs_submitted(self, table: str, day: dt.date) -> int:
        """Jobs submitted with ``table`` as destination on UTC ``day`` (for budgets)."""

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobStatus | None]:
        """:meth:`get_job` of each ID, each once (one ``jobs.get`` each on BigQuery; DuckDB
        reads them in one statement)."""
        return {job_id: self.get_job(job_id) for job_id in dict.fromkeys(job_ids)}

    def jobs_submitted_to(self, tables: Sequence[str], day: dt.date) -> dict[str, int]:
        """:meth:`jobs_submitted` of each table, each once (DuckDB: one statement)."""
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
        """Append ``records`` to the ledger in one INSERT statement (nothing if empty); each
        supersedes earlier rows of its partition.

        A step's 24-72 stage loads record their content at once: on BigQuery one DML query job
        instead of one per load, locally one commit instead of one per load (issue 9).

        Raises:
            ValueError: if a ``published_at`` is naive (nothing is written).
        """
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
        (UTC): which build each audited hour's rows come from. This default reads the rows
        (:meth:`audit_rows`); DuckDB answers with one ``SELECT DISTINCT``."""
        return {(row["hour"], row["fingerprint"]) for row in self.audit_rows(start, end)}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default does nothing."""
