"""The hourly build: landed gzip logs -> pageview Parquet files + one manifest per UTC hour.

The body of the ``pageview_files`` asset. For a set of UTC hours it verifies the landed
deliveries (:mod:`bq_platform.lib.landing.deliveries`), reads and classifies them in Spark
passes of whole hours (:mod:`~bq_platform.lib.hourly_build.read`,
:mod:`~bq_platform.lib.hourly_build.transform`),
counts per file and site-hour (a file whose line count differs from its manifest goes to
``file_mismatches`` for the blocking accounting check, not raised), writes ``full``, ``sample``
and dead-letter Parquet under the attempt's prefix, at least one file per hour
(:mod:`bq_platform.lib.hourly_build.outputs`), records the attempts it displaces, and writes each
:class:`~bq_platform.lib.core.manifest.HourManifest` *last*: it names exactly the files that
count, so a crashed attempt leaves nothing a loader would pick up.

Per site and hour, when the manifests are right:
``source_lines = pageviews + non_page_hits + rejected + duplicates + out_of_window``.
"""

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bq_platform.lib.core import layout
from bq_platform.lib.core.accounting import category_totals
from bq_platform.lib.core.manifest import (
    HourManifest,
    LandedManifest,
    ManifestError,
    read_hour_manifests,
)
from bq_platform.lib.core.partition_window import HourWindow
from bq_platform.lib.core.pseudonymize import key_id
from bq_platform.lib.hourly_build.hour_manifests import SAMPLES, hour_manifests
from bq_platform.lib.hourly_build.outputs import (
    clear_hour_folders,
    dead_letter_rows,
    file_counts,
    pageview_arrow_schema,
    pageview_rows,
    rejected_samples,
    slim,
    write_hour_files,
    write_hour_folders,
)
from bq_platform.lib.hourly_build.read import (
    BUILD_SQL_CONF,
    DEFAULT_LINES_PER_PASS,
    passes,
    read_lines,
    site_hour_units,
    sql_conf,
)
from bq_platform.lib.hourly_build.superseded import record_superseded, superseded_units
from bq_platform.lib.hourly_build.traffic import classify_pages, visitor_activity
from bq_platform.lib.hourly_build.transform import (
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    transform_lines,
)
from bq_platform.lib.landing.deliveries import landed_hours, unreadable_landed_file, verify_landed
from bq_platform.lib.landing.index import list_sites
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.traffic.version import classifier_version

_LOG = logging.getLogger(__name__)

#: The most sample rows a pass collects to the driver and writes with pyarrow, one file per
#: hour (a sample is small; a Spark writer costs a job per write). Above it one Spark task
#: writes them, so the driver never holds more than about this many rows.
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
    thresholds: ClassificationThresholds | None = None,
    classify: bool = True,
) -> list[HourManifest]:
    """Build the pageview Parquet files and hour manifests of ``hours`` (see module docstring).

    Args:
        spark: the session, or a function that returns it, called before each pass.
        hours: UTC hours (aware, on the hour); duplicates are ignored.
        attempt_id: this attempt's ID (``[A-Za-z0-9_-]+``); an earlier output of the same
            attempt for these hours is replaced.
        visitor_key: the pseudonymization key (only its :func:`key_id` is recorded).
        window: the partitions' hours; None: no bounds.
        log: ``logging.Logger`` or Dagster's ``context.log``; progress at INFO.
        lines_per_pass: the most source lines one Spark pass reads.
        thresholds: the traffic heuristics' configuration; None: the defaults.
        classify: False builds without the traffic step, for the benchmark only
            (:func:`~bq_platform.lib.hourly_build.traffic.classify_pages`): the pages have no
            class, so the hours must never be published.

    Returns:
        One :class:`HourManifest` per hour, in hour order, as written.

    Raises:
        LandingError: a landed file or manifest is missing, misplaced or disagrees, or Spark
            cannot read a landed file as gzip (no hour manifest is written then).
        ValueError: an hour is naive or not on the hour, the attempt ID malformed or the key
            empty.
        RuntimeError: Spark's lines could not all be matched to landed files (a bug).
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

    # Replace what an earlier try of this attempt left.
    clear_hour_folders(store, (full_prefix, sample_prefix, dead_prefix), list(labels.values()))

    per_file: dict[str, dict[str, Any]] = {}
    visitors: dict[tuple[str, str], tuple[int, int]] = {}
    traffic: dict[tuple[str, str], tuple[int, int]] = {}
    reasons: dict[tuple[str, str], dict[str, int]] = {}
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
                traffic=traffic,
                thresholds=thresholds or ClassificationThresholds(),
                bot_reasons=reasons,
                classify=classify,
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
        classifier=classifier_version(thresholds or ClassificationThresholds()),
        traffic=traffic,
        bot_reasons=reasons,
    )
    # The manifests these replace: what this attempt displaces, for the cleanup.
    try:
        previous = read_hour_manifests(store, hour_list)
    except ManifestError as exc:  # replaced below; the cleanup's full pass finds its attempts
        log.warning("%s; it is replaced, and its attempt is left to the full cleanup pass", exc)
        previous = {}
    # Recorded before the manifests that displace them, so no displaced attempt goes unrecorded.
    displaced = record_superseded(store, attempt_id, superseded_units(previous, manifests))
    if displaced is not None:
        log.info(
            "recorded %d attempt-hours these manifests supersede, for cleanup after the retention",
            len(displaced.units),
        )
    for manifest in manifests:  # last: a manifest names only complete files
        store.write_text(layout.hour_manifest_key(manifest.hour), manifest.to_json())
        totals = category_totals(manifest.counts)
        problems = (
            f", {len(manifest.file_mismatches)} FILE MISMATCHES" if manifest.file_mismatches else ""
        ) + (
            f", {len(manifest.orphan_files)} DATA FILES WITHOUT MANIFEST (incomplete): "
            + ", ".join(manifest.orphan_files[:3])
            if manifest.orphan_files
            else ""
        )
        # A line per hour only where something is off: the counts are in the metadata.
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
    everything = category_totals(c for m in manifests for c in m.counts)
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


def site_hour_visitors(activity: DataFrame) -> DataFrame:
    """Per site-hour (``unit_no``) of a pass's
    :func:`~bq_platform.lib.hourly_build.traffic.visitor_activity`: ``visitors`` (distinct
    ``visitor_id`` of the pages) and ``sampled`` (those in the sample). One Spark job over the
    visitor rows, not the lines."""
    return activity.groupBy("unit_no").agg(
        F.count_if(F.col("visitor_pages") > 0).alias("visitors"),
        F.count_if(F.col("visitor_sampled")).alias("sampled"),
    )


def site_hour_classes(pages: DataFrame) -> DataFrame:
    """Per site-hour (``unit_no``) and ``bot_reason`` of the classified ``pages``: ``pages``.
    The row whose ``bot_reason`` is null counts the human pages (a page has a reason exactly
    when it is not human); the others, each reason's ``bot`` and ``suspected_bot`` pages.
    Few rows (the reasons of a site-hour), no distinct count. One Spark job."""
    return pages.groupBy("unit_no", "bot_reason").agg(F.count(F.lit(1)).alias("pages"))


def _run_spark(
    spark: SparkSession,
    store: ObjectStore,
    kept: Sequence[LandedManifest],
    visitor_key: str,
    prefixes: tuple[str, str, str],
    per_file: dict[str, dict[str, Any]],
    visitors: dict[tuple[str, str], tuple[int, int]],
    log: logging.Logger,
    *,
    window: HourWindow | None,
    thresholds: ClassificationThresholds,
    traffic: dict[tuple[str, str], tuple[int, int]],
    bot_reasons: dict[tuple[str, str], dict[str, int]],
    classify: bool,
) -> None:
    """Read, classify, count and write; fills ``per_file``, ``visitors``, ``traffic`` (human
    and bot pages per site and hour label; none when ``classify`` is False) and
    ``bot_reasons`` (per site and hour label, the bot pages per ``bot_reason``; a site-hour
    without bot pages has no entry)."""
    full_prefix, sample_prefix, dead_prefix = prefixes
    t0 = time.monotonic()
    with sql_conf(spark, BUILD_SQL_CONF):
        lines = read_lines(spark, store, kept)
        classified = transform_lines(
            lines, visitor_key=visitor_key, window=window, keep=("file_no", "unit_no")
        )
        rows = slim(classified).persist()
        activity: DataFrame | None = None
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
                per_file[data_key][SAMPLES] = {}
            if any(r[CATEGORY_REJECTED] for r in counts):  # clean data: no job
                for r in rejected_samples(rows).collect():
                    samples = r.asDict()
                    data_key = kept[samples.pop("file_no")].data_key
                    per_file[data_key][SAMPLES] = {
                        k: v for k, v in samples.items() if v is not None
                    }
            pages = rows.where(category == CATEGORY_PAGE)
            activity = visitor_activity(rows)
            units = site_hour_units(kept)
            for r in site_hour_visitors(activity).collect():
                visitors[units[r["unit_no"]]] = (int(r["visitors"]), int(r["sampled"]))
            classified_pages = classify_pages(activity, pages, thresholds, classify=classify)
            if classify:
                for r in site_hour_classes(classified_pages).collect():
                    unit, reason, n = units[r["unit_no"]], r["bot_reason"], int(r["pages"])
                    human, bot = traffic.get(unit, (0, 0))
                    traffic[unit] = (human + n, bot) if reason is None else (human, bot + n)
                    if reason is not None:
                        bot_reasons.setdefault(unit, {})[reason] = n
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
            write_hour_folders(pageview_rows(classified_pages), store.uri(full_prefix))
            sample_rows = pageview_rows(classified_pages.where(F.col("in_sample")))
            n_sample = sum(int(r["sample_rows"]) for r in counts)
            if 0 < n_sample <= DRIVER_SAMPLE_ROWS:
                schema = pageview_arrow_schema()
                write_hour_files(sample_rows.toArrow(), store, sample_prefix, schema)
            elif n_sample:  # one Spark writer: one file per hour, as on the driver
                write_hour_folders(sample_rows.coalesce(1), store.uri(sample_prefix))
            # No dead letters in this pass: no job; its hours get their empty file.
            if any(r[CATEGORY_REJECTED] or r[CATEGORY_OUT_OF_WINDOW] for r in counts):
                dead = rows.where(category.isin(CATEGORY_REJECTED, CATEGORY_OUT_OF_WINDOW))
                write_hour_folders(dead_letter_rows(dead), store.uri(dead_prefix))
            log.info("wrote Parquet (full, sample, dead letters) in %.1f s", time.monotonic() - t1)
        finally:
            if activity is not None:
                activity.unpersist()
            rows.unpersist()
