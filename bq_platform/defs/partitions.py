"""The two partitions definitions of the project (UTC hours, UTC days), their hours and days.

Hourly partition keys are hour labels, ``YYYY-MM-DDTHH`` (:mod:`bq_platform.lib.core.hours`);
daily keys are ``YYYY-MM-DD``. The first partition is ``BQ_PLATFORM_FIRST_HOUR``
(:func:`bq_platform.settings.first_hour`), read when the definitions load: a partitions
definition is part of the asset graph.
"""

import datetime as dt

import dagster as dg

from bq_platform import settings
from bq_platform.lib.core.hours import HOURLY_PARTITION_FMT, days_between, hours_between

FIRST_HOUR: dt.datetime = settings.first_hour()

hourly_partitions = dg.HourlyPartitionsDefinition(
    start_date=FIRST_HOUR, timezone="UTC", fmt=HOURLY_PARTITION_FMT
)
daily_partitions = dg.DailyPartitionsDefinition(
    start_date=FIRST_HOUR.replace(hour=0), timezone="UTC"
)


def partition_hours(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> list[dt.datetime]:
    """The UTC hours of the run's partition or partition range (hourly or daily assets), in
    time order."""
    window = context.partition_time_window
    return hours_between(window.start, window.end)


def partition_days(context: dg.AssetExecutionContext) -> list[dt.date]:
    """The UTC days of the run's daily partition or partition range, in order."""
    window = context.partition_time_window
    return days_between(
        window.start.astimezone(dt.UTC).date(), window.end.astimezone(dt.UTC).date()
    )
