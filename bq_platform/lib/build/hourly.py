"""The hourly build: landed gzip logs -> pageview Parquet files + one manifest per UTC hour.

This is the body of the ``pageview_files`` asset. Steps 1-3 are
:mod:`bq_platform.lib.landing.deliveries`, step 7 :mod:`bq_platform.lib.build.hour_manifests`; this module
runs the Spark pass. For a set of UTC hours it:

1. lists the sites (``landing/pageviews/site=<name>``) and every hour's landed manifests;
2. checks every landed file against its manifest (exists, byte size, checksum: on GCS from the
   listing's CRC32C, with no download) and raises :class:`LandingError` naming each file that
   disagrees; a file Spark then cannot read as gzip is a :class:`LandingError` too;
3. counts a delivery whose checksum was already delivered for the same site and hour once:
   the extra deliveries' lines are ``duplicates`` (at-least-once delivery);
4. reads the kept files in Spark passes of whole hours, up to ``lines_per_pass`` source lines
   each (:func:`passes`: a pass's cache stays in memory, issue 9); gzip is unsplittable, so one
   file is one split, read in order; numbers lines per file without a shuffle, and classifies
   them with :func:`bq_platform.lib.build.transform.transform_lines`; the result is persisted once
   per pass;
5. aggregates per (site, hour, file) and the distinct visitors per (site, hour) (by integer
   keys, the file's and the site-hour's number in the pass, mapped back on the driver:
   :func:`bq_platform.lib.build.read.read_lines`); a file whose
   line count differs from its manifest is reported in ``file_mismatches`` (not raised: the
   blocking accounting check reports it, with the other hours still built); the same pass
   counts rejected lines per reason and, when there are some, keeps a few raw ones, for the
   rejected-share check (:mod:`bq_platform.lib.quality.rejected_share`);
6. writes Parquet under this attempt's own prefix (:func:`bq_platform.lib.core.layout.attempt_prefix`)
   in ``hour=YYYY-MM-DDTHH`` folders: ``full`` (pages), ``sample`` (pages of sampled visitors)
   and the dead letters (rejected and out-of-window lines with reason, raw text and delivery
   hour; :mod:`bq_platform.lib.build.outputs`); an hour without such rows still gets one empty
   Parquet file in each, so each load job has at least one file;
7. records the attempts its manifests will displace, for the cleanup
   (:mod:`bq_platform.lib.build.superseded`), then writes each hour's
   :class:`~bq_platform.lib.core.manifest.HourManifest` *last*; it names exactly the files that
   count, so a crashed attempt leaves nothing a loader would pick up.

Per site and hour, when the manifests are right:
``source_lines = pageviews + non_page_hits + rejected + duplicates + out_of_window``.

Spark work per pass: one read of the landed gzip (no shuffle: lines are numbered where they are
read), one persist, two small aggregations (a third over the rejected lines when there are
some) and up to three Parquet writes from the persisted rows: ``full``; the sample, collected
to the driver and written by pyarrow (one file per hour) unless it has more than
:data:`DRIVER_SAMPLE_ROWS` rows; the dead letters only when the pass has some.
"""

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bq_platform.lib.core import layout
from bq_platform.lib.build.outputs import (
    dead_letter_rows,
    file_counts,
    rejected_samples,
    slim,
    write_hour_files,
    write_hour_folders,
)
from bq_platform.lib.build.read import (
    BUILD_SQL_CONF,
    DEFAULT_LINES_PER_PASS,
    passes,
    read_lines,
    site_hour_units,
    sql_conf,
)
from bq_platform.lib.landing.deliveries import landed_hours, unreadable_landed_file, verify_landed
from bq_platform.lib.build.hour_manifests import (
    _SAMPLES,
    HOUR_FOLDER_COLUMN,
    clear_hour_folders,
    hour_manifests,
    pageview_arrow_schema,
    sum_counts,
)
from bq_platform.lib.landing.index import list_sites
from bq_platform.lib.core.manifest import HourManifest, LandedManifest, ManifestError
from bq_platform.lib.core.manifest_reads import read_hour_manifests
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.core.partition_window import HourWindow
from bq_platform.lib.core.pseudonymize import key_id
from bq_platform.lib.build.superseded import record_superseded, superseded_units
from bq_platform.lib.build.transform import (
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    PAGEVIEW_COLUMN_NAMES,
    transform_lines,
)

_LOG = logging.getLogger(__name__)

#: The most sample rows a pass collects to the driver and writes with pyarrow, one Parquet
#: file per hour (:func:`~bq_platform.lib.build.outputs.write_hour_files`), instead of a Spark
#: write. A pass's sample is 1 in 200 visitors of at most ``lines_per_pass`` lines (3,653 rows
#: of the bench's 1x input), and a Spark writer costs a job plus ~12 ms per file it opens: on
#: the 1x input 1.3-1.7 s a pass against 0.4-0.9 s (docs/PERFORMANCE.md, issue 9). Above it
#: (a sampled visitor with huge traffic), one Spark task writes them, so the driver never
#: holds more than about this many rows (~300 bytes each).
DRIVER_SAMPLE_ROWS = 200_000


def build_hours(
    spark: SparkSession | Callable[[], SparkSession],
    store: ObjectStore,
    hours: Sequence[dt.datetime],
    *,
    attempt_id: str,
    visitor_key: str,
    window: HourWindow | None = None,
    log: logging.Logger | None = None,
    lines_per_pass: int = DEFAULT_LINES_PER_PASS,
) -> list[HourManifest]:
    """Build the pageview Parquet files and hour manifests of ``hours`` (see module docstring).

    Args:
        spark: the session (``spark.sql.shuffle.partitions`` small for hourly inputs), or a
            function that returns it, called before each pass, so after the landed files are
            verified: a session still starting (the lazy ``SparkResource``) then starts while
            the landing zone is listed and checked (0.5-2 s at 1x on 2 cores, issue 9); no
            landed file, no call.
        store: object store holding the landing zone and receiving the outputs.
        hours: UTC hours (aware, on the hour); duplicates are ignored.
        attempt_id: this attempt's ID (``[A-Za-z0-9_-]+``); its outputs go under its own
            prefix, and any earlier output of the same attempt for these hours is replaced.
        visitor_key: the pseudonymization key (only its :func:`key_id` is recorded).
        window: the partitions' hours (first partition .. now plus the allowed skew); an
            out-of-window line outside it gets the reason ``before_first_partition`` or
            ``future_timestamp`` (:mod:`bq_platform.lib.core.partition_window`). None: no bounds.
        log: a logger (``logging.Logger`` or Dagster's ``context.log``); progress is logged
            at INFO: hours, files, lines, rows and seconds.
        lines_per_pass: the most source lines (by the landed manifests) one Spark pass reads;
            hours are read in hour order, whole hours per pass (one hour above the limit is a
            pass of its own), see :data:`DEFAULT_LINES_PER_PASS` and :func:`passes`.

    Returns:
        One :class:`HourManifest` per hour, in hour order, as written.

    Raises:
        LandingError: a landed file is missing or disagrees with its manifest, or a manifest is
            unreadable or misplaced (nothing is written then); or Spark cannot read a landed
            file as gzip (no hour manifest is written then).
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
    scanned = landed_hours(store, sites, hour_list)
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

    # Replace what an earlier try of this attempt left (3 listings, not one per hour folder).
    clear_hour_folders(store, (full_prefix, sample_prefix, dead_prefix), list(labels.values()))

    per_file: dict[str, dict[str, Any]] = {}
    visitors: dict[tuple[str, str], tuple[int, int]] = {}
    chunks = passes(kept, lines_per_pass)
    for number, chunk in enumerate(chunks, 1):
        log.info(  # reporting.PASS_PROGRESS: bq-platform run prints it as it comes
            "pass %d/%d: hours %s .. %s, %s landed files, %s lines",
            number,
            len(chunks),
            layout.hour_label(chunk[0].hour),
            layout.hour_label(chunk[-1].hour),
            f"{len(chunk):,}",
            f"{sum(m.lines for m in chunk):,}",
        )
        session = spark() if callable(spark) else spark
        try:
            _run_spark(
                session,
                store,
                chunk,
                visitor_key,
                (full_prefix, sample_prefix, dead_prefix),
                per_file,
                visitors,
                log,
                window=window,
            )
        except Exception as exc:
            unreadable = unreadable_landed_file(exc, store, every)
            if unreadable is None:
                raise
            raise unreadable from None

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
    # The manifests these replace, for the record of what this attempt displaces (one read per
    # hour, side by side): the cleanup then deletes those units without a listing of every
    # attempt ever written (lib/build/superseded.py).
    try:
        previous = read_hour_manifests(store, hour_list)
    except ManifestError as exc:  # replaced below; the cleanup's full pass finds its attempts
        log.warning("%s; it is replaced, and its attempt is left to the full cleanup pass", exc)
        previous = {}
    # Recorded before the manifests that displace them: a crash in between leaves a record
    # whose units the current manifests still name (the record pass keeps them), never a
    # displaced attempt that no record names (the full pass skips settled attempts).
    displaced = record_superseded(store, attempt_id, superseded_units(previous, manifests))
    if displaced is not None:
        log.info(
            "recorded %d attempt-hours these manifests supersede, for cleanup after the retention",
            len(displaced.units),
        )
    for manifest in manifests:  # last: a manifest names only complete files
        store.write_text(layout.hour_manifest_key(manifest.hour), manifest.to_json())
        totals = sum_counts(manifest.counts)
        problems = (
            f", {len(manifest.file_mismatches)} FILE MISMATCHES" if manifest.file_mismatches else ""
        ) + (
            f", {len(manifest.orphan_files)} DATA FILES WITHOUT MANIFEST (incomplete): "
            + ", ".join(manifest.orphan_files[:3])
            if manifest.orphan_files
            else ""
        )
        # One line per hour only where something is off: each line of Dagster's log is an
        # event-log write (~5-10 ms; 72 a 3-day run, issue 9). The per-site-hour counts are in
        # the materialization's metadata.
        (log.warning if problems else _LOG.debug)(
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
            problems,
        )
    everything = sum_counts([c for m in manifests for c in m.counts])
    log.info(
        "wrote %d hour manifests: %d pageviews, %d sample rows, %d non-page, %d rejected, "
        "%d duplicates, %d out of window",
        len(manifests),
        sum(m.rows for m in manifests),
        sum(m.sample_rows for m in manifests),
        everything["non_page_hits"],
        everything["rejected"],
        everything["duplicates"],
        everything["out_of_window"],
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
    with sql_conf(spark, BUILD_SQL_CONF):
        lines = read_lines(spark, store, kept)
        classified = transform_lines(
            lines, visitor_key=visitor_key, window=window, keep=("file_no", "unit_no")
        )
        rows = slim(classified).persist()
        try:
            category = F.col("category")
            counts = file_counts(rows).collect()
            unmatched = [r for r in counts if r["file_no"] is None]
            bad_numbers = [
                kept[r["file_no"]].data_key
                for r in counts
                if r["file_no"] is not None
                and (r["first_line"] != 1 or r["last_line"] != r["lines_read"])
            ]
            if unmatched or bad_numbers:
                raise RuntimeError(
                    "internal error: Spark lines could not be matched to landed files "
                    f"({sum(r['lines_read'] for r in unmatched)} unmatched lines, line numbers "
                    f"not 1..n in {bad_numbers[:5]}); nothing was written"
                )
            for r in counts:
                values = r.asDict()
                data_key = kept[values.pop("file_no")].data_key
                per_file[data_key] = {k: int(v) for k, v in values.items()}
                per_file[data_key][_SAMPLES] = {}
            if any(r[CATEGORY_REJECTED] for r in counts):  # clean data: no job
                for r in rejected_samples(rows).collect():
                    samples = r.asDict()
                    data_key = kept[samples.pop("file_no")].data_key
                    per_file[data_key][_SAMPLES] = {
                        k: v for k, v in samples.items() if v is not None
                    }
            pages = rows.where(category == CATEGORY_PAGE)
            units = site_hour_units(kept)
            for r in (
                pages.groupBy("unit_no")
                .agg(
                    F.count_distinct("visitor_id").alias("visitors"),
                    F.count_distinct(F.when(F.col("in_sample"), F.col("visitor_id"))).alias(
                        "sampled"
                    ),
                )
                .collect()
            ):
                visitors[units[r["unit_no"]]] = (int(r["visitors"]), int(r["sampled"]))
            n_lines = sum(int(r["lines_read"]) for r in counts)  # this pass's files only
            n_pages = sum(int(r[CATEGORY_PAGE]) for r in counts)
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
            sample_rows = page_rows.where(F.col("in_sample"))
            n_sample = sum(int(r["sample_rows"]) for r in counts)
            if 0 < n_sample <= DRIVER_SAMPLE_ROWS:
                schema = pageview_arrow_schema()
                write_hour_files(sample_rows.toArrow(), store, sample_prefix, schema)
            elif n_sample:  # one Spark writer: one file per hour, as on the driver
                write_hour_folders(sample_rows.coalesce(1), store.uri(sample_prefix))
            # The counts say whether this pass has dead letters; without any, the job (a scan of
            # the cache, 0.3-0.6 s) is skipped: its hours get their empty file like any other.
            if any(r[CATEGORY_REJECTED] or r[CATEGORY_OUT_OF_WINDOW] for r in counts):
                dead = rows.where(category.isin(CATEGORY_REJECTED, CATEGORY_OUT_OF_WINDOW))
                write_hour_folders(dead_letter_rows(dead), store.uri(dead_prefix))
            log.info("wrote Parquet (full, sample, dead letters) in %.1f s", time.monotonic() - t1)
        finally:
            rows.unpersist()
