"""How a build pass reads landed files: passes of whole UTC hours, one Spark read per pass
with every line numbered in its file (no shuffle), and the SQL settings that make that work.

:mod:`bq_platform.lib.build` runs a pass per :func:`passes` chunk: :func:`read_lines`, then
the transform, counts and writes.
"""

import contextlib
import datetime as dt
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bq_platform.lib import layout
from bq_platform.lib.manifest import LandedManifest
from bq_platform.lib.objectstore.base import ObjectStore

#: SQL settings of the Spark part of a build: Parquet timestamps as BigQuery loads them, and
#: each landed file its own input split (see :func:`read_lines`): Spark packs small files into
#: one split until ``maxPartitionBytes``, counting ``openCostInBytes`` per file
#: (``FilePartition.getFilePartitions``); an open cost above any split size packs none.
BUILD_SQL_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.files.openCostInBytes": str(1 << 40),
}
#: ``monotonically_increasing_id()`` is the input partition's index shifted left by 33 bits
#: plus the row's position in that partition (``pyspark.sql.functions`` docs): the low 33 bits.
_ROW_IN_SPLIT_MASK = (1 << 33) - 1
#: Read tasks per core after coalescing the one-file splits (Parquet files per hour and task).
_READ_TASKS_PER_CORE = 2
#: Source lines per Spark pass (issue 9: driver memory flat as the data grows, time linear). A
#: pass keeps its classified rows in Spark's in-memory cache: 213 MiB for 2,043,576 synthetic
#: lines (``SparkContext.getRDDStorageInfo``, local[2]), about 105 bytes a line. A 2g driver has
#: about 520 MiB of storage memory, (2,048 - 300 reserved) MiB x ``spark.memory.fraction`` 0.6
#: x ``spark.memory.storageFraction`` 0.5 (spark.apache.org/docs/latest/tuning.html, "Memory
#: Management Overview"), so 4 M lines stay in memory. The 4x bench point read 8.2 M lines
#: (~850 MiB of cache) in one pass and cost more per line than 1x (docs/PERFORMANCE.md).
#: ``BQ_PLATFORM_LINES_PER_PASS``.
DEFAULT_LINES_PER_PASS = 4_000_000


@contextlib.contextmanager
def sql_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set runtime SQL settings for the duration of the block, then restore them."""
    previous = {k: spark.conf.get(k, None) for k in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def read_lines(
    spark: SparkSession, store: ObjectStore, files: Sequence[LandedManifest]
) -> DataFrame:
    """All lines of ``files`` in one read, with their file's identity and 1-based line number.

    Lines are matched to their landed file by ``input_file_name()``, which is a URI
    (``file:///...`` for local paths, ``gs://...`` on GCS), not the path we passed. The reader's
    own list of those URIs (``DataFrame.inputFiles()``, no job) is mapped back to data keys here
    by their last three segments (``site=<s>/hour=<h>/<name>``, URI-unescaped), so each line
    only costs one hash-join lookup, on the driver-built broadcast table. A line that still
    finds no file makes :func:`build_hours` raise.

    Line numbers need no shuffle (issue 9: the window over a file ID cost one shuffle and sort
    of every line). A gzip file is unsplittable, and :data:`BUILD_SQL_CONF` makes each file its
    own input split, so the row position in the split, the low bits of
    ``monotonically_increasing_id()`` taken right at the scan, is the 0-based line number. The
    one-file splits are then coalesced (no shuffle) into ``_READ_TASKS_PER_CORE`` tasks per core:
    a coalesced task reads its files one after the other, each still numbered by its own split.
    The build checks that every file's numbers are exactly ``1..lines``.

    File listing: over 32 paths, Spark lists them in a job of one task per path (1,200 tasks a
    day, 5-12 s measured); ``parallelPartitionDiscovery.parallelism`` caps that job at one task
    per core (on GCS the listing stays parallel).
    """
    by_tail = {m.data_key.split("/", 2)[2]: (i, m) for i, m in enumerate(files)}
    cores = max(1, spark.sparkContext.defaultParallelism)
    with sql_conf(spark, {"spark.sql.sources.parallelPartitionDiscovery.parallelism": str(cores)}):
        reader = spark.read.option("lineSep", "\n").text([store.uri(m.data_key) for m in files])
    uris, ids = [], []
    for uri in reader.inputFiles():
        tail = "/".join(urllib.parse.unquote(uri).rstrip("/").split("/")[-3:])
        if tail in by_tail:
            uris.append(uri)
            ids.append(by_tail[tail][0])
    mapping = spark.createDataFrame(  # from Arrow: a local relation, no Python worker
        pa.table(
            {
                "_uri": uris,
                "site": [files[i].site for i in ids],
                "hour_label": [layout.hour_label(files[i].hour) for i in ids],
                "data_key": [files[i].data_key for i in ids],
                "file_sha256": [files[i].sha256 for i in ids],
            }
        )
    )
    scanned = reader.select(
        F.input_file_name().alias("_uri"),
        F.monotonically_increasing_id().alias("_mid"),
        F.col("value").alias("raw"),
    ).coalesce(min(len(files), cores * _READ_TASKS_PER_CORE))
    line_no = F.col("_mid").bitwiseAND(F.lit(_ROW_IN_SPLIT_MASK)) + F.lit(1)
    return scanned.join(F.broadcast(mapping), "_uri", "left").select(
        "site",
        "hour_label",
        "data_key",
        "file_sha256",
        line_no.cast("bigint").alias("line_no"),
        "raw",
    )


def passes(
    files: Sequence[LandedManifest], max_lines: int = DEFAULT_LINES_PER_PASS
) -> list[list[LandedManifest]]:
    """``files`` cut into Spark passes of whole UTC hours, in hour order.

    A pass takes the next hour while its source lines (``LandedManifest.lines``) stay within
    ``max_lines``; an hour larger than ``max_lines`` is a pass of its own (an hour's files are
    never split, so every hour's outputs come from one pass). Within a pass, files keep their
    order in ``files``.

    Raises:
        ValueError: if ``max_lines`` is not positive.
    """
    if max_lines < 1:
        raise ValueError(f"lines per pass must be positive, got {max_lines}")
    by_hour: dict[dt.datetime, list[LandedManifest]] = {}
    for manifest in files:
        by_hour.setdefault(manifest.hour, []).append(manifest)
    chunks: list[list[LandedManifest]] = []
    lines = 0
    for hour in sorted(by_hour):
        hour_lines = sum(m.lines for m in by_hour[hour])
        if not chunks or lines + hour_lines > max_lines:
            chunks.append([])
            lines = 0
        chunks[-1].extend(by_hour[hour])
        lines += hour_lines
    return chunks
