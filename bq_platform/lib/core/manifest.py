"""Manifests: small JSON documents, versioned by ``format``, that say which files count.

- :class:`LandedManifest`: written by a producer next to each landed file, *after* the file.
- :class:`HourManifest`: written by the build once all Parquet files of one attempt for one
  hour are complete; it names exactly the files the load jobs load.
"""

import dataclasses
import datetime as dt
import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from bq_platform.lib.core.accounting import SiteHourCounts
from bq_platform.lib.core.hours import hour_label, parse_hour_label
from bq_platform.lib.core.layout import hour_manifest_key
from bq_platform.lib.storage.base import ObjectNotFoundError, ObjectStore

LANDED_MANIFEST_FORMAT = "bq_platform.landed/1"
#: A CRC32C as GCS encodes it: base64 of 4 bytes.
_CRC32C_RE = re.compile(r"^[A-Za-z0-9+/]{6}==$")
HOUR_MANIFEST_FORMAT = "bq_platform.hour/1"
#: :attr:`HourManifest.classifier` of an hour built without traffic classification.
UNCLASSIFIED = ""


class ManifestError(ValueError):
    """A manifest is missing a field, has the wrong format, or disagrees with its data."""


class LandingError(ValueError):
    """Input cannot be landed, or a landed file or manifest is missing, corrupt or disagrees
    with the other; the message names the objects, what disagreed, and what to do."""


@dataclasses.dataclass(frozen=True)
class LandedManifest:
    """Producer manifest of one landed gzip file of ``site`` (e.g. ``epa.gov``) and UTC ``hour``.

    Attributes:
        lines: log lines in the file (``\\n``-terminated, plus a final unterminated one): the
            *source count*.
        bytes: size of the landed object.
        sha256: hex SHA-256 of the landed bytes; equal values are the same delivery.
        source: name of the file the lines came from (informational).
        crc32c: CRC32C of the landed bytes as GCS lists it (base64, big-endian); optional
            (``""``). With it, a build on GCS checks the file from its listing.
    """

    site: str
    hour: dt.datetime
    data_key: str
    lines: int
    bytes: int
    sha256: str
    source: str = ""
    crc32c: str = ""

    def to_json(self) -> str:
        """Serialize as a one-line JSON document (``crc32c`` only when known)."""
        document = {
            "format": LANDED_MANIFEST_FORMAT,
            "site": self.site,
            "hour": hour_label(self.hour),
            "data_key": self.data_key,
            "lines": self.lines,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "source": self.source,
        }
        if self.crc32c:
            document["crc32c"] = self.crc32c
        return json.dumps(document, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "<manifest>") -> "LandedManifest":
        """Parse a landed manifest; ManifestError naming ``where`` if it is not valid."""
        data = _load(text, where, LANDED_MANIFEST_FORMAT)
        try:
            manifest = cls(
                site=str(data["site"]),
                hour=parse_hour_label(str(data["hour"])),
                data_key=str(data["data_key"]),
                lines=int(data["lines"]),
                bytes=int(data["bytes"]),
                sha256=str(data["sha256"]),
                source=str(data.get("source", "")),
                crc32c=str(data.get("crc32c", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{where}: bad or missing field: {exc}") from exc
        if manifest.lines < 0 or manifest.bytes < 0 or len(manifest.sha256) != 64:
            raise ManifestError(f"{where}: lines/bytes must be >= 0 and sha256 64 hex digits")
        if manifest.crc32c and not _CRC32C_RE.fullmatch(manifest.crc32c):
            raise ManifestError(
                f"{where}: crc32c {manifest.crc32c!r} is not a base64 CRC32C (8 characters "
                "ending in '==', as GCS reports it)"
            )
        return manifest


@dataclasses.dataclass(frozen=True)
class HourManifest:
    """What one successful build attempt produced for one UTC hour.

    Attributes:
        attempt_id: the attempt whose files count (a Dagster run ID, or a CLI-made ID).
        fingerprint: hex SHA-256 of the hour's output
            (:func:`bq_platform.lib.core.job_ids.hour_fingerprint`); job IDs are built from it.
        input_fingerprint: of the landed inputs (their checksums).
        counts: per-site accounting (every known site, zeros included).
        file_mismatches: landed files whose line count differs from their manifest:
            ``{"data_key", "manifest_lines", "lines_read"}``.
        orphan_files: landed data files of the hour no manifest names (incomplete deliveries).
        full_bytes, sample_bytes: bytes of ``full_files``/``sample_files``; None when the
            document lacks them (:func:`stage_bytes`).
        classifier: the traffic classifier the hour's rows were classified with
            (:func:`bq_platform.lib.traffic.version.classifier_version`); :data:`UNCLASSIFIED`
            when the document lacks it (written by a build without traffic classification).
    """

    hour: dt.datetime
    attempt_id: str
    fingerprint: str
    input_fingerprint: str
    full_files: tuple[str, ...]
    sample_files: tuple[str, ...]
    deadletter_files: tuple[str, ...]
    rows: int
    sample_rows: int
    counts: tuple[SiteHourCounts, ...]
    file_mismatches: tuple[Mapping[str, Any], ...] = ()
    orphan_files: tuple[str, ...] = ()
    full_bytes: int | None = None
    sample_bytes: int | None = None
    classifier: str = UNCLASSIFIED
    created_at: dt.datetime = dataclasses.field(
        default_factory=lambda: dt.datetime.now(dt.UTC).replace(microsecond=0)
    )

    def to_json(self) -> str:
        """Serialize as an indented JSON document (humans read these)."""
        return json.dumps(
            {
                "format": HOUR_MANIFEST_FORMAT,
                "hour": hour_label(self.hour),
                "attempt_id": self.attempt_id,
                "fingerprint": self.fingerprint,
                "input_fingerprint": self.input_fingerprint,
                "full_files": list(self.full_files),
                "sample_files": list(self.sample_files),
                "deadletter_files": list(self.deadletter_files),
                "rows": self.rows,
                "sample_rows": self.sample_rows,
                "counts": [c.to_json() for c in self.counts],
                "file_mismatches": [dict(m) for m in self.file_mismatches],
                "orphan_files": list(self.orphan_files),
                "full_bytes": self.full_bytes,
                "sample_bytes": self.sample_bytes,
                "classifier": self.classifier,
                "created_at": self.created_at.isoformat(),
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "<manifest>") -> "HourManifest":
        """Parse an hour manifest; ManifestError naming ``where`` if it is not valid."""
        data = _load(text, where, HOUR_MANIFEST_FORMAT)
        try:
            return cls(
                hour=parse_hour_label(data["hour"]),
                attempt_id=str(data["attempt_id"]),
                fingerprint=str(data["fingerprint"]),
                input_fingerprint=str(data["input_fingerprint"]),
                full_files=tuple(data["full_files"]),
                sample_files=tuple(data["sample_files"]),
                deadletter_files=tuple(data["deadletter_files"]),
                rows=int(data["rows"]),
                sample_rows=int(data["sample_rows"]),
                counts=tuple(SiteHourCounts.from_json(c) for c in data["counts"]),
                file_mismatches=tuple(data.get("file_mismatches", ())),
                orphan_files=tuple(str(k) for k in data.get("orphan_files", ())),
                full_bytes=_optional_int(data.get("full_bytes")),
                sample_bytes=_optional_int(data.get("sample_bytes")),
                classifier=str(data.get("classifier") or UNCLASSIFIED),
                created_at=dt.datetime.fromisoformat(data["created_at"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{where}: bad or missing field: {exc}") from exc

    def accounting_problems(self) -> list[str]:
        """What does not add up in the hour, one line each naming the site or the file:
        unbalanced sites, landed files whose line count differs from their manifest, and data
        files without a manifest (an incomplete delivery)."""
        label = hour_label(self.hour)
        return (
            [
                f"{c.site} {label}: source_lines {c.source_lines} != accounted {c.accounted}"
                for c in self.counts
                if not c.balanced
            ]
            + [
                f"{m['data_key']}: manifest says {m['manifest_lines']} lines, "
                f"file has {m['lines_read']}"
                for m in self.file_mismatches
            ]
            + [
                f"{key}: data file without a manifest (incomplete delivery: its lines are not "
                "counted; have the producer write the manifest, or land the file again)"
                for key in self.orphan_files
            ]
        )


#: Hour manifests :func:`parse_hour_manifest` keeps parsed (a few to tens of KB of text each).
PARSED_MANIFESTS = 256


@functools.lru_cache(maxsize=PARSED_MANIFESTS)
def parse_hour_manifest(text: str | bytes, where: str) -> HourManifest:
    """:meth:`HourManifest.from_json`, cached by exact text and ``where``: a manifest changes
    only by being rewritten, which changes its text, so a process's steps share one parsed
    manifest (do not change its ``file_mismatches`` dicts)."""
    return HourManifest.from_json(text, where=where)


def read_hour_manifests(
    store: ObjectStore, hours: Sequence[dt.datetime]
) -> dict[dt.datetime, HourManifest | None]:
    """Each hour's manifest (None: never built), in order, read side by side; ManifestError
    naming the object if one is unreadable."""
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


def read_hour_manifest(store: ObjectStore, hour: dt.datetime) -> HourManifest | None:
    """:func:`read_hour_manifests` of one hour."""
    return read_hour_manifests(store, [hour])[hour]


def stage_files(manifest: HourManifest, kind: str) -> list[str]:
    """Object keys of the hour's ``kind`` (``"full"`` or ``"sample"``) Parquet files."""
    return list(manifest.full_files if kind == "full" else manifest.sample_files)


def stage_bytes(store: ObjectStore, manifest: HourManifest, kind: str) -> int:
    """Bytes of the hour's ``kind`` Parquet files, as the manifest records them, else one size
    request per file."""
    recorded = manifest.full_bytes if kind == "full" else manifest.sample_bytes
    if recorded is not None:
        return recorded
    return sum(store.size(k) for k in stage_files(manifest, kind))


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _load(text: str | bytes, where: str, expected_format: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{where}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != expected_format:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ManifestError(f"{where}: expected format {expected_format!r}, got {got!r}")
    return data
