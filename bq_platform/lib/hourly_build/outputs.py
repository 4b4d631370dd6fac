"""The Spark frames of a build's outputs: the slim per-line rows, the dead-letter rows, the
per-file counts and rejected samples, and the writes into ``hour=`` folders (by Spark, or for
a few rows by pyarrow on the driver)."""

import io
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bq_platform.lib.core import logformat as lf
from bq_platform.lib.core.accounting import MAX_SAMPLE_CHARS
from bq_platform.lib.core.column_modes import is_required, with_table_modes
from bq_platform.lib.hourly_build.traffic import ROBOTS_TXT_COLUMN, robots_txt_column
from bq_platform.lib.hourly_build.transform import (
    CATEGORIES,
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    PAGEVIEW_COLUMN_NAMES,
    PARSED_COLUMN_NAMES,
)
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.warehouse.schema import DEADLETTER_COLUMNS_SPEC, PAGEVIEW_COLUMNS
from bq_platform.lib.warehouse.schema import Column as TableColumn

#: Columns of the dead-letter Parquet files, in the ``pageview_deadletters`` table's order.
DEADLETTER_COLUMNS: tuple[str, ...] = tuple(c.name for c in DEADLETTER_COLUMNS_SPEC)
#: Page columns written without a Parquet dictionary (``parquet.enable.dictionary#<column>``,
#: parquet-hadoop README, "Class: ParquetOutputFormat"): their values are (nearly) unique.
PLAIN_ENCODED_COLUMNS: tuple[str, ...] = ("event_id", "visitor_id")
#: Partition folder name of every Parquet output (``hour=YYYY-MM-DDTHH``).
HOUR_FOLDER_COLUMN = "hour"
#: Per-file aggregates: ``rejected:<reason>`` counts the lines rejected for ``<reason>``;
#: ``sample:<reason>`` is the first such raw line, ``sample:`` the file's last rejected one.
REJECTED_COLUMN_PREFIX = "rejected:"
SAMPLE_COLUMN_PREFIX = "sample:"


def slim(classified: DataFrame) -> DataFrame:
    """What the outputs and counts need of ``classified`` (the transform's output with
    ``file_no`` and ``unit_no``), each column set only on the rows that need it (the rows are
    cached uncompressed): page columns for pages, raw text and file for dead letters, the
    site-hour (``unit_no``) and ``client`` for pages and in-window fetches of ``/robots.txt``
    (:data:`~bq_platform.lib.hourly_build.traffic.ROBOTS_TXT_COLUMN`), which the traffic
    heuristics count."""
    category = F.col("category")
    page = category == CATEGORY_PAGE
    robots = category.isin(CATEGORY_PAGE, CATEGORY_NON_PAGE) & robots_txt_column(F.col("page_path"))
    visitor_line = page | robots
    dead = category.isin(CATEGORY_REJECTED, CATEGORY_OUT_OF_WINDOW)
    written = page | dead

    def page_column(name: str) -> Column:
        """Site for pages and dead letters, other page columns for pages only."""
        if name == "event_id":
            return F.col(name)
        return F.when(written if name == "site" else page, F.col(name)).alias(name)

    return classified.select(
        "file_no",
        F.when(visitor_line, F.col("unit_no")).alias("unit_no"),
        F.when(visitor_line, F.col("client")).alias("client"),
        robots.alias(ROBOTS_TXT_COLUMN),
        F.when(written, F.col("hour_label")).alias("hour_label"),
        F.when(dead, F.col("data_key")).alias("data_key"),
        "line_no",
        "category",
        *[page_column(c) for c in PARSED_COLUMN_NAMES],
        "in_sample",
        F.when(page, F.col("user_agent_field")).alias("user_agent_field"),
        F.when(dead, F.col("reason")).alias("reason"),
        F.when(dead, F.col("raw")).alias("raw"),
    )


def dead_letter_rows(dead: DataFrame) -> DataFrame:
    """The dead-letter rows to write: :data:`DEADLETTER_COLUMNS` (delivery hour and date typed,
    in UTC; the table's modes, :func:`~bq_platform.lib.core.column_modes.with_table_modes`)
    plus the hour folder column."""
    delivery_hour = F.to_timestamp(F.col("hour_label"), "yyyy-MM-dd'T'HH")
    rows = dead.select(
        "*",
        delivery_hour.alias("delivery_hour"),
        F.to_date(delivery_hour).alias("delivery_date"),
    ).select(*DEADLETTER_COLUMNS, F.col("hour_label").alias(HOUR_FOLDER_COLUMN))
    return with_table_modes(rows, DEADLETTER_COLUMNS_SPEC, "a dead-letter row")


def pageview_rows(pages: DataFrame) -> DataFrame:
    """The pageview rows to write (``full`` or ``sample``) of classified ``pages`` (with
    ``hour_label``): :data:`PAGEVIEW_COLUMNS` with the table's modes
    (:func:`~bq_platform.lib.core.column_modes.with_table_modes`) plus the hour folder
    column."""
    rows = pages.select(*PAGEVIEW_COLUMN_NAMES, F.col("hour_label").alias(HOUR_FOLDER_COLUMN))
    return with_table_modes(rows, PAGEVIEW_COLUMNS, "a pageview row")


def file_counts(rows: DataFrame) -> DataFrame:
    """Per ``file_no`` of :func:`slim`'s ``rows``: ``lines_read``, ``first_line``,
    ``last_line``, one count per category, ``sample_rows`` and :func:`rejected_counts` (lines)."""
    category = F.col("category")
    return rows.groupBy("file_no").agg(
        F.count(F.lit(1)).alias("lines_read"),
        F.min("line_no").alias("first_line"),
        F.max("line_no").alias("last_line"),
        *[F.count_if(category == c).alias(c) for c in CATEGORIES],
        F.count_if((category == CATEGORY_PAGE) & F.col("in_sample")).alias("sample_rows"),
        *rejected_counts(),
    )


def rejected_counts() -> list[Column]:
    """Per-file lines of each rejection reason (``rejected:<reason>``), for
    :mod:`bq_platform.lib.quality.rejected_share`."""
    rejected = F.col("category") == CATEGORY_REJECTED
    return [
        F.count_if(rejected & (F.col("reason") == code)).alias(REJECTED_COLUMN_PREFIX + code)
        for code in lf.REJECT_REASONS
    ]


def rejected_samples(rows: DataFrame) -> DataFrame:
    """Per ``file_no``: each reason's first line (``sample:<reason>``) and the last rejected
    line (``sample:``), cut to ``MAX_SAMPLE_CHARS``. Apart from :func:`file_counts`, as a
    string in ``min_by``/``max_by`` forces a sort aggregation."""
    raw = F.substring(F.col("raw"), 1, MAX_SAMPLE_CHARS)
    line_no = F.col("line_no")
    columns = [
        F.min_by(raw, F.when(F.col("reason") == code, line_no)).alias(SAMPLE_COLUMN_PREFIX + code)
        for code in lf.REJECT_REASONS
    ]
    columns.append(F.max_by(raw, line_no).alias(SAMPLE_COLUMN_PREFIX))
    return rows.where(F.col("category") == CATEGORY_REJECTED).groupBy("file_no").agg(*columns)


def write_hour_folders(frame: DataFrame, uri: str) -> None:
    """Append ``frame`` as Parquet under ``uri`` in ``hour=YYYY-MM-DDTHH`` folders (from its
    :data:`HOUR_FOLDER_COLUMN`, which the files then do not hold); the columns of
    :data:`PLAIN_ENCODED_COLUMNS` it has are written without a dictionary."""
    writer = frame.write.mode("append").partitionBy(HOUR_FOLDER_COLUMN)
    for column in PLAIN_ENCODED_COLUMNS:
        writer = writer.option(f"parquet.enable.dictionary#{column}", "false")
    writer.parquet(uri)


def write_hour_files(rows: pa.Table, store: ObjectStore, prefix: str, schema: pa.Schema) -> int:
    """Write ``rows`` (``schema``'s columns and :data:`HOUR_FOLDER_COLUMN`) under ``prefix``
    with pyarrow, one ``part-00000.parquet`` per hour folder; the files written. Raises
    pyarrow.ArrowInvalid if a value does not fit ``schema``, ValueError if a required field
    of ``schema`` has a null (nothing of that hour is written)."""
    hours = rows.column(HOUR_FOLDER_COLUMN)
    labels = pc.unique(hours).to_pylist()
    for label in labels:
        hour_rows = rows.filter(pc.equal(hours, label)).select(schema.names).cast(schema)
        store.write_bytes(
            f"{hour_folder(prefix, label)}/part-00000.parquet", parquet_bytes(hour_rows)
        )
    return len(labels)


_ARROW_TYPES: Mapping[str, pa.DataType] = {
    "STRING": pa.string(),
    "INT64": pa.int64(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
}


def _arrow_schema(columns: Sequence[TableColumn]) -> pa.Schema:
    """What Spark writes for ``columns`` (``TIMESTAMP`` as ``TIMESTAMP(MICROS, UTC)``; a
    ``REQUIRED`` column a required field, :mod:`bq_platform.lib.core.column_modes`), so a load
    job takes a file written either way."""
    return pa.schema(
        [pa.field(c.name, _ARROW_TYPES[c.type], nullable=not is_required(c)) for c in columns]
    )


def pageview_arrow_schema() -> pa.Schema:
    """Arrow schema of the pageview Parquet files (``PAGEVIEW_COLUMNS``, in order)."""
    return _arrow_schema(PAGEVIEW_COLUMNS)


def deadletter_arrow_schema() -> pa.Schema:
    """Arrow schema of the dead-letter Parquet files (:data:`DEADLETTER_COLUMNS`, in order)."""
    return _arrow_schema(DEADLETTER_COLUMNS_SPEC)


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as one Parquet file (pyarrow's defaults: snappy, as Spark writes)."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def empty_parquet(schema: pa.Schema) -> bytes:
    """A Parquet file of ``schema`` with no rows."""
    return parquet_bytes(schema.empty_table())


def hour_folder(prefix: str, label: str) -> str:
    """The ``hour=`` folder of the hour ``label`` (``YYYY-MM-DDTHH``) under ``prefix``."""
    return f"{prefix}/{HOUR_FOLDER_COLUMN}={label}"


def parquet_files_by_folder(store: ObjectStore, prefix: str) -> dict[str, dict[str, int]]:
    """``{hour folder: {key: size in bytes}}`` of the Parquet files under ``prefix`` (hidden
    ``.``/``_`` files left out), from one listing."""
    out: dict[str, dict[str, int]] = {}
    for key, size in store.list_sizes(prefix).items():
        name = key.rsplit("/", 1)[-1]
        if name.endswith(".parquet") and not name.startswith((".", "_")):
            out.setdefault(key.rsplit("/", 1)[0], {})[key] = size
    return out


def clear_hour_folders(store: ObjectStore, prefixes: Sequence[str], labels: Sequence[str]) -> int:
    """Delete the ``hour=`` folders of ``labels`` that an earlier try of the attempt left; the
    objects deleted. Only folders that hold something are deleted: on GCS deleting a folder is
    a listing request even when it is empty."""
    deleted = 0
    for prefix in prefixes:
        present = {key[len(prefix) + 1 :].split("/", 1)[0] for key in store.list_keys(prefix)}
        for label in labels:
            if f"{HOUR_FOLDER_COLUMN}={label}" in present:
                deleted += store.delete_prefix(hour_folder(prefix, label))
    return deleted
