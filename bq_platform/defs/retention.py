"""Cleanup of superseded build attempts and rollup folders in a Dagster deployment: a job and
its daily schedule.

``bq-platform run`` cleans after each run; runs the sensor, a backfill or the UI launch do not,
so this job does it for them (:func:`bq_platform.lib.hourly_build.retention.clean_staging`). Stopped
by default, like the sensor.
"""

import dagster as dg

from bq_platform.defs.resources import ObjectStoreResource
from bq_platform.lib.hourly_build.retention import FULL_PASS_EVERY, RETENTION, clean_staging

#: When the schedule runs (UTC): after the night's publishes, once a day (the retention is a day).
CLEANUP_CRON = "30 3 * * *"


class CleanupConfig(dg.Config):
    """Launchpad config of the cleanup."""

    full: bool = False
    """Also run the full pass over every attempt folder now (it runs every FULL_PASS_EVERY)."""


@dg.op(
    name="clean_superseded_attempts",
    description="Delete the staging Parquet and dead letters of build attempts that no hour "
    f"manifest names any more, {RETENTION} after they were superseded (the files a manifest "
    "names are never touched): the units the builds recorded, and once every "
    f"{FULL_PASS_EVERY} a full pass over every attempt folder; and the daily rollups' content "
    f"folders that a newer content of the same table and day replaced {RETENTION} ago (the "
    "newest is never touched). Metadata: what was deleted and what waits.",
)
def clean_superseded_attempts(
    context: dg.OpExecutionContext, config: CleanupConfig, object_store: ObjectStoreResource
) -> dg.Output[None]:
    report = clean_staging(object_store.get_store(), full=config.full, log=context.log)
    attempts = sorted({attempt for attempt, _ in report.deleted_units})
    context.log.info(report.describe())
    return dg.Output(
        None,
        metadata={
            "deleted_objects": dg.MetadataValue.int(report.deleted_objects),
            "deleted_units": dg.MetadataValue.int(len(report.deleted_units)),
            "deleted_attempts": dg.MetadataValue.json(attempts[:100]),
            "waiting_units": dg.MetadataValue.int(report.waiting),
            "kept_units": dg.MetadataValue.int(report.kept),
            "records_done": dg.MetadataValue.int(report.records),
            "unreadable_records": dg.MetadataValue.json(report.bad_records[:100]),
            "full_pass": dg.MetadataValue.bool(report.full_pass),
            "deleted_rollup_folders": dg.MetadataValue.json(report.deleted_rollups[:100]),
            "waiting_rollup_folders": dg.MetadataValue.int(report.rollups_waiting),
        },
    )


@dg.job(
    name="staging_cleanup_job",
    description="Delete superseded build attempts from the staging and dead-letter areas, and "
    "superseded rollup folders (lib/hourly_build/retention.py, lib/daily_build/retention.py); "
    "what bq-platform run does after each run.",
)
def staging_cleanup_job() -> None:
    clean_superseded_attempts()


staging_cleanup_schedule = dg.ScheduleDefinition(
    name="staging_cleanup_schedule",
    job=staging_cleanup_job,
    cron_schedule=CLEANUP_CRON,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Runs staging_cleanup_job once a day. Stopped by default: turn it on in "
    "Automation (production deployments, where the sensor launches the runs).",
)
