"""What BigQuery keeps about a table that DuckDB cannot (partitioning, clustering,
``require_partition_filter``, expiration, labels, description, creation time): one row per
table in ``_bq_platform_tables``.
"""

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import duckdb

from bq_platform.lib.warehouse.duckdb.sql import BIGQUERY_TYPES, ident, table_columns, utc, utc_now
from bq_platform.lib.warehouse.schema import Column, TableSpec

TABLES_TABLE = "_bq_platform_tables"
TABLES_DDL = f"""CREATE TABLE IF NOT EXISTS {TABLES_TABLE} (
    table_name VARCHAR PRIMARY KEY,
    partition_field VARCHAR,
    clustering JSON NOT NULL,
    require_partition_filter BOOLEAN NOT NULL,
    expiration_days INTEGER,
    expires_at TIMESTAMP WITH TIME ZONE,
    labels JSON NOT NULL,
    description VARCHAR NOT NULL,
    created_at TIMESTAMP WITH TIME ZONE NOT NULL,
    updated_at TIMESTAMP WITH TIME ZONE NOT NULL)"""


_LAYOUT_COLUMNS = (
    "partition_field, clustering, require_partition_filter, expiration_days, labels, "
    "description, created_at"
)


def read_spec(con: duckdb.DuckDBPyConnection, table: str) -> tuple[TableSpec, dt.datetime] | None:
    """``(spec, created)`` of an existing table, read back; None if it does not exist."""
    columns = table_columns(con, table)
    if not columns:
        return None
    row = con.execute(
        f"SELECT {_LAYOUT_COLUMNS} FROM {TABLES_TABLE} WHERE table_name = ?", [table]
    ).fetchone()
    return _spec(table, columns, row)


def read_specs(
    con: duckdb.DuckDBPyConnection, tables: Sequence[str]
) -> dict[str, tuple[TableSpec, dt.datetime] | None]:
    """:func:`read_spec` of each table in two statements (``duckdb_columns()`` of the current
    schema, then the layout rows); one table alone is read by :func:`read_spec`."""
    names = list(dict.fromkeys(tables))
    if len(names) < 2:
        return {name: read_spec(con, name) for name in names}
    columns: dict[str, list[tuple[str, str, bool]]] = {}
    for table, name, data_type, nullable in con.execute(
        "SELECT table_name, column_name, data_type, is_nullable FROM duckdb_columns() "
        "WHERE database_name = current_database() AND schema_name = current_schema() "
        "AND table_name = ANY(?) ORDER BY table_name, column_index",
        [names],
    ).fetchall():
        columns.setdefault(table, []).append((name, data_type, bool(nullable)))
    rows = {
        row[0]: row[1:]
        for row in (
            con.execute(
                f"SELECT table_name, {_LAYOUT_COLUMNS} FROM {TABLES_TABLE} "
                "WHERE table_name = ANY(?)",
                [list(columns)],
            ).fetchall()
            if columns
            else ()
        )
    }
    return {n: _spec(n, columns[n], rows.get(n)) if n in columns else None for n in names}


def _spec(
    table: str, columns: Sequence[tuple[str, str, bool]], row: Sequence[Any] | None
) -> tuple[TableSpec, dt.datetime]:
    """A table's spec and creation time from its ``(name, duckdb type, nullable)`` columns
    and its layout row (:data:`_LAYOUT_COLUMNS`; a table without one has the defaults)."""
    row = row or (None, "[]", False, None, "{}", "", utc_now())
    spec = TableSpec(
        name=table,
        columns=tuple(
            Column(
                name,
                BIGQUERY_TYPES.get(data_type, data_type),
                "NULLABLE" if nullable else "REQUIRED",
            )
            for name, data_type, nullable in columns
        ),
        partition_field=row[0],
        clustering=tuple(json.loads(row[1])),
        require_partition_filter=bool(row[2]),
        expiration_days=row[3],
        labels=json.loads(row[4]),
        description=row[5],
    )
    return spec, utc(row[6])


def write_layout(con: duckdb.DuckDBPyConnection, spec: TableSpec, *, created: bool = False) -> None:
    """Write the table's layout row. A patch keeps ``created_at``/``expires_at``, as BigQuery
    keeps ``creationTime``/``expirationTime``; a creation replaces a row a dropped table left."""
    if created:
        write_new_layouts(con, [spec])
        return
    con.execute(
        f"INSERT INTO {TABLES_TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (table_name) DO UPDATE SET "
        "partition_field = excluded.partition_field, clustering = excluded.clustering, "
        "require_partition_filter = excluded.require_partition_filter, "
        "labels = excluded.labels, description = excluded.description, "
        "updated_at = excluded.updated_at",
        _layout_row(spec, utc_now()),
    )


def write_new_layouts(con: duckdb.DuckDBPyConnection, specs: Sequence[TableSpec]) -> None:
    """The layout rows of tables just created, replacing any row a dropped table of the same
    name left: one DELETE and one plain INSERT for all of them."""
    if not specs:
        return
    stamp = utc_now()
    con.execute(
        f"DELETE FROM {TABLES_TABLE} WHERE table_name = ANY(?)", [[spec.name for spec in specs]]
    )
    one = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    con.execute(
        f"INSERT INTO {TABLES_TABLE} VALUES {', '.join(one for _ in specs)}",
        [value for spec in specs for value in _layout_row(spec, stamp)],
    )


def _layout_row(spec: TableSpec, stamp: dt.datetime) -> list[Any]:
    """A table's layout row as :data:`TABLES_DDL` orders it, created and updated at ``stamp``."""
    expires = None if spec.expiration_days is None else stamp + dt.timedelta(spec.expiration_days)
    return [
        spec.name,
        spec.partition_field,
        json.dumps(list(spec.clustering)),
        spec.require_partition_filter,
        spec.expiration_days,
        expires,
        json.dumps(dict(sorted(spec.labels.items()))),
        spec.description,
        stamp,
        stamp,
    ]


def rows_and_created(con: duckdb.DuckDBPyConnection, table: str) -> tuple[int, dt.datetime]:
    """``(rows, created)`` in one statement (no layout row: created now); raises
    duckdb.CatalogException if the table does not exist."""
    rows, created = con.execute(
        f"SELECT (SELECT count(*) FROM {ident(table)}), "
        f"(SELECT created_at FROM {TABLES_TABLE} WHERE table_name = ?)",
        [table],
    ).fetchone()
    return int(rows), utc(created) or utc_now()


def expired_tables(con: duckdb.DuckDBPyConnection, at: dt.datetime) -> list[str]:
    """Names of the tables whose expiration time is ``at`` or earlier, sorted."""
    return [
        name
        for (name,) in con.execute(
            f"SELECT table_name FROM {TABLES_TABLE} WHERE expires_at <= ? ORDER BY table_name",
            [at],
        ).fetchall()
    ]


def drop_table(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Drop a table (if it exists) and its layout row."""
    con.execute(f"DROP TABLE IF EXISTS {ident(table)}")
    con.execute(f"DELETE FROM {TABLES_TABLE} WHERE table_name = ?", [table])
