"""The DuckDB dialect of the local warehouse: quoted names, BigQuery types, values in UTC."""

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import duckdb

from bq_platform.lib.warehouse import rules, schema
from bq_platform.lib.warehouse.schema import Column

log = logging.getLogger(__name__)

#: BigQuery standard SQL type name -> DuckDB column type. ``TIMESTAMP`` is an instant in
#: both systems; DuckDB's ``TIMESTAMP`` (no time zone) is BigQuery's ``DATETIME``.
DUCKDB_TYPES: Mapping[str, str] = {
    "STRING": "VARCHAR",
    "BYTES": "BLOB",
    "INT64": "BIGINT",
    "FLOAT64": "DOUBLE",
    "BOOL": "BOOLEAN",
    "TIMESTAMP": "TIMESTAMP WITH TIME ZONE",
    "DATETIME": "TIMESTAMP",
    "DATE": "DATE",
    "NUMERIC": "DECIMAL(38, 9)",
}

#: DuckDB column type -> canonical BigQuery name, for reading a table's schema back.
BIGQUERY_TYPES: Mapping[str, str] = {v: k for k, v in DUCKDB_TYPES.items()}


def ident(name: str) -> str:
    """``name`` quoted; ValueError unless it is ``[A-Za-z_][A-Za-z0-9_]*``."""
    if not rules.TABLE_NAME_RE.fullmatch(name):
        raise ValueError(f"not a valid table or column name: {name!r}")
    return f'"{name}"'


def duckdb_type(column: Column) -> str:
    """DuckDB type of a spec column (:data:`DUCKDB_TYPES`)."""
    return DUCKDB_TYPES[schema.normalize_type(column.type)]


def column_ddl(column: Column) -> str:
    """``"name" TYPE [NOT NULL]`` of a spec column (REQUIRED -> NOT NULL)."""
    required = schema.normalize_mode(column.mode) == "REQUIRED"
    return f"{ident(column.name)} {duckdb_type(column)}" + (" NOT NULL" if required else "")


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str, bool]]:
    """``(name, duckdb type, nullable)`` of ``table``'s columns; [] if missing (a catalog
    error at bind, which leaves an open transaction usable)."""
    try:
        rows = con.execute(
            'SELECT name, type, "notnull" FROM pragma_table_info(?) ORDER BY cid', [table]
        ).fetchall()
    except duckdb.CatalogException:
        return []
    return [(name, data_type, not bool(not_null)) for name, data_type, not_null in rows]


def utc(value: Any) -> Any:
    """Aware datetimes (DuckDB returns pytz zones) -> ``datetime.UTC``; anything else as is."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def require_aware(value: dt.datetime, what: str) -> dt.datetime:
    """``value`` in UTC; ValueError (naming ``what``) unless it is an aware datetime."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise ValueError(f"{what} must be a timezone-aware datetime (UTC), got {value!r}")
    return value.astimezone(dt.UTC)


def utc_now() -> dt.datetime:
    """The current time, aware, in UTC."""
    return dt.datetime.now(dt.UTC)


def dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The cursor's remaining rows as dicts keyed by column, aware datetimes in UTC."""
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, map(utc, row), strict=True)) for row in cursor.fetchall()]


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll the open transaction back; one already gone (connection invalidated) is ignored."""
    try:
        con.rollback()
    except duckdb.Error:
        log.debug("rollback failed", exc_info=True)
