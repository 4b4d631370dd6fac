"""Load and copy jobs as BigQuery runs them, in the caller's DuckDB transaction.

A failure raises :class:`JobError` with BigQuery's error reason
(cloud.google.com/bigquery/docs/error-messages) and changes nothing. Checked here is what
BigQuery checks while a job runs: Parquet column types, that the destination exists
(``CREATE_NEVER``), and that a write into ``table$YYYYMMDD`` holds only that day's rows.
"""

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from bq_platform.lib.warehouse import job_rules, rules, schema
from bq_platform.lib.warehouse.duckdb.sql import duckdb_type, ident
from bq_platform.lib.warehouse.job_model import CopyJob, LoadJob
from bq_platform.lib.warehouse.schema import TableSpec

INVALID = "invalid"
NOT_FOUND = "notFound"
DUPLICATE = "duplicate"
ACCESS_DENIED = "accessDenied"
INTERNAL_ERROR = "internalError"

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
_GLOB_CHARS = frozenset("*?[")


class JobError(Exception):
    """A job failed; carries BigQuery's error reason (``invalid``, ``notFound``...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _parquet_select(con: duckdb.DuckDBPyConnection, job: LoadJob) -> tuple[str, list[Any]]:
    """A ``SELECT`` of the spec's columns, cast, from the job's Parquet files, each file's
    types checked first so an error names file and column; a NULLABLE column no file has is
    NULL."""
    paths: list[str] = []
    for uri in job.source_uris:
        if "://" in uri and not uri.startswith("file://"):
            raise JobError(
                INVALID,
                f"{uri}: the local DuckDB warehouse loads local files only (use the BigQuery "
                "warehouse for gs:// URIs)",
            )
        path = uri.removeprefix("file://")
        if not _GLOB_CHARS.intersection(path) and not Path(path).is_file():
            raise JobError(NOT_FOUND, f"Not found: URI {uri}")
        paths.append(path)
    present: set[str] = set()
    for path in paths:
        described = con.execute(
            "DESCRIBE SELECT * FROM read_parquet(?, hive_partitioning = false)", [path]
        ).fetchall()
        types = {row[0]: row[1] for row in described}
        for column in job.spec.columns:
            target = duckdb_type(column)
            if column.name not in types:
                if schema.normalize_mode(column.mode) == "REQUIRED":
                    raise JobError(
                        INVALID,
                        f"{path}: column {column.name!r} is missing and REQUIRED in "
                        f"{job.spec.name}",
                    )
                continue
            if types[column.name] not in _PARQUET_SOURCES.get(target, frozenset({target})):
                raise JobError(
                    INVALID,
                    f"{path}: column {column.name!r} has type {types[column.name]}, which "
                    f"cannot be loaded into {column.type} column of {job.spec.name}",
                )
            present.add(column.name)
    select = ", ".join(
        f"CAST({ident(c.name)} AS {duckdb_type(c)}) AS {ident(c.name)}"
        if c.name in present
        else f"CAST(NULL AS {duckdb_type(c)}) AS {ident(c.name)}"
        for c in job.spec.columns
    )
    # hive_partitioning off: DuckDB would add (or override) columns from folders such as
    # hour=1995-08-01T04/; union_by_name on: else it drops the columns the first file lacks.
    return (
        f"SELECT {select} FROM read_parquet(?, hive_partitioning = false, union_by_name = true)",
        [paths],
    )


def _check_one_day(
    con: duckdb.DuckDBPyConnection,
    select: str,
    params: Sequence[Any],
    field: str,
    destination: str,
    day: dt.date,
) -> None:
    """BigQuery fails a write into ``table$YYYYMMDD`` whose rows belong to other days."""
    found = con.execute(
        f"SELECT DISTINCT {ident(field)} FROM ({select}) WHERE {ident(field)} IS DISTINCT FROM ?",
        [*params, day],
    ).fetchall()
    try:
        job_rules.check_partition_rows(destination, day, [row[0] for row in found])
    except rules.RuleViolation as exc:
        raise JobError(INVALID, str(exc)) from exc


def _prepare_destination(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    day: dt.date | None,
    disposition: str,
) -> None:
    """Empty the destination (WRITE_TRUNCATE) or check it is empty (WRITE_EMPTY)."""
    where, params = ("", [])
    if day is not None:
        where, params = (f" WHERE {ident(spec.partition_field or '')} = ?", [day])
    if disposition == "WRITE_TRUNCATE":
        con.execute(f"DELETE FROM {ident(spec.name)}{where}", params)
    elif disposition == "WRITE_EMPTY":
        row = con.execute(f"SELECT count(*) FROM {ident(spec.name)}{where}", params).fetchone()
        if row and row[0]:
            target = spec.name if day is None else f"{spec.name}${day:%Y%m%d}"
            raise JobError(DUPLICATE, f"Already Exists: {target} is not empty (WRITE_EMPTY)")


def run_load(
    con: duckdb.DuckDBPyConnection,
    job: LoadJob,
    destination_spec: Callable[[str], TableSpec | None],
) -> int:
    """Run a validated load job in ``con``'s open transaction; the rows written.
    ``destination_spec`` reads a table's current spec (None if missing). Raises JobError."""
    table, day = rules.split_destination(job.destination)
    spec = destination_spec(table)
    if spec is None:
        raise JobError(NOT_FOUND, f"Not found: Table {table} (loads never create tables)")
    select, params = _parquet_select(con, job)
    if day is not None:
        _check_one_day(con, select, params, spec.partition_field or "", job.destination, day)
    _prepare_destination(con, spec, day, job.write_disposition)
    columns = ", ".join(ident(c.name) for c in job.spec.columns)
    cursor = con.execute(f"INSERT INTO {ident(table)} ({columns}) {select}", params)
    return _count(cursor)


def run_copy(
    con: duckdb.DuckDBPyConnection,
    job: CopyJob,
    destination_spec: Callable[[str], TableSpec | None],
) -> int:
    """:func:`run_load` for a copy job."""
    table, day = rules.split_destination(job.destination)
    spec = destination_spec(table)
    if spec is None:
        raise JobError(NOT_FOUND, f"Not found: Table {table} (copies never create tables)")
    selects: list[tuple[str, list[Any]]] = []
    for source in job.sources:
        name, source_day = rules.split_destination(source)
        source_spec = destination_spec(name)
        if source_spec is None:
            raise JobError(NOT_FOUND, f"Not found: Table {name}")
        if source_day is None:
            selects.append((f"SELECT * FROM {ident(name)}", []))
        else:
            field = ident(source_spec.partition_field or "")
            selects.append((f"SELECT * FROM {ident(name)} WHERE {field} = ?", [source_day]))
    union = " UNION ALL BY NAME ".join(select for select, _ in selects)
    params = [p for _, select_params in selects for p in select_params]
    if day is not None:
        _check_one_day(con, union, params, spec.partition_field or "", job.destination, day)
    _prepare_destination(con, spec, day, job.write_disposition)
    return _count(con.execute(f"INSERT INTO {ident(table)} BY NAME {union}", params))


_INVALID_ERRORS: tuple[type[Exception], ...] = (
    duckdb.BinderException,
    duckdb.ConstraintException,
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.OutOfRangeException,
    duckdb.ParserException,
    duckdb.TypeMismatchException,
)


def classify(exc: BaseException) -> tuple[str, str]:
    """Map an exception raised inside a job to (BigQuery error reason, message)."""
    if isinstance(exc, JobError):
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


def _count(cursor: duckdb.DuckDBPyConnection) -> int:
    """Rows changed by the DML statement that produced ``cursor``."""
    row = cursor.fetchone()
    return int(row[0]) if row else 0
