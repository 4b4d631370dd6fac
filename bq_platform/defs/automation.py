"""Jobs and the automation that brings every closed day with landed data to published.

The sensor (stopped by default) asks :func:`bq_platform.lib.planning.plan_automation`, the
answer ``bq-platform run`` uses, what is due; it reads what is materialized and the days whose
latest publish run failed (:func:`bq_platform.defs.publish_status.failed_publishes`), not a
cursor.
A sensor rather than ``AutomationCondition``: "what needs to run" is content-based
(fingerprints), is needed by the CLI without a daemon too, and counts hours without any landed
file once their day closes; plain Python keeps that one answer testable and shared.
"""

import datetime as dt

import dagster as dg

from bq_platform.defs.partitions import daily_partitions, hourly_partitions
from bq_platform.defs.publish_status import DAILY_JOB, failed_publishes, run_days
from bq_platform.defs.resources import ObjectStoreResource, PipelineSettings, WarehouseResource
from bq_platform.defs.run_tags import AUTOMATION_TRIGGER, IN_PROGRESS_STATUSES, TRIGGER_TAG
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.planning import (
    MAX_RETRY_BACKOFF,
    RETRY_BACKOFF,
    AutomationPlan,
    plan_automation,
    scan_window,
)

HOURLY_SELECTION = dg.AssetSelection.assets(
    ["lake", "pageview_files"],
    ["warehouse", "pageviews_stage"],
    ["warehouse", "pageviews_sample_stage"],
    ["warehouse", "pageviews_audit"],
)
DAILY_SELECTION = dg.AssetSelection.assets(
    ["warehouse", "pageviews"],
    ["warehouse", "pageviews_sample"],
    ["warehouse", "pageview_deadletters"],
    ["warehouse", "pageviews_daily_by_site"],
    ["warehouse", "pageviews_daily_by_page"],
    ["reports", "pageviews_completeness"],
)
MINIMUM_INTERVAL_SECONDS = 60
"""Seconds between two evaluations of the automation sensor."""

pageviews_hourly_job = dg.define_asset_job(
    "pageviews_hourly_job",
    selection=HOURLY_SELECTION,
    partitions_def=hourly_partitions,
    description="Build, stage and audit a range of UTC hours (one Spark session per run).",
)
pageviews_daily_job = dg.define_asset_job(
    DAILY_JOB,
    selection=DAILY_SELECTION,
    partitions_def=daily_partitions,
    description="Publish one UTC day into pageviews and pageviews_sample (copy jobs), load its "
    "dead letters into pageview_deadletters and its rollups (computed in Spark) into "
    "pageviews_daily_by_site and pageviews_daily_by_page, and report its completeness.",
)


def busy_days(instance: dg.DagsterInstance) -> set[dt.date]:
    """Days covered by a queued or running hourly or daily run."""
    days: set[dt.date] = set()
    for job in (pageviews_hourly_job.name, pageviews_daily_job.name):
        for run in instance.get_runs(
            dg.RunsFilter(job_name=job, statuses=list(IN_PROGRESS_STATUSES))
        ):
            days.update(run_days(run))
    return days


def run_requests(plan: AutomationPlan) -> list[dg.RunRequest]:
    """Dagster run requests for an automation plan (deterministic run keys)."""
    out = []
    for request in plan.requests:
        tags = {TRIGGER_TAG: AUTOMATION_TRIGGER, "bq_platform/reason": request.reason[:200]}
        if request.kind == "build":
            out.append(
                dg.RunRequest(
                    run_key=request.run_key,
                    job_name=pageviews_hourly_job.name,
                    tags={
                        **tags,
                        "dagster/asset_partition_range_start": hour_label(request.hours[0]),
                        "dagster/asset_partition_range_end": hour_label(request.hours[-1]),
                    },
                )
            )
        else:
            out.append(
                dg.RunRequest(
                    run_key=request.run_key,
                    job_name=pageviews_daily_job.name,
                    partition_key=request.day.isoformat(),
                    tags=tags,
                )
            )
    return out


@dg.sensor(
    name="pageviews_automation_sensor",
    jobs=[pageviews_hourly_job, pageviews_daily_job],
    minimum_interval_seconds=MINIMUM_INTERVAL_SECONDS,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Brings every closed UTC day with landed data to published: builds new, late "
    "and empty hours, then publishes the day. Reads hour manifests and publish records (what "
    "is materialized), so turning it on requests only what is not yet done. A day whose last "
    f"publish run failed is published again, {RETRY_BACKOFF.total_seconds() / 60:g} minutes "
    "after the failure, then with doubling waits (at most "
    f"{MAX_RETRY_BACKOFF.total_seconds() / 3600:g} hours) while it keeps failing. With "
    "BQ_PLATFORM_LOOKBACK_DAYS set, only the days of that window are planned (older days: "
    "backfill their partitions). It never reclassifies: hours whose input is unchanged but "
    "whose traffic classifier was upgraded are named in the skip reason and wait for "
    "`bq-platform run --reclassify` (or run config reclassify: true). Stopped by default: turn "
    "it on in Automation.",
)
def pageviews_automation_sensor(
    context: dg.SensorEvaluationContext,
    object_store: ObjectStoreResource,
    warehouse: WarehouseResource,
    settings: PipelineSettings,
) -> dg.SensorResult | dg.SkipReason:
    store = object_store.get_store()
    wh = warehouse.new_warehouse()  # a tick reads the state afresh (no cache of a prior tick)
    try:
        now = dt.datetime.now(dt.UTC)
        index = scan_window(store, settings.lookback_days, now)
        plan = plan_automation(
            index,
            store,
            wh,
            settings.visitor_key,
            now=now,
            busy_days=busy_days(context.instance),
            failed_publishes=failed_publishes(context.instance, index.days()),
            thresholds=settings.traffic_thresholds(),
        )
    finally:
        wh.close()
    if not plan.requests:
        return dg.SkipReason(plan.skip_reason())
    for note in plan.held:
        context.log.warning("not reclassified by the automation: %s", note)
    for request in plan.requests:
        context.log.info(
            "%s %s: %s (%s)", request.kind, request.day, request.reason, request.run_key
        )
    return dg.SensorResult(run_requests=run_requests(plan))
