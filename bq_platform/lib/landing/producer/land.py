"""Landing: split access logs by UTC hour into the landing zone, each file with a manifest.

What a producer (a log shipper) does in production; ``bq-platform land`` does it for local
files. For each input file (plain or gzip):

1. lines are split on ``\\n`` exactly; a final line without ``\\n`` is a line too;
2. each line goes to the UTC hour of its timestamp; a line whose timestamp cannot be read, or
   whose hour is outside :mod:`~bq_platform.lib.core.partition_window`, goes with its
   neighbours, so landing never drops a line and never creates an hour that is no partition;
3. each hour's lines are written as one deterministic gzip object named by its SHA-256, then
   its :class:`~bq_platform.lib.core.manifest.LandedManifest` *last*, with SHA-256 and CRC32C;
4. what was landed of the source is recorded in :mod:`~bq_platform.lib.landing.producer.registry`
   before the data (marked pending) and again after it: when the source grows, only the new
   lines land, and a landing that stopped half-way is completed by the next one. A last line
   landed without its ``\\n`` that has grown is taken out of its object (rewritten in place)
   and lands whole;
5. every object already landed for the source, or about to be written, is checked against its
   manifest; a missing or corrupt one is rebuilt from the source ("re-land the file" repairs).

A file that fails to land (:func:`land_all`) is reported with its path and reason; the other
files still land.

Memory: about three times one input file's uncompressed bytes.
"""

import dataclasses
import datetime as dt
import gzip
import hashlib
import logging
import os
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from bq_platform.lib.core.layout import (
    hour_label,
    landed_data_key,
    landed_manifest_key,
    validate_site,
)
from bq_platform.lib.core.manifest import LandedManifest, LandingError, ManifestError
from bq_platform.lib.core.partition_window import HourWindow
from bq_platform.lib.landing.producer import split as landing_split
from bq_platform.lib.landing.producer.registry import Delivery, SourceState, read_state, write_state
from bq_platform.lib.landing.producer.split import gzip_deterministic
from bq_platform.lib.storage.base import ObjectNotFoundError, ObjectStore, crc32c

__all__ = [
    "FailedFile",
    "LandedFile",
    "assign_hours",
    "gzip_deterministic",
    "land_all",
    "land_file",
    "land_files",
    "read_lines",
    "read_source",
]

GZIP_MAGIC = b"\x1f\x8b"


@dataclasses.dataclass(frozen=True)
class LandedFile:
    """One landed object: its manifest, whether this call wrote it (False: already there and
    intact), and whether it replaced a missing, corrupt or superseded object."""

    manifest: LandedManifest
    written: bool
    repaired: bool = False


def read_source(path: Path) -> bytes:
    """The uncompressed bytes of a plain or gzip (possibly multi-member) log file.

    Raises:
        LandingError: if the file cannot be read or its gzip stream is corrupt.
    """
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if raw[:2] == GZIP_MAGIC else raw
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise LandingError(
            f"{path}: cannot read ({exc}); check the file and land it again"
        ) from exc


def read_lines(path: Path) -> list[bytes]:
    """Read a plain or gzip log file and split it into lines (without their ``\\n``).

    Raises:
        LandingError: if the file cannot be read or its gzip stream is corrupt.
    """
    return landing_split.split_lines(read_source(path))


def _no_hour_error(where: str, n_lines: int, window: HourWindow | None) -> LandingError:
    span = ""
    if window is not None and (window.first_hour or window.last_hour):
        first = hour_label(window.first_hour) if window.first_hour else "any"
        last = hour_label(window.last_hour) if window.last_hour else "any"
        span = f" inside the partitions ({first} .. {last})"
    return LandingError(
        f"{where}: none of its {n_lines} lines has a readable timestamp{span}, so no hour can be "
        "chosen; pass --default-hour YYYY-MM-DDTHH to land them there (the pipeline will "
        "reject or count them out of window)"
    )


def assign_hours(
    lines: Sequence[bytes],
    default_hour: dt.datetime | None = None,
    where: str = "<input>",
    window: HourWindow | None = None,
) -> list[dt.datetime]:
    """UTC hour of every line, with unplaceable lines next to their neighbours (reference).

    Args:
        default_hour: hour for the lines when *no* line has a placeable timestamp.
        where: file name for error messages.
        window: hours a line may have; a timestamp outside is treated as unreadable.

    Raises:
        LandingError: if no line has a placeable timestamp and ``default_hour`` is None.
    """
    own = [landing_split.line_hour(line) for line in lines]
    own = [h if h is not None and (window is None or window.contains(h)) else None for h in own]
    current = next((h for h in own if h is not None), default_hour)
    if current is None:
        if not lines:
            return []
        raise _no_hour_error(where, len(lines), window)
    hours = []
    for hour in own:
        current = hour or current
        hours.append(current)
    return hours


def _intact(
    store: ObjectStore, key: str, want: LandedManifest | None = None
) -> LandedManifest | None:
    """The stored manifest of ``key`` if the object and its manifest exist, agree (size, and
    CRC32C where both have one, else the SHA-256 of a download) and match ``want``; else None."""
    try:
        manifest = LandedManifest.from_json(store.read_bytes(landed_manifest_key(key)))
        stored = store.stat(key)
        if manifest.data_key != key or stored.size != manifest.bytes:
            return None
        if want is not None and (manifest.sha256, manifest.lines) != (want.sha256, want.lines):
            return None
        if stored.crc32c and manifest.crc32c:
            return manifest if stored.crc32c == manifest.crc32c else None
        digest = hashlib.sha256(store.read_bytes(key)).hexdigest()
        return manifest if digest == manifest.sha256 else None
    except (ObjectNotFoundError, ManifestError):
        return None


@dataclasses.dataclass(frozen=True)
class _Planned:
    """One object a delivery needs: its gzip bytes and manifest, and the stored manifest if the
    store already holds it intact (None: it must be written)."""

    gz: bytes
    manifest: LandedManifest
    stored: LandedManifest | None


def _plan_range(
    store: ObjectStore,
    site: str,
    source: str,
    data: bytes,
    delivery: Delivery,
    where: str,
) -> tuple[Delivery, list[_Planned]]:
    """Split ``data[start:end]`` by hour into the objects of ``delivery`` (under its earlier
    keys, if any; a recorded hour without lines gets an empty object), each checked against
    the store. Nothing is written.

    Deterministic: the same bytes and delivery give the same objects. A recorded delivery
    whose range has no placeable line (the rest of one whose last line was taken out) keeps
    its earliest hour.
    """
    start, end = delivery.start, delivery.end
    chunk = data if (start, end) == (0, len(data)) else data[start:end]
    default = delivery.default_hour or min(delivery.objects, default=None)
    runs = landing_split.place_runs(
        landing_split.hour_runs(chunk), delivery.window, default, delivery.carry_hour
    )
    if runs is None:
        raise _no_hour_error(where, len(landing_split.split_lines(chunk)), delivery.window)
    bodies = landing_split.bodies_by_hour(chunk, runs)
    for hour in delivery.objects:
        bodies.setdefault(hour, (b"", 0))
    comment = f"bq_platform offset {start}" if start else ""  # keeps equal chunks apart
    objects: dict[dt.datetime, str] = {}
    planned = []
    for hour in sorted(bodies):
        body, n = bodies.pop(hour)
        gz = gzip_deterministic(body, comment)
        sha = hashlib.sha256(gz).hexdigest()
        key = delivery.objects.get(hour) or landed_data_key(site, hour, sha)
        manifest = LandedManifest(
            site=site,
            hour=hour,
            data_key=key,
            lines=n,
            bytes=len(gz),
            sha256=sha,
            source=source,
            crc32c=crc32c(gz),
        )
        objects[hour] = key
        planned.append(_Planned(gz, manifest, _intact(store, key, manifest)))
    last_hour = runs[-1][0] if runs else delivery.carry_hour
    return dataclasses.replace(delivery, objects=objects, last_hour=last_hour), planned


def _write(store: ObjectStore, planned: Sequence[_Planned]) -> list[LandedFile]:
    """Write each planned object the store does not hold intact: data, then its manifest."""
    landed = []
    for item in planned:
        if item.stored is not None:
            landed.append(LandedFile(item.stored, written=False))
            continue
        key = item.manifest.data_key
        repaired = store.exists(key) or store.exists(landed_manifest_key(key))
        store.write_bytes(key, item.gz)
        store.write_text(landed_manifest_key(key), item.manifest.to_json())  # last: it counts
        landed.append(LandedFile(item.manifest, written=True, repaired=repaired))
    return landed


def land_file(
    store: ObjectStore,
    site: str,
    path: str | os.PathLike[str],
    *,
    source: str | None = None,
    default_hour: dt.datetime | None = None,
    first_hour: dt.datetime | None = None,
    now: dt.datetime | None = None,
    log: logging.Logger | None = None,
) -> list[LandedFile]:
    """Land what is new of one log file: one gzip object plus manifest per UTC hour it touches.

    Args:
        site: publisher key (folder ``site=<site>``).
        path: the input file, plain or gzip.
        source: the source's name in the registry (default: the file's basename).
        default_hour: see :func:`assign_hours`.
        first_hour: the first hourly partition; None: no lower bound.
        now: the clock for the future bound (default: now).

    Returns:
        The objects of the new lines, in hour order, then any object this call wrote to repair
        a lost or corrupt one or to complete a landing that stopped (``repaired``).

    Raises:
        LandingError: unreadable input, no placeable line, or a registry entry that is
            unreadable or of another source (each names the file).
        ValueError: an invalid site or source name.
        Errors of the store (``OSError``, a GCS API error): the next landing of the file
            completes what this one wrote (see the module docstring).
    """
    log = log or logging.getLogger(__name__)
    validate_site(site)
    src = Path(path)
    name = source or src.name
    where = str(src)
    data = read_source(src)
    window = HourWindow.until_now(first_hour, now)
    try:
        state = read_state(store, site, name)
    except ValueError as exc:
        raise LandingError(f"{where}: {exc}") from exc

    view = memoryview(data)
    digest = hashlib.sha256()
    continues = False
    if state is not None and len(data) >= state.bytes:
        digest.update(view[: state.bytes])
        continues = digest.hexdigest() == state.sha256
    if state is not None and not continues:
        if state.pending_from is not None:
            unfinished = state.deliveries[state.pending_from :]
            log.warning(
                "%s: the last landing of source %r for %s stopped before it recorded every object "
                "of bytes %d..%d as written, and the file no longer starts with those bytes "
                "(rotated or truncated): a missing one cannot be rebuilt; the file lands as new "
                "content",
                where,
                name,
                site,
                unfinished[0].start if unfinished else state.bytes,
                state.bytes,
            )
        digest = hashlib.sha256()
        state = None
    start = state.bytes if state else 0
    digest.update(view[start:])

    deliveries = list(state.deliveries) if state else []
    pending_from = state.pending_from if state else None
    plans: dict[int, list[_Planned]] = {}  # delivery index -> its objects, to check or write
    for i, delivery in enumerate(deliveries):  # finish a stopped landing, repair what is lost
        unfinished = pending_from is not None and i >= pending_from
        if unfinished or not all(_intact(store, key) for key in delivery.objects.values()):
            deliveries[i], plans[i] = _plan_range(store, site, name, data, delivery, where)
    lines = state.lines if state else 0
    if state and state.partial and len(data) > start:
        if data[start] == ord("\n"):
            start += 1  # the last line landed without \n is complete, as landed
        else:  # it grew: land the last delivery again without it, then the whole line
            start -= state.partial
            last = len(deliveries) - 1
            cut = dataclasses.replace(deliveries[last], end=start)
            deliveries[last], plans[last] = _plan_range(store, site, name, data, cut, where)
            lines -= 1
    new_index = None
    if start < len(data):
        carry = deliveries[-1].last_hour if deliveries else None
        delivery = Delivery(start, len(data), window, default_hour, {}, carry_hour=carry)
        new_index = len(deliveries)
        delivery, plans[new_index] = _plan_range(store, site, name, data, delivery, where)
        deliveries.append(delivery)
        lines += sum(p.manifest.lines for p in plans[new_index])
    partial = len(data) - data.rfind(b"\n") - 1 if data and not data.endswith(b"\n") else 0
    updated = SourceState(
        site, name, len(data), lines, digest.hexdigest(), partial, tuple(deliveries)
    )
    to_write = [i for i in sorted(plans) if any(p.stored is None for p in plans[i])]
    if to_write:  # first: a landing that stops in between is completed by the next one
        write_state(store, dataclasses.replace(updated, pending_from=to_write[0]))
    new: list[LandedFile] = []
    landed: list[LandedFile] = []
    for i in sorted(plans):
        files = _write(store, plans[i])
        if i == new_index:
            new = files
        else:
            landed += [dataclasses.replace(f, repaired=True) for f in files if f.written]
    if to_write or updated != state:
        write_state(store, updated)  # every object is written
    log.info(
        "landed %s for %s as source %r: %d new lines in %d hours (%d new objects, %d repaired)",
        src,
        site,
        name,
        sum(f.manifest.lines for f in new),
        len(new),
        sum(f.written and not f.repaired for f in new),
        sum(f.repaired for f in new + landed),
    )
    return new + landed


@dataclasses.dataclass(frozen=True)
class FailedFile:
    """A file that did not land: its path, and why (a message that names the file and what to
    do; printable, undecodable bytes of a name shown as ``\\udcXX``)."""

    path: str
    reason: str


def _failure(path: str, exc: Exception) -> FailedFile:
    """The :class:`FailedFile` of ``path`` for ``exc``: a :class:`LandingError` says what to do
    itself; anything else (a store that refused a write, a full disk) gets its type and a hint."""
    reason = str(exc)
    if not isinstance(exc, LandingError):
        reason = (
            f"{type(exc).__name__}: {reason}; fix the cause and land the file again (what it "
            "landed is completed, nothing counts twice)"
        )
    if path not in reason:
        reason = f"{path}: {reason}"
    printable = reason.encode("utf-8", "backslashreplace").decode("utf-8")
    return FailedFile(path.encode("utf-8", "backslashreplace").decode("utf-8"), printable)


def land_files(
    store: ObjectStore,
    site: str,
    paths: Iterable[str | os.PathLike[str]],
    *,
    default_hour: dt.datetime | None = None,
    first_hour: dt.datetime | None = None,
    now: dt.datetime | None = None,
    log: logging.Logger | None = None,
) -> list[LandedFile]:
    """:func:`land_file` for several files of one site (each its own source, by basename);
    raises as :func:`land_file` at the first file that fails (:func:`land_all` lands the
    others too)."""
    out: list[LandedFile] = []
    for path in paths:
        out.extend(
            land_file(
                store,
                site,
                path,
                default_hour=default_hour,
                first_hour=first_hour,
                now=now,
                log=log,
            )
        )
    return out


def land_all(
    store: ObjectStore,
    site: str,
    paths: Iterable[str | os.PathLike[str]],
    *,
    source: str | None = None,
    default_hour: dt.datetime | None = None,
    first_hour: dt.datetime | None = None,
    now: dt.datetime | None = None,
    log: logging.Logger | None = None,
) -> tuple[list[LandedFile], list[FailedFile]]:
    """:func:`land_file` for every file of ``paths`` that can land, each its own source (by
    basename, or ``source`` for a single file): a file that fails is reported and the others
    still land.

    Returns:
        The landed objects of the files that landed, in file order, and the files that failed.

    Raises:
        ValueError: ``source`` with more than one path.
    """
    log = log or logging.getLogger(__name__)
    paths = list(paths)
    if source is not None and len(paths) != 1:
        raise ValueError(f"a source name names one file, got {len(paths)}")
    landed: list[LandedFile] = []
    failed: list[FailedFile] = []
    for path in paths:
        try:
            landed += land_file(
                store,
                site,
                path,
                source=source,
                default_hour=default_hour,
                first_hour=first_hour,
                now=now,
                log=log,
            )
        except Exception as exc:  # reported per file; the other files still land
            failed.append(_failure(str(path), exc))
            log.info("landing %s failed", path, exc_info=True)  # the traceback with -v
    return landed, failed
