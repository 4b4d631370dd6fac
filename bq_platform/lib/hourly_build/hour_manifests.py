"""Each hour's manifest at the end of a build: the accounting per site, the Parquet files that
count (an hour without rows gets one empty file per output, so every load job has a source),
the orphan data files, and the fingerprints the job IDs are built from.
"""

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from bq_platform.lib.core import job_ids, layout
from bq_platform.lib.core.accounting import SiteHourCounts
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.core.pseudonymize import SAMPLE_MODULUS
from bq_platform.lib.hourly_build.outputs import (
    REJECTED_COLUMN_PREFIX,
    SAMPLE_COLUMN_PREFIX,
    deadletter_arrow_schema,
    empty_parquet,
    hour_folder,
    pageview_arrow_schema,
    parquet_files_by_folder,
)
from bq_platform.lib.hourly_build.transform import (
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    TRANSFORM_VERSION,
)
from bq_platform.lib.landing.deliveries import LandedDelivery
from bq_platform.lib.landing.index import orphan_checksum
from bq_platform.lib.storage.base import ObjectStore

#: Key of a file's rejected samples in its ``per_file`` entry: ``{sample column: raw line}``
#: (the ``sample:`` columns of :func:`~bq_platform.lib.hourly_build.outputs.rejected_samples`).
SAMPLES = "samples"
#: Raw rejected lines a site-hour's manifest keeps (for the rejected-share check).
MAX_REJECTED_SAMPLES = 3


def rejected_details(files: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``rejected_reasons`` and ``rejected_samples`` of a site-hour from its files' entries.
    Samples: each reason's first line, most frequent reason first, then the files' last
    rejected lines, at most :data:`MAX_REJECTED_SAMPLES` distinct ones."""
    reasons: dict[str, int] = {}
    for f in files:
        for key, value in f.items():
            if key.startswith(REJECTED_COLUMN_PREFIX) and value:
                reason = key[len(REJECTED_COLUMN_PREFIX) :]
                reasons[reason] = reasons.get(reason, 0) + int(value)
    ranked = sorted(reasons, key=lambda r: (-reasons[r], r))
    candidates = [f.get(SAMPLES, {}).get(SAMPLE_COLUMN_PREFIX + r) for r in ranked for f in files]
    candidates += [f.get(SAMPLES, {}).get(SAMPLE_COLUMN_PREFIX) for f in files]
    samples: list[str] = []
    for line in candidates:
        if line is not None and line not in samples and len(samples) < MAX_REJECTED_SAMPLES:
            samples.append(line)
    return {"rejected_reasons": reasons, "rejected_samples": tuple(samples)}


def hour_manifests(
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
    *,
    classifier: str,
    traffic: Mapping[tuple[str, str], tuple[int, int]] | None = None,
    bot_reasons: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
) -> list[HourManifest]:
    """One manifest per hour of ``hour_list``, in order; writes the empty Parquet files needed.

    Args:
        deliveries: per (site, hour), every landed delivery, duplicates included.
        per_file: per landed data key, the build's counts (``lines_read``, one per category,
            ``sample_rows``, ``rejected:<reason>``) and its :data:`SAMPLES`.
        visitors: per (site, hour label), distinct and sampled visitors.
        key_ident: :func:`~bq_platform.lib.core.pseudonymize.key_id` of the visitor key.
        prefixes: the attempt's full, sample and dead-letter prefixes.
        orphans: per (site, hour), data files no manifest names; part of the input
            fingerprint, as :attr:`~bq_platform.lib.landing.index.LandedHour.input_fingerprint`.
        traffic: per (site, hour label), human and bot pages.
        bot_reasons: per (site, hour label), bot pages per ``bot_reason``.
        classifier: the traffic classifier's version
            (:func:`~bq_platform.lib.traffic.version.classifier_version`): part of the hour's
            fingerprint, and recorded as :attr:`HourManifest.classifier`.
    """
    full_prefix, sample_prefix, dead_prefix = prefixes
    schemas = {
        full_prefix: pageview_arrow_schema,
        sample_prefix: pageview_arrow_schema,
        dead_prefix: deadletter_arrow_schema,
    }
    empty: dict[str, bytes] = {}
    written = {p: parquet_files_by_folder(store, p) for p in prefixes}
    manifests = []
    for hour in hour_list:
        label = hour_label(hour)
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
            n_human, n_bot = (traffic or {}).get((site, label), (0, 0))
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
                    human_pageviews=n_human,
                    bot_pageviews=n_bot,
                    bot_reasons=dict((bot_reasons or {}).get((site, label), {})),
                    **rejected_details(files),
                )
            )
        folders = {p: hour_folder(p, label) for p in prefixes}
        files_of = {p: written[p].get(folders[p], {}) for p in prefixes}
        for prefix in prefixes:
            if not files_of[prefix]:
                if prefix not in empty:
                    empty[prefix] = empty_parquet(schemas[prefix]())
                key = f"{folders[prefix]}/part-00000-empty.parquet"
                store.write_bytes(key, empty[prefix])
                files_of[prefix] = {key: len(empty[prefix])}
        hour_orphans = [k for site in sites for k in (orphans or {}).get((site, hour), ())]
        checksums += [(layout.parse_landed_key(k)[0], orphan_checksum(k)) for k in hour_orphans]
        input_fp = job_ids.input_fingerprint(checksums)
        manifests.append(
            HourManifest(
                hour=hour,
                attempt_id=attempt_id,
                fingerprint=job_ids.hour_fingerprint(
                    input_fp, TRANSFORM_VERSION, key_ident, SAMPLE_MODULUS, classifier
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
                full_bytes=sum(files_of[full_prefix].values()),
                sample_bytes=sum(files_of[sample_prefix].values()),
                classifier=classifier,
            )
        )
    return manifests
