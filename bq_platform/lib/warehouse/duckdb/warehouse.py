"""The local warehouse: BigQuery's tables and job model in one DuckDB file.

Rules, schema comparison, ensure cache and publish ledger are the base class's, so a local run
fails where BigQuery would. What DuckDB does differently:

- tables keep their production names; types map by :data:`.sql.DUCKDB_TYPES`, ``REQUIRED`` is
  ``NOT NULL`` and every connection runs in UTC (:mod:`.session`);
- partitioning, clustering, labels and expiration live in ``_bq_platform_tables``
  (:mod:`.layout`); the jobs emulate partitions (:mod:`.jobs`); clustering and
  ``require_partition_filter`` are recorded, not enforced;
- a job runs in one transaction with its job-history row (:mod:`.history`), on the caller's
  thread or a worker's (:mod:`.background`); a failed job changes nothing and is recorded DONE
  with BigQuery's error reason;
- counts are ``count(*)``.

DuckDB lets one process at a time open a file for writing: the file is opened on first use and
kept until :meth:`DuckDBWarehouse.close`; a locked file is retried (:mod:`.open`).
"""

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from bq_platform.lib.warehouse import ledger, rollup_compare, rules, schema
from bq_platform.lib.warehouse.base import (
    SAMPLE_PREVIEW_COLUMNS,
    Job,
    JobConflictError,
    JobStatus,
    LoadJob,
    TableExistsError,
    TableInfo,
    Warehouse,
    WarehouseError,
)
from bq_platform.lib.warehouse.compare import SpecDifference
from bq_platform.lib.warehouse.duckdb import history, jobs, layout
from bq_platform.lib.warehouse.duckdb.background import BackgroundJobs
from bq_platform.lib.warehouse.duckdb.open import open_with_retry
from bq_platform.lib.warehouse.duckdb.session import SessionSettings
from bq_platform.lib.warehouse.duckdb.sql import (
    column_ddl,
    dicts,
    duckdb_type,
    ident,
    require_aware,
    rollback,
    table_columns,
    utc,
    utc_now,
)
from bq_platform.lib.warehouse.rollup_compare import RollupComparison
from bq_platform.lib.warehouse.schema import AUDIT_TABLE, TableSpec, audit_spec

log = logging.getLogger(__name__)

DEFAULT_PATH = Path(".bq_platform/warehouse.duckdb")

#: The warehouse's own tables: the layout rows and the job history.
_INTERNAL = frozenset({layout.TABLES_TABLE, history.JOBS_TABLE})
_INTERNAL_DDL = (layout.TABLES_DDL, history.JOBS_DDL)

_READ_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})

#: DuckDB column type -> the Arrow type the audit rows are inserted as.
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


class DuckDBWarehouse(Warehouse):
    """BigQuery's table and job semantics in one local DuckDB file.

    Args:
        path: the database file; its folder is created. ``:memory:`` is refused: the file
            must outlive the connection.
        lock_timeout_s: seconds to retry while another process holds the write lock.
        threads, memory_limit, disabled_compression, max_vacuum_tasks,
        auto_checkpoint_skip_wal_threshold: see :class:`.session.SessionSettings`.
        concurrent_jobs: worker threads, each with its own connection. Above 1,
            ``submit_job`` returns a RUNNING job, as BigQuery does; 1 runs it before returning.

    Raises:
        ValueError: ``path`` is ``:memory:``, ``concurrent_jobs`` < 1, or a setting is out of
            range (on first use: DuckDB refuses it).

    Attributes:
        metadata_operations: per table, the metadata reads, creates and patches of
            ``ensure_table`` (the counterpart of BigQuery's per-table metadata quota).
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
        """Wait for running jobs, close the connections, release the file (idempotent)."""
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
                rollback(con)
                raise
            con.commit()

    # ----------------------------------------------------------------- tables

    def _count_metadata(self, table: str) -> None:
        with self._lock:
            self.metadata_operations[table] = self.metadata_operations.get(table, 0) + 1

    def describe_table(self, table: str) -> TableSpec | None:
        """Read a table's spec back (columns in BigQuery types and modes, plus its layout)."""
        with self._connect() as con:
            found = layout.read_spec(con, table)
        return found[0] if found else None

    def _describe_table(self, table: str) -> TableSpec | None:
        return self._describe_tables([table])[table]

    def _describe_tables(self, tables: Sequence[str]) -> dict[str, TableSpec | None]:
        """In two statements, one metadata read counted per table. Raises ValueError for an
        internal table name (nothing is read)."""
        names = list(dict.fromkeys(tables))
        for table in names:
            if table in _INTERNAL:  # they always exist: _create_table's check would never run
                raise ValueError(f"table name {table} is reserved by the DuckDB warehouse")
        for table in names:
            self._count_metadata(table)
        with self._connect() as con:
            found = layout.read_specs(con, names)
        return {table: None if f is None else f[0] for table, f in found.items()}

    def tables_rows(self, tables: Sequence[str]) -> dict[str, int | None]:
        """``count(*)`` of each table in two statements; a ``$YYYYMMDD`` name is read alone."""
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
        self, con: duckdb.DuckDBPyConnection, spec: TableSpec, *, with_layout: bool = True
    ) -> None:
        """``CREATE TABLE`` and its layout row (unless ``with_layout`` is False) in ``con``'s
        transaction. Raises ValueError for an internal name, TableExistsError if it exists."""
        if spec.name in _INTERNAL:
            raise ValueError(f"table name {spec.name} is reserved by the DuckDB warehouse")
        columns = ", ".join(column_ddl(c) for c in spec.columns)
        try:
            con.execute(f"CREATE TABLE {ident(spec.name)} ({columns})")
        except duckdb.CatalogException as exc:
            if "already exists" not in str(exc):
                raise
            raise TableExistsError(f"Already Exists: Table {spec.name}") from None
        if with_layout:
            layout.write_layout(con, spec, created=True)

    def _create_table(self, spec: TableSpec) -> None:
        self._count_metadata(spec.name)
        with self._transaction() as con:
            self._create_in(con, spec)
        log.info("created table %s (%d columns)", spec.name, len(spec.columns))

    def _create_tables(self, specs: Sequence[TableSpec]) -> list[TableSpec]:
        """All in one transaction; if one exists by then, nothing is kept and the base class
        creates each on its own, which reports it."""
        if len(specs) < 2:
            return super()._create_tables(specs)
        try:
            with self._transaction() as con:
                for spec in specs:
                    self._create_in(con, spec, with_layout=False)
                layout.write_new_layouts(con, specs)
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
            layout.write_layout(con, spec)
        log.info(
            "patched table %s: columns %s, %s",
            spec.name,
            [c.name for c in diff.added_columns] or "none",
            ", ".join(diff.patch_fields) or "no layout change",
        )

    def table_info(self, destination: str) -> TableInfo | None:
        """Rows by ``count(*)``. Raises RuleViolation for ``$YYYYMMDD`` of an unpartitioned one."""
        table, day = rules.split_destination(destination)
        with self._connect() as con:
            if day is None:
                try:
                    rows, created = layout.rows_and_created(con, table)
                except duckdb.CatalogException:
                    return None
                return TableInfo(table=table, created=created, rows=rows)
            found = layout.read_spec(con, table)
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
        """Drop the tables expired at ``now`` (aware; default the clock), as BigQuery does by
        itself; their names, sorted."""
        at = require_aware(now, "now") if now is not None else utc_now()
        with self._transaction() as con:
            expired = layout.expired_tables(con, at)
            for name in expired:
                layout.drop_table(con, name)
        for name in expired:
            self.forget_table(name)
        if expired:
            log.info("dropped %d expired tables: %s", len(expired), ", ".join(expired))
        return expired

    def drop_table(self, table: str) -> None:
        """Drop a table, as an operator would (``bq rm``); used to test expiry handling."""
        with self._transaction() as con:
            layout.drop_table(con, table)
        self.forget_table(table)

    # ----------------------------------------------------------------- jobs

    def get_job(self, job_id: str) -> JobStatus | None:
        """From the job history; a job still on a worker is RUNNING."""
        if self._background.running(job_id):
            return JobStatus(job_id=job_id, state="RUNNING")
        with self._connect() as con:
            return history.read_status(con, job_id)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobStatus | None]:
        """:meth:`get_job` of each ID (each once) in one statement."""
        ids = list(dict.fromkeys(job_ids))
        found: dict[str, JobStatus | None] = {
            i: JobStatus(job_id=i, state="RUNNING") if self._background.running(i) else None
            for i in ids
        }
        asked = [i for i, status in found.items() if status is None]
        if asked:
            with self._connect() as con:
                found.update(history.read_statuses(con, asked))
        return found

    def _insert_job(self, job: Job) -> JobStatus:
        """Run the job now (one worker: returned DONE) or on a worker (returned RUNNING). A
        failed job is recorded and returned, not raised.

        Raises:
            JobConflictError: if a job with this ID exists (HTTP 409).
            WarehouseError: if the file stays locked or the history cannot be written.
        """
        created_at = utc_now()
        with self._connect() as con:
            if history.exists(con, job.job_id) or self._background.known(job.job_id):
                raise JobConflictError(
                    f"job {job.job_id} already exists (409 duplicate); look it up instead"
                )
            if self._background.workers == 1:
                return self._execute_job(con, job, created_at)
        table, _ = rules.split_destination(job.destination)
        self._background.start(
            job.job_id,
            table,
            lambda cursor: self._execute_job(cursor, job, created_at),
            self._job_connection,
        )
        return JobStatus(job_id=job.job_id, state="RUNNING")

    def _execute_job(
        self, con: duckdb.DuckDBPyConnection, job: Job, created_at: dt.datetime
    ) -> JobStatus:
        """Run ``job`` and record it, in one transaction on ``con``; its DONE status."""
        kind = "load" if isinstance(job, LoadJob) else "copy"
        rows: int | None = None
        reason = message = None
        con.begin()
        try:
            run = jobs.run_load if isinstance(job, LoadJob) else jobs.run_copy
            rows = run(con, job, lambda name: _spec_or_none(con, name))  # type: ignore[arg-type]
        except Exception as exc:  # every failure becomes a failed job, as in BigQuery
            rollback(con)
            reason, message = jobs.classify(exc)
            message = f"{kind} job {job.job_id} -> {job.destination}: {message}"
            log.warning("%s", message, exc_info=exc if reason == jobs.INTERNAL_ERROR else None)
            con.begin()
        status = history.record(con, job, kind, created_at, rows, reason, message)
        con.commit()
        if reason is None:
            log.debug("%s job %s -> %s: %d rows", kind, job.job_id, job.destination, rows)
        return status

    def wait_job(self, job_id: str, timeout_s: float = 3600.0) -> JobStatus:
        """Raises WarehouseError if no job has this ID or its history row could not be
        written, TimeoutError after ``timeout_s`` seconds."""
        status = self._background.wait(job_id, timeout_s)
        if status is None:
            status = self.get_job(job_id)
        if status is None:
            raise WarehouseError(f"no job {job_id!r} in the warehouse's job history")
        return status

    def jobs_submitted(self, table: str, day: dt.date) -> int:
        """From the job history (failed jobs too), plus jobs still on a worker, counted first:
        one that ends meanwhile counts twice, so a budget errs on the safe side."""
        return self.jobs_submitted_to([table], day)[table]

    def jobs_submitted_to(self, tables: Sequence[str], day: dt.date) -> dict[str, int]:
        """:meth:`jobs_submitted` of each table in one statement."""
        names = list(dict.fromkeys(tables))
        counts = {table: self._background.in_flight(table) for table in names}
        if not names:
            return counts
        with self._connect() as con:
            recorded = history.count_submitted(con, names, day)
        for table, count in recorded.items():
            counts[table] += count
        return counts

    # ----------------------------------------------------------------- publish ledger

    def read_publish_record(self, destination: str, partition: str) -> ledger.PublishRecord | None:
        """One statement: without the ledger table, the catalog error at bind means no record."""
        rules.check_table_name(destination)
        return ledger.latest(self._ledger_rows(destination, partition))

    def _ledger_rows(self, destination: str, partition: str) -> list[dict[str, Any]]:
        """The ledger rows of one destination partition; [] if the ledger does not exist."""
        with self._connect() as con:
            try:
                cursor = con.execute(
                    f"SELECT * FROM {ident(ledger.PUBLISH_LEDGER_TABLE)} "
                    "WHERE destination = ? AND partition_key = ?",
                    [destination, partition],
                )
            except duckdb.CatalogException:
                return []
            return dicts(cursor)

    def _append_ledger_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        names = [c.name for c in ledger.LEDGER_COLUMNS]
        one = f"({', '.join('?' for _ in names)})"
        with self._connect() as con:
            con.execute(
                f"INSERT INTO {ident(ledger.PUBLISH_LEDGER_TABLE)} "
                f"({', '.join(ident(n) for n in names)}) VALUES {', '.join(one for _ in rows)}",
                [row[n] for row in rows for n in names],
            )

    # ----------------------------------------------------------------- audit table

    def replace_audit_rows(
        self, hours: Sequence[dt.datetime], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """In one transaction.

        Raises:
            ValueError: if an hour or TIMESTAMP value is naive, a row's ``hour`` is not in
                ``hours``, a key is unknown or a REQUIRED value is missing.
        """
        spec = audit_spec()
        hour_set = {require_aware(h, "hour") for h in hours}
        table = _audit_arrow(spec, rows, hour_set)
        self.ensure_table(spec)
        with self._transaction() as con:
            con.execute(
                f"DELETE FROM {ident(AUDIT_TABLE)} "
                "WHERE list_contains(CAST(? AS TIMESTAMP WITH TIME ZONE[]), hour)",
                [sorted(hour_set)],
            )
            con.register("_bq_platform_audit_rows", table)
            try:
                columns = ", ".join(ident(c.name) for c in spec.columns)
                con.execute(
                    f"INSERT INTO {ident(AUDIT_TABLE)} ({columns}) "
                    f"SELECT {columns} FROM _bq_platform_audit_rows"
                )
            finally:
                con.unregister("_bq_platform_audit_rows")

    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        """``hour`` aware UTC, ``event_date`` a date; empty if the audit table does not exist."""
        start = require_aware(start, "start")
        end = require_aware(end, "end")
        with self._connect() as con:
            if not table_columns(con, AUDIT_TABLE):
                return []
            cursor = con.execute(
                f"SELECT * FROM {ident(AUDIT_TABLE)} WHERE hour >= ? AND hour < ? "
                "ORDER BY hour, site",
                [start, end],
            )
            return dicts(cursor)

    def audited_builds(self, start: dt.datetime, end: dt.datetime) -> set[tuple[dt.datetime, str]]:
        """One ``SELECT DISTINCT``; empty if the audit table does not exist."""
        start = require_aware(start, "start")
        end = require_aware(end, "end")
        with self._connect() as con:
            try:
                rows = con.execute(
                    f"SELECT DISTINCT hour, fingerprint FROM {ident(AUDIT_TABLE)} "
                    "WHERE hour >= ? AND hour < ?",
                    [start, end],
                ).fetchall()
            except duckdb.CatalogException:
                return set()
        return {(utc(hour), fingerprint) for hour, fingerprint in rows}

    # ----------------------------------------------------------------- reads

    def published_sample_rows(self, first: dt.date, last: dt.date) -> list[dict[str, Any]]:
        """One ``SELECT`` of the days' partitions; empty if the table does not exist."""
        if last < first:
            raise ValueError(f"last day {last} is before first day {first}")
        columns = ", ".join(ident(c) for c in SAMPLE_PREVIEW_COLUMNS)
        with self._connect() as con:
            if not table_columns(con, schema.PAGEVIEWS_SAMPLE_TABLE):
                return []
            cursor = con.execute(
                f"SELECT {columns} FROM {ident(schema.PAGEVIEWS_SAMPLE_TABLE)} "
                "WHERE event_date BETWEEN ? AND ? ORDER BY site, event_ts",
                [first, last],
            )
            return dicts(cursor)

    def compare_rollup(self, table: str, day: dt.date, human_class: str) -> RollupComparison:
        """One ``SELECT``. Raises WarehouseError if ``pageviews`` or ``table`` is missing."""
        sql = rollup_compare.comparison_sql(table, ident, lambda name: f"${name}")
        with self._connect() as con:
            for name in (schema.PAGEVIEWS_TABLE, table):
                if not table_columns(con, name):
                    raise WarehouseError(f"table {name} does not exist: publish {day} first")
            cursor = con.execute(sql, {"day": day, "human": human_class})
            return rollup_compare.comparison_result(table, day, dicts(cursor))

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Rows (dicts, timestamps in UTC) of one read-only statement, values as ``?``
        ``params``; identifiers cannot be parameters: take them from validated configuration.

        Raises:
            ValueError: if ``sql`` is not exactly one read statement.
            WarehouseError: if DuckDB rejects it.
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
            return dicts(cursor)


def _spec_or_none(con: duckdb.DuckDBPyConnection, table: str) -> TableSpec | None:
    """A table's spec read back on ``con`` (a job's own transaction); None if missing."""
    found = layout.read_spec(con, table)
    return found[0] if found else None


def _audit_arrow(
    spec: TableSpec, rows: Sequence[Mapping[str, Any]], hours: set[dt.datetime]
) -> pa.Table:
    """``rows`` as an Arrow table of the audit columns; raises as ``replace_audit_rows``."""
    names = set(spec.column_names)
    for index, row in enumerate(rows):
        unknown = set(row) - names
        if unknown:
            raise ValueError(f"audit row {index}: unknown columns {sorted(unknown)}")
        for column in spec.columns:
            value = row.get(column.name)
            if value is None and schema.normalize_mode(column.mode) == "REQUIRED":
                raise ValueError(f"audit row {index}: REQUIRED column {column.name!r} is missing")
            if column.type == "TIMESTAMP" and value is not None:
                require_aware(value, f"audit row {index} {column.name}")
        if require_aware(row["hour"], "hour") not in hours:
            raise ValueError(
                f"audit row {index}: hour {row['hour']} is not among the hours being replaced"
            )
    arrow_schema = pa.schema([pa.field(c.name, _ARROW_TYPES[duckdb_type(c)]) for c in spec.columns])
    return pa.Table.from_pylist(
        [{c: row.get(c) for c in spec.column_names} for row in rows], schema=arrow_schema
    )
