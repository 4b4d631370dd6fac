"""The cleanup job and its schedule: what ``bq-platform run`` does after each run, for a
deployment whose runs the sensor, backfills or the UI launch."""

import dagster as dg

from bq_platform.defs.resources import LocalObjectStoreResource
from bq_platform.defs.retention import CLEANUP_CRON, staging_cleanup_job, staging_cleanup_schedule
from bq_platform.lib.hourly_build.retention import clean_attempts, list_attempts
from bq_platform_tests.lib.daily_build.test_retention import HOUR, write_rollup
from bq_platform_tests.lib.hourly_build.test_retention import T0, lake


def test_the_schedule_runs_the_job_daily_and_is_stopped_by_default():
    assert staging_cleanup_schedule.job_name == staging_cleanup_job.name
    assert staging_cleanup_schedule.cron_schedule == CLEANUP_CRON == "30 3 * * *"
    assert staging_cleanup_schedule.execution_timezone == "UTC"
    assert staging_cleanup_schedule.default_status == dg.DefaultScheduleStatus.STOPPED


def test_the_job_deletes_what_was_seen_superseded_a_day_ago(tmp_path):
    store = lake(tmp_path)
    clean_attempts(store, now=T0)  # a pass long ago saw old/05, running/06 and crashed

    def run(full: bool = False) -> dict:
        result = staging_cleanup_job.execute_in_process(
            resources={"object_store": LocalObjectStoreResource(root=str(store.root))},
            instance=dg.DagsterInstance.ephemeral(),
            run_config={"ops": {"clean_superseded_attempts": {"config": {"full": full}}}},
        )
        assert result.success
        (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
        return {k: v.value for k, v in output.event_specific_data.metadata.items()}

    first = run()  # the last full pass was long ago: this one is full
    assert first["full_pass"] is True
    assert first["deleted_units"] == 4 and first["deleted_objects"] == 1 + 3 + 3
    assert first["deleted_attempts"] == ["crashed", "old", "running"]
    assert list_attempts(store) == ["new", "old"]  # old's hour 6 is still named
    again = run()  # a day later in production: the records only
    assert again["full_pass"] is False and again["records_done"] == 0
    assert again["deleted_units"] == 0 and again["waiting_units"] == 0
    assert run(full=True)["full_pass"] is True  # asked for in the launchpad


def test_the_job_deletes_superseded_rollup_folders(tmp_path):
    store = LocalObjectStoreResource(root=str(tmp_path)).get_store()
    old = write_rollup(store, "pageviews_daily_by_site", "a" * 64, T0)
    new = write_rollup(store, "pageviews_daily_by_site", "b" * 64, T0 + HOUR)
    result = staging_cleanup_job.execute_in_process(
        resources={"object_store": LocalObjectStoreResource(root=str(tmp_path))},
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = {k: v.value for k, v in output.event_specific_data.metadata.items()}
    assert metadata["deleted_rollup_folders"] == [old]  # the clock is long past T0 + a day
    assert metadata["waiting_rollup_folders"] == 0
    assert store.exists(f"{new}/_ROLLUP.json") and not store.list_keys(old)
