"""The two partitions definitions of the project (UTC hours, UTC days), their hours and days.

Hourly partition keys are hour labels, ``YYYY-MM-DDTHH`` (``1995-08-01T04``): the same
spelling as the landing folders and ``bq-platform run --start/--end`` (see
:mod:`bq_platform.lib.core.hours`). Daily keys are ``YYYY-MM-DD``.

The first partition is configuration: ``BQ_PLATFORM_FIRST_HOUR`` (``YYYY-MM-DDTHH``, UTC; the
pre-issue-8 spelling ``YYYY-MM-DD-HH:00`` is accepted too), default ``1995-08-01T00`` for the
bundled logs (:func:`bq_platform.settings.first_hour`, which the landing commands read
too). It is read when the definitions load, the one setting that must be known then (a
partitions definition is part of the asset graph).
"""

import datetime as dt

import dagster as dg

from bq_platform import settings as environment
from bq_platform.lib.core.hours import HOURLY_PARTITION_FMT, days_between, hours_between

FIRST_HOUR: dt.datetime = environment.first_hour()

hourly_partitions = dg.HourlyPartitionsDefinition(
    start_date=FIRST_HOUR, timezone="UTC", fmt=HOURLY_PARTITION_FMT
)
daily_partitions = dg.DailyPartitionsDefinition(
    start_date=FIRST_HOUR.replace(hour=0), timezone="UTC"
)


def partition_hours(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> list[dt.datetime]:
    """The UTC hours of the run's partition or partition range (hourly or daily assets).

    One partition, a range of a backfill (up to 24 hours per run, see the backfill policy) or
    a day: always the hours of ``context.partition_time_window``, in time order.
    """
    window = context.partition_time_window
    return hours_between(window.start, window.end)


def partition_days(context: dg.AssetExecutionContext) -> list[dt.date]:
    """The UTC days of the run's daily partition or partition range, in order
    (``bq-platform run`` publishes a batch's days in one run: ``defs/daily.py``)."""
    window = context.partition_time_window
    return days_between(
        window.start.astimezone(dt.UTC).date(), window.end.astimezone(dt.UTC).date()
    )
