"""The UTC hour: one type (an aware ``datetime`` on the hour) and one spelling.

- :func:`hour_label`: ``YYYY-MM-DDTHH`` (``1995-08-01T04``), every human-facing place: Dagster's
  hourly partition keys, ``hour=`` folders, the CLI's ``--start/--end``, logs.
- :func:`hour_id`: ``YYYYMMDDHH``, only in BigQuery identifiers (stage tables, job IDs).
"""

import datetime as dt
import re

HOUR_LABEL_FMT = "%Y-%m-%dT%H"
"""``YYYY-MM-DDTHH``: hour labels, and the fmt of the Dagster hourly partitions."""
HOUR_ID_FMT = "%Y%m%d%H"
"""``YYYYMMDDHH``: BigQuery identifiers only (table suffixes, job-ID partitions)."""
LEGACY_PARTITION_FMT = "%Y-%m-%d-%H:%M"
"""The older hourly partition spelling, still accepted by :func:`parse_hour`."""
HOURLY_PARTITION_FMT = HOUR_LABEL_FMT

_HOUR_LABEL_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}", re.ASCII)  # fullmatch: no "\n" after
_LEGACY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}-\d{2}:00$")


def to_utc(value: dt.datetime) -> dt.datetime:
    """Return ``value`` as a UTC-aware datetime; ``ValueError`` if it is naive."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass a timezone-aware value")
    return value.astimezone(dt.UTC)


def hours_between(start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """UTC hours ``h`` with ``start <= h < end``; both bounds must be on the hour.

    Raises:
        ValueError: if a bound is naive or not on the hour.
    """
    start, end = to_utc(start), to_utc(end)
    for bound in (start, end):
        if bound.minute or bound.second or bound.microsecond:
            raise ValueError(f"{bound.isoformat()} is not on the hour")
    count = int((end - start).total_seconds() // 3600)
    return [start + dt.timedelta(hours=i) for i in range(max(count, 0))]


def days_between(start: dt.date, end: dt.date) -> list[dt.date]:
    """UTC days ``d`` with ``start <= d < end``, in order."""
    return [start + dt.timedelta(days=i) for i in range(max((end - start).days, 0))]


def day_hours(day: dt.date) -> list[dt.datetime]:
    """The 24 UTC hours of ``day``."""
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    return hours_between(start, start + dt.timedelta(days=1))


def hour_label(hour: dt.datetime) -> str:
    """Format a UTC hour as ``YYYY-MM-DDTHH`` (partition key, folder name, CLI argument).

    Raises:
        ValueError: if ``hour`` is naive, not UTC, or not on the hour.
    """
    if hour.tzinfo is None or hour.utcoffset() != dt.timedelta(0):
        raise ValueError(f"hour must be timezone-aware UTC, got {hour!r}")
    if hour.minute or hour.second or hour.microsecond:
        raise ValueError(f"hour must be on the hour, got {hour.isoformat()}")
    return hour.strftime(HOUR_LABEL_FMT)


def parse_hour_label(label: str) -> dt.datetime:
    """Inverse of :func:`hour_label`: ``'1995-08-01T04'`` -> 1995-08-01 04:00 UTC;
    ``ValueError`` for anything else."""
    if not _HOUR_LABEL_RE.fullmatch(label):
        raise ValueError(f"not an hour label (YYYY-MM-DDTHH): {label!r}")
    # By slices rather than ``strptime``, which dominates a landing scan; the regex checked them.
    try:
        return dt.datetime(
            int(label[0:4]), int(label[5:7]), int(label[8:10]), int(label[11:13]), tzinfo=dt.UTC
        )
    except ValueError:  # e.g. month 13, hour 24
        raise ValueError(f"not an hour label (YYYY-MM-DDTHH): {label!r}") from None


def parse_hour(value: str) -> dt.datetime:
    """Parse ``YYYY-MM-DDTHH``, or the older partition spelling ``YYYY-MM-DD-HH:00``;
    ``ValueError`` for anything else."""
    if _LEGACY_RE.fullmatch(value):
        return dt.datetime.strptime(value, LEGACY_PARTITION_FMT).replace(tzinfo=dt.UTC)
    try:
        return parse_hour_label(value)
    except ValueError:
        raise ValueError(
            f"not a UTC hour: {value!r} (use YYYY-MM-DDTHH, e.g. 1995-08-01T00)"
        ) from None


def hour_id(hour: dt.datetime) -> str:
    """``YYYYMMDDHH`` of a UTC hour (BigQuery identifiers); raises as :func:`hour_label`."""
    hour_label(hour)  # validates
    return hour.strftime(HOUR_ID_FMT)


def partition_day(key: str | None) -> dt.date | None:
    """UTC day of an hourly (``YYYY-MM-DDTHH``) or daily (``YYYY-MM-DD``) key; None for none;
    ``ValueError`` for anything else."""
    if not key:
        return None
    return parse_hour_label(key).date() if "T" in key else dt.date.fromisoformat(key)
