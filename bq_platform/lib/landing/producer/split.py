"""Split a log buffer by UTC hour, and gzip it deterministically (the lander's hot path).

:func:`hour_runs` gives each line the hour :func:`line_hour` (the per-line reference) gives it,
without a Python step per line: logs are in time order, so one regex reads a line's local hour
and zone, then one ``search`` finds the next line that does *not* start with them (per local
minute for zones like ``+0530``); any other line is read by the reference alone.
"""

import datetime as dt
import re
import struct
import zlib

from bq_platform.lib.core.logformat import parse_clf_timestamp, parse_timestamp_field
from bq_platform.lib.core.partition_window import HourWindow, floor_hour

#: zlib level of landed gzip objects (changing it changes every landed object's name).
GZIP_LEVEL = 1
#: A run: (UTC hour or None when unplaceable, first byte, end byte, lines).
Run = tuple[dt.datetime | None, int, int, int]

_PREFIX = rb"(?>(?:\S+:\d+ )?\S+ \S+ \S+ \[)"
_LINE_START_RE = re.compile(
    _PREFIX + rb"(\d\d/[A-Za-z]{3}/\d{4}:\d\d):([0-5]\d):[0-5]\d ([+-]\d\d(\d\d))\]"
)
_run_patterns: dict[tuple[bytes, bytes | None, bytes], re.Pattern[bytes]] = {}
_key_hours: dict[tuple[bytes, bytes, bytes], dt.datetime | None] = {}


def split_lines(data: bytes) -> list[bytes]:
    """Lines of ``data`` without their ``\\n``; a final unterminated line is a line too."""
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return lines


def line_hour(line: bytes) -> dt.datetime | None:
    """UTC hour of one line's timestamp, None if unreadable (the reference, per line)."""
    ts = parse_clf_timestamp(line.decode("utf-8", errors="replace"))
    return floor_hour(ts) if ts is not None else None


def _run_pattern(hour_text: bytes, minute: bytes | None, zone: bytes) -> re.Pattern[bytes]:
    key = (hour_text, minute, zone)
    pattern = _run_patterns.get(key)
    if pattern is None:
        minute_re = re.escape(minute) if minute is not None else rb"[0-5]\d"
        pattern = re.compile(
            rb"\n(?!"
            + _PREFIX
            + re.escape(hour_text)
            + rb":"
            + minute_re
            + rb":[0-5]\d "
            + re.escape(zone)
            + rb"\])"
        )
        if len(_run_patterns) > 10_000:
            _run_patterns.clear()
        _run_patterns[key] = pattern
    return pattern


def _key_hour(hour_text: bytes, minute: bytes, zone: bytes) -> dt.datetime | None:
    key = (hour_text, minute, zone)
    if key not in _key_hours:
        text = f"{hour_text.decode()}:{minute.decode()}:00 {zone.decode()}"
        ts = parse_timestamp_field(text)  # seconds are [0-5]\d: they change neither
        if len(_key_hours) > 100_000:
            _key_hours.clear()
        _key_hours[key] = floor_hour(ts) if ts is not None else None
    return _key_hours[key]


def hour_runs(data: bytes) -> list[Run]:
    """Consecutive lines of equal own hour (None: unreadable), covering ``data`` in order."""
    runs: list[Run] = []
    size = len(data)
    pos = 0
    match_start = _LINE_START_RE.match
    while pos < size:
        m = match_start(data, pos)
        hour = None
        if m is not None:
            hour_text, minute, zone, zone_minutes = m.groups()
            hour = _key_hour(hour_text, minute, zone)
        if hour is None:  # one line, read by the reference
            end = data.find(b"\n", pos)
            end = size if end < 0 else end + 1
            line = data[pos : end - 1] if data[end - 1 : end] == b"\n" else data[pos:end]
            runs.append((line_hour(line), pos, end, 1))
            pos = end
            continue
        per_minute = minute if zone_minutes != b"00" else None
        found = _run_pattern(hour_text, per_minute, zone).search(data, pos)
        end = size if found is None else found.start() + 1
        lines = data.count(b"\n", pos, end) + (end == size and data[-1:] != b"\n")
        if runs and runs[-1][0] == hour and runs[-1][2] == pos:
            _, first, _, before = runs[-1]
            runs[-1] = (hour, first, end, before + lines)
        else:
            runs.append((hour, pos, end, lines))
        pos = end
    return runs


def place_runs(
    runs: list[Run],
    window: HourWindow | None,
    default_hour: dt.datetime | None,
    carry: dt.datetime | None = None,
) -> list[tuple[dt.datetime, int, int, int]] | None:
    """Every run with a placeable hour: its own if readable and inside ``window``, else the
    hour of the run before it; leading runs take ``carry``, else the first placeable hour.
    None when no line is placeable and there is no ``default_hour``."""
    own = [
        (h if h is not None and (window is None or window.contains(h)) else None, a, b, n)
        for h, a, b, n in runs
    ]
    current = carry or next((h for h, _, _, _ in own if h is not None), default_hour)
    if current is None:
        return None if runs else []
    placed: list[tuple[dt.datetime, int, int, int]] = []
    for hour, a, b, n in own:
        current = hour or current
        if placed and placed[-1][0] == current and placed[-1][2] == a:
            placed[-1] = (current, placed[-1][1], b, placed[-1][3] + n)
        else:
            placed.append((current, a, b, n))
    return placed


def bodies_by_hour(
    data: bytes, placed: list[tuple[dt.datetime, int, int, int]]
) -> dict[dt.datetime, tuple[bytes, int]]:
    """``{hour: (its lines' bytes, each ending with \\n), line count}``."""
    parts: dict[dt.datetime, list[bytes]] = {}
    counts: dict[dt.datetime, int] = {}
    view = memoryview(data)
    for hour, a, b, n in placed:
        parts.setdefault(hour, []).append(view[a:b])
        counts[hour] = counts.get(hour, 0) + n
    if data and not data.endswith(b"\n"):  # the final line gets its \n, as every line has
        last = placed[-1][0]
        parts[last].append(b"\n")
    return {hour: (b"".join(chunks), counts[hour]) for hour, chunks in parts.items()}


def gzip_deterministic(data: bytes, comment: str = "") -> bytes:
    """One gzip member of ``data``: mtime 0, no name, level :data:`GZIP_LEVEL` (RFC 1952).

    ``comment``: optional ASCII ``FCOMMENT`` (readers skip it); keeps two deliveries of equal
    lines from different offsets of a source apart.
    """
    flags = 0x10 if comment else 0  # FCOMMENT
    header = struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, flags, 0, 4, 255)  # xfl 4: fastest
    if comment:
        header += comment.encode("ascii") + b"\0"
    body = zlib.compress(data, GZIP_LEVEL, wbits=-15)
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return header + body + trailer
