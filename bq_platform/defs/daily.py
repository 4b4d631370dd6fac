"""Daily assets over a range of days: one step, and each day its own metadata and checks.

``bq-platform run`` publishes a batch of consecutive days in one daily run (a range of daily
partitions); the sensor and the UI launch one day per run. Both run the same per-day function.
The first day that fails fails the step (its message names the day); days published before
stay published, and a re-run skips them by their job IDs.
"""

import datetime as dt
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import dagster as dg

from bq_platform.defs.check_events import CheckedEvent, PartitionCheck, report
from bq_platform.defs.metadata import partition_results
from bq_platform.defs.partitions import partition_days

#: Per-day counts a range's step totals add up.
SUMMED = (
    "hours",
    "hours_published",
    "incomplete_hours",
    "complete_hours",
    "empty_hours",
    "files",
    "source_lines",
    "pageviews",
    "rejected",
    "rows",
)
#: What one day of a daily asset gives: its materialization metadata and its check results.
DayReport = tuple[Mapping[str, Any], list[PartitionCheck]]


def report_days(
    context: dg.AssetExecutionContext, one_day: Callable[[dt.date], DayReport]
) -> Iterator[CheckedEvent]:
    """Run ``one_day`` for each day of the run, then report each day's metadata (in a range,
    plus the step's totals under :data:`~bq_platform.lib.core.reporting.STEP_TOTALS`) and
    checks on its partition. Raises what ``one_day`` raises for the first day that fails."""
    started = time.monotonic()
    by_day: dict[str, Mapping[str, Any]] = {}
    checks: list[PartitionCheck] = []
    for day in partition_days(context):
        metadata, day_checks = one_day(day)
        by_day[day.isoformat()] = metadata
        checks.extend(day_checks)
    if len(by_day) == 1:
        (metadata,) = by_day.values()
        result = dg.MaterializeResult(metadata=dict(metadata))
    else:
        totals: dict[str, Any] = {"days": len(by_day)}
        for key in SUMMED:
            values = [m[key] for m in by_day.values() if isinstance(m.get(key), int)]
            if values:
                totals[key] = sum(values)
        totals["duration_seconds"] = round(time.monotonic() - started, 2)
        result = partition_results(context, by_day, totals)
    return report(context, result, checks)
