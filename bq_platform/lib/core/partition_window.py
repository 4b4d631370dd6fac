"""The hours a line may land in: from the first hourly partition to now plus a small skew.

A timestamp outside the partitions must never create an hour that is no Dagster partition
(publishes would fail with ``DagsterUnknownPartitionError``). So the lander puts such a line in
the hour of its neighbours, and the build counts it ``out_of_window`` with
:data:`REASON_BEFORE_FIRST_PARTITION` or :data:`REASON_FUTURE_TIMESTAMP`.

The window is ``first_hour <= hour(ts) <= last_hour``: ``first_hour`` is the first partition
(``BQ_PLATFORM_FIRST_HOUR``), ``last_hour`` the UTC hour of now plus :data:`MAX_FUTURE_SKEW`.
"""

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from bq_platform.lib.core import logformat as lf

if TYPE_CHECKING:
    from pyspark.sql import Column

#: How far in the future a timestamp may be and still land in its own hour (clock drift).
MAX_FUTURE_SKEW = dt.timedelta(hours=1)

#: Reason codes (all in :data:`bq_platform.lib.core.logformat.REASONS`).
REASON_BEFORE_FIRST_PARTITION = lf.REASON_BEFORE_FIRST_PARTITION
REASON_FUTURE_TIMESTAMP = lf.REASON_FUTURE_TIMESTAMP
REASON_OUT_OF_WINDOW = lf.REASON_OUT_OF_WINDOW


def floor_hour(ts: dt.datetime) -> dt.datetime:
    """``ts`` (aware) truncated to its UTC hour."""
    return ts.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


@dataclasses.dataclass(frozen=True)
class HourWindow:
    """Inclusive range of UTC hours (aware, on the hour); None means unbounded on that side."""

    first_hour: dt.datetime | None = None
    last_hour: dt.datetime | None = None

    @classmethod
    def until_now(
        cls,
        first_hour: dt.datetime | None,
        now: dt.datetime | None = None,
        skew: dt.timedelta = MAX_FUTURE_SKEW,
    ) -> "HourWindow":
        """The window from ``first_hour`` to the hour of ``now`` (default: the clock) + ``skew``;
        ``ValueError`` if ``first_hour`` or ``now`` is naive."""
        if first_hour is not None and first_hour.tzinfo is None:
            raise ValueError(f"first_hour must be timezone-aware UTC, got {first_hour!r}")
        if now is not None and now.tzinfo is None:
            raise ValueError(f"now must be timezone-aware, got {now!r}")
        current = now or dt.datetime.now(dt.UTC)
        return cls(
            floor_hour(first_hour) if first_hour is not None else None,
            floor_hour(current + skew),
        )

    def contains(self, hour: dt.datetime) -> bool:
        """True if the UTC hour ``hour`` is inside the window."""
        if self.first_hour is not None and hour < self.first_hour:
            return False
        return self.last_hour is None or hour <= self.last_hour

    def to_json(self) -> dict[str, str | None]:
        """``{"first_hour": iso or None, "last_hour": iso or None}``."""
        return {
            "first_hour": self.first_hour.isoformat() if self.first_hour else None,
            "last_hour": self.last_hour.isoformat() if self.last_hour else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, str | None]) -> "HourWindow":
        """Inverse of :meth:`to_json`."""
        first, last = data.get("first_hour"), data.get("last_hour")
        return cls(
            dt.datetime.fromisoformat(first) if first else None,
            dt.datetime.fromisoformat(last) if last else None,
        )


def out_of_window_reason(event_ts: dt.datetime, window: HourWindow | None) -> str:
    """Reason code of an ``out_of_window`` line with readable timestamp ``event_ts`` (UTC)."""
    hour = floor_hour(event_ts)
    if window is not None and window.first_hour is not None and hour < window.first_hour:
        return REASON_BEFORE_FIRST_PARTITION
    if window is not None and window.last_hour is not None and hour > window.last_hour:
        return REASON_FUTURE_TIMESTAMP
    return REASON_OUT_OF_WINDOW


def out_of_window_reason_column(event_ts: "Column", window: HourWindow | None) -> "Column":
    """Spark version of :func:`out_of_window_reason` for a TIMESTAMP column (native functions,
    compared as Unix seconds, so the session time zone plays no part)."""
    from pyspark.sql import functions as F

    reason = F.lit(REASON_OUT_OF_WINDOW)
    if window is None:
        return reason
    secs = F.unix_seconds(event_ts)
    if window.last_hour is not None:
        end = int(window.last_hour.timestamp()) + 3600  # first second after the last hour
        reason = F.when(secs >= end, F.lit(REASON_FUTURE_TIMESTAMP)).otherwise(reason)
    if window.first_hour is not None:
        start = int(window.first_hour.timestamp())
        reason = F.when(secs < start, F.lit(REASON_BEFORE_FIRST_PARTITION)).otherwise(reason)
    return reason
