"""The SQL half of the DuckDB backend: publish-ledger rows, the audit table, read queries.

:class:`DuckDBSql` is mixed into :class:`~bq_platform.lib.warehouse.duckdb.warehouse.DuckDBWarehouse`,
which provides ``_connect``, ``_transaction`` and ``ensure_table``. The ledger
is append-only and read latest-wins (:mod:`bq_platform.lib.warehouse.ledger`), as in BigQuery;
the audit rows of some hours are replaced in one transaction.
"""

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from bq_platform.lib.warehouse import ledger, rules, schema
from bq_platform.lib.warehouse.base import WarehouseError
from bq_platform.lib.warehouse.duckdb.jobs import duckdb_type, ident
from bq_platform.lib.warehouse.schema import AUDIT_TABLE, TableSpec, audit_spec

log = logging.getLogger(__name__)

_READ_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})
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


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str, bool]]:
    """``(name, duckdb type, nullable)`` of ``table``'s columns in order; [] if missing.

    ``pragma_table_info`` looks the one table up (0.2 ms); ``duckdb_columns()`` lists the
    columns of every table (6 ms with 300 tables, growing with each hour's stage tables;
    docs/PERFORMANCE.md). A missing table is a catalog error at bind
    time, which leaves an open transaction usable.
    """
    try:
        rows = con.execute(
            'SELECT name, type, "notnull" FROM pragma_table_info(?) ORDER BY cid', [table]
        ).fetchall()
    except duckdb.CatalogException:
        return []
    return [(name, data_type, not bool(not_null)) for name, data_type, not_null in rows]


class DuckDBSql:
    """Ledger, audit and query SQL of :class:`~bq_platform.lib.warehouse.duckdb.warehouse.DuckDBWarehouse`."""

    # ----------------------------------------------------------------- publish ledger

    def read_publish_record(self, destination: str, partition: str) -> ledger.PublishRecord | None:
        """The latest :class:`~bq_platform.lib.warehouse.ledger.PublishRecord` of a destination
        partition, or None, in one statement: without the ledger table it is a catalog error
        at bind (the transaction stays usable), read as no record. The base class's metadata
        read first cost a second statement per job, 145 in a 1x stage step (issue 9)."""
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
            return _dicts(cursor)

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
        """Atomically replace the ``pageviews_audit`` rows of ``hours`` with ``rows``.

        One transaction deletes every row whose ``hour`` is in ``hours`` and inserts ``rows``
        (dicts keyed by the audit columns, see :func:`bq_platform.lib.core.accounting.audit_records`).

        Raises:
            ValueError: if an hour or a TIMESTAMP value is naive, a row's ``hour`` is not in
                ``hours`` (a later replace would then leave it behind), a key is unknown or a
                REQUIRED value is missing.
        """
        spec = audit_spec()
        hour_set = {_require_aware(h, "hour") for h in hours}
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
        """``pageviews_audit`` rows with ``start <= hour < end``, ordered by hour and site.

        Returns:
            One dict per row keyed by column; ``hour`` is an aware UTC datetime, ``event_date``
            a date. Empty if the audit table does not exist yet.
        """
        start = _require_aware(start, "start")
        end = _require_aware(end, "end")
        with self._connect() as con:
            if not table_columns(con, AUDIT_TABLE):
                return []
            cursor = con.execute(
                f"SELECT * FROM {ident(AUDIT_TABLE)} WHERE hour >= ? AND hour < ? "
                "ORDER BY hour, site",
                [start, end],
            )
            return _dicts(cursor)

    def audited_builds(self, start: dt.datetime, end: dt.datetime) -> set[tuple[dt.datetime, str]]:
        """``(hour, fingerprint)`` of the audit rows with ``start <= hour < end``, in one
        ``SELECT DISTINCT``: a day's 24 pairs in ~1 ms, against ~8 ms for its 1,200 rows as
        dicts (:meth:`audit_rows`; issue 9). Empty if the audit table does not exist yet."""
        start = _require_aware(start, "start")
        end = _require_aware(end, "end")
        with self._connect() as con:
            try:
                rows = con.execute(
                    f"SELECT DISTINCT hour, fingerprint FROM {ident(AUDIT_TABLE)} "
                    "WHERE hour >= ? AND hour < ?",
                    [start, end],
                ).fetchall()
            except duckdb.CatalogException:
                return set()
        return {(_utc(hour), fingerprint) for hour, fingerprint in rows}

    # ----------------------------------------------------------------- reads

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Run one read-only statement (``SELECT``/``WITH``/``DESCRIBE``/``EXPLAIN``).

        Values go in ``params`` (``?`` placeholders); identifiers cannot be parameters, so
        they must come from validated configuration or the schema module.

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
            if value is None and schema.normalize_mode(column.mode) == "REQUIRED":
                raise ValueError(f"audit row {index}: REQUIRED column {column.name!r} is missing")
            if column.type == "TIMESTAMP" and value is not None:
                _require_aware(value, f"audit row {index} {column.name}")
        if _require_aware(row["hour"], "hour") not in hours:
            raise ValueError(
                f"audit row {index}: hour {row['hour']} is not among the hours being replaced"
            )
    arrow_schema = pa.schema([pa.field(c.name, _ARROW_TYPES[duckdb_type(c)]) for c in spec.columns])
    return pa.Table.from_pylist(
        [{c: row.get(c) for c in spec.column_names} for row in rows], schema=arrow_schema
    )


def _dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, map(_utc, row), strict=True)) for row in cursor.fetchall()]


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.rollback()
    except duckdb.Error:  # the transaction may already be gone (connection invalidated)
        log.debug("rollback failed", exc_info=True)
