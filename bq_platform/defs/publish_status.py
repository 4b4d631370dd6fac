"""Which days' latest publish run failed: read from the Dagster instance's run records.

A day's publish run is a finished run of :data:`DAILY_JOB` whose partition tags cover the day
(one day, or a range of days as ``bq-platform run`` launches them), whoever launched it: the
CLI, the automation sensor, the UI or a backfill. A publish step can fail after the copy jobs
wrote the publish records (in the completeness report, say), so the warehouse alone does not
show it; :func:`bq_platform.lib.planning.plan_day` takes this answer as an argument and
publishes such a day again. The latest run decides: a failure followed by a successful run is
fixed. A run still in progress decides nothing.
"""

import datetime as dt
from collections.abc import Collection, Mapping

import dagster as dg

from bq_platform.lib.core.hours import days_between, partition_day
from bq_platform.lib.planning import FailedPublish

DAILY_JOB = "pageviews_daily_job"
"""The job that publishes days (defined in :mod:`bq_platform.defs.automation`)."""
FINISHED = [
    dg.DagsterRunStatus.SUCCESS,
    dg.DagsterRunStatus.FAILURE,
    dg.DagsterRunStatus.CANCELED,
]
UNSUCCESSFUL = {dg.DagsterRunStatus.FAILURE: "failed", dg.DagsterRunStatus.CANCELED: "canceled"}
PAGE = 200
"""Run records read per query, newest first."""


def run_days(tags: dg.DagsterRun | Mapping[str, str]) -> list[dt.date]:
    """UTC days a pipeline run covers, from its partition tags (an hourly or daily range, or
    one day)."""
    tags = tags.tags if isinstance(tags, dg.DagsterRun) else tags
    start = tags.get("dagster/asset_partition_range_start") or tags.get("dagster/partition")
    end = tags.get("dagster/asset_partition_range_end") or start
    if not start or not end:
        return []
    first, last = partition_day(start), partition_day(end)
    return days_between(first, last + dt.timedelta(days=1))


def failed_publishes(
    instance: dg.DagsterInstance, days: Collection[dt.date]
) -> dict[dt.date, FailedPublish]:
    """The ``days`` whose latest finished publish run failed or was canceled, each with that
    run, its failed steps and how many such runs are in a row since the day's last successful
    one. Reads run records newest first until every day is decided (all of them for a day
    never published), and the failed runs' step failures."""
    wanted = set(days)
    decided: set[dt.date] = set()
    unsuccessful: dict[dt.date, list[dg.RunRecord]] = {}
    cursor: str | None = None
    while wanted - decided:
        records = instance.get_run_records(
            dg.RunsFilter(job_name=DAILY_JOB, statuses=FINISHED), limit=PAGE, cursor=cursor
        )
        for record in records:
            run = record.dagster_run
            for day in wanted.intersection(run_days(run)) - decided:
                if run.status == dg.DagsterRunStatus.SUCCESS:
                    decided.add(day)
                else:
                    unsuccessful.setdefault(day, []).append(record)
        if len(records) < PAGE:
            break
        cursor = records[-1].dagster_run.run_id
    return {
        day: _failed_publish(instance, records[0], len(records))
        for day, records in unsuccessful.items()
    }


def _failed_publish(
    instance: dg.DagsterInstance, record: dg.RunRecord, failures: int
) -> FailedPublish:
    run = record.dagster_run
    steps: list[str] = []
    events = instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE
    ).records
    for event in events:
        dagster_event = event.event_log_entry.dagster_event
        step = dagster_event.step_key if dagster_event else None
        if step and step not in steps:
            steps.append(step)
    if record.end_time is not None:
        ended = dt.datetime.fromtimestamp(record.end_time, dt.UTC)
    else:  # marked failed from outside (a dead process): its last update
        ended = record.update_timestamp.replace(tzinfo=record.update_timestamp.tzinfo or dt.UTC)
    return FailedPublish(run.run_id, UNSUCCESSFUL[run.status], tuple(steps), failures, ended)
