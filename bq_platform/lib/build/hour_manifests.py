"""The manifests of an hourly build: per-hour counts, file lists and fingerprints.

:func:`hour_manifests` turns what the Spark pass of :mod:`bq_platform.lib.build.hourly` counted per
landed file (lines per category, rejected lines per reason with a few samples, visitors) into
one :class:`~bq_platform.lib.core.manifest.HourManifest` per UTC hour: the accounting per site, the
Parquet files that count (an hour without pages gets one empty file, so every load job has a
source, the dead letters too), the orphan data files, and the hour's content fingerprint
(:func:`bq_platform.lib.core.job_ids.hour_fingerprint`), from which the job IDs are built.
"""

import datetime as dt
import io
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bq_platform.lib.core import job_ids as jobids

from bq_platform.lib.core import layout
from bq_platform.lib.core.accounting import SiteHourCounts
from bq_platform.lib.landing.deliveries import LandedDelivery
from bq_platform.lib.landing.index import orphan_checksum
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.core.pseudonymize import SAMPLE_MODULUS
from bq_platform.lib.build.transform import (
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    TRANSFORM_VERSION,
)
from bq_platform.lib.warehouse.schema import DEADLETTER_COLUMNS_SPEC, PAGEVIEW_COLUMNS, Column

#: Partition folder name of every Parquet output (``hour=YYYY-MM-DDTHH``).
HOUR_FOLDER_COLUMN = "hour"


_ARROW_TYPES: Mapping[str, pa.DataType] = {
    "STRING": pa.string(),
    "INT64": pa.int64(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
}


def arrow_schema(columns: Sequence[Column]) -> pa.Schema:
    """Arrow schema of Parquet files Spark writes for a table of ``columns``.

    ``TIMESTAMP`` is ``TIMESTAMP(MICROS, UTC)`` (Spark with ``spark.sql.parquet.
    outputTimestampType=TIMESTAMP_MICROS``), ``DATE`` is ``DATE``, ``INT64`` is ``INT64``; every
    field nullable, as Spark always writes file sources. Used for the empty file of an hour
    without rows, so every load job has a source.
    """
    return pa.schema([pa.field(c.name, _ARROW_TYPES[c.type]) for c in columns])


def pageview_arrow_schema() -> pa.Schema:
    """Arrow schema of the pageview Parquet files (:data:`PAGEVIEW_COLUMNS`, in order)."""
    return arrow_schema(PAGEVIEW_COLUMNS)


def deadletter_arrow_schema() -> pa.Schema:
    """Arrow schema of the dead-letter Parquet files (:data:`DEADLETTER_COLUMNS_SPEC`)."""
    return arrow_schema(DEADLETTER_COLUMNS_SPEC)


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as one Parquet file (pyarrow's defaults: snappy, as Spark writes)."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def empty_parquet(schema: pa.Schema) -> bytes:
    """A Parquet file of ``schema`` with no rows (a few hundred bytes)."""
    return parquet_bytes(schema.empty_table())


def parquet_files_by_folder(store: ObjectStore, prefix: str) -> dict[str, dict[str, int]]:
    """The Parquet files under ``prefix`` with their sizes in bytes, by their ``hour=`` folder
    (one listing: on GCS a listing is a request and carries the sizes, and a day has 24 hours
    of three outputs)."""
    out: dict[str, dict[str, int]] = {}
    for key, size in store.list_sizes(prefix).items():
        name = key.rsplit("/", 1)[-1]
        if name.endswith(".parquet") and not name.startswith((".", "_")):
            out.setdefault(key.rsplit("/", 1)[0], {})[key] = size
    return out


def clear_hour_folders(store: ObjectStore, prefixes: Sequence[str], labels: Sequence[str]) -> int:
    """Delete what an earlier try of the same attempt left in the ``hour=`` folders of
    ``labels`` under each of ``prefixes``; return the objects deleted.

    One listing per prefix finds the folders that hold anything, and only those are deleted:
    on GCS a folder deletion is a listing request even when the folder is empty, and a fresh
    attempt over 72 hours has 216 empty folders (3 outputs), 216 requests in a row.
    """
    deleted = 0
    for prefix in prefixes:
        present = {key[len(prefix) + 1 :].split("/", 1)[0] for key in store.list_keys(prefix)}
        for label in labels:
            if f"{HOUR_FOLDER_COLUMN}={label}" in present:
                deleted += store.delete_prefix(hour_folder(prefix, label))
    return deleted


def hour_folder(prefix: str, label: str) -> str:
    return f"{prefix}/{HOUR_FOLDER_COLUMN}={label}"


_REJECTED = "rejected:"  # per-file count of rejected lines of a reason: "rejected:malformed"
_SAMPLE = "sample:"  # per-file raw sample line: "sample:malformed" (first), "sample:" (last)
_SAMPLES = "samples"  # key of a file's samples (_SAMPLE name -> raw line) in ``per_file``
#: Raw rejected lines a site-hour's manifest keeps (for the rejected-share check).
MAX_REJECTED_SAMPLES = 3


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


def sum_counts(counts: Sequence[SiteHourCounts]) -> dict[str, int]:
    fields = ("non_page_hits", "rejected", "duplicates", "out_of_window")
    return {f: sum(getattr(c, f) for c in counts) for f in fields}


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
) -> list[HourManifest]:
    """Counts, file lists and fingerprints per hour; writes empty Parquet files where needed.

    ``orphans``: per (site, hour), data files no manifest names; recorded in the manifest and
    part of the input fingerprint (as :attr:`~bq_platform.lib.landing.index.LandedHour.
    input_fingerprint` computes it, so ``bq-platform run`` sees the hour as built).
    """
    full_prefix, sample_prefix, dead_prefix = prefixes
    schemas = {
        full_prefix: pageview_arrow_schema,
        sample_prefix: pageview_arrow_schema,
        dead_prefix: deadletter_arrow_schema,
    }
    empty: dict[str, bytes] = {}
    written = {p: parquet_files_by_folder(store, p) for p in prefixes}  # 3 listings, not 5/hour
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
                full_bytes=sum(files_of[full_prefix].values()),
                sample_bytes=sum(files_of[sample_prefix].values()),
            )
        )
    return manifests
