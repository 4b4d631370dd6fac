"""The Spark frames of a build's outputs: the slim per-line rows, the dead-letter rows, the
per-file rejected-line counts and samples, and the writes into ``hour=`` folders, by Spark or,
for a few rows, by pyarrow on the driver (:mod:`bq_platform.lib.build.hourly` runs them in its one
Spark pass)."""

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bq_platform.lib.core import logformat as lf
from bq_platform.lib.core.accounting import MAX_SAMPLE_CHARS
from bq_platform.lib.build.hour_manifests import (
    _REJECTED,
    _SAMPLE,
    HOUR_FOLDER_COLUMN,
    hour_folder,
    parquet_bytes,
)
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.build.transform import (
    CATEGORIES,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    PAGEVIEW_COLUMN_NAMES,
)
from bq_platform.lib.warehouse.schema import DEADLETTER_COLUMNS_SPEC

#: Columns of the dead-letter Parquet files, in the ``pageview_deadletters`` table's order
#: (:data:`~bq_platform.lib.warehouse.schema.DEADLETTER_COLUMNS_SPEC`); the files are also in
#: ``hour=`` folders.
DEADLETTER_COLUMNS: tuple[str, ...] = tuple(c.name for c in DEADLETTER_COLUMNS_SPEC)
#: Page columns written without a Parquet dictionary (parquet-java's per-column
#: ``parquet.enable.dictionary#<column>``, parquet-hadoop's README, "Class: ParquetOutputFormat"):
#: ``event_id`` is unique per row and ``visitor_id`` nearly so within a file (one hour of a read
#: task), so the writer filled a dictionary per row group only to fall back to plain encoding.
#: The 1x bench's ``full`` write (765,710 rows, warm, four rounds): 3.0-3.6 s -> 2.7-3.1 s, the
#: files 83.4 -> 83.0 MiB (docs/PERFORMANCE.md).
PLAIN_ENCODED_COLUMNS: tuple[str, ...] = ("event_id", "visitor_id")


def slim(classified: DataFrame) -> DataFrame:
    """What the outputs and counts need, per line: page columns for pages, the raw text and
    file for dead letters, and for every line its ``file_no``, ``line_no``, ``category``,
    ``in_sample`` and ``reason``; for pages also their site-hour's ``unit_no``.

    ``classified`` is :func:`~bq_platform.lib.build.transform.transform_lines`'s output with the
    build's ``file_no`` and ``unit_no`` kept (:func:`~bq_platform.lib.build.read.read_lines`).
    The build caches these rows uncompressed (:data:`~bq_platform.lib.build.read.BUILD_SQL_CONF`),
    so a column costs its bytes on every row it is set on: ``site`` and ``hour_label`` are kept
    for pages and dead letters only, ``data_key`` (~80 characters) for dead letters only; a
    non-page line (60% of the bench's lines) keeps only numbers and its category. The per-file
    counts group by ``file_no``, the distinct visitors by ``unit_no``.
    """
    category = F.col("category")
    page = category == CATEGORY_PAGE
    dead = category.isin(CATEGORY_REJECTED, CATEGORY_OUT_OF_WINDOW)
    written = page | dead

    def page_column(name: str) -> Column:
        """A page column where a row needs it: site for pages and dead letters, the others for
        pages (event_id is null but for pages already)."""
        if name == "event_id":
            return F.col(name)
        return F.when(written if name == "site" else page, F.col(name)).alias(name)

    return classified.select(
        "file_no",
        F.when(page, F.col("unit_no")).alias("unit_no"),
        F.when(written, F.col("hour_label")).alias("hour_label"),
        F.when(dead, F.col("data_key")).alias("data_key"),
        "line_no",
        "category",
        *[page_column(c) for c in PAGEVIEW_COLUMN_NAMES],
        "in_sample",
        F.when(dead, F.col("reason")).alias("reason"),
        F.when(dead, F.col("raw")).alias("raw"),
    )


def dead_letter_rows(dead: DataFrame) -> DataFrame:
    """The dead-letter rows to write: :data:`DEADLETTER_COLUMNS` plus the hour folder column.

    The delivery hour and date are typed columns (the session time zone is UTC,
    :mod:`bq_platform.lib.build.spark`), so the day's load job puts each row in its day partition of
    ``pageview_deadletters``.
    """
    delivery_hour = F.to_timestamp(F.col("hour_label"), "yyyy-MM-dd'T'HH")
    return dead.select(
        "*",
        delivery_hour.alias("delivery_hour"),
        F.to_date(delivery_hour).alias("delivery_date"),
    ).select(*DEADLETTER_COLUMNS, F.col("hour_label").alias(HOUR_FOLDER_COLUMN))


def file_counts(rows: DataFrame) -> DataFrame:
    """The per-file counts of a pass, one row per ``file_no`` of :func:`slim`'s ``rows``.

    Columns: ``file_no``; ``lines_read``; ``first_line`` and ``last_line`` (the build checks
    that a file's line numbers are exactly ``1..lines_read``); one count per category of
    :data:`~bq_platform.lib.build.transform.CATEGORIES` (``page``, ``non_page``, ``rejected``,
    ``out_of_window``); ``sample_rows`` (pages of sampled visitors); and
    :func:`rejected_counts`. All counts are lines (BIGINT). The build's first action, which
    also fills its cache.
    """
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
    """Per-file aggregates for :mod:`bq_platform.lib.quality.rejected_share`, computed in the file-count pass:
    for each rejection reason, its lines (``rejected:<reason>``)."""
    rejected = F.col("category") == CATEGORY_REJECTED
    return [
        F.count_if(rejected & (F.col("reason") == code)).alias(_REJECTED + code)
        for code in lf.REJECT_REASONS
    ]


def rejected_samples(rows: DataFrame) -> DataFrame:
    """Per file with rejected lines (``file_no``, as the per-file counts): for each rejection
    reason, the first such line (``sample:<reason>``, by line number), and the file's last
    rejected line (``sample:``); raw text cut to
    :data:`~bq_platform.lib.core.accounting.MAX_SAMPLE_CHARS`.

    Its own aggregation over the rejected rows only, run when the counts show some: ``min_by``
    and ``max_by`` of a string keep a string in the aggregation buffer, which Spark's hash
    aggregation cannot hold, so in the per-file counts they made Spark sort every line of a
    pass by file first (``SortAggregate``: 1.2-1.3 s against 0.55-0.6 s for the counts' final
    stage on the bench's 1x input, docs/PERFORMANCE.md). They keep one value per group, so an
    hour of garbage costs no more memory.
    """
    raw = F.substring(F.col("raw"), 1, MAX_SAMPLE_CHARS)
    line_no = F.col("line_no")
    columns = [
        F.min_by(raw, F.when(F.col("reason") == code, line_no)).alias(_SAMPLE + code)
        for code in lf.REJECT_REASONS
    ]
    columns.append(F.max_by(raw, line_no).alias(_SAMPLE))
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
    """Write ``rows`` under ``prefix`` in ``hour=YYYY-MM-DDTHH`` folders with pyarrow, one
    Parquet file per hour (``part-00000.parquet``), through ``store``; return the files written.

    ``rows`` has ``schema``'s columns (any order; Spark's Arrow types, e.g. large strings, are
    cast to ``schema``'s) and :data:`HOUR_FOLDER_COLUMN`, which the files do not hold, as in
    :func:`write_hour_folders`. ``schema`` is what Spark writes for the same table
    (:func:`~bq_platform.lib.build.hour_manifests.arrow_schema`), so the load jobs take either file.
    No rows: no file.

    Raises:
        pyarrow.ArrowInvalid: a value does not fit ``schema`` (a column of another type).
    """
    hours = rows.column(HOUR_FOLDER_COLUMN)
    labels = pc.unique(hours).to_pylist()
    for label in labels:
        hour_rows = rows.filter(pc.equal(hours, label)).select(schema.names).cast(schema)
        store.write_bytes(
            f"{hour_folder(prefix, label)}/part-00000.parquet", parquet_bytes(hour_rows)
        )
    return len(labels)
