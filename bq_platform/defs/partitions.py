"""The two partitions definitions of the project: UTC hours and UTC days.

The first partition is configuration: ``BQ_PLATFORM_FIRST_HOUR`` (``YYYY-MM-DD-HH:MM``, UTC),
default ``1995-08-01-00:00`` for the bundled logs. It is read when the definitions load, the
one setting that must be known then (a partitions definition is part of the asset graph).
"""

import os

import dagster as dg

from bq_platform.lib.hours import HOURLY_PARTITION_FMT

DEFAULT_FIRST_HOUR = "1995-08-01-00:00"
FIRST_HOUR = os.environ.get("BQ_PLATFORM_FIRST_HOUR", DEFAULT_FIRST_HOUR)

hourly_partitions = dg.HourlyPartitionsDefinition(
    start_date=FIRST_HOUR, timezone="UTC", fmt=HOURLY_PARTITION_FMT
)
daily_partitions = dg.DailyPartitionsDefinition(start_date=FIRST_HOUR[:10], timezone="UTC")
