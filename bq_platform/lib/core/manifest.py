"""Manifests: small JSON documents that say which files count.

Two kinds:

- :class:`LandedManifest`, written by a producer (or ``bq-platform land``) next to each landed
  file, *after* the file. Its ``lines`` is the *source count* of the file.
- :class:`HourManifest`, written by the Spark build after all Parquet files of one attempt for
  one hour are complete. It names exactly the files the load job loads, and carries the
  per-site accounting and the content fingerprint used in job IDs.

Both are versioned with ``format`` so that a reader can refuse a manifest it does not know.
"""

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Mapping
from typing import Any

from bq_platform.lib.core.accounting import SiteHourCounts
from bq_platform.lib.core.layout import hour_label, parse_hour_label

LANDED_MANIFEST_FORMAT = "bq_platform.landed/1"
#: A CRC32C as GCS encodes it: base64 of 4 bytes.
_CRC32C_RE = re.compile(r"^[A-Za-z0-9+/]{6}==$")
HOUR_MANIFEST_FORMAT = "bq_platform.hour/1"


class ManifestError(ValueError):
    """A manifest is missing a field, has the wrong format, or disagrees with its data."""


@dataclasses.dataclass(frozen=True)
class LandedManifest:
    """Producer manifest of one landed gzip file.

    Attributes:
        site: publisher key, e.g. ``epa.gov``.
        hour: UTC hour the file belongs to.
        data_key: object-store key of the landed gzip file.
        lines: number of log lines in the file (``\\n``-terminated, plus a final unterminated
            line if any): the *source count*.
        bytes: size of the landed (gzip) object in bytes.
        sha256: hex SHA-256 of the landed object's bytes; two deliveries with the same value
            are the same delivery (see :mod:`bq_platform.lib.core.accounting`, ``duplicates``).
        source: name of the file the lines came from (informational).
        crc32c: CRC32C of the landed object's bytes, base64 of the big-endian checksum: the
            value GCS keeps of every object and returns in its listings
            (:func:`bq_platform.lib.storage.base.crc32c`). Optional (``""``: a producer
            that does not write it); with it, a build on GCS checks the file from the listing
            it makes anyway instead of downloading it (issue 9, docs/production.md).
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
        """Parse a landed manifest.

        Raises:
            ManifestError: naming ``where`` if the JSON is invalid, the format unknown or a
                field missing or of the wrong type.
        """
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
        if manifest.crc32c and not _CRC32C_RE.match(manifest.crc32c):
            raise ManifestError(
                f"{where}: crc32c {manifest.crc32c!r} is not a base64 CRC32C (8 characters "
                "ending in '==', as GCS reports it)"
            )
        return manifest


@dataclasses.dataclass(frozen=True)
class HourManifest:
    """What one successful build attempt produced for one UTC hour.

    Attributes:
        hour: the UTC hour.
        attempt_id: the attempt whose files count (a Dagster run ID, or a CLI-made ID).
        fingerprint: content fingerprint (hex SHA-256) of this hour's output; see
            :func:`bq_platform.lib.core.job_ids.hour_fingerprint`. Job IDs are built from it.
        input_fingerprint: fingerprint of the landed inputs (their checksums).
        full_files / sample_files / deadletter_files: object-store keys of Parquet files.
        rows / sample_rows: rows in the full and sample files.
        counts: per-site accounting for the hour (every known site, zeros included).
        file_mismatches: landed files whose line count differs from their manifest:
            ``{"data_key", "manifest_lines", "lines_read"}``.
        orphan_files: keys of landed data files of the hour that no manifest names: an
            incomplete delivery, so the hour is incomplete (absent in manifests written before
            issue 7: read as none).
        full_bytes / sample_bytes: total size in bytes of ``full_files`` / ``sample_files``,
            from the build's listing of its outputs, so a step that reports them sends no
            request per file (issue 9); None in manifests written before.
        created_at: UTC time the manifest was written.
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
                "created_at": self.created_at.isoformat(),
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "<manifest>") -> "HourManifest":
        """Parse an hour manifest.

        Raises:
            ManifestError: naming ``where`` if the document is not a valid hour manifest.
        """
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
                created_at=dt.datetime.fromisoformat(data["created_at"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{where}: bad or missing field: {exc}") from exc


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
