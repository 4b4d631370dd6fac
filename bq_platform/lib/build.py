"""The hourly build: landed gzip logs -> pageview Parquet files + one manifest per UTC hour.

This is the body of the ``pageview_files`` asset. For a set of UTC hours it:

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
   and the dead letters (rejected and out-of-window lines with reason and raw text); an hour
   without pages still gets one empty Parquet file in ``full`` and ``sample``, so each load job
   has at least one file;
7. writes each hour's :class:`~bq_platform.lib.manifest.HourManifest` *last*; it names exactly
   the files that count, so a crashed attempt leaves nothing a loader would pick up.

Per site and hour, when the manifests are right:
``source_lines = pageviews + non_page_hits + rejected + duplicates + out_of_window``.

Spark work: one read of the landed gzip (no shuffle: lines are numbered where they are read),
one persist, two small aggregations and three Parquet writes from the persisted rows.
"""

import concurrent.futures
import contextlib
import dataclasses
import datetime as dt
import hashlib
import io
import logging
import re
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from bq_platform.lib import jobids, layout
from bq_platform.lib import logformat as lf
from bq_platform.lib.accounting import MAX_SAMPLE_CHARS, SiteHourCounts
from bq_platform.lib.landing import LandingError
from bq_platform.lib.landing_index import find_orphans, orphan_checksum
from bq_platform.lib.manifest import HourManifest, LandedManifest, ManifestError
from bq_platform.lib.objectstore.base import ObjectNotFoundError, ObjectStore
from bq_platform.lib.partition_window import HourWindow
from bq_platform.lib.pseudonymize import SAMPLE_MODULUS, key_id
from bq_platform.lib.transform import (
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    PAGEVIEW_COLUMN_NAMES,
    TRANSFORM_VERSION,
    transform_lines,
)
from bq_platform.lib.warehouse.schema import PAGEVIEW_COLUMNS

#: Columns of the dead-letter Parquet files (the hour is the ``hour=`` folder).
DEADLETTER_COLUMNS: tuple[str, ...] = ("site", "data_key", "line_no", "reason", "raw")
#: Partition folder name of every Parquet output (``hour=YYYY-MM-DDTHH``).
HOUR_FOLDER_COLUMN = "hour"
GZIP_MAGIC = b"\x1f\x8b"
#: Allowed landed file names (what the lander writes; Hadoop paths break on ':' and the like).
_SAFE_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_SITE_FOLDER = "site="
_MAX_LISTED_PROBLEMS = 20
_VERIFY_THREADS = 8
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
_LANDING_HINT = (
    "re-land the file with `bq-platform land` (or have its producer deliver it again), "
    "then run these hours again"
)


@dataclasses.dataclass(frozen=True)
class LandedDelivery:
    """One landed manifest as the build sees it.

    Attributes:
        manifest_key: object key of the manifest.
        manifest: its content.
        duplicate: True when an earlier manifest (by key order) of the same site and hour has
            the same SHA-256: this delivery's lines count as ``duplicates`` and are not read.
    """

    manifest_key: str
    manifest: LandedManifest
    duplicate: bool = False


def list_sites(store: ObjectStore) -> list[str]:
    """Sites with a landing folder (``landing/pageviews/site=<name>``), sorted.

    Raises:
        LandingError: if a ``site=`` folder has a name the pipeline cannot use.
    """
    sites = []
    for folder in store.list_folders(layout.LANDING_PREFIX):
        if not folder.startswith(_SITE_FOLDER):
            continue
        name = folder[len(_SITE_FOLDER) :]
        try:
            sites.append(layout.validate_site(name))
        except ValueError as exc:
            uri = store.uri(f"{layout.LANDING_PREFIX}/{folder}")
            raise LandingError(f"{uri}: {exc}; rename the folder and land its files again") from exc
    return sites


def landed_deliveries(store: ObjectStore, site: str, hour: dt.datetime) -> list[LandedDelivery]:
    """The landed manifests of one site and UTC hour, by key, duplicates marked.

    Raises:
        LandingError: as :func:`landed_hour`.
    """
    return landed_hour(store, site, hour)[0]


def landed_hour(
    store: ObjectStore, site: str, hour: dt.datetime
) -> tuple[list[LandedDelivery], list[str]]:
    """The landed manifests of one site and UTC hour (by key, duplicates marked) and the
    orphans: data files of the folder no manifest names (an incomplete delivery, issue 7; see
    :func:`bq_platform.lib.landing_index.find_orphans`). One listing of the folder.

    Raises:
        LandingError: if a manifest is unreadable, names another site or hour, or points at a
            data file outside its folder or not named ``[A-Za-z0-9._-]+.gz``.
    """
    prefix = layout.landing_hour_prefix(site, hour)
    deliveries: list[LandedDelivery] = []
    seen: set[str] = set()
    keys = store.list_keys(prefix)
    for key in keys:
        if layout.parse_landed_manifest_key(key) is None or key.count("/") != prefix.count("/") + 1:
            continue
        uri = store.uri(key)
        try:
            manifest = LandedManifest.from_json(store.read_bytes(key), where=uri)
        except (ManifestError, ObjectNotFoundError) as exc:
            raise LandingError(f"{exc}; {_LANDING_HINT}") from exc
        folder, _, name = manifest.data_key.rpartition("/")
        problem = None
        if manifest.site != site or manifest.hour != hour:
            problem = (
                f"says site {manifest.site!r} hour {layout.hour_label(manifest.hour)} but is in "
                f"the folder of site {site!r} hour {layout.hour_label(hour)}"
            )
        elif folder != prefix:
            problem = f"points at {manifest.data_key!r}, outside its own folder {prefix!r}"
        elif not _SAFE_NAME_RE.match(name) or not name.endswith(".gz"):
            problem = (
                f"names data file {name!r}: landed files must be gzip named [A-Za-z0-9._-]+.gz"
            )
        if problem:
            raise LandingError(f"landed manifest {uri} {problem}; {_LANDING_HINT}")
        deliveries.append(LandedDelivery(key, manifest, duplicate=manifest.sha256 in seen))
        seen.add(manifest.sha256)
    return deliveries, find_orphans(keys, [d.manifest for d in deliveries])


def _check_file(store: ObjectStore, delivery: LandedDelivery) -> str | None:
    manifest = delivery.manifest
    uri = store.uri(manifest.data_key)
    where = f"landed file {uri} (manifest {store.uri(delivery.manifest_key)})"
    try:
        size = store.size(manifest.data_key)
        if size != manifest.bytes:
            return f"{where}: size is {size} bytes, the manifest says {manifest.bytes}"
        data = store.read_bytes(manifest.data_key)
    except ObjectNotFoundError:
        return f"{where}: the file is missing"
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest.sha256:
        return f"{where}: SHA-256 is {digest}, the manifest says {manifest.sha256}"
    if manifest.bytes and not data.startswith(GZIP_MAGIC):
        return f"{where}: not a gzip file"
    return None


def verify_landed(store: ObjectStore, deliveries: Sequence[LandedDelivery]) -> None:
    """Check that every landed file exists with its manifest's byte size and SHA-256.

    Files are read in a few threads (object stores reward parallel reads).

    Raises:
        LandingError: listing every file that is missing or disagrees, and what to do.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=_VERIFY_THREADS) as pool:
        results = list(pool.map(lambda d: _check_file(store, d), deliveries))
    problems = sorted(p for p in results if p)
    if problems:
        shown = problems[:_MAX_LISTED_PROBLEMS]
        more = len(problems) - len(shown)
        raise LandingError(
            f"{len(problems)} landed file(s) disagree with their manifests:\n  "
            + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more else "")
            + f"\nFix: {_LANDING_HINT}."
        )


_ARROW_TYPES: Mapping[str, pa.DataType] = {
    "STRING": pa.string(),
    "INT64": pa.int64(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
}


def pageview_arrow_schema() -> pa.Schema:
    """Arrow schema of the pageview Parquet files, as Spark writes them.

    :data:`~bq_platform.lib.warehouse.schema.PAGEVIEW_COLUMNS` in order; ``TIMESTAMP`` is
    ``TIMESTAMP(MICROS, UTC)`` (Spark with ``spark.sql.parquet.outputTimestampType=
    TIMESTAMP_MICROS``), ``DATE`` is ``DATE``, ``INT64`` is ``INT64``; every field nullable, as
    Spark always writes file sources. Used for the empty file of an hour without pages.
    """
    return pa.schema([pa.field(c.name, _ARROW_TYPES[c.type]) for c in PAGEVIEW_COLUMNS])


def _empty_parquet() -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pageview_arrow_schema().empty_table(), buffer)
    return buffer.getvalue()


def _parquet_keys(store: ObjectStore, prefix: str) -> list[str]:
    keys = []
    for key in store.list_keys(prefix):
        name = key.rsplit("/", 1)[-1]
        if name.endswith(".parquet") and not name.startswith((".", "_")):
            keys.append(key)
    return keys


def _parquet_keys_by_folder(store: ObjectStore, prefix: str) -> dict[str, list[str]]:
    """The Parquet files under ``prefix`` by their ``hour=`` folder (one listing: on GCS a
    listing is a request, and a day has 24 hours of three outputs)."""
    out: dict[str, list[str]] = {}
    for key in _parquet_keys(store, prefix):
        out.setdefault(key.rsplit("/", 1)[0], []).append(key)
    return out


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


def _hour_folder(prefix: str, label: str) -> str:
    return f"{prefix}/{HOUR_FOLDER_COLUMN}={label}"


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


def _slim(classified: DataFrame) -> DataFrame:
    """What the outputs need, per line: page columns for pages, raw text for dead letters."""
    category = F.col("category")
    page = category == CATEGORY_PAGE
    dead = category.isin(CATEGORY_REJECTED, CATEGORY_OUT_OF_WINDOW)
    keep = {"site", "event_id"}
    return classified.select(
        "hour_label",
        "data_key",
        "line_no",
        "category",
        *[
            F.col(c) if c in keep else F.when(page, F.col(c)).alias(c)
            for c in PAGEVIEW_COLUMN_NAMES
        ],
        "in_sample",
        F.when(dead, F.col("reason")).alias("reason"),
        F.when(dead, F.col("raw")).alias("raw"),
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
            store.delete_prefix(_hour_folder(prefix, labels[hour]))

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

    manifests = _hour_manifests(
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
        totals = _sum_counts(manifest.counts)
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
        rows = _slim(transform_lines(lines, visitor_key=visitor_key, window=window)).persist()
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
                    *_rejected_aggregates(),
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
            _write(page_rows, store.uri(full_prefix))
            _write(page_rows.where(F.col("in_sample")), store.uri(sample_prefix))
            dead = rows.where(category.isin(CATEGORY_REJECTED, CATEGORY_OUT_OF_WINDOW))
            _write(dead.select(*DEADLETTER_COLUMNS, hour_col), store.uri(dead_prefix))
            log.info("wrote Parquet (full, sample, dead letters) in %.1f s", time.monotonic() - t1)
        finally:
            rows.unpersist()


_REJECTED = "rejected:"  # per-file count of rejected lines of a reason: "rejected:malformed"
_SAMPLE = "sample:"  # per-file raw sample line: "sample:malformed" (first), "sample:" (last)
_SAMPLES = "samples"  # key of a file's samples (_SAMPLE name -> raw line) in ``per_file``
#: Raw rejected lines a site-hour's manifest keeps (for the rejected-share check).
MAX_REJECTED_SAMPLES = 3


def _rejected_aggregates() -> list[Column]:
    """Per-file aggregates for :mod:`bq_platform.lib.quality`, computed in the file-count pass.

    For each rejection reason: its lines, and the first such line (by line number; raw text cut
    to :data:`~bq_platform.lib.accounting.MAX_SAMPLE_CHARS`); plus the file's last rejected line.
    ``min_by``/``max_by`` keep one value per group, so an hour of garbage costs no more memory.
    """
    rejected = F.col("category") == CATEGORY_REJECTED
    raw = F.substring(F.col("raw"), 1, MAX_SAMPLE_CHARS)
    line_no = F.col("line_no")
    columns = []
    for code in lf.REJECT_REASONS:
        of_code = rejected & (F.col("reason") == code)
        columns.append(F.count_if(of_code).alias(_REJECTED + code))
        columns.append(F.min_by(raw, F.when(of_code, line_no)).alias(_SAMPLE + code))
    columns.append(F.max_by(raw, F.when(rejected, line_no)).alias(_SAMPLE))
    return columns


def _rejected_details(files: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``rejected_reasons`` and ``rejected_samples`` of a site-hour from its files' aggregates.

    Samples: the first line of each reason, most frequent reason first, then the files' last
    rejected lines, up to :data:`MAX_REJECTED_SAMPLES` distinct lines.
    """
    reasons: dict[str, int] = {}
    for f in files:
        for key, value in f.items():
            if key.startswith(_REJECTED) and value:
                reason = key[len(_REJECTED) :]
                reasons[reason] = reasons.get(reason, 0) + int(value)
    ranked = sorted(reasons, key=lambda r: (-reasons[r], r))
    candidates = [f.get(_SAMPLES, {}).get(_SAMPLE + r) for r in ranked for f in files]
    candidates += [f.get(_SAMPLES, {}).get(_SAMPLE) for f in files]
    samples: list[str] = []
    for line in candidates:
        if line is not None and line not in samples and len(samples) < MAX_REJECTED_SAMPLES:
            samples.append(line)
    return {"rejected_reasons": reasons, "rejected_samples": tuple(samples)}


def _write(frame: DataFrame, uri: str) -> None:
    frame.write.mode("append").partitionBy(HOUR_FOLDER_COLUMN).parquet(uri)


def _sum_counts(counts: Sequence[SiteHourCounts]) -> dict[str, int]:
    fields = ("non_page_hits", "rejected", "duplicates", "out_of_window")
    return {f: sum(getattr(c, f) for c in counts) for f in fields}


def _hour_manifests(
    store: ObjectStore,
    hour_list: Sequence[dt.datetime],
    sites: Sequence[str],
    deliveries: Mapping[tuple[str, dt.datetime], Sequence[LandedDelivery]],
    per_file: Mapping[str, Mapping[str, Any]],
    visitors: Mapping[tuple[str, str], tuple[int, int]],
    attempt_id: str,
    key_ident: str,
    prefixes: tuple[str, str, str],
    orphans: Mapping[tuple[str, dt.datetime], Sequence[str]] | None = None,
) -> list[HourManifest]:
    """Counts, file lists and fingerprints per hour; writes empty Parquet files where needed.

    ``orphans``: per (site, hour), data files no manifest names; recorded in the manifest and
    part of the input fingerprint (as :attr:`~bq_platform.lib.landing_index.LandedHour.
    input_fingerprint` computes it, so ``bq-platform run`` sees the hour as built).
    """
    full_prefix, sample_prefix, dead_prefix = prefixes
    empty: bytes | None = None
    written = {p: _parquet_keys_by_folder(store, p) for p in prefixes}  # 3 listings, not 5/hour
    manifests = []
    for hour in hour_list:
        label = layout.hour_label(hour)
        counts, mismatches, checksums = [], [], []
        for site in sites:
            ds = deliveries[(site, hour)]
            checksums += [(site, d.manifest.sha256) for d in ds]
            files = [per_file.get(d.manifest.data_key, {}) for d in ds if not d.duplicate]
            for d in ds:
                read = per_file.get(d.manifest.data_key, {}).get("lines_read", 0)
                if not d.duplicate and read != d.manifest.lines:
                    mismatches.append(
                        {
                            "data_key": d.manifest.data_key,
                            "manifest_lines": d.manifest.lines,
                            "lines_read": read,
                        }
                    )
            n_visitors, n_sampled = visitors.get((site, label), (0, 0))
            counts.append(
                SiteHourCounts(
                    site=site,
                    hour=hour,
                    source_lines=sum(d.manifest.lines for d in ds),
                    pageviews=sum(f.get(CATEGORY_PAGE, 0) for f in files),
                    non_page_hits=sum(f.get(CATEGORY_NON_PAGE, 0) for f in files),
                    rejected=sum(f.get(CATEGORY_REJECTED, 0) for f in files),
                    duplicates=sum(d.manifest.lines for d in ds if d.duplicate),
                    out_of_window=sum(f.get(CATEGORY_OUT_OF_WINDOW, 0) for f in files),
                    lines_read=sum(f.get("lines_read", 0) for f in files),
                    sample_rows=sum(f.get("sample_rows", 0) for f in files),
                    visitors=n_visitors,
                    sample_visitors=n_sampled,
                    files=len(files),
                    **_rejected_details(files),
                )
            )
        folders = {p: _hour_folder(p, label) for p in prefixes}
        files_of = {p: written[p].get(folders[p], []) for p in prefixes}
        for prefix in (full_prefix, sample_prefix):
            if not files_of[prefix]:
                if empty is None:
                    empty = _empty_parquet()
                key = f"{folders[prefix]}/part-00000-empty.parquet"
                store.write_bytes(key, empty)
                files_of[prefix] = [key]
        hour_orphans = [k for site in sites for k in (orphans or {}).get((site, hour), ())]
        checksums += [(layout.parse_landed_key(k)[0], orphan_checksum(k)) for k in hour_orphans]
        input_fp = jobids.input_fingerprint(checksums)
        manifests.append(
            HourManifest(
                hour=hour,
                attempt_id=attempt_id,
                fingerprint=jobids.hour_fingerprint(
                    input_fp, TRANSFORM_VERSION, key_ident, SAMPLE_MODULUS
                ),
                input_fingerprint=input_fp,
                full_files=tuple(files_of[full_prefix]),
                sample_files=tuple(files_of[sample_prefix]),
                deadletter_files=tuple(files_of[dead_prefix]),
                rows=sum(c.pageviews for c in counts),
                sample_rows=sum(c.sample_rows for c in counts),
                counts=tuple(counts),
                file_mismatches=tuple(mismatches),
                orphan_files=tuple(hour_orphans),
            )
        )
    return manifests
