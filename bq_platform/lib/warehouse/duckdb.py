"""The local warehouse: BigQuery's tables and job model in one DuckDB file.

:class:`DuckDBWarehouse` implements :class:`~bq_platform.lib.warehouse.base.Warehouse` with
BigQuery's semantics, so the pipeline, its tests and a new user's first ``make run`` exercise
the same rules as production:

- **Tables** keep their production names (``pageviews``, ``pageviews_stage_YYYYMMDDHH``...)
  and BigQuery types mapped by :data:`DUCKDB_TYPES`; ``REQUIRED`` becomes ``NOT NULL``.
  ``TIMESTAMP`` is stored as ``TIMESTAMP WITH TIME ZONE`` and every connection runs with
  ``TimeZone = 'UTC'``, so values are instants and read back as UTC.
- **Layout.** DuckDB has no partitioning, clustering or expiration. Each table's
  ``partition_field``, clustering, ``require_partition_filter``, expiration and labels are kept
  in ``_bq_platform_tables`` (readable with :meth:`DuckDBWarehouse.describe_table`), and the
  *partition semantics are emulated by the job logic*: a ``table$YYYYMMDD`` destination
  replaces exactly the rows whose partition column is that day, and refuses rows of another
  day, as BigQuery does. Clustering and ``require_partition_filter`` are recorded, not enforced.
- **Jobs** run synchronously inside one DuckDB transaction each, so a failed job leaves the
  destination as it was (BigQuery's atomic ``WRITE_TRUNCATE``). Every job, failed or not, is
  a ``DONE`` row in the ledger ``_bq_platform_jobs``; reusing a job ID raises
  :class:`~bq_platform.lib.warehouse.base.JobConflictError` (BigQuery's HTTP 409).
- **Publish records** live in ``_bq_platform_published`` (one row per destination partition).

Concurrency: DuckDB lets one process at a time open a database file for writing. Every
operation opens a connection, does its work and closes it again, so a Dagster run, the
Dagster daemon and the CLI take turns. A locked file is retried with exponential backoff and
jitter for up to ``lock_timeout_s`` seconds (duckdb.org/docs/stable/connect/concurrency).
"""

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import random
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

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

DEFAULT_PATH = Path(".bq_platform/warehouse.duckdb")

#: BigQuery standard SQL type name -> DuckDB column type. ``TIMESTAMP`` is an instant in
#: both systems; DuckDB's ``TIMESTAMP`` (no time zone) is BigQuery's ``DATETIME``.
DUCKDB_TYPES: Mapping[str, str] = {
    "STRING": "VARCHAR",
    "BYTES": "BLOB",
    "INT64": "BIGINT",
    "INTEGER": "BIGINT",
    "FLOAT64": "DOUBLE",
    "FLOAT": "DOUBLE",
    "BOOL": "BOOLEAN",
    "BOOLEAN": "BOOLEAN",
    "TIMESTAMP": "TIMESTAMP WITH TIME ZONE",
    "DATETIME": "TIMESTAMP",
    "DATE": "DATE",
}

# DuckDB column type -> canonical BigQuery name, for reading a table's schema back.
_BIGQUERY_TYPES: Mapping[str, str] = {
    "VARCHAR": "STRING",
    "BLOB": "BYTES",
    "BIGINT": "INT64",
    "DOUBLE": "FLOAT64",
    "BOOLEAN": "BOOL",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMP",
    "TIMESTAMP": "DATETIME",
    "DATE": "DATE",
}

_TIMESTAMPS = frozenset(
    {"TIMESTAMP WITH TIME ZONE", "TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS"}
)
# Parquet column types (as DuckDB reads them) a load accepts per destination DuckDB type,
# following BigQuery's Parquet conversions (cloud.google.com/bigquery/docs/loading-data-
# cloud-storage-parquet#type_conversions): no string->number or string->date coercion.
_PARQUET_SOURCES: Mapping[str, frozenset[str]] = {
    "VARCHAR": frozenset({"VARCHAR"}),
    "BLOB": frozenset({"BLOB"}),
    "BIGINT": frozenset(
        {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"}
    ),
    "DOUBLE": frozenset({"FLOAT", "DOUBLE"}),
    "BOOLEAN": frozenset({"BOOLEAN"}),
    "TIMESTAMP WITH TIME ZONE": _TIMESTAMPS,
    "TIMESTAMP": _TIMESTAMPS,
    "DATE": frozenset({"DATE"}),
}

_ARROW_TYPES: Mapping[str, pa.DataType] = {
    "VARCHAR": pa.string(),
    "BLOB": pa.binary(),
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP": pa.timestamp("us"),
    "DATE": pa.date32(),
}

TABLES_TABLE = "_bq_platform_tables"
JOBS_TABLE = "_bq_platform_jobs"
PUBLISHED_TABLE = "_bq_platform_published"
_INTERNAL_PREFIX = "_bq_platform_"

_INTERNAL_DDL = (
    f"""CREATE TABLE IF NOT EXISTS {TABLES_TABLE} (
        table_name VARCHAR PRIMARY KEY,
        fingerprint VARCHAR NOT NULL,
        partition_field VARCHAR,
        clustering JSON NOT NULL,
        require_partition_filter BOOLEAN NOT NULL,
        expiration_days INTEGER,
        expires_at TIMESTAMP WITH TIME ZONE,
        labels JSON NOT NULL,
        description VARCHAR NOT NULL,
        created_at TIMESTAMP WITH TIME ZONE NOT NULL,
        updated_at TIMESTAMP WITH TIME ZONE NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {JOBS_TABLE} (
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
        finished_at TIMESTAMP WITH TIME ZONE)""",
    f"""CREATE TABLE IF NOT EXISTS {PUBLISHED_TABLE} (
        destination VARCHAR NOT NULL,
        "partition" VARCHAR NOT NULL,
        job_id VARCHAR NOT NULL,
        fingerprint VARCHAR NOT NULL,
        "rows" BIGINT NOT NULL,
        published_at TIMESTAMP WITH TIME ZONE NOT NULL,
        PRIMARY KEY (destination, "partition"))""",
)

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,1023}$")
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9_\-]{1,1024}$")
_GLOB_CHARS = frozenset("*?[")
_LOCK_MARKERS = ("Could not set lock", "Conflicting lock")
_READ_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})

# BigQuery error reasons (cloud.google.com/bigquery/docs/error-messages).
INVALID = "invalid"
NOT_FOUND = "notFound"
DUPLICATE = "duplicate"
ACCESS_DENIED = "accessDenied"
INTERNAL_ERROR = "internalError"

_INVALID_ERRORS: tuple[type[Exception], ...] = (
    duckdb.BinderException,
    duckdb.ConstraintException,
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.OutOfRangeException,
    duckdb.ParserException,
    duckdb.TypeMismatchException,
)


class _JobError(Exception):
    """A job failed for a reason we detected ourselves; carries BigQuery's error reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class _Layout:
    """One ``_bq_platform_tables`` row: what DuckDB cannot store on the table itself."""

    partition_field: str | None
    clustering: tuple[str, ...]
    require_partition_filter: bool
    expiration_days: int | None
    labels: Mapping[str, str]
    description: str


def _ident(name: str) -> str:
    """Quote a validated identifier (table or column name) for SQL.

    Raises:
        ValueError: if ``name`` is not a BigQuery-style name (``[A-Za-z_][A-Za-z0-9_]*``).
    """
    if not _NAME_RE.match(name):
        raise ValueError(f"not a valid table or column name: {name!r}")
    return f'"{name}"'


def _duckdb_type(column: Column) -> str:
    try:
        return DUCKDB_TYPES[column.type.upper()]
    except KeyError:
        raise ValueError(
            f"column {column.name!r} has BigQuery type {column.type!r}, which the DuckDB "
            f"warehouse does not map; supported: {', '.join(sorted(DUCKDB_TYPES))}"
        ) from None


def _not_null(column: Column) -> bool:
    mode = column.mode.upper()
    if mode not in {"NULLABLE", "REQUIRED"}:
        raise ValueError(f"column {column.name!r}: mode {column.mode!r} is not supported")
    return mode == "REQUIRED"


def _column_ddl(column: Column) -> str:
    return f"{_ident(column.name)} {_duckdb_type(column)}" + (
        " NOT NULL" if _not_null(column) else ""
    )


def _layout_of(spec: TableSpec) -> _Layout:
    return _Layout(
        partition_field=spec.partition_field,
        clustering=tuple(spec.clustering),
        require_partition_filter=spec.require_partition_filter,
        expiration_days=spec.expiration_days,
        labels=dict(spec.labels),
        description=spec.description,
    )


def _utc(value: Any) -> Any:
    """Aware datetimes (DuckDB returns pytz zones) -> ``datetime.UTC``; anything else as is."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def _require_aware(value: dt.datetime, what: str) -> dt.datetime:
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise ValueError(f"{what} must be a timezone-aware datetime (UTC), got {value!r}")
    return value.astimezone(dt.UTC)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _is_lock_error(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.IOException) and any(m in str(exc) for m in _LOCK_MARKERS)


def _classify(exc: BaseException) -> tuple[str, str]:
    """Map an exception raised inside a job to (BigQuery error reason, message)."""
    if isinstance(exc, _JobError):
        return exc.reason, str(exc)
    message = str(exc).split("\n\nLINE ", 1)[0].strip()
    if isinstance(exc, duckdb.IOException) and "No files found" in message:
        return NOT_FOUND, message
    if isinstance(exc, duckdb.CatalogException):
        return NOT_FOUND, message
    if isinstance(exc, duckdb.PermissionException):
        return ACCESS_DENIED, message
    if isinstance(exc, _INVALID_ERRORS):
        return INVALID, message
    return INTERNAL_ERROR, f"{type(exc).__name__}: {message}"


class DuckDBWarehouse(Warehouse):
    """BigQuery's table and job semantics in one local DuckDB file.

    Args:
        path: the database file (the project default is ``.bq_platform/warehouse.duckdb``);
            its parent folder is created if missing. ``:memory:`` is refused: every
            operation opens its own connection, and an in-memory database would not outlive it.
        lock_timeout_s: how long to keep retrying, in seconds, while another process holds
            the file's write lock, before raising :class:`WarehouseError`.

    Attributes:
        path: absolute path of the database file.
        metadata_operations: table-metadata round trips made by :meth:`ensure_table` (reads,
            creates, alters), 1 per table and schema per instance; cached calls add 0. The
            counterpart of BigQuery's ~5 metadata updates per 10 s per table quota.
    """

    def __init__(self, path: str | Path = DEFAULT_PATH, *, lock_timeout_s: float = 120.0) -> None:
        if str(path) == ":memory:":
            raise ValueError("DuckDBWarehouse needs a file path; ':memory:' is not supported")
        self.path = Path(path).expanduser().resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock_timeout_s = lock_timeout_s
        self.metadata_operations = 0
        self._ensured: dict[str, str] = {}  # spec fingerprint -> table name
        self._lock = threading.RLock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._internal_ready = False

    def __repr__(self) -> str:
        return f"DuckDBWarehouse({str(self.path)!r})"

    # ----------------------------------------------------------------- connections

    def _open(self) -> duckdb.DuckDBPyConnection:
        """Open the file, retrying while another process holds its lock.

        Raises:
            WarehouseError: if the lock is still held after ``lock_timeout_s`` seconds, or
                the file cannot be opened at all.
        """
        deadline = time.monotonic() + self.lock_timeout_s
        delay_s = 0.05
        waited = False
        while True:
            try:
                return duckdb.connect(str(self.path))
            except duckdb.Error as exc:
                if not _is_lock_error(exc):
                    raise WarehouseError(
                        f"cannot open the DuckDB warehouse {self.path}: {exc}"
                    ) from exc
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WarehouseError(
                        f"the DuckDB warehouse {self.path} is locked by another process (for "
                        f"example `dagster dev` materializing assets, or another bq-platform "
                        f"run) and stayed locked for {self.lock_timeout_s:.0f} s. DuckDB "
                        "allows one writing process per file: wait for that run to finish or "
                        "stop it, then retry (or use a longer lock_timeout_s). DuckDB said: "
                        f"{exc}"
                    ) from exc
                if not waited:
                    log.info("DuckDB warehouse %s is locked by another process; waiting", self.path)
                    waited = True
                # Exponential backoff with "equal jitter": half fixed, half random.
                time.sleep(min(remaining, delay_s / 2 + random.uniform(0, delay_s / 2)))
                delay_s = min(delay_s * 2, 5.0)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The instance's connection, in UTC, with the internal tables present.

        The file is opened on first use and kept open until :meth:`close` (a Dagster run
        closes it in the resource's teardown): opening a DuckDB file costs 10-40 ms, and a
        day's stage loads make hundreds of operations. While it is open, other processes
        cannot write the file; they wait (see :meth:`_open`).
        """
        with self._lock:
            if self._con is None:
                con = self._open()
                # Session setting: TIMESTAMPTZ -> DATE casts, naive parameters and returned
                # values all use it; the default is the machine's local zone.
                con.execute("SET TimeZone = 'UTC'")
                if not self._internal_ready:
                    for ddl in _INTERNAL_DDL:
                        con.execute(ddl)
                    self._internal_ready = True
                self._con = con
            yield self._con

    def close(self) -> None:
        """Close the connection and release the file for other processes (idempotent)."""
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection inside ``BEGIN``; committed on success, rolled back on any error."""
        with self._connect() as con:
            con.begin()
            try:
                yield con
            except BaseException:
                _rollback(con)
                raise
            con.commit()

    # ----------------------------------------------------------------- catalog helpers

    @staticmethod
    def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str, bool]]:
        """``(name, duckdb type, nullable)`` of ``table``'s columns in order; [] if missing."""
        return [
            (name, data_type, bool(nullable))
            for name, data_type, nullable in con.execute(
                "SELECT column_name, data_type, is_nullable FROM duckdb_columns() "
                "WHERE database_name = current_database() AND schema_name = 'main' "
                "AND table_name = ? ORDER BY column_index",
                [table],
            ).fetchall()
        ]

    @staticmethod
    def _exists(con: duckdb.DuckDBPyConnection, table: str) -> bool:
        row = con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND table_name = ?",
            [table],
        ).fetchone()
        return bool(row and row[0])

    @staticmethod
    def _layout(con: duckdb.DuckDBPyConnection, table: str) -> _Layout | None:
        row = con.execute(
            f"SELECT partition_field, clustering, require_partition_filter, expiration_days, "
            f"labels, description FROM {TABLES_TABLE} WHERE table_name = ?",
            [table],
        ).fetchone()
        if row is None:
            return None
        return _Layout(
            partition_field=row[0],
            clustering=tuple(json.loads(row[1])),
            require_partition_filter=bool(row[2]),
            expiration_days=row[3],
            labels=json.loads(row[4]),
            description=row[5],
        )

    @staticmethod
    def _write_layout(con: duckdb.DuckDBPyConnection, spec: TableSpec, *, replace: bool) -> None:
        """Insert (or with ``replace``, update) the table's layout row from ``spec``.

        ``expires_at`` is counted from the table's first creation, as BigQuery's
        ``expirationTime`` set from a default table expiration.
        """
        now = _now()
        conflict = (
            "DO UPDATE SET fingerprint = excluded.fingerprint, "
            "partition_field = excluded.partition_field, clustering = excluded.clustering, "
            "require_partition_filter = excluded.require_partition_filter, "
            "expiration_days = excluded.expiration_days, "
            f"expires_at = CASE WHEN excluded.expiration_days IS NULL THEN NULL ELSE "
            f"{TABLES_TABLE}.created_at + to_days(excluded.expiration_days) END, "
            "labels = excluded.labels, description = excluded.description, "
            "updated_at = excluded.updated_at"
            if replace
            else "DO NOTHING"
        )
        con.execute(
            f"INSERT INTO {TABLES_TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            f"ON CONFLICT (table_name) {conflict}",
            [
                spec.name,
                spec.fingerprint(),
                spec.partition_field,
                json.dumps(list(spec.clustering)),
                spec.require_partition_filter,
                spec.expiration_days,
                None
                if spec.expiration_days is None
                else now + dt.timedelta(days=spec.expiration_days),
                json.dumps(dict(sorted(spec.labels.items()))),
                spec.description,
                now,
                now,
            ],
        )

    def _create_table(self, con: duckdb.DuckDBPyConnection, spec: TableSpec, verb: str) -> None:
        """``CREATE [OR REPLACE] TABLE`` from ``spec`` (``verb`` is the statement's head)."""
        columns = ", ".join(_column_ddl(c) for c in spec.columns)
        con.execute(f"{verb} {_ident(spec.name)} ({columns})")

    # ----------------------------------------------------------------- tables

    def ensure_table(self, spec: TableSpec) -> None:
        """Create ``spec``'s table if missing, else check it; cached per spec fingerprint.

        Additive changes are applied: NULLABLE columns missing from the table are added
        (``ALTER TABLE ADD COLUMN``, at the end, as BigQuery appends them), and changed
        clustering, labels, expiration or ``require_partition_filter`` are recorded (BigQuery
        can update those with ``tables.patch``). Each uncached call is one metadata round trip
        (:attr:`metadata_operations`); repeated calls with the same spec touch nothing.

        Raises:
            SchemaMismatchError: naming the table, column and difference, if a column was
                removed, changed type or mode, a REQUIRED column is new, or the partition
                field changed; none of these can be applied in place in BigQuery.
            ValueError: if the spec uses a type or mode this warehouse does not map.
        """
        fingerprint = spec.fingerprint()
        with self._lock:
            if fingerprint in self._ensured:
                return
        self._check_user_table(spec.name)
        for column in spec.columns:
            _column_ddl(column)  # validate names, types and modes before touching the file
        with self._transaction() as con:
            with self._lock:
                self.metadata_operations += 1
            self._ensure_in(con, spec)
        with self._lock:
            self._ensured[fingerprint] = spec.name

    def _ensure_in(self, con: duckdb.DuckDBPyConnection, spec: TableSpec) -> None:
        existing = self._columns(con, spec.name)
        if not existing:
            self._create_table(con, spec, "CREATE TABLE")
            self._write_layout(con, spec, replace=True)
            log.info("created table %s (%d columns)", spec.name, len(spec.columns))
            return
        have = {name: (data_type, nullable) for name, data_type, nullable in existing}
        want = {c.name: c for c in spec.columns}
        problems: list[str] = []
        for name in have:
            if name not in want:
                problems.append(f"column {name!r} is in the table but not in the spec (removed)")
        additions: list[Column] = []
        for column in spec.columns:
            expected_type = _duckdb_type(column)
            if column.name not in have:
                if _not_null(column):
                    problems.append(
                        f"column {column.name!r} is new and REQUIRED; only NULLABLE columns "
                        "can be added to an existing table"
                    )
                else:
                    additions.append(column)
                continue
            data_type, nullable = have[column.name]
            if data_type != expected_type:
                problems.append(
                    f"column {column.name!r} is {data_type} in the table, the spec wants "
                    f"{column.type} ({expected_type})"
                )
            if nullable == _not_null(column):
                problems.append(
                    f"column {column.name!r} is {'NULLABLE' if nullable else 'REQUIRED'} in "
                    f"the table, the spec wants {column.mode.upper()}"
                )
        layout = self._layout(con, spec.name)
        if layout is not None and layout.partition_field != spec.partition_field:
            problems.append(
                f"partition field is {layout.partition_field!r}, the spec wants "
                f"{spec.partition_field!r} (partitioning cannot change in place)"
            )
        if problems:
            raise SchemaMismatchError(
                f"table {spec.name!r} does not match its spec: {'; '.join(problems)}. Revert "
                "the spec, or migrate: create a new table and copy the data into it."
            )
        for column in additions:
            con.execute(f"ALTER TABLE {_ident(spec.name)} ADD COLUMN {_column_ddl(column)}")
            log.info("table %s: added NULLABLE column %s %s", spec.name, column.name, column.type)
        if layout is None or layout != _layout_of(spec):
            self._write_layout(con, spec, replace=True)
            if layout is not None:
                log.info("table %s: updated layout metadata to %s", spec.name, _layout_of(spec))

    @staticmethod
    def _check_user_table(table: str) -> None:
        _ident(table)
        if table.startswith(_INTERNAL_PREFIX):
            raise ValueError(f"table names starting with {_INTERNAL_PREFIX!r} are reserved")

    def table_exists(self, table: str) -> bool:
        """True if the table exists."""
        _ident(table)
        with self._connect() as con:
            return self._exists(con, table)

    def table_rows(self, table: str) -> int | None:
        """Rows in ``table`` (``count(*)``, cheap in DuckDB); None if the table does not exist."""
        with self._connect() as con:
            if not self._exists(con, table):
                return None
            row = con.execute(f"SELECT count(*) FROM {_ident(table)}").fetchone()
        return int(row[0]) if row else 0

    def partition_rows(self, table: str, day: dt.date) -> int:
        """Rows of ``table`` whose partition column is ``day``; 0 if the table is missing.

        BigQuery reads this from ``INFORMATION_SCHEMA.PARTITIONS`` (no scan); locally a
        filtered ``count(*)`` is just as cheap.

        Raises:
            WarehouseError: if the table is not day-partitioned.
        """
        with self._connect() as con:
            if not self._exists(con, table):
                return 0
            field = self._partition_field(con, table)
            if field is None:
                raise WarehouseError(f"table {table!r} is not partitioned; use table_rows()")
            row = con.execute(
                f"SELECT count(*) FROM {_ident(table)} WHERE {_ident(field)} = ?", [day]
            ).fetchone()
        return int(row[0]) if row else 0

    def _partition_field(self, con: duckdb.DuckDBPyConnection, table: str) -> str | None:
        layout = self._layout(con, table)
        return layout.partition_field if layout else None

    def describe_table(self, table: str) -> TableSpec | None:
        """Read a table's spec back: columns in BigQuery types and modes, plus its layout.

        For a table created by :meth:`ensure_table` from ``spec`` (and not changed since),
        ``describe_table(spec.name).fingerprint() == spec.fingerprint()``.

        Returns:
            The :class:`TableSpec`, or None if the table does not exist.
        """
        with self._connect() as con:
            return self._spec_of(con, table)

    def _spec_of(self, con: duckdb.DuckDBPyConnection, table: str) -> TableSpec | None:
        columns = self._columns(con, table)
        if not columns:
            return None
        layout = self._layout(con, table) or _Layout(None, (), False, None, {}, "")
        return TableSpec(
            name=table,
            columns=tuple(
                Column(
                    name,
                    _BIGQUERY_TYPES.get(data_type, data_type),
                    "NULLABLE" if nullable else "REQUIRED",
                )
                for name, data_type, nullable in columns
            ),
            partition_field=layout.partition_field,
            clustering=layout.clustering,
            require_partition_filter=layout.require_partition_filter,
            expiration_days=layout.expiration_days,
            labels=dict(layout.labels),
            description=layout.description,
        )

    def drop_expired_tables(self, now: dt.datetime | None = None) -> list[str]:
        """Drop tables whose expiration passed (stage tables), as BigQuery does by itself.

        Args:
            now: the current time (UTC, aware); defaults to the clock.

        Returns:
            Names of the dropped tables, sorted.
        """
        now = _require_aware(now, "now") if now is not None else _now()
        with self._transaction() as con:
            expired = [
                name
                for (name,) in con.execute(
                    f"SELECT table_name FROM {TABLES_TABLE} WHERE expires_at <= ? "
                    "ORDER BY table_name",
                    [now],
                ).fetchall()
            ]
            for name in expired:
                con.execute(f"DROP TABLE IF EXISTS {_ident(name)}")
                con.execute(f"DELETE FROM {TABLES_TABLE} WHERE table_name = ?", [name])
        with self._lock:
            self._ensured = {fp: t for fp, t in self._ensured.items() if t not in expired}
        if expired:
            log.info("dropped %d expired tables: %s", len(expired), ", ".join(expired))
        return expired

    # ----------------------------------------------------------------- jobs

    def get_job(self, job_id: str) -> JobStatus | None:
        """Look a job up in the ledger; None if no job has this ID."""
        with self._connect() as con:
            row = con.execute(
                f"SELECT job_id, state, error_reason, error_message, output_rows, labels "
                f"FROM {JOBS_TABLE} WHERE job_id = ?",
                [job_id],
            ).fetchone()
        if row is None:
            return None
        return JobStatus(
            job_id=row[0],
            state=row[1],
            error_reason=row[2],
            error_message=row[3],
            output_rows=row[4],
            labels=json.loads(row[5]),
        )

    def submit_job(self, job: Job) -> JobStatus:
        """Run a load or copy job synchronously and record it; return its DONE status.

        The job's data change and its ledger row commit in one transaction. If the job fails,
        the transaction is rolled back (the destination is unchanged) and a DONE ledger row
        with ``error_reason`` is recorded: ``invalid`` (bad input, schema, rows outside the
        decorated partition, no sources), ``notFound`` (missing files or tables),
        ``duplicate`` (``WRITE_EMPTY`` into a non-empty destination) or ``internalError``.
        A failed job is returned, not raised; :mod:`bq_platform.lib.jobs` decides.

        Raises:
            JobConflictError: if a job with this ID exists already (HTTP 409).
            ValueError: if the job ID is not ``[A-Za-z0-9_-]{1,1024}`` (BigQuery's rule).
            WarehouseError: if the file stays locked (see ``lock_timeout_s``) or the ledger
                cannot be written.
        """
        if not _JOB_ID_RE.match(job.job_id):
            raise ValueError(f"invalid job ID {job.job_id!r}: use [A-Za-z0-9_-], <= 1024 chars")
        kind = "load" if isinstance(job, LoadJob) else "copy"
        created_at = _now()
        with self._connect() as con:
            if self._job_exists(con, job.job_id):
                raise JobConflictError(
                    f"job {job.job_id} already exists (409 duplicate); look it up instead"
                )
            con.begin()
            try:
                table, day = self._destination(job.destination)
                if isinstance(job, LoadJob):
                    rows = self._run_load(con, job, table, day)
                else:
                    rows = self._run_copy(con, job, table, day)
                status = self._record_job(
                    con, job, kind, created_at, output_rows=rows, reason=None, message=None
                )
                con.commit()
            except JobConflictError:
                _rollback(con)
                raise
            except Exception as exc:  # every failure becomes a failed job, as in BigQuery
                _rollback(con)
                reason, message = _classify(exc)
                log.warning(
                    "%s job %s -> %s failed: %s: %s",
                    kind,
                    job.job_id,
                    job.destination,
                    reason,
                    message,
                    exc_info=exc if reason == INTERNAL_ERROR else None,
                )
                status = self._record_job(
                    con,
                    job,
                    kind,
                    created_at,
                    output_rows=None,
                    reason=reason,
                    message=f"{kind} job {job.job_id} -> {job.destination}: {message}",
                )
                return status
        log.info("%s job %s -> %s: %d rows", kind, job.job_id, job.destination, rows)
        return status

    def wait_job(self, job_id: str, timeout_s: float = 3600.0) -> JobStatus:
        """Return the job's status; local jobs are synchronous, so it is already DONE.

        Raises:
            WarehouseError: if no job has this ID.
            TimeoutError: if the job is not DONE within ``timeout_s`` seconds (cannot happen
                for jobs this class ran; kept for the interface).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.get_job(job_id)
            if status is None:
                raise WarehouseError(f"no job {job_id!r} in the warehouse's job ledger")
            if status.done:
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {status.state} after {timeout_s} s")
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def jobs_submitted(self, table: str, day: dt.date) -> int:
        """Jobs (failed ones too, as BigQuery counts them) with destination ``table`` that
        were created on UTC ``day``, from the ledger."""
        start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
        with self._connect() as con:
            row = con.execute(
                f"SELECT count(*) FROM {JOBS_TABLE} WHERE destination = ? "
                "AND created_at >= ? AND created_at < ?",
                [table, start, start + dt.timedelta(days=1)],
            ).fetchone()
        return int(row[0]) if row else 0

    @staticmethod
    def _job_exists(con: duckdb.DuckDBPyConnection, job_id: str) -> bool:
        sql = f"SELECT count(*) FROM {JOBS_TABLE} WHERE job_id = ?"
        row = con.execute(sql, [job_id]).fetchone()
        return bool(row and row[0])

    def _destination(self, destination: str) -> tuple[str, dt.date | None]:
        try:
            table, day = split_decorator(destination)
            self._check_user_table(table)
        except ValueError as exc:
            raise _JobError(INVALID, str(exc)) from exc
        return table, day

    def _record_job(
        self,
        con: duckdb.DuckDBPyConnection,
        job: Job,
        kind: str,
        created_at: dt.datetime,
        *,
        output_rows: int | None,
        reason: str | None,
        message: str | None,
    ) -> JobStatus:
        """Insert the job's DONE ledger row (inside the caller's transaction, if any).

        ``destination`` is the table without decorator; ``partition`` the decorator's
        ``YYYYMMDD``, else the job's ``partition`` label, else ``""``.
        """
        match = re.match(r"^[^$]*\$(\d{8})$", job.destination)
        partition = match[1] if match else str(job.labels.get("partition", ""))
        labels = dict(sorted(job.labels.items()))
        try:
            con.execute(
                f"INSERT INTO {JOBS_TABLE} VALUES (?, ?, ?, ?, 'DONE', ?, ?, ?, ?, ?, ?)",
                [
                    job.job_id,
                    kind,
                    job.destination.split("$", 1)[0],
                    partition,
                    reason,
                    message,
                    output_rows,
                    json.dumps(labels),
                    created_at,
                    _now(),
                ],
            )
        except duckdb.ConstraintException as exc:
            raise JobConflictError(f"job {job.job_id} already exists (409 duplicate)") from exc
        except duckdb.Error as exc:
            raise WarehouseError(f"cannot record job {job.job_id} in the ledger: {exc}") from exc
        return JobStatus(
            job_id=job.job_id,
            state="DONE",
            error_reason=reason,
            error_message=message,
            output_rows=output_rows,
            labels=labels,
        )

    # ----------------------------------------------------------------- load jobs

    def _run_load(
        self, con: duckdb.DuckDBPyConnection, job: LoadJob, table: str, day: dt.date | None
    ) -> int:
        """Load the job's Parquet files; return the rows it wrote. Raises on any failure."""
        spec = job.spec
        if spec.name != table:
            raise _JobError(INVALID, f"destination {table!r} is not the spec's table {spec.name!r}")
        source_sql, params = self._parquet_source(con, job)
        layout = self._layout(con, table)
        if layout is not None and layout.partition_field != spec.partition_field:
            raise _JobError(
                INVALID,
                f"incompatible table partitioning: {table} is partitioned on "
                f"{layout.partition_field!r}, the job's spec on {spec.partition_field!r}",
            )
        columns = ", ".join(_ident(c.name) for c in spec.columns)
        insert = f"INSERT INTO {_ident(table)} ({columns}) {source_sql}"
        if day is None:
            if job.write_disposition == "WRITE_TRUNCATE":
                # Replaces data and schema, as a BigQuery WRITE_TRUNCATE load does.
                self._create_table(con, spec, "CREATE OR REPLACE TABLE")
            else:
                self._create_table(con, spec, "CREATE TABLE IF NOT EXISTS")
                if job.write_disposition == "WRITE_EMPTY":
                    self._require_empty(con, table, None, None)
            self._write_layout(con, spec, replace=False)
            return _count(con.execute(insert, params))
        field = spec.partition_field
        if field is None:
            raise _JobError(
                INVALID,
                f"{job.destination}: table {table} is not partitioned, so it takes no "
                "$YYYYMMDD decorator",
            )
        self._create_table(con, spec, "CREATE TABLE IF NOT EXISTS")
        self._write_layout(con, spec, replace=False)
        self._check_one_day(con, source_sql, params, field, day, f"the files of job {job.job_id}")
        self._apply_partition_write(con, job.write_disposition, table, field, day)
        return _count(con.execute(insert, params))

    def _parquet_source(
        self, con: duckdb.DuckDBPyConnection, job: LoadJob
    ) -> tuple[str, list[Any]]:
        """A ``SELECT`` of the spec's columns, cast, from the job's Parquet files.

        Each file's schema is checked first (BigQuery's Parquet type rules), so an error names
        the file and column. Columns missing from every file load as NULL if NULLABLE.
        """
        if not job.source_uris:
            raise _JobError(INVALID, "the load job has no source URIs")
        paths: list[str] = []
        for uri in job.source_uris:
            if "://" in uri and not uri.startswith("file://"):
                raise _JobError(
                    INVALID,
                    f"{uri}: the local DuckDB warehouse loads local files only (use the "
                    "BigQuery warehouse for gs:// URIs)",
                )
            path = uri.removeprefix("file://")
            if not _GLOB_CHARS.intersection(path) and not Path(path).is_file():
                raise _JobError(NOT_FOUND, f"Not found: URI {uri}")
            paths.append(path)
        present: set[str] = set()
        for path in paths:
            described = con.execute(
                "DESCRIBE SELECT * FROM read_parquet(?, hive_partitioning = false)", [path]
            ).fetchall()
            types = {row[0]: row[1] for row in described}
            for column in job.spec.columns:
                target = _duckdb_type(column)
                if column.name not in types:
                    if _not_null(column):
                        raise _JobError(
                            INVALID,
                            f"{path}: column {column.name!r} is missing and REQUIRED in "
                            f"{job.spec.name}",
                        )
                    continue
                if types[column.name] not in _PARQUET_SOURCES[target]:
                    raise _JobError(
                        INVALID,
                        f"{path}: column {column.name!r} has type {types[column.name]}, which "
                        f"cannot be loaded into {column.type} column of {job.spec.name}",
                    )
                present.add(column.name)
        select = ", ".join(
            f"CAST({_ident(c.name)} AS {_duckdb_type(c)}) AS {_ident(c.name)}"
            if c.name in present
            else f"CAST(NULL AS {_duckdb_type(c)}) AS {_ident(c.name)}"
            for c in job.spec.columns
        )
        # hive_partitioning off: DuckDB would otherwise add (or override!) columns from
        # "key=value" folders such as hour=1995-08-01T04/. union_by_name on: without it,
        # DuckDB takes the first file's schema and silently drops other files' columns.
        return (
            f"SELECT {select} FROM read_parquet(?, hive_partitioning = false, "
            "union_by_name = true)",
            [paths],
        )

    # ----------------------------------------------------------------- copy jobs

    def _run_copy(
        self, con: duckdb.DuckDBPyConnection, job: CopyJob, table: str, day: dt.date | None
    ) -> int:
        """Copy the job's source tables into the destination; return the rows written."""
        if not job.sources:
            raise _JobError(INVALID, "the copy job has no source tables")
        selects: list[tuple[str, str, list[Any]]] = []  # (source, SELECT, its parameters)
        for source in job.sources:
            src_table, src_day = self._destination(source)
            if not self._exists(con, src_table):
                raise _JobError(NOT_FOUND, f"Not found: Table {src_table}")
            if src_day is None:
                selects.append((source, f"SELECT * FROM {_ident(src_table)}", []))
                continue
            src_field = self._partition_field(con, src_table)
            if src_field is None:
                raise _JobError(INVALID, f"source {source}: {src_table} is not partitioned")
            selects.append(
                (
                    source,
                    f"SELECT * FROM {_ident(src_table)} WHERE {_ident(src_field)} = ?",
                    [src_day],
                )
            )
        exists = self._exists(con, table)
        if day is None:
            if not exists:
                self._create_like(con, table, self._destination(job.sources[0])[0])
            elif job.write_disposition == "WRITE_TRUNCATE":
                con.execute(f"DELETE FROM {_ident(table)}")
            elif job.write_disposition == "WRITE_EMPTY":
                self._require_empty(con, table, None, None)
        else:
            if not exists:
                raise _JobError(
                    NOT_FOUND, f"Not found: Table {table} (create it with ensure_table first)"
                )
            field = self._partition_field(con, table)
            if field is None:
                raise _JobError(
                    INVALID,
                    f"{job.destination}: table {table} is not partitioned, so it takes no "
                    "$YYYYMMDD decorator",
                )
            for source, select, params in selects:
                self._check_one_day(con, select, params, field, day, f"source {source}")
            self._apply_partition_write(con, job.write_disposition, table, field, day)
        union = " UNION ALL BY NAME ".join(select for _, select, _ in selects)
        params = [p for _, _, select_params in selects for p in select_params]
        return _count(con.execute(f"INSERT INTO {_ident(table)} BY NAME {union}", params))

    def _create_like(self, con: duckdb.DuckDBPyConnection, table: str, source: str) -> None:
        """Create ``table`` with ``source``'s columns, partitioning and clustering (a copy
        into a new table); labels, expiration and description are not copied."""
        spec = self._spec_of(con, source)
        assert spec is not None, source  # the caller checked that every source exists
        spec = dataclasses.replace(
            spec, name=table, expiration_days=None, labels={}, description=""
        )
        self._create_table(con, spec, "CREATE TABLE")
        self._write_layout(con, spec, replace=False)

    # ----------------------------------------------------------------- partition helpers

    @staticmethod
    def _check_one_day(
        con: duckdb.DuckDBPyConnection,
        select: str,
        params: Sequence[Any],
        field: str,
        day: dt.date,
        what: str,
    ) -> None:
        """Refuse rows whose partition column is not ``day`` (BigQuery rejects the job)."""
        row = con.execute(
            f"SELECT count(*), CAST(min({_ident(field)}) AS VARCHAR) FROM ({select}) "
            f"WHERE {_ident(field)} IS DISTINCT FROM ?",
            [*params, day],
        ).fetchone()
        if row and row[0]:
            raise _JobError(
                INVALID,
                f"{what} has {row[0]} rows whose {field} is not {day.isoformat()} (e.g. "
                f"{row[1] or 'NULL'}); a write into partition ${day:%Y%m%d} may only hold "
                "that day's rows",
            )

    def _apply_partition_write(
        self,
        con: duckdb.DuckDBPyConnection,
        disposition: str,
        table: str,
        field: str,
        day: dt.date,
    ) -> None:
        """Prepare one day partition for the insert: empty it (TRUNCATE) or check it (EMPTY)."""
        if disposition == "WRITE_TRUNCATE":
            con.execute(f"DELETE FROM {_ident(table)} WHERE {_ident(field)} = ?", [day])
        elif disposition == "WRITE_EMPTY":
            self._require_empty(con, table, field, day)

    @staticmethod
    def _require_empty(
        con: duckdb.DuckDBPyConnection, table: str, field: str | None, day: dt.date | None
    ) -> None:
        where, params = ("", []) if field is None else (f" WHERE {_ident(field)} = ?", [day])
        row = con.execute(f"SELECT count(*) FROM {_ident(table)}{where}", params).fetchone()
        if row and row[0]:
            target = table if day is None else f"{table}${day:%Y%m%d}"
            raise _JobError(DUPLICATE, f"Already Exists: {target} is not empty (WRITE_EMPTY)")

    # ----------------------------------------------------------------- publish records

    def read_publish_record(self, destination: str, partition: str) -> PublishRecord | None:
        """The last :class:`PublishRecord` for a destination partition, or None."""
        with self._connect() as con:
            row = con.execute(
                f'SELECT destination, "partition", job_id, fingerprint, "rows", published_at '
                f'FROM {PUBLISHED_TABLE} WHERE destination = ? AND "partition" = ?',
                [destination, partition],
            ).fetchone()
        if row is None:
            return None
        return PublishRecord(
            destination=row[0],
            partition=row[1],
            job_id=row[2],
            fingerprint=row[3],
            rows=int(row[4]),
            published_at=_utc(row[5]),
        )

    def write_publish_record(self, record: PublishRecord) -> None:
        """Store ``record``, replacing the one for the same destination partition.

        Raises:
            ValueError: if ``published_at`` is naive.
        """
        published_at = _require_aware(record.published_at, "published_at")
        with self._connect() as con:
            con.execute(
                f"INSERT INTO {PUBLISHED_TABLE} VALUES (?, ?, ?, ?, ?, ?) "
                'ON CONFLICT (destination, "partition") DO UPDATE SET job_id = excluded.job_id, '
                'fingerprint = excluded.fingerprint, "rows" = excluded."rows", '
                "published_at = excluded.published_at",
                [
                    record.destination,
                    record.partition,
                    record.job_id,
                    record.fingerprint,
                    record.rows,
                    published_at,
                ],
            )

    # ----------------------------------------------------------------- audit table

    def replace_audit_rows(
        self, hours: Sequence[dt.datetime], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Atomically replace the ``pageviews_audit`` rows of ``hours`` with ``rows``.

        One transaction deletes every row whose ``hour`` is in ``hours`` and inserts ``rows``
        (dicts keyed by the audit columns, see :func:`bq_platform.lib.accounting.audit_records`).

        Raises:
            ValueError: if an hour or a TIMESTAMP value is naive, a row's ``hour`` is not in
                ``hours`` (a later replace would then leave it behind), a key is unknown or a
                REQUIRED value is missing.
        """
        spec = audit_spec()
        hour_set = {_require_aware(h, "hour") for h in hours}
        table = self._audit_arrow(spec, rows, hour_set)
        self.ensure_table(spec)
        with self._transaction() as con:
            deleted = _count(
                con.execute(
                    f"DELETE FROM {_ident(AUDIT_TABLE)} "
                    "WHERE list_contains(CAST(? AS TIMESTAMP WITH TIME ZONE[]), hour)",
                    [sorted(hour_set)],
                )
            )
            con.register("_bq_platform_audit_rows", table)
            try:
                columns = ", ".join(_ident(c.name) for c in spec.columns)
                con.execute(
                    f"INSERT INTO {_ident(AUDIT_TABLE)} ({columns}) "
                    f"SELECT {columns} FROM _bq_platform_audit_rows"
                )
            finally:
                con.unregister("_bq_platform_audit_rows")
        log.info(
            "audit: replaced %d rows of %d hours with %d rows", deleted, len(hour_set), len(rows)
        )

    @staticmethod
    def _audit_arrow(
        spec: TableSpec, rows: Sequence[Mapping[str, Any]], hours: set[dt.datetime]
    ) -> pa.Table:
        names = set(spec.column_names)
        for index, row in enumerate(rows):
            unknown = set(row) - names
            if unknown:
                raise ValueError(f"audit row {index}: unknown columns {sorted(unknown)}")
            for column in spec.columns:
                value = row.get(column.name)
                if value is None and _not_null(column):
                    raise ValueError(
                        f"audit row {index}: REQUIRED column {column.name!r} is missing"
                    )
                if column.type == "TIMESTAMP" and value is not None:
                    _require_aware(value, f"audit row {index} {column.name}")
            if _require_aware(row["hour"], "hour") not in hours:
                raise ValueError(
                    f"audit row {index}: hour {row['hour']} is not among the hours being replaced"
                )
        schema = pa.schema([pa.field(c.name, _ARROW_TYPES[_duckdb_type(c)]) for c in spec.columns])
        return pa.Table.from_pylist(
            [{c: row.get(c) for c in spec.column_names} for row in rows], schema=schema
        )

    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        """``pageviews_audit`` rows with ``start <= hour < end``, ordered by hour and site.

        Returns:
            One dict per row keyed by column; ``hour`` is an aware UTC datetime, ``event_date``
            a date. Empty if the audit table does not exist yet.
        """
        start = _require_aware(start, "start")
        end = _require_aware(end, "end")
        with self._connect() as con:
            if not self._exists(con, AUDIT_TABLE):
                return []
            cursor = con.execute(
                f"SELECT * FROM {_ident(AUDIT_TABLE)} WHERE hour >= ? AND hour < ? "
                "ORDER BY hour, site",
                [start, end],
            )
            return _dicts(cursor)

    # ----------------------------------------------------------------- reads

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Run one read-only statement (``SELECT``/``WITH``/``DESCRIBE``/``EXPLAIN``).

        Values go in ``params`` (``?`` placeholders); identifiers (table names) cannot be
        parameters, so they must come from validated configuration or the schema module,
        never from user input.

        Returns:
            One dict per row; aware timestamps are returned in ``datetime.UTC``.

        Raises:
            ValueError: if ``sql`` is not exactly one read statement.
            WarehouseError: if DuckDB rejects the statement.
        """
        try:
            statements = duckdb.extract_statements(sql)
        except duckdb.Error as exc:
            raise WarehouseError(f"cannot parse query: {exc}") from exc
        if len(statements) != 1 or statements[0].type not in _READ_STATEMENTS:
            raise ValueError("query() runs exactly one read-only statement (SELECT, EXPLAIN)")
        with self._connect() as con:
            try:
                cursor = con.execute(sql, list(params) if params is not None else None)
            except duckdb.Error as exc:
                raise WarehouseError(f"query failed: {exc}") from exc
            return _dicts(cursor)


def _dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, map(_utc, row), strict=True)) for row in cursor.fetchall()]


def _count(cursor: duckdb.DuckDBPyConnection) -> int:
    """Rows changed by the DML statement that produced ``cursor``."""
    row = cursor.fetchone()
    return int(row[0]) if row else 0


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.rollback()
    except duckdb.Error:  # the transaction may already be gone (connection invalidated)
        log.debug("rollback failed", exc_info=True)
