"""How a build pass reads landed files: passes of whole UTC hours, one Spark read per pass
with every line numbered in its file (no shuffle), and the SQL settings that make that work.

:mod:`bq_platform.lib.build.hourly` runs a pass per :func:`passes` chunk: :func:`read_lines`, then
the transform, counts and writes.
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
from bq_platform.lib.py4j_lists import input_files, read_text

#: SQL settings of the Spark part of a build: Parquet timestamps as BigQuery loads them; each
#: landed file its own input split (see :func:`read_lines`): Spark packs small files into one
#: split until ``maxPartitionBytes``, counting ``openCostInBytes`` per file
#: (``FilePartition.getFilePartitions``), and an open cost above any split size packs none; and
#: a union that concatenates its children's partitions: Spark 4's ``UnionExec`` otherwise takes
#: its children's output partitioning when they share one, and zips the read tasks of
#: :func:`read_lines` (one partition each) into a single task (measured: the whole pass on one
#: core); and a pass's cache without compression: to choose a column's encoding, Spark's cache
#: builder runs every value through each candidate scheme's statistics (a boxed Scala hash map
#: lookup per string value for the dictionary scheme), which cost more than the cache saved by
#: being smaller: persist and per-file counts on the bench's 1x input 8.1-8.6 -> 6.7-6.9 s warm
#: (with :func:`~bq_platform.lib.build.outputs.slim`'s narrow non-page rows; 331 MiB of cache
#: instead of 210, docs/PERFORMANCE.md). Set for the whole pass: Spark reads the settings when
#: it plans an action, and the cache's when it persists.
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
#: Source lines per Spark pass (issue 9: driver memory flat as the data grows, time linear). A
#: pass keeps its rows (:func:`~bq_platform.lib.build.outputs.slim`) in Spark's in-memory cache,
#: uncompressed (:data:`BUILD_SQL_CONF`): 331 MiB for 2,043,576 synthetic lines
#: (``SparkContext.getRDDStorageInfo``, local[2]), about 170 bytes a line. A 2g driver has
#: about 520 MiB of storage memory, (2,048 - 300 reserved) MiB x ``spark.memory.fraction`` 0.6
#: x ``spark.memory.storageFraction`` 0.5 (spark.apache.org/docs/latest/tuning.html, "Memory
#: Management Overview"), so 3 M lines (~490 MiB) stay in memory. The 4x bench point read 8.2 M
#: lines (~850 MiB of the then compressed cache) in one pass and cost more per line than 1x
#: (docs/PERFORMANCE.md). ``BQ_PLATFORM_LINES_PER_PASS``.
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

    Columns: ``site``, ``hour_label``, ``data_key``, ``file_sha256`` (of the line's landed file),
    ``file_no`` INT (the file's index in ``files``: the build counts per file by it, an integer
    key instead of the ~80-character data key), ``unit_no`` INT (the index of the file's site
    and hour in :func:`site_hour_units` of ``files``: the build counts distinct visitors per
    site-hour by it), ``line_no`` BIGINT, ``raw``.

    Lines are matched to their landed file by ``input_file_name()``, which is a URI
    (``file:///...`` for local paths, ``gs://...`` on GCS), not the path we passed. The readers'
    own lists of those URIs (``DataFrame.inputFiles()``, no job) are mapped back to data keys
    here by their last three segments (``site=<s>/hour=<h>/<name>``, URI-unescaped), so each
    line only costs one hash-join lookup, on the driver-built broadcast table. A line that still
    finds no file makes :func:`build_hours` raise. The paths go to the JVM, and the URIs come
    back, in one py4j call per reader (:mod:`bq_platform.lib.py4j_lists`: PySpark's own
    conversions make one call per file, 1-1.6 s of a cold driver for the 1x bench's 3,600).

    Line numbers need no shuffle (issue 9: the window over a file ID cost one shuffle and sort
    of every line). A gzip file is unsplittable, and :data:`BUILD_SQL_CONF` makes each file its
    own input split, so the row position in the split, the low bits of
    ``monotonically_increasing_id()`` taken right at the scan, is the 0-based line number. The
    build checks that every file's numbers are exactly ``1..lines``.

    Read tasks: ``_READ_TASKS_PER_CORE`` per core, each a run of consecutive ``files``
    (:func:`read_groups`; a pass's files come in hour order), read by its own reader whose
    one-file splits are coalesced into one task (no shuffle: the task reads its files one after
    the other, each still numbered by its own split); the runs are concatenated (``unionAll``,
    with :data:`BUILD_SQL_CONF`'s ``spark.sql.unionOutputPartitioning`` off, so that the union
    keeps one partition per run instead of zipping them into one). A task then holds whole hours
    but where a run's cut falls inside one, and the writes open one Parquet file per hour
    folder a task holds (~12 ms each): 72-75 files for a 72-hour pass instead of ~150 from one
    reader, whose splits Spark orders by size (``FilePartition.getFilePartitions``) and whose
    coalesce mixes hours. Measured on the bench's 1x input: the writes 3.5 -> 2.5-2.7 s warm,
    5.4 -> 4.3-4.8 s cold (docs/PERFORMANCE.md).

    File listing: over ``spark.sql.sources.parallelPartitionDiscovery.threshold`` paths (32),
    Spark lists them in a Spark job of one task per path (1,200 tasks a day, 5-12 s measured);
    :func:`listing_conf` lists local files on the driver and caps the job for remote ones.
    """
    by_tail = {m.data_key.split("/", 2)[2]: (i, m) for i, m in enumerate(files)}
    unit_of = {unit: i for i, unit in enumerate(site_hour_units(files))}
    cores = max(1, spark.sparkContext.defaultParallelism)
    uris, ids, scans = [], [], []
    for group in read_groups(files, cores * _READ_TASKS_PER_CORE):
        paths = [store.uri(m.data_key) for m in group]
        with sql_conf(spark, listing_conf(paths, cores)):
            reader = read_text(spark.read.option("lineSep", "\n"), paths)
        for uri in input_files(reader):
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

    A unit's index is the ``unit_no`` of :func:`read_lines`: the build counts distinct visitors
    per site-hour by that integer instead of two strings (a site name and a 13-character hour
    label on every page row), and maps the counts back through this list. On the bench's 1x
    input (72 hours of 50 sites, 765,710 pages) that aggregation's stages took 0.97-1.00 s
    against 1.22-1.26 s by the strings in cold builds, 0.57-0.69 s against 0.72-0.97 s warm
    (docs/PERFORMANCE.md).
    """
    return list(dict.fromkeys(_site_hour(m) for m in files))


def listing_conf(paths: Sequence[str], cores: int) -> dict[str, str]:
    """How Spark lists ``paths`` (URIs) for one reader: SQL settings for :func:`sql_conf`.

    Spark lists more than ``spark.sql.sources.parallelPartitionDiscovery.threshold`` (32) paths
    in a Spark job (``InMemoryFileIndex.bulkListLeafFiles``). For local files (a path or
    ``file:``, as :class:`~bq_platform.lib.storage.local.LocalObjectStore` gives) that
    job is pure overhead: the bench's 72-hour pass made four, 0.05-0.25 s each plus their
    scheduling, where the driver stats 900 local files in milliseconds; on the 1x landing zone
    the pass's first action started 0.5 s sooner with the driver's listing (three cold builds
    each, docs/PERFORMANCE.md). So local paths are listed on the driver (threshold above their
    number). Remote paths (``gs://``: one metadata request each) keep Spark's job, capped at one
    task per core (``parallelPartitionDiscovery.parallelism``; 1,200 tasks a day otherwise,
    5-12 s measured), so a cluster's executors list them side by side.
    """
    if paths and all(urllib.parse.urlsplit(path).scheme in ("", "file") for path in paths):
        return {"spark.sql.sources.parallelPartitionDiscovery.threshold": str(len(paths))}
    return {"spark.sql.sources.parallelPartitionDiscovery.parallelism": str(cores)}


def read_groups(files: Sequence[LandedManifest], tasks: int) -> list[list[LandedManifest]]:
    """``files`` cut, in their order, into at most ``tasks`` runs of about equal lines.

    Each run is one read task, so with ``files`` in hour order a task holds whole hours but
    where a cut falls inside one. The cut after the run ``k`` is where the lines read so far
    (``LandedManifest.lines``) reach ``(k + 1) / tasks`` of the total; no run is empty.

    Raises:
        ValueError: if ``tasks`` is not positive.
    """
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
