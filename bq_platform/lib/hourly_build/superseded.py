"""Superseded records: which attempts each build displaced, so cleanup follows the builds.

The attempts an hour's old manifest named and its new one does not are *superseded*. The build
records them, one JSON object per build attempt, written *before* its hour manifests so that no
displacement goes unrecorded:

    {"format": "bq_platform.superseded/1", "attempt_id": "<the build's attempt>",
     "written_at": "<UTC ISO time>", "units": [["<displaced attempt>", "YYYY-MM-DDTHH"], ...]}

A *unit* is one attempt's three folders of one hour; the cleanup's record pass
(:func:`bq_platform.lib.hourly_build.retention.clean_superseded`) deletes them.
"""

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import HourManifest, ManifestError
from bq_platform.lib.storage.base import ObjectStore

SUPERSEDED_FORMAT = "bq_platform.superseded/1"
#: Folder of the records (not an ``attempt=`` folder, so attempt listings ignore it).
SUPERSEDED_PREFIX = f"{layout.STAGING_PREFIX}/_SUPERSEDED"
_RECORD_NAME = "units.json"

#: One attempt's folder of one hour: ``(attempt_id, hour label 'YYYY-MM-DDTHH')``.
Unit = tuple[str, str]


def superseded_record_key(attempt_id: str) -> str:
    """Key of the record of the build attempt ``attempt_id``, in a folder of its own (so
    ``delete_prefix`` removes it); ``ValueError`` for an invalid attempt ID."""
    layout.attempt_prefix(attempt_id)  # validates
    return f"{SUPERSEDED_PREFIX}/{layout.ATTEMPT_FOLDER}{attempt_id}/{_RECORD_NAME}"


@dataclasses.dataclass(frozen=True)
class SupersededRecord:
    """What one build attempt displaced.

    Attributes:
        attempt_id: the build attempt that wrote the newer hour manifests.
        written_at: when it wrote this record (UTC).
        units: ``(displaced attempt, hour label)``, sorted, no repeats.
    """

    attempt_id: str
    written_at: dt.datetime
    units: tuple[Unit, ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": SUPERSEDED_FORMAT,
                "attempt_id": self.attempt_id,
                "written_at": self.written_at.isoformat(),
                "units": [list(unit) for unit in self.units],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "superseded record") -> "SupersededRecord":
        """Parse and validate a record; ``ManifestError`` naming ``where`` if it is not one."""
        try:
            data: Any = json.loads(text)
            if data.get("format") != SUPERSEDED_FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {SUPERSEDED_FORMAT}")
            written_at = dt.datetime.fromisoformat(data["written_at"])
            if written_at.utcoffset() != dt.timedelta(0):
                raise ValueError(f"written_at {data['written_at']!r} is not UTC")
            units = tuple(_unit(u) for u in data["units"])
            layout.attempt_prefix(data["attempt_id"])
            return cls(str(data["attempt_id"]), written_at, units)
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{where}: not a superseded record: {exc}") from exc


def _unit(value: Any) -> Unit:
    attempt_id, label = value  # ValueError/TypeError if not a pair
    layout.attempt_prefix(attempt_id)
    layout.parse_hour_label(label)
    return (attempt_id, label)


def named_attempts(manifest: HourManifest) -> set[str]:
    """The attempts whose files ``manifest`` names, and its own attempt."""
    named = {manifest.attempt_id}
    roots = (layout.STAGING_PREFIX + "/", layout.DEADLETTER_PREFIX + "/")
    for key in manifest.full_files + manifest.sample_files + manifest.deadletter_files:
        for root in roots:
            if key.startswith(root):
                attempt_id = layout.parse_attempt_folder(key[len(root) :].split("/", 1)[0])
                if attempt_id is not None:
                    named.add(attempt_id)
    return named


def superseded_units(
    previous: Mapping[dt.datetime, HourManifest | None], current: Sequence[HourManifest]
) -> list[Unit]:
    """The units the ``current`` manifests displace: per hour, the attempts the ``previous``
    manifest (None: the hour was never built) named that the current one does not. Sorted."""
    units: set[Unit] = set()
    for manifest in current:
        before = previous.get(manifest.hour)
        if before is None:
            continue
        label = layout.hour_label(manifest.hour)
        units.update((a, label) for a in named_attempts(before) - named_attempts(manifest))
    return sorted(units)


def record_superseded(
    store: ObjectStore, attempt_id: str, units: Sequence[Unit], now: dt.datetime | None = None
) -> SupersededRecord | None:
    """Write the record of ``attempt_id`` (one object), or nothing when ``units`` is empty.

    Call it just before the attempt's hour manifests are written. A retry of the same attempt
    replaces the record.

    Raises:
        ValueError: if an attempt ID or hour label is invalid.
    """
    if not units:
        return None
    record = SupersededRecord(
        attempt_id=attempt_id,
        written_at=now or dt.datetime.now(dt.UTC),
        units=tuple(_unit(u) for u in sorted(set(units))),
    )
    store.write_text(superseded_record_key(attempt_id), record.to_json())
    return record


def read_records(store: ObjectStore) -> dict[str, SupersededRecord | ManifestError]:
    """Every record under :data:`SUPERSEDED_PREFIX`, by key. An unreadable record maps to its
    :class:`ManifestError` (naming the object), for the caller to report and keep."""
    keys = [k for k in store.list_keys(SUPERSEDED_PREFIX) if k.endswith("/" + _RECORD_NAME)]
    texts = store.read_many(keys)
    records: dict[str, SupersededRecord | ManifestError] = {}
    for key in keys:
        text = texts[key]
        if isinstance(text, Exception):  # deleted by another pass since the listing
            continue
        try:
            records[key] = SupersededRecord.from_json(text, where=store.uri(key))
        except ManifestError as exc:
            records[key] = exc
    return records


def record_folder(key: str) -> str:
    """The folder of the record ``key`` (what :meth:`ObjectStore.delete_prefix` removes)."""
    return key.rsplit("/", 1)[0]
