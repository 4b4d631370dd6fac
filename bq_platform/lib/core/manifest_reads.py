"""What the steps after the build read of an hour: its manifest and the files it names.

On GCS every read is a request of ~20-100 ms, so an hour manifest is read with one request (no
existence check first), the manifests of a step's or a day's hours side by side
(``ObjectStore.read_many``), and the bytes of an hour's files come from its manifest, not from a
size request per file (issue 9, docs/PERFORMANCE.md).
"""

import datetime as dt
import functools
from collections.abc import Sequence

from bq_platform.lib.core.layout import hour_manifest_key
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.storage.base import ObjectNotFoundError, ObjectStore


def stage_files(manifest: HourManifest, kind: str) -> list[str]:
    """The object keys of the hour's ``kind`` Parquet files its manifest names."""
    return list(manifest.full_files if kind == "full" else manifest.sample_files)


def stage_bytes(store: ObjectStore, manifest: HourManifest, kind: str) -> int:
    """Total size in bytes of the hour's ``kind`` Parquet files: as its manifest records it, or
    (a manifest written before it did) one size request per file."""
    recorded = manifest.full_bytes if kind == "full" else manifest.sample_bytes
    if recorded is not None:
        return recorded
    return sum(store.size(k) for k in stage_files(manifest, kind))


def read_hour_manifests(
    store: ObjectStore, hours: Sequence[dt.datetime]
) -> dict[dt.datetime, HourManifest | None]:
    """Each hour's manifest, None for an hour never built, in ``hours``' order.

    One read per hour (on GCS an existence check first would be a second request), the reads
    side by side (``ObjectStore.read_many``: a day is 24 requests of ~20-100 ms on GCS).

    Raises:
        ManifestError: naming the object, if a manifest is unreadable.
    """
    keys = {hour: hour_manifest_key(hour) for hour in hours}
    texts = store.read_many(list(keys.values()))
    manifests: dict[dt.datetime, HourManifest | None] = {}
    for hour, key in keys.items():
        text = texts[key]
        if isinstance(text, ObjectNotFoundError):  # never built
            manifests[hour] = None
        else:
            manifests[hour] = parse_hour_manifest(text, store.uri(key))
    return manifests


#: Hour manifests :func:`parse_hour_manifest` keeps parsed, ~20 KB of text each (a 3-day batch
#: is 72; a 1x ``bq-platform run`` parsed 504, each ~0.4 ms: issue 9, docs/PERFORMANCE.md).
PARSED_MANIFESTS = 256


@functools.lru_cache(maxsize=PARSED_MANIFESTS)
def parse_hour_manifest(text: str | bytes, where: str) -> HourManifest:
    """:meth:`HourManifest.from_json`, remembered by the manifest's exact text (and where it
    was read): the audit, stage, report and publish steps of one process read the same hours
    again, and a manifest changes only by being rewritten, which changes its text (its
    ``attempt_id`` and ``created_at`` at least). Callers share the result: a frozen dataclass
    (its ``file_mismatches`` are dicts no caller changes). A text that does not parse raises
    each time.

    Raises:
        ManifestError: naming ``where`` if the document is not a valid hour manifest.
    """
    return HourManifest.from_json(text, where=where)


def read_hour_manifest(store: ObjectStore, hour: dt.datetime) -> HourManifest | None:
    """:func:`read_hour_manifests` of one hour.

    Raises:
        ManifestError: naming the object, if the manifest is unreadable.
    """
    return read_hour_manifests(store, [hour])[hour]
