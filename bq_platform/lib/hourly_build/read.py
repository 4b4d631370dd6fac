"""How a build pass reads landed files: passes of whole UTC hours, one Spark read per pass
with every line numbered in its file (no shuffle), and the SQL settings that make that work.
"""

import contextlib
import datetime as dt
import functools
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import LandedManifest
from bq_platform.lib.storage.base import ObjectStore

#: SQL settings of a build pass: Parquet timestamps as BigQuery loads them; one input split per
#: landed file (``FilePartition.getFilePartitions``); a union that keeps its children's
#: partitions (else Spark 4 zips the read tasks into one); an uncompressed cache (cheaper CPU).
BUILD_SQL_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.files.openCostInBytes": str(1 << 40),
    "spark.sql.unionOutputPartitioning": "false",
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}
#: ``monotonically_increasing_id()`` is the input partition's index shifted left by 33 bits
#: plus the row's position in that partition (``pyspark.sql.functions`` docs): the low 33 bits.
_ROW_IN_SPLIT_MASK = (1 << 33) - 1
#: Read tasks per core (:func:`read_groups`), each a run of consecutive landed files.
_READ_TASKS_PER_CORE = 2
#: Source lines per Spark pass (``BQ_PLATFORM_LINES_PER_PASS``), so a pass's cache (about 170
#: bytes a line) fits a 2g driver's ~520 MiB of storage memory: (2,048 - 300) MiB x
#: ``spark.memory.fraction`` 0.6 x ``storageFraction`` 0.5 (spark.apache.org/docs/latest/
#: tuning.html, "Memory Management Overview").
DEFAULT_LINES_PER_PASS = 3_000_000


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
    """All lines of ``files``, with their file's identity and 1-based line number.

    Columns: ``site``, ``hour_label``, ``data_key``, ``file_sha256``, ``file_no`` INT (the
    file's index in ``files``), ``unit_no`` INT (its site-hour's index in
    :func:`site_hour_units`), ``line_no`` BIGINT (1-based), ``raw``.

    Lines are matched to their file by ``input_file_name()`` (a line with no file gets null
    ids). Line numbers need no shuffle: a gzip file is unsplittable and :data:`BUILD_SQL_CONF`
    makes each file its own split, so the low bits of ``monotonically_increasing_id()`` are
    the line's position. Each read task is a run of consecutive ``files`` (:func:`read_groups`).
    """
    by_tail = {m.data_key.split("/", 2)[2]: (i, m) for i, m in enumerate(files)}
    unit_of = {unit: i for i, unit in enumerate(site_hour_units(files))}
    cores = max(1, spark.sparkContext.defaultParallelism)
    uris, ids, scans = [], [], []
    for group in read_groups(files, cores * _READ_TASKS_PER_CORE):
        paths = [store.uri(m.data_key) for m in group]
        with sql_conf(spark, listing_conf(paths, cores)):
            reader = spark.read.option("lineSep", "\n").text(paths)
        for uri in reader.inputFiles():
            tail = "/".join(urllib.parse.unquote(uri).rstrip("/").split("/")[-3:])
            if tail in by_tail:
                uris.append(uri)
                ids.append(by_tail[tail][0])
        scans.append(
            reader.select(
                F.input_file_name().alias("_uri"),
                F.monotonically_increasing_id().alias("_mid"),
                F.col("value").alias("raw"),
            ).coalesce(1)
        )
    mapping = spark.createDataFrame(  # from Arrow: a local relation, no Python worker
        pa.table(
            {
                "_uri": uris,
                "file_no": pa.array(ids, pa.int32()),
                "unit_no": pa.array([unit_of[_site_hour(files[i])] for i in ids], pa.int32()),
                "site": [files[i].site for i in ids],
                "hour_label": [layout.hour_label(files[i].hour) for i in ids],
                "data_key": [files[i].data_key for i in ids],
                "file_sha256": [files[i].sha256 for i in ids],
            }
        )
    )
    scanned = functools.reduce(DataFrame.unionAll, scans)
    line_no = F.col("_mid").bitwiseAND(F.lit(_ROW_IN_SPLIT_MASK)) + F.lit(1)
    return scanned.join(F.broadcast(mapping), "_uri", "left").select(
        "site",
        "hour_label",
        "data_key",
        "file_sha256",
        "file_no",
        "unit_no",
        line_no.cast("bigint").alias("line_no"),
        "raw",
    )


def _site_hour(manifest: LandedManifest) -> tuple[str, str]:
    return manifest.site, layout.hour_label(manifest.hour)


def site_hour_units(files: Sequence[LandedManifest]) -> list[tuple[str, str]]:
    """The distinct ``(site, hour_label)`` of ``files``, in order of first appearance.

    A unit's index is the ``unit_no`` of :func:`read_lines`: the build groups by that integer
    rather than two strings and maps the counts back through this list.
    """
    return list(dict.fromkeys(_site_hour(m) for m in files))


def listing_conf(paths: Sequence[str], cores: int) -> dict[str, str]:
    """How Spark lists ``paths`` (URIs) for one reader: SQL settings for :func:`sql_conf`.

    Spark lists more than ``spark.sql.sources.parallelPartitionDiscovery.threshold`` (32) paths
    in a Spark job (``InMemoryFileIndex.bulkListLeafFiles``). Local paths (none or ``file:``
    scheme) are listed on the driver instead; remote ones keep the job, one task per core.
    """
    if paths and all(urllib.parse.urlsplit(path).scheme in ("", "file") for path in paths):
        return {"spark.sql.sources.parallelPartitionDiscovery.threshold": str(len(paths))}
    return {"spark.sql.sources.parallelPartitionDiscovery.parallelism": str(cores)}


def read_groups(files: Sequence[LandedManifest], tasks: int) -> list[list[LandedManifest]]:
    """``files`` cut, in their order, into at most ``tasks`` non-empty runs of about equal
    lines; ``ValueError`` if ``tasks`` is not positive."""
    if tasks < 1:
        raise ValueError(f"read tasks must be positive, got {tasks}")
    count = min(tasks, len(files))
    total = sum(m.lines for m in files)
    groups: list[list[LandedManifest]] = []
    seen = 0
    for index, manifest in enumerate(files):
        left = len(files) - index  # files not yet placed, this one included
        need_new = not groups or (
            len(groups) < count
            and (seen * count >= len(groups) * total or left <= count - len(groups))
        )
        if need_new:
            groups.append([])
        groups[-1].append(manifest)
        seen += manifest.lines
    return groups


def passes(
    files: Sequence[LandedManifest], max_lines: int = DEFAULT_LINES_PER_PASS
) -> list[list[LandedManifest]]:
    """``files`` cut into Spark passes of whole UTC hours, in hour order: a pass takes the next
    hour while its source lines stay within ``max_lines`` (an hour is never split; a larger one
    is a pass of its own). ``ValueError`` if ``max_lines`` is not positive."""
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
