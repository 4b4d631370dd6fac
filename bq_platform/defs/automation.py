"""Jobs, schedules and the landing sensor.

- ``pageviews_hourly_job``: pageview files, stage tables and audit for a range of UTC hours
  (a day's hours run in one Spark session: the assets' backfill policy allows 24 per run).
- ``pageviews_daily_job``: publishes one UTC day into ``pageviews`` and ``pageviews_sample``.
- ``pageviews_hourly_schedule`` (hh:15 for the previous hour) and ``pageviews_daily_schedule``
  (01:30 UTC for the previous day): production cadence, stopped by default.
- ``landing_sensor``: watches the landing zone; when an hour's content changes (new or late
  files) it requests the hourly job for that day's changed hours.
- ``publish_after_hourly_sensor``: when an hourly run succeeds, requests the publish of the
  days it touched (the publish's completeness gate decides whether the day is ready).
"""

import json

import dagster as dg

from bq_platform.defs.partitions import daily_partitions, hourly_partitions
from bq_platform.defs.resources import ObjectStoreResource
from bq_platform.lib.hours import hour_partition_key
from bq_platform.lib.jobids import sha256_json
from bq_platform.lib.landing_index import scan_landing

HOURLY_SELECTION = dg.AssetSelection.assets(
    ["lake", "pageview_files"],
    ["warehouse", "pageviews_stage"],
    ["warehouse", "pageviews_sample_stage"],
    ["warehouse", "pageviews_audit"],
)
DAILY_SELECTION = dg.AssetSelection.assets(
    ["warehouse", "pageviews"], ["warehouse", "pageviews_sample"]
)

pageviews_hourly_job = dg.define_asset_job(
    "pageviews_hourly_job",
    selection=HOURLY_SELECTION,
    partitions_def=hourly_partitions,
    description="Build, stage and audit a range of UTC hours (one Spark session per run).",
)
pageviews_daily_job = dg.define_asset_job(
    "pageviews_daily_job",
    selection=DAILY_SELECTION,
    partitions_def=daily_partitions,
    description="Publish one UTC day into pageviews and pageviews_sample (copy jobs).",
)

pageviews_hourly_schedule = dg.build_schedule_from_partitioned_job(
    pageviews_hourly_job, minute_of_hour=15, name="pageviews_hourly_schedule"
)
pageviews_daily_schedule = dg.build_schedule_from_partitioned_job(
    pageviews_daily_job, hour_of_day=1, minute_of_hour=30, name="pageviews_daily_schedule"
)


def changed_hours(previous: dict[str, str], current: dict[str, str]) -> list[str]:
    """Hour partition keys whose landed-content fingerprint is new or different."""
    return sorted(k for k, fp in current.items() if previous.get(k) != fp)


@dg.sensor(
    name="landing_sensor",
    job=pageviews_hourly_job,
    minimum_interval_seconds=120,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Requests the hourly build for hours whose landed files changed (new or late "
    "files). Cursor: fingerprint of each landed hour's content.",
)
def landing_sensor(
    context: dg.SensorEvaluationContext, object_store: ObjectStoreResource
) -> dg.SensorResult:
    previous: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    index = scan_landing(object_store.get_store())
    current = {hour_partition_key(h.hour): h.input_fingerprint[:16] for h in index.hours()}
    changed = changed_hours(previous, current)
    by_day: dict[str, list[str]] = {}
    for key in changed:
        by_day.setdefault(key[:10], []).append(key)
    requests = []
    for _day, keys in sorted(by_day.items()):
        content = sha256_json({k: current[k] for k in keys})[:16]
        requests.append(
            dg.RunRequest(
                run_key=f"hourly:{keys[0]}:{keys[-1]}:{content}",
                job_name=pageviews_hourly_job.name,
                tags={
                    "dagster/asset_partition_range_start": keys[0],
                    "dagster/asset_partition_range_end": keys[-1],
                },
            )
        )
    if changed:
        context.log.info("%d changed hours over %d days", len(changed), len(by_day))
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(current, sort_keys=True))


@dg.run_status_sensor(
    name="publish_after_hourly_sensor",
    run_status=dg.DagsterRunStatus.SUCCESS,
    monitored_jobs=[pageviews_hourly_job],
    request_job=pageviews_daily_job,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Publishes the days an hourly run touched, once that run has succeeded.",
)
def publish_after_hourly_sensor(context: dg.RunStatusSensorContext) -> list[dg.RunRequest]:
    tags = context.dagster_run.tags
    start = tags.get("dagster/asset_partition_range_start") or tags.get("dagster/partition")
    end = tags.get("dagster/asset_partition_range_end") or start
    if not start:
        return []
    days = daily_partitions.get_partition_keys_in_range(dg.PartitionKeyRange(start[:10], end[:10]))
    return [
        dg.RunRequest(run_key=f"{context.dagster_run.run_id}:{day}", partition_key=day)
        for day in days
    ]
