"""The local warehouse: BigQuery's tables and job model in one DuckDB file.

:class:`DuckDBWarehouse` is the DuckDB backend of
:class:`~bq_platform.lib.warehouse.base.Warehouse`: the rules, the schema comparison, the
ensure cache and the publish ledger come from the base class, exactly as for BigQuery, so a
local run fails where BigQuery would. This module supplies only what DuckDB does differently:

- **Tables** keep their production names and BigQuery types mapped by
  :data:`~bq_platform.lib.warehouse.duckdb.jobs.DUCKDB_TYPES`; ``REQUIRED`` becomes
  ``NOT NULL``; ``TIMESTAMP`` is ``TIMESTAMP WITH TIME ZONE`` and every connection runs with
  ``TimeZone = 'UTC'``.
- **Layout.** DuckDB has no partitioning, clustering, labels or expiration: they are kept in
  ``_bq_platform_tables`` with the creation time
  (:mod:`bq_platform.lib.warehouse.duckdb.layout`), and partition semantics are emulated by the
  jobs (:mod:`bq_platform.lib.warehouse.duckdb.jobs`). Clustering and
  ``require_partition_filter`` are recorded, not enforced.
- **Jobs** run each in one transaction with its row in ``_bq_platform_jobs`` (BigQuery's job
  history), on the caller's thread or on worker threads (``concurrent_jobs``); reusing a job ID
  raises :class:`~bq_platform.lib.warehouse.base.JobConflictError` (HTTP 409).
- **Storage settings** (``threads``, ``memory_limit``, ``disabled_compression``,
  ``max_vacuum_tasks``, ``auto_checkpoint_skip_wal_threshold``) are chosen for many small
  commits on a 2-core machine, each default measured in
  :class:`~bq_platform.lib.warehouse.duckdb.session.SessionSettings` (issue 9).
- **Counts** are ``count(*)``: as cheap locally as BigQuery's metadata.

Concurrency: DuckDB lets one process at a time open a database file for writing. The file is
opened on first use and kept until :meth:`DuckDBWarehouse.close`; a locked file is retried
for up to ``lock_timeout_s`` seconds (:mod:`bq_platform.lib.warehouse.duckdb.open`).
"""

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import duckdb

from bq_platform.lib.warehouse import rules
from bq_platform.lib.warehouse.base import (
    TableExistsError,
    TableInfo,
    Warehouse,
)
from bq_platform.lib.warehouse.compare import SpecDifference
from bq_platform.lib.warehouse.duckdb.background import BackgroundJobs
from bq_platform.lib.warehouse.duckdb.history import JOBS_DDL, JOBS_TABLE, DuckDBJobHistory
from bq_platform.lib.warehouse.duckdb.jobs import DUCKDB_TYPES as DUCKDB_TYPES  # re-exported
from bq_platform.lib.warehouse.duckdb.jobs import column_ddl, ident
from bq_platform.lib.warehouse.duckdb.layout import (
    TABLES_DDL,
    TABLES_TABLE,
    read_spec,
    read_specs,
    write_layout,
    write_new_layouts,
)
from bq_platform.lib.warehouse.duckdb.open import open_with_retry
from bq_platform.lib.warehouse.duckdb.session import SessionSettings
from bq_platform.lib.warehouse.duckdb.sql import DuckDBSql, _now, _require_aware, _rollback, _utc
from bq_platform.lib.warehouse.schema import TableSpec

log = logging.getLogger(__name__)

DEFAULT_PATH = Path(".bq_platform/warehouse.duckdb")

#: The warehouse's own tables: the layout rows (:mod:`~bq_platform.lib.warehouse.duckdb.layout`)
#: and the job history (:mod:`~bq_platform.lib.warehouse.duckdb.history`).
_INTERNAL = frozenset({TABLES_TABLE, JOBS_TABLE})
_INTERNAL_DDL = (TABLES_DDL, JOBS_DDL)


class DuckDBWarehouse(DuckDBJobHistory, DuckDBSql, Warehouse):
    """BigQuery's table and job semantics in one local DuckDB file.

    Args:
        path: the database file (the project default is ``.bq_platform/warehouse.duckdb``);
            its parent folder is created if missing. ``:memory:`` is refused: the file must
            outlive the connection.
        lock_timeout_s: how long to keep retrying, in seconds, while another process holds
            the file's write lock, before raising :class:`WarehouseError`.
        threads, memory_limit, disabled_compression, max_vacuum_tasks,
        auto_checkpoint_skip_wal_threshold: DuckDB's session settings
            (:class:`~bq_platform.lib.warehouse.duckdb.session.SessionSettings`, whose
            defaults these are, with what each was measured against).
        concurrent_jobs: jobs run side by side on this many worker threads, each with its own
            connection (:mod:`~bq_platform.lib.warehouse.duckdb.background`): ``submit_job``
            returns a RUNNING job, as BigQuery does, and ``wait_job`` waits for it. 1 (the
            default) runs each job before ``submit_job`` returns.

    Raises:
        ValueError: if ``path`` is ``:memory:``, ``concurrent_jobs`` is below 1 or a setting
            is out of range (:class:`SessionSettings`); on first use, if DuckDB refuses a
            setting.

    Attributes:
        path: absolute path of the database file.
        metadata_operations: table-metadata reads, creates and patches made by
            ``ensure_table``, per table (the counterpart of BigQuery's ~5 metadata updates
            per 10 s per table quota): one read, plus a create or patch if needed, per table
            and schema per instance.
    """

    def __init__(
        self,
        path: str | Path = DEFAULT_PATH,
        *,
        lock_timeout_s: float = 120.0,
        threads: int = SessionSettings.threads,
        memory_limit: str = SessionSettings.memory_limit,
        disabled_compression: str = SessionSettings.disabled_compression,
        max_vacuum_tasks: int = SessionSettings.max_vacuum_tasks,
        auto_checkpoint_skip_wal_threshold: int = (
            SessionSettings.auto_checkpoint_skip_wal_threshold
        ),
        concurrent_jobs: int = 1,
    ) -> None:
        super().__init__()
        if str(path) == ":memory:":
            raise ValueError("DuckDBWarehouse needs a file path; ':memory:' is not supported")
        self.path = Path(path).expanduser().resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock_timeout_s = lock_timeout_s
        if concurrent_jobs < 1:
            raise ValueError(f"concurrent_jobs must be at least 1, got {concurrent_jobs}")
        self.settings = SessionSettings(
            threads=threads,
            memory_limit=memory_limit,
            disabled_compression=disabled_compression,
            max_vacuum_tasks=max_vacuum_tasks,
            auto_checkpoint_skip_wal_threshold=auto_checkpoint_skip_wal_threshold,
        )
        self.metadata_operations: dict[str, int] = {}
        self._lock = threading.RLock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._internal_ready = False
        self._background = BackgroundJobs(concurrent_jobs)

    def __repr__(self) -> str:
        return f"DuckDBWarehouse({str(self.path)!r})"

    # ----------------------------------------------------------------- connections

    @contextlib.contextmanager
    def _connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The instance's connection, in UTC, with the internal tables present."""
        with self._lock:
            if self._con is None:
                con = open_with_retry(self.path, self.lock_timeout_s)
                try:
                    self.settings.apply(con)
                except ValueError:
                    con.close()
                    raise
                if not self._internal_ready:
                    for ddl in _INTERNAL_DDL:
                        con.execute(ddl)
                    self._internal_ready = True
                self._con = con
            yield self._con

    def _job_connection(self) -> duckdb.DuckDBPyConnection:
        """A new connection to this database for a job worker, in UTC."""
        with self._connect() as con:
            cursor = con.cursor()
        self.settings.apply_to_cursor(cursor)
        return cursor

    def close(self) -> None:
        """Wait for running jobs, close the connections and release the file for other
        processes (idempotent)."""
        self._background.close()
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

    # ----------------------------------------------------------------- tables

    def _count_metadata(self, table: str) -> None:
        with self._lock:
            self.metadata_operations[table] = self.metadata_operations.get(table, 0) + 1

    def describe_table(self, table: str) -> TableSpec | None:
        """Read a table's spec back (columns in BigQuery types and modes, plus its layout)."""
        with self._connect() as con:
            found = read_spec(con, table)
        return found[0] if found else None

    def _describe_table(self, table: str) -> TableSpec | None:
        return self._describe_tables([table])[table]

    def _describe_tables(self, tables: Sequence[str]) -> dict[str, TableSpec | None]:
        """:meth:`_describe_table` of each table (each once) in two statements
        (:func:`read_specs`), one metadata read counted per table, as BigQuery would bill them.

        Raises:
            ValueError: if a name is one of the warehouse's internal tables (nothing is read).
        """
        names = list(dict.fromkeys(tables))
        for table in names:
            if table in _INTERNAL:  # they always exist: _create_table's check would never run
                raise ValueError(f"table name {table} is reserved by the DuckDB warehouse")
        for table in names:
            self._count_metadata(table)
        with self._connect() as con:
            found = read_specs(con, names)
        return {table: None if f is None else f[0] for table, f in found.items()}

    def tables_rows(self, tables: Sequence[str]) -> dict[str, int | None]:
        """Rows of each table (``count(*)``, as :meth:`table_info`) in two statements: the
        tables that exist (``duckdb_tables()``), then one ``count(*)`` each in a ``UNION ALL``.
        A step's 144 stage tables cost ~0.7 ms each one by one, the Python around each call
        included (issue 9, docs/PERFORMANCE.md). None for a missing table; a name with a
        partition decorator is read on its own (:meth:`table_info`)."""
        names = list(dict.fromkeys(tables))
        rows: dict[str, int | None] = {}
        plain = []
        for name in names:
            if rules.split_destination(name)[1] is None:
                plain.append(name)
            else:
                rows[name] = self.table_rows(name)
        if plain:
            try:
                rows.update(self._count_tables(plain))
            except duckdb.CatalogException:  # dropped between the two statements
                rows.update({name: self.table_rows(name) for name in plain})
        return {name: rows[name] for name in names}

    def _count_tables(self, tables: Sequence[str]) -> dict[str, int | None]:
        rows: dict[str, int | None] = dict.fromkeys(tables)
        with self._connect() as con:
            existing = [
                r[0]
                for r in con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = "
                    "current_database() AND schema_name = current_schema() "
                    "AND table_name = ANY(?)",
                    [list(tables)],
                ).fetchall()
            ]
            if existing:
                counted = con.execute(
                    " UNION ALL ".join(
                        f"SELECT {i} AS n, count(*) FROM {ident(t)}" for i, t in enumerate(existing)
                    )
                ).fetchall()
                rows.update({existing[i]: int(count) for i, count in counted})
        return rows

    def _create_in(
        self, con: duckdb.DuckDBPyConnection, spec: TableSpec, *, layout: bool = True
    ) -> None:
        """``CREATE TABLE`` and (unless ``layout`` is False: the caller writes it) its layout
        row, in ``con``'s open transaction.

        Raises:
            ValueError: if the name is one of the warehouse's internal tables.
            TableExistsError: if the table exists (BigQuery's 409).
        """
        if spec.name in _INTERNAL:
            raise ValueError(f"table name {spec.name} is reserved by the DuckDB warehouse")
        columns = ", ".join(column_ddl(c) for c in spec.columns)
        try:
            con.execute(f"CREATE TABLE {ident(spec.name)} ({columns})")
        except duckdb.CatalogException as exc:
            if "already exists" not in str(exc):
                raise
            raise TableExistsError(f"Already Exists: Table {spec.name}") from None
        if layout:
            write_layout(con, spec, created=True)

    def _create_table(self, spec: TableSpec) -> None:
        self._count_metadata(spec.name)
        with self._transaction() as con:
            self._create_in(con, spec)
        log.info("created table %s (%d columns)", spec.name, len(spec.columns))

    def _create_tables(self, specs: Sequence[TableSpec]) -> list[TableSpec]:
        """Create the missing tables in one transaction, their layout rows in two statements
        (:func:`write_new_layouts`): a commit each cost ~4-9 ms, 0.3 s for a step's 72 stage
        tables against 0.05-0.09 s together (issue 9, docs/PERFORMANCE.md). If one of them
        exists by then, nothing is kept and each is created on its own
        (:meth:`Warehouse._create_tables`), which reports it."""
        if len(specs) < 2:
            return super()._create_tables(specs)
        try:
            with self._transaction() as con:
                for spec in specs:
                    self._create_in(con, spec, layout=False)
                write_new_layouts(con, specs)
        except TableExistsError:
            return super()._create_tables(specs)
        for spec in specs:
            self._count_metadata(spec.name)
            self._ensured[spec.name] = spec
        log.info("created %d tables: %s", len(specs), ", ".join(s.name for s in specs))
        return []

    def _patch_table(self, spec: TableSpec, diff: SpecDifference) -> None:
        self._count_metadata(spec.name)
        with self._transaction() as con:
            for column in diff.added_columns:
                con.execute(f"ALTER TABLE {ident(spec.name)} ADD COLUMN {column_ddl(column)}")
            write_layout(con, spec)
        log.info(
            "patched table %s: columns %s, %s",
            spec.name,
            [c.name for c in diff.added_columns] or "none",
            ", ".join(diff.patch_fields) or "no layout change",
        )

    def table_info(self, destination: str) -> TableInfo | None:
        """Creation time and rows of a table or of ``table$YYYYMMDD`` (``count(*)``)."""
        table, day = rules.split_destination(destination)
        with self._connect() as con:
            if day is None:  # one statement: a stage load reads this twice (issue 9)
                try:
                    rows, created = con.execute(
                        f"SELECT (SELECT count(*) FROM {ident(table)}), (SELECT created_at FROM "
                        f"{TABLES_TABLE} WHERE table_name = ?)",
                        [table],
                    ).fetchone()
                except duckdb.CatalogException:
                    return None
                return TableInfo(table=table, created=_utc(created) or _now(), rows=int(rows))
            found = read_spec(con, table)
            if found is None:
                return None
            spec, created = found
            if spec.partition_field is None:
                raise rules.RuleViolation(
                    f"BigQuery would refuse {destination}: {table} is not partitioned, so it "
                    "takes no $YYYYMMDD decorator (source: "
                    "/bigquery/docs/managing-partitioned-table-data)"
                )
            row = con.execute(
                f"SELECT count(*) FROM {ident(table)} WHERE {ident(spec.partition_field)} = ?",
                [day],
            ).fetchone()
        return TableInfo(table=table, created=created, rows=int(row[0]) if row else 0)

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
                con.execute(f"DROP TABLE IF EXISTS {ident(name)}")
                con.execute(f"DELETE FROM {TABLES_TABLE} WHERE table_name = ?", [name])
        for name in expired:
            self.forget_table(name)
        if expired:
            log.info("dropped %d expired tables: %s", len(expired), ", ".join(expired))
        return expired

    def drop_table(self, table: str) -> None:
        """Drop a table, as an operator would (``bq rm``); used to test expiry handling."""
        with self._transaction() as con:
            con.execute(f"DROP TABLE IF EXISTS {ident(table)}")
            con.execute(f"DELETE FROM {TABLES_TABLE} WHERE table_name = ?", [table])
        self.forget_table(table)
