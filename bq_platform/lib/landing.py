"""Landing: split access logs by UTC hour into the landing zone, each file with a manifest.

This is what a producer (a log shipper) does in production; ``bq-platform land`` does it for
local files. For each input file (plain or gzip, Common or Combined Log Format):

1. lines are split on ``\\n`` exactly (a ``\\r`` or other control byte inside a URL stays in
   its line); a final line without ``\\n`` (a truncated write) is a line too;
2. each line goes to the UTC hour of its timestamp; a line whose timestamp cannot be read goes
   with its neighbours (the hour of the line before it, or the first readable hour of the
   file), so that the pipeline rejects *and counts* it; landing never drops a line;
3. each hour's lines are written as one gzip object named by its SHA-256 (deterministic gzip:
   no name, mtime 0), then its :class:`~bq_platform.lib.manifest.LandedManifest` is written
   *last*. Landing the same input again writes the same keys: nothing doubles downstream.

Memory: one input file's uncompressed bytes (hourly log files, tens of MB). Bigger inputs
should be split by the producer.
"""

import dataclasses
import datetime as dt
import gzip
import hashlib
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from bq_platform.lib.layout import landed_data_key, landed_manifest_key, validate_site
from bq_platform.lib.logformat import parse_clf_timestamp
from bq_platform.lib.manifest import LandedManifest, ManifestError
from bq_platform.lib.objectstore.base import ObjectStore

GZIP_MAGIC = b"\x1f\x8b"


class LandingError(ValueError):
    """Input cannot be landed, or a landed file or manifest is missing, corrupt or disagrees
    with the other (raised by the build too). The message names every file or object URI
    concerned, what disagreed, and what to do."""


@dataclasses.dataclass(frozen=True)
class LandedFile:
    """One landed object: its manifest and whether this call wrote it (False: already there)."""

    manifest: LandedManifest
    written: bool


def read_lines(path: Path) -> list[bytes]:
    """Read a plain or gzip log file and split it into lines (without their ``\\n``).

    Raises:
        LandingError: if the file cannot be read or its gzip stream is corrupt.
    """
    try:
        raw = path.read_bytes()
        data = gzip.decompress(raw) if raw[:2] == GZIP_MAGIC else raw
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise LandingError(
            f"{path}: cannot read ({exc}); check the file and land it again"
        ) from exc
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()  # the terminator of the last line, not an extra empty line
    return lines


def assign_hours(
    lines: Sequence[bytes], default_hour: dt.datetime | None = None, where: str = "<input>"
) -> list[dt.datetime]:
    """UTC hour of every line, with unreadable timestamps placed next to their neighbours.

    Args:
        lines: raw lines.
        default_hour: hour for lines when *no* line has a readable timestamp.
        where: file name for error messages.

    Returns:
        One UTC hour (tz-aware, on the hour) per line, same length as ``lines``.

    Raises:
        LandingError: if no line has a readable timestamp and ``default_hour`` is None.
    """
    parsed = [parse_clf_timestamp(line.decode("utf-8", errors="replace")) for line in lines]
    first = next((ts for ts in parsed if ts is not None), None)
    if first is None:
        if not lines:
            return []
        if default_hour is None:
            raise LandingError(
                f"{where}: none of its {len(lines)} lines has a readable timestamp, so no hour "
                "can be chosen; pass --default-hour YYYY-MM-DDTHH to land them there "
                "(the pipeline will reject and count them)"
            )
        first = default_hour
    hours = []
    current = first.replace(minute=0, second=0, microsecond=0)
    for ts in parsed:
        if ts is not None:
            current = ts.replace(minute=0, second=0, microsecond=0)
        hours.append(current)
    return hours


def gzip_deterministic(data: bytes) -> bytes:
    """gzip ``data`` with no file name and mtime 0, so equal input gives equal bytes."""
    return gzip.compress(data, compresslevel=6, mtime=0)


def land_file(
    store: ObjectStore,
    site: str,
    path: str | os.PathLike[str],
    *,
    default_hour: dt.datetime | None = None,
    log: logging.Logger | None = None,
) -> list[LandedFile]:
    """Land one log file: one gzip object plus manifest per UTC hour it touches.

    Args:
        store: the landing zone's object store.
        site: publisher key (folder ``site=<site>``).
        path: the input file, plain or gzip.
        default_hour: see :func:`assign_hours`.
        log: progress logger.

    Returns:
        One :class:`LandedFile` per hour, in hour order.

    Raises:
        LandingError: unreadable input, no placeable line, or an existing landed object whose
            manifest is corrupt.
    """
    log = log or logging.getLogger(__name__)
    validate_site(site)
    src = Path(path)
    lines = read_lines(src)
    hours = assign_hours(lines, default_hour, where=str(src))
    by_hour: dict[dt.datetime, list[bytes]] = {}
    for line, hour in zip(lines, hours, strict=True):
        by_hour.setdefault(hour, []).append(line)

    landed = []
    for hour in sorted(by_hour):
        chunk = by_hour[hour]
        body = gzip_deterministic(b"".join(line + b"\n" for line in chunk))
        sha = hashlib.sha256(body).hexdigest()
        data_key = landed_data_key(site, hour, sha)
        manifest = LandedManifest(
            site=site,
            hour=hour,
            data_key=data_key,
            lines=len(chunk),
            bytes=len(body),
            sha256=sha,
            source=src.name,
        )
        manifest_key = landed_manifest_key(data_key)
        if store.exists(manifest_key) and store.exists(data_key):
            try:
                existing = LandedManifest.from_json(store.read_bytes(manifest_key), manifest_key)
            except ManifestError as exc:
                raise LandingError(f"{store.uri(manifest_key)} is corrupt: {exc}") from exc
            if existing.sha256 == sha and existing.lines == len(chunk):
                landed.append(LandedFile(existing, written=False))
                continue
        store.write_bytes(data_key, body)
        store.write_text(manifest_key, manifest.to_json())  # last: makes the file count
        landed.append(LandedFile(manifest, written=True))
    total = sum(f.manifest.lines for f in landed)
    log.info(
        "landed %s for %s: %d lines in %d hours (%d new objects)",
        src,
        site,
        total,
        len(landed),
        sum(f.written for f in landed),
    )
    return landed


def land_files(
    store: ObjectStore,
    site: str,
    paths: Iterable[str | os.PathLike[str]],
    *,
    default_hour: dt.datetime | None = None,
    log: logging.Logger | None = None,
) -> list[LandedFile]:
    """:func:`land_file` for several files of one site; returns all landed objects."""
    out: list[LandedFile] = []
    for path in paths:
        out.extend(land_file(store, site, path, default_hour=default_hour, log=log))
    return out
