"""The hourly build: landed gzip logs -> pageview Parquet files + one manifest per UTC hour.

This is the body of the ``pageview_files`` asset. Steps 1-3 are
:mod:`bq_platform.lib.deliveries`, step 7 :mod:`bq_platform.lib.hour_manifests`; this module
runs the Spark pass. For a set of UTC hours it:

1. lists the sites (``landing/pageviews/site=<name>``) and every hour's landed manifests;
2. checks every landed file against its manifest (exists, byte size, SHA-256) and raises
   :class:`LandingError` naming each file that disagrees;
3. counts a delivery whose checksum was already delivered for the same site and hour once:
   the extra deliveries' lines are ``duplicates`` (at-least-once delivery);
4. reads all kept files of all hours in *one* Spark pass (gzip is unsplittable, so one file is
   one split, read in order), numbers lines per file without a shuffle, and classifies them with
   :func:`bq_platform.lib.transform.transform_lines`; the result is persisted once;
5. aggregates per (site, hour, file) and the distinct visitors per (site, hour); a file whose
   line count differs from its manifest is reported in ``file_mismatches`` (not raised: the
   blocking accounting check reports it, with the other hours still built); the same pass
   counts rejected lines per reason and keeps a few raw ones, for the rejected-share check
   (:mod:`bq_platform.lib.quality`);
6. writes Parquet under this attempt's own prefix (:func:`bq_platform.lib.layout.attempt_prefix`)
   in ``hour=YYYY-MM-DDTHH`` folders: ``full`` (pages), ``sample`` (pages of sampled visitors)
   and the dead letters (rejected and out-of-window lines with reason, raw text and delivery
   hour; :mod:`bq_platform.lib.build_frames`); an hour without such rows still gets one empty
   Parquet file in each, so each load job has at least one file;
7. writes each hour's :class:`~bq_platform.lib.manifest.HourManifest` *last*; it names exactly
   the files that count, so a crashed attempt leaves nothing a loader would pick up.

Per site and hour, when the manifests are right:
``source_lines = pageviews + non_page_hits + rejected + duplicates + out_of_window``.

Spark work: one read of the landed gzip (no shuffle: lines are numbered where they are read),
one persist, two small aggregations and three Parquet writes from the persisted rows.
"""

import contextlib
import datetime as dt
import logging
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bq_platform.lib import layout
from bq_platform.lib.build_frames import (
    dead_letter_rows,
    rejected_aggregates,
    slim,
    write_hour_folders,
)
from bq_platform.lib.deliveries import landed_hour, list_sites, verify_landed
from bq_platform.lib.hour_manifests import (
    _SAMPLE,
    _SAMPLES,
    HOUR_FOLDER_COLUMN,
    hour_folder,
    hour_manifests,
    sum_counts,
)
from bq_platform.lib.manifest import HourManifest, LandedManifest
from bq_platform.lib.objectstore.base import ObjectStore
from bq_platform.lib.partition_window import HourWindow
from bq_platform.lib.pseudonymize import key_id
from bq_platform.lib.transform import (
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    PAGEVIEW_COLUMN_NAMES,
    transform_lines,
)

#: SQL settings of the Spark part of a build: Parquet timestamps as BigQuery loads them, and
#: each landed file its own input split (see :func:`_read_lines`): Spark packs small files into
#: one split until ``maxPartitionBytes``, counting ``openCostInBytes`` per file
#: (``FilePartition.getFilePartitions``); an open cost above any split size packs none.
_BUILD_SQL_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.files.openCostInBytes": str(1 << 40),
}
#: ``monotonically_increasing_id()`` is the input partition's index shifted left by 33 bits
#: plus the row's position in that partition (``pyspark.sql.functions`` docs): the low 33 bits.
_ROW_IN_SPLIT_MASK = (1 << 33) - 1
#: Read tasks per core after coalescing the one-file splits (Parquet files per hour and task).
_READ_TASKS_PER_CORE = 2


@contextlib.contextmanager
def _sql_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
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


def _read_lines(
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
    of every line). A gzip file is unsplittable, and :data:`_BUILD_SQL_CONF` makes each file its
    own input split, so the row position in the split, the low bits of
    ``monotonically_increasing_id()`` taken right at the scan, is the 0-based line number. The
    one-file splits are then coalesced (no shuffle) into ``_READ_TASKS_PER_CORE`` tasks per core:
    a coalesced task reads its files one after the other, each still numbered by its own split.
    :func:`_run_spark` checks that every file's numbers are exactly ``1..lines``.

    File listing: over 32 paths, Spark lists them in a job of one task per path (1,200 tasks a
    day, 5-12 s measured); ``parallelPartitionDiscovery.parallelism`` caps that job at one task
    per core (on GCS the listing stays parallel).
    """
    by_tail = {m.data_key.split("/", 2)[2]: (i, m) for i, m in enumerate(files)}
    cores = max(1, spark.sparkContext.defaultParallelism)
    with _sql_conf(spark, {"spark.sql.sources.parallelPartitionDiscovery.parallelism": str(cores)}):
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


def build_hours(
    spark: SparkSession,
    store: ObjectStore,
    hours: Sequence[dt.datetime],
    *,
    attempt_id: str,
    visitor_key: str,
    window: HourWindow | None = None,
    log: logging.Logger | None = None,
) -> list[HourManifest]:
    """Build the pageview Parquet files and hour manifests of ``hours`` (see module docstring).

    Args:
        spark: the session (``spark.sql.shuffle.partitions`` small for hourly inputs).
        store: object store holding the landing zone and receiving the outputs.
        hours: UTC hours (aware, on the hour); duplicates are ignored.
        attempt_id: this attempt's ID (``[A-Za-z0-9_-]+``); its outputs go under its own
            prefix, and any earlier output of the same attempt for these hours is replaced.
        visitor_key: the pseudonymization key (only its :func:`key_id` is recorded).
        window: the partitions' hours (first partition .. now plus the allowed skew); an
            out-of-window line outside it gets the reason ``before_first_partition`` or
            ``future_timestamp`` (:mod:`bq_platform.lib.partition_window`). None: no bounds.
        log: a logger (``logging.Logger`` or Dagster's ``context.log``); progress is logged
            at INFO: hours, files, lines, rows and seconds.

    Returns:
        One :class:`HourManifest` per hour, in hour order, as written.

    Raises:
        LandingError: a landed file is missing or disagrees with its manifest, or a manifest is
            unreadable or misplaced (nothing is written then).
        ValueError: an hour is naive or not on the hour, the attempt ID is malformed or the
            key empty.
        RuntimeError: Spark's lines could not all be matched to landed files (a bug: nothing
            is written then).
    """
    log = log or logging.getLogger(__name__)
    started = time.monotonic()
    hour_list = sorted(set(hours))
    labels = {hour: layout.hour_label(hour) for hour in hour_list}
    full_prefix = layout.attempt_prefix(attempt_id) + "/full"
    sample_prefix = layout.attempt_prefix(attempt_id) + "/sample"
    dead_prefix = layout.deadletter_attempt_prefix(attempt_id)
    key_ident = key_id(visitor_key)
    if not hour_list:
        return []

    sites = list_sites(store)
    scanned = {(site, hour): landed_hour(store, site, hour) for hour in hour_list for site in sites}
    deliveries = {k: ds for k, (ds, _) in scanned.items()}
    orphans = {k: found for k, (_, found) in scanned.items()}
    every = [d for ds in deliveries.values() for d in ds]
    kept = [d.manifest for d in every if not d.duplicate]
    verify_landed(store, every)
    log.info(
        "build %s: %d hours (%s .. %s), %d sites, %d landed files (%d duplicate deliveries, "
        "%d bytes) verified in %.1f s",
        attempt_id,
        len(hour_list),
        labels[hour_list[0]],
        labels[hour_list[-1]],
        len(sites),
        len(every),
        len(every) - len(kept),
        sum(d.manifest.bytes for d in every),
        time.monotonic() - started,
    )

    for hour in hour_list:  # replace what an earlier try of this attempt left
        for prefix in (full_prefix, sample_prefix, dead_prefix):
            store.delete_prefix(hour_folder(prefix, labels[hour]))

    per_file: dict[str, dict[str, Any]] = {}
    visitors: dict[tuple[str, str], tuple[int, int]] = {}
    if kept:
        _run_spark(
            spark,
            store,
            kept,
            visitor_key,
            (full_prefix, sample_prefix, dead_prefix),
            per_file,
            visitors,
            log,
            window=window,
        )

    manifests = hour_manifests(
        store,
        hour_list,
        sites,
        deliveries,
        per_file,
        visitors,
        attempt_id,
        key_ident,
        (full_prefix, sample_prefix, dead_prefix),
        orphans=orphans,
    )
    for manifest in manifests:  # last: a manifest names only complete files
        store.write_text(layout.hour_manifest_key(manifest.hour), manifest.to_json())
        totals = sum_counts(manifest.counts)
        log.info(
            "hour %s: %d pageviews, %d sample rows, %d non-page, %d rejected, %d duplicates, "
            "%d out of window, %d files%s",
            labels[manifest.hour],
            manifest.rows,
            manifest.sample_rows,
            totals["non_page_hits"],
            totals["rejected"],
            totals["duplicates"],
            totals["out_of_window"],
            len(manifest.full_files),
            (
                f", {len(manifest.file_mismatches)} FILE MISMATCHES"
                if manifest.file_mismatches
                else ""
            )
            + (
                f", {len(manifest.orphan_files)} DATA FILES WITHOUT MANIFEST (incomplete): "
                + ", ".join(manifest.orphan_files[:3])
                if manifest.orphan_files
                else ""
            ),
        )
    log.info("build %s done in %.1f s", attempt_id, time.monotonic() - started)
    return manifests


def _run_spark(
    spark: SparkSession,
    store: ObjectStore,
    kept: Sequence[LandedManifest],
    visitor_key: str,
    prefixes: tuple[str, str, str],
    per_file: dict[str, dict[str, Any]],
    visitors: dict[tuple[str, str], tuple[int, int]],
    log: logging.Logger,
    window: HourWindow | None = None,
) -> None:
    """Read, classify, count and write; fills ``per_file`` and ``visitors``."""
    full_prefix, sample_prefix, dead_prefix = prefixes
    t0 = time.monotonic()
    with _sql_conf(spark, _BUILD_SQL_CONF):
        lines = _read_lines(spark, store, kept)
        rows = slim(transform_lines(lines, visitor_key=visitor_key, window=window)).persist()
        try:
            category = F.col("category")
            file_counts = (
                rows.groupBy("data_key")
                .agg(
                    F.count(F.lit(1)).alias("lines_read"),
                    F.min("line_no").alias("first_line"),
                    F.max("line_no").alias("last_line"),
                    *[
                        F.count_if(category == c).alias(c)
                        for c in (
                            CATEGORY_PAGE,
                            CATEGORY_NON_PAGE,
                            CATEGORY_REJECTED,
                            CATEGORY_OUT_OF_WINDOW,
                        )
                    ],
                    F.count_if((category == CATEGORY_PAGE) & F.col("in_sample")).alias(
                        "sample_rows"
                    ),
                    *rejected_aggregates(),
                )
                .collect()
            )
            unmatched = [r for r in file_counts if r["data_key"] is None]
            bad_numbers = [
                r["data_key"]
                for r in file_counts
                if r["data_key"] is not None
                and (r["first_line"] != 1 or r["last_line"] != r["lines_read"])
            ]
            if unmatched or bad_numbers:
                raise RuntimeError(
                    "internal error: Spark lines could not be matched to landed files "
                    f"({sum(r['lines_read'] for r in unmatched)} unmatched lines, line numbers "
                    f"not 1..n in {bad_numbers[:5]}); nothing was written"
                )
            for r in file_counts:
                values = r.asDict()
                data_key = values.pop("data_key")
                samples = {k: values.pop(k) for k in list(values) if k.startswith(_SAMPLE)}
                per_file[data_key] = {k: int(v) for k, v in values.items()}
                per_file[data_key][_SAMPLES] = {k: v for k, v in samples.items() if v is not None}
            pages = rows.where(category == CATEGORY_PAGE)
            for r in (
                pages.groupBy("site", "hour_label")
                .agg(
                    F.count_distinct("visitor_id").alias("visitors"),
                    F.count_distinct(F.when(F.col("in_sample"), F.col("visitor_id"))).alias(
                        "sampled"
                    ),
                )
                .collect()
            ):
                visitors[(r["site"], r["hour_label"])] = (int(r["visitors"]), int(r["sampled"]))
            n_lines = sum(v["lines_read"] for v in per_file.values())
            n_pages = sum(v[CATEGORY_PAGE] for v in per_file.values())
            log.info(
                "read and classified %d lines of %d files in %.1f s: %d pageviews",
                n_lines,
                len(kept),
                time.monotonic() - t0,
                n_pages,
            )

            t1 = time.monotonic()
            hour_col = F.col("hour_label").alias(HOUR_FOLDER_COLUMN)
            page_rows = pages.select(*PAGEVIEW_COLUMN_NAMES, hour_col)
            write_hour_folders(page_rows, store.uri(full_prefix))
            write_hour_folders(page_rows.where(F.col("in_sample")), store.uri(sample_prefix))
            dead = rows.where(category.isin(CATEGORY_REJECTED, CATEGORY_OUT_OF_WINDOW))
            write_hour_folders(dead_letter_rows(dead), store.uri(dead_prefix))
            log.info("wrote Parquet (full, sample, dead letters) in %.1f s", time.monotonic() - t1)
        finally:
            rows.unpersist()
