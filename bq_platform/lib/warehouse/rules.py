"""BigQuery's documented constraints on table specs and jobs, in one place, with their sources.

Neither bqemulator nor DuckDB enforces these, so both warehouses check them before they create
a table or submit a job: a local run fails where BigQuery would, with the same message. Each
rule names its source (a cloud.google.com path, or an upstream issue) where it raises
:func:`refuse`. Job rules: :mod:`bq_platform.lib.warehouse.job_rules`.
"""

import datetime as dt
import re
from collections.abc import Mapping

from bq_platform.lib.warehouse.schema import Column, TableSpec, normalize_mode, normalize_type

JOB_ID_RE = re.compile(r"^[A-Za-z0-9_\-]{1,1024}$")
TABLE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,1023}$")
COLUMN_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,299}$")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_\-]{0,62}$")
LABEL_VALUE_RE = re.compile(r"^[a-z0-9_\-]{0,63}$")
DECORATOR_RE = re.compile(r"^(?P<table>[^$]+)\$(?P<partition>\d{8})$")

MAX_LABELS = 64
MAX_LOAD_URIS = 10_000
MAX_COPY_SOURCES = 1_200
MAX_CLUSTERING_COLUMNS = 4
MAX_COLUMNS = 10_000
#: The largest HTTP request the BigQuery API accepts, bytes: a query job's parameters travel
#: in its jobs.insert request (cloud.google.com/bigquery/quotas, "API requests": maximum
#: request size 10 MB).
MAX_REQUEST_BYTES = 10 * 1000 * 1000
#: Table metadata updates (load, copy and query jobs that write the table or a partition of it)
#: BigQuery allows per table within :data:`TABLE_UPDATE_WINDOW_S` seconds
#: (cloud.google.com/bigquery/quotas#standard_tables).
TABLE_UPDATES_PER_WINDOW = 5
#: BigQuery's error reason for a spent quota (cloud.google.com/bigquery/docs/error-messages).
QUOTA_EXCEEDED = "quotaExceeded"
#: How long to wait before retrying work that met ``quotaExceeded``, seconds: BigQuery's
#: error-messages page says to retry after 10 minutes or more
#: (cloud.google.com/bigquery/docs/error-messages, quotaExceeded).
QUOTA_EXCEEDED_WAIT_S = 600
#: How many times a step that met ``quotaExceeded`` is run again before it fails.
QUOTA_EXCEEDED_RETRIES = 2
TABLE_UPDATE_WINDOW_S = 10.0

KNOWN_TYPES = frozenset(
    {"STRING", "BYTES", "INT64", "FLOAT64", "BOOL", "TIMESTAMP", "DATETIME", "DATE", "NUMERIC"}
)
PARTITION_TYPES = frozenset({"DATE", "TIMESTAMP", "DATETIME"})
#: Clustering columns: top-level, not FLOAT64, BYTES... (clustered-tables#limitations).
CLUSTER_TYPES = frozenset(
    {"STRING", "INT64", "BOOL", "TIMESTAMP", "DATETIME", "DATE", "NUMERIC", "BIGNUMERIC"}
)
MODES = frozenset({"NULLABLE", "REQUIRED"})
WRITE_DISPOSITIONS = frozenset({"WRITE_TRUNCATE", "WRITE_APPEND", "WRITE_EMPTY"})


class RuleViolation(ValueError):
    """A table spec or job that BigQuery would refuse; nothing was sent or run. The message
    (``BigQuery would refuse ...``) names the table or job, the rule and its source."""


def refuse(what: str, rule: str, source: str) -> RuleViolation:
    """The :class:`RuleViolation` to raise: ``what`` broke ``rule``, documented at ``source``."""
    return RuleViolation(f"BigQuery would refuse {what}: {rule} (source: {source})")


def split_destination(destination: str) -> tuple[str, dt.date | None]:
    """``'pageviews$19950801'`` -> ``('pageviews', date(1995, 8, 1))``; no decorator -> None.

    Raises:
        RuleViolation: if the table name or the decorator is not valid.
    """
    match = DECORATOR_RE.fullmatch(destination)
    table, partition = (match["table"], match["partition"]) if match else (destination, None)
    check_table_name(table)
    if partition is None:
        return table, None
    try:
        return table, dt.datetime.strptime(partition, "%Y%m%d").date()
    except ValueError:
        raise refuse(
            f"destination {destination!r}",
            "a partition decorator is a real date, $YYYYMMDD",
            "/bigquery/docs/managing-partitioned-table-data",
        ) from None


def check_job_id(job_id: str) -> str:
    """Return ``job_id`` if BigQuery accepts it, else raise :class:`RuleViolation`."""
    if not isinstance(job_id, str) or not JOB_ID_RE.fullmatch(job_id):
        raise refuse(
            f"job ID {job_id!r}",
            "job IDs are 1-1,024 letters, digits, '_' or '-'",
            "/bigquery/docs/running-jobs#generate-jobid",
        )
    return job_id


def check_table_name(name: str) -> str:
    """Return ``name`` if it is a table name we may send, else raise :class:`RuleViolation`."""
    if not isinstance(name, str) or not TABLE_NAME_RE.fullmatch(name):
        raise refuse(
            f"table name {name!r}",
            "table names are letters, digits and '_' (we use the ASCII subset), <= 1,024",
            "/bigquery/docs/tables#table_naming",
        )
    return name


def check_labels(labels: Mapping[str, str], where: str) -> dict[str, str]:
    """Return ``labels`` as a dict if BigQuery accepts them on ``where`` (a table or job).

    A value of None is refused too: the API answers HTTP 500 to it, which a retry would repeat.

    Raises:
        RuleViolation: for more than 64 labels, or a key or value out of the rules.
    """
    source = "/bigquery/docs/labels-intro#requirements"
    if len(labels) > MAX_LABELS:
        raise refuse(where, f"{len(labels)} labels; at most {MAX_LABELS} per resource", source)
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.fullmatch(key):
            raise refuse(
                where,
                f"label key {key!r}: keys are 1-63 lowercase letters, digits, '_' or '-', "
                "starting with a letter",
                source,
            )
        if not isinstance(value, str) or not LABEL_VALUE_RE.fullmatch(value):
            raise refuse(
                where,
                f"value {value!r} of label {key!r}: values are 0-63 lowercase letters, digits, "
                "'_' or '-'",
                source,
            )
        out[key] = value
    return out


def _check_columns(spec: TableSpec) -> dict[str, Column]:
    what = f"table {spec.name}"
    if not spec.columns:
        raise refuse(what, "a table needs at least one column", "/bigquery/docs/schemas")
    if len(spec.columns) > MAX_COLUMNS:
        raise refuse(
            what, f"{len(spec.columns)} columns; at most {MAX_COLUMNS:,}", "/bigquery/quotas"
        )
    by_name: dict[str, Column] = {}
    seen: set[str] = set()
    for column in spec.columns:
        if not COLUMN_NAME_RE.fullmatch(column.name):
            raise refuse(
                what,
                f"column name {column.name!r}: letters, digits, '_', starting with a letter or "
                "'_', <= 300 characters",
                "/bigquery/docs/schemas#column_names",
            )
        if column.name.lower() in seen:
            raise refuse(
                what,
                f"column {column.name!r} twice: names are unique ignoring case",
                "/bigquery/docs/schemas#column_names",
            )
        seen.add(column.name.lower())
        if normalize_type(column.type) not in KNOWN_TYPES:
            raise refuse(
                what,
                f"column {column.name!r} has type {column.type!r}; use a standard SQL type "
                f"({', '.join(sorted(KNOWN_TYPES))})",
                "/bigquery/docs/schemas#standard_sql_data_types",
            )
        if normalize_mode(column.mode) not in MODES:
            raise refuse(
                what,
                f"column {column.name!r} has mode {column.mode!r}; NULLABLE or REQUIRED",
                "/bigquery/docs/schemas#modes",
            )
        by_name[column.name] = column
    return by_name


def check_table_spec(spec: TableSpec) -> TableSpec:
    """Return ``spec`` if BigQuery would create a table from it (name, columns, partitioning,
    clustering, ``require_partition_filter``, expiration, labels), else raise
    :class:`RuleViolation`."""
    check_table_name(spec.name)
    columns = _check_columns(spec)
    what = f"table {spec.name}"
    if spec.partition_field is not None:
        column = columns.get(spec.partition_field)
        if column is None or normalize_type(column.type) not in PARTITION_TYPES:
            raise refuse(
                what,
                f"partition column {spec.partition_field!r} must be a top-level DATE, TIMESTAMP "
                "or DATETIME column",
                "/bigquery/docs/partitioned-tables#date_timestamp_partitioned_tables",
            )
    elif spec.require_partition_filter:
        raise refuse(
            what,
            "require_partition_filter needs a partitioned table",
            "/bigquery/docs/managing-partitioned-tables#require-filter",
        )
    if len(spec.clustering) > MAX_CLUSTERING_COLUMNS:
        raise refuse(
            what,
            f"{len(spec.clustering)} clustering columns; at most {MAX_CLUSTERING_COLUMNS}",
            "/bigquery/docs/clustered-tables#limitations",
        )
    if len(set(spec.clustering)) != len(spec.clustering):
        raise refuse(what, "a clustering column is named twice", "/bigquery/docs/clustered-tables")
    for name in spec.clustering:
        column = columns.get(name)
        if column is None or normalize_type(column.type) not in CLUSTER_TYPES:
            raise refuse(
                what,
                f"clustering column {name!r} must be an existing top-level column of type "
                f"{', '.join(sorted(CLUSTER_TYPES))}",
                "/bigquery/docs/clustered-tables#limitations",
            )
    if spec.expiration_days is not None and spec.expiration_days <= 0:
        raise refuse(what, "the expiration must be in the future", "/bigquery/docs/managing-tables")
    check_labels(spec.labels, what)
    return spec


def check_destination(destination: str, spec: TableSpec, what: str) -> dt.date | None:
    """The day of ``destination``'s partition decorator (or None) if ``spec`` allows it.

    Raises:
        RuleViolation: if ``destination`` names another table than ``spec``, or has a
            ``$YYYYMMDD`` decorator while ``spec`` is not DAY-partitioned.
    """
    table, day = split_destination(destination)
    if table != spec.name:
        raise refuse(what, f"destination {destination} is not table {spec.name}", "our specs")
    if day is not None and spec.partition_field is None:
        raise refuse(
            what,
            f"{destination}: the partition decorator $YYYYMMDD needs a DAY-partitioned table, "
            f"and {spec.name} is not partitioned",
            "/bigquery/docs/managing-partitioned-table-data",
        )
    return day
