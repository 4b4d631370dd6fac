"""UTC hour arithmetic for partition windows (Dagster gives windows; we need their hours)."""

import datetime as dt


def to_utc(value: dt.datetime) -> dt.datetime:
    """Return ``value`` as a UTC-aware datetime.

    Raises:
        ValueError: if ``value`` is naive (we never guess a time zone).
    """
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


def day_hours(day: dt.date) -> list[dt.datetime]:
    """The 24 UTC hours of ``day``."""
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    return hours_between(start, start + dt.timedelta(days=1))


HOURLY_PARTITION_FMT = "%Y-%m-%d-%H:%M"
"""Format of hourly partition keys (``1995-08-01-04:00``), shared with ``defs/partitions.py``."""


def hour_partition_key(hour: dt.datetime) -> str:
    """Dagster hourly partition key of a UTC hour."""
    return to_utc(hour).strftime(HOURLY_PARTITION_FMT)


def parse_hour_partition_key(key: str) -> dt.datetime:
    """Inverse of :func:`hour_partition_key`.

    Raises:
        ValueError: if ``key`` is not ``YYYY-MM-DD-HH:MM``.
    """
    return dt.datetime.strptime(key, HOURLY_PARTITION_FMT).replace(tzinfo=dt.UTC)
