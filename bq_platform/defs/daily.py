"""Daily assets over a range of days: one step, and each day its own metadata and checks.

``bq-platform run`` publishes a batch of consecutive days in one daily run (a range of daily
partitions, as its hourly run builds a range of hours): one run and one step per asset instead
of one per day, and the days' copy jobs side by side. The bench's three 1x days: 3.8-4.1 s of
daily runs -> 2.25-2.3 s (issue 9, docs/PERFORMANCE.md). The sensor and the UI still launch
one day per run; both shapes run the same per-day function.

A range run is all or nothing: the first day that fails fails the step (its message names the
day), as a one-day run fails; ``bq-platform run`` then publishes the batch day by day, so a bad
day holds only itself. Days published before the failure stay published, and their re-run is
skipped by their job IDs (the publish is idempotent).
"""

import datetime as dt
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import dagster as dg

from bq_platform.defs.check_events import CheckedEvent, PartitionCheck, report
from bq_platform.defs.metadata import partition_results
from bq_platform.defs.partitions import partition_days

#: Per-day counts a range's step totals add up (counts that do not add up, such as ``sites``,
#: stay per day).
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
    """Run ``one_day`` for each day of the run, then report: the materialization of each day
    with its own metadata, and every day's checks on its partition.

    A one-day run's materialization carries the day's metadata itself (as before ranges); a
    range's days each get theirs, plus the step's totals (days, :data:`SUMMED`, seconds) under
    :data:`~bq_platform.lib.core.reporting.STEP_TOTALS` (:func:`partition_results`).

    Raises:
        whatever ``one_day`` raises, for the first day that fails (see the module docstring).
    """
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
