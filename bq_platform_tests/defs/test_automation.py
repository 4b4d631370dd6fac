"""The automation sensor, tick by tick, against a real local pipeline (Spark, DuckDB).

Each tick is evaluated with ``dg.build_sensor_context``; its run requests are executed in
process as the daemon would launch them, and the next tick sees what they materialized.
"""

import datetime as dt

import dagster as dg
import pytest

from bq_platform.defs.automation import pageviews_automation_sensor
from bq_platform.defs.publish_status import failed_publishes, run_days
from bq_platform.defs.reports import assets as reports_assets
from bq_platform.defs.resources import build_resources
from bq_platform.lib import planning
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.planning import is_closed
from bq_platform_tests.defs.conftest import Pipeline

pytestmark = pytest.mark.spark
UTC = dt.UTC
DAY1 = dt.datetime(1995, 8, 1, tzinfo=UTC)
DAY2 = dt.datetime(1995, 8, 2, tzinfo=UTC)


def tick(pipeline: Pipeline) -> list[dg.RunRequest]:
    """Evaluate one tick; a skip must say why."""
    result = pipeline.evaluate(pageviews_automation_sensor)
    if isinstance(result, dg.SkipReason):
        assert result.skip_message
        return []
    return list(result.run_requests or [])


def skip_message(pipeline: Pipeline) -> str:
    result = pipeline.evaluate(pageviews_automation_sensor)
    assert isinstance(result, dg.SkipReason), result
    return result.skip_message or ""


def hourly_range(request: dg.RunRequest) -> tuple[str, str]:
    assert request.job_name == "pageviews_hourly_job"
    return (
        request.tags["dagster/asset_partition_range_start"],
        request.tags["dagster/asset_partition_range_end"],
    )


def published_rows(pipeline: Pipeline, day: dt.datetime) -> int:
    (row,) = pipeline.query(
        f"SELECT count(*) AS n FROM pageviews WHERE event_date = DATE '{day.date()}'"
    )
    return row["n"]


def test_automation_builds_empty_hours_publishes_reruns_late_files_and_starts_from_state(
    pipeline: Pipeline,
):
    assert "landing zone is empty" in skip_message(pipeline)

    # A closed day with data in two hours only: its 22 empty hours are built too, in one run.
    pipeline.land(DAY1.replace(hour=10), 30)
    pipeline.land(DAY1.replace(hour=11), 20)
    (build,) = tick(pipeline)
    assert hourly_range(build) == ("1995-08-01T00", "1995-08-01T23")
    # Until it runs, every tick asks again with the same key (the daemon drops repeats).
    assert [r.run_key for r in tick(pipeline)] == [build.run_key]
    pipeline.execute(build)

    # All 24 hours current: the day with empty hours is published.
    (publish,) = tick(pipeline)
    assert publish.job_name == "pageviews_daily_job" and publish.partition_key == "1995-08-01"
    pipeline.execute(publish)
    assert published_rows(pipeline, DAY1) == 50
    assert "up to date" in skip_message(pipeline)

    # First tick of a fresh sensor on this materialized instance (no cursor): nothing.
    fresh = pipeline.evaluate(pageviews_automation_sensor, dg.DagsterInstance.ephemeral())
    assert isinstance(fresh, dg.SkipReason) and "1995-08-01: up to date" in fresh.skip_message

    # A late file for 10:00 re-runs that hour only, then republishes the day.
    pipeline.land(DAY1.replace(hour=10), 5, path="/late.html")
    (late,) = tick(pipeline)
    assert hourly_range(late) == ("1995-08-01T10", "1995-08-01T10")
    assert late.run_key != build.run_key
    pipeline.execute(late)
    (republish,) = tick(pipeline)
    assert republish.partition_key == "1995-08-01" and republish.run_key != publish.run_key
    pipeline.execute(republish)
    assert published_rows(pipeline, DAY1) == 55
    assert "up to date" in skip_message(pipeline)


def test_an_hour_not_yet_closed_is_left_alone_and_a_new_closed_hour_is_requested(
    pipeline: Pipeline,
):
    now = dt.datetime.now(UTC)
    current = now.replace(minute=0, second=0, microsecond=0)
    pipeline.land(current, 10)
    message = skip_message(pipeline)
    assert f"{current.date()}: open until" in message

    previous = current - dt.timedelta(hours=2)  # ended more than 15 minutes ago
    pipeline.land(previous, 10)
    before = dt.datetime.now(UTC)
    (request,) = tick(pipeline)
    after = dt.datetime.now(UTC)
    # Only the closed hour with data; the open hour and the day's empty hours wait.
    label = hour_label(previous)
    if previous.date() == current.date():
        assert hourly_range(request) == (label, label)
    else:  # just after midnight: once yesterday's last hour is closed, all its hours are due
        last = dt.datetime.combine(previous.date(), dt.time(23), tzinfo=UTC)
        ends = {hour_label(last) if is_closed(last, now) else label for now in (before, after)}
        assert hourly_range(request)[1] in ends


def test_a_lookback_window_plans_only_its_days(pipeline: Pipeline, monkeypatch):
    """Production sets BQ_PLATFORM_LOOKBACK_DAYS: a tick then reads and plans the window's
    days only, whatever the landing zone's history holds (issue 9)."""
    yesterday = dt.datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - dt.timedelta(
        days=1
    )
    pipeline.land(yesterday.replace(hour=10), 10)
    pipeline.land(DAY1.replace(hour=10), 10)  # an old day, outside any recent window
    every = {hourly_range(r)[0][:10] for r in tick(pipeline)}
    assert every == {"1995-08-01", str(yesterday.date())}

    monkeypatch.setenv("BQ_PLATFORM_LOOKBACK_DAYS", "3")
    pipeline.resources["settings"] = build_resources("local")["settings"]
    assert pipeline.resources["settings"].lookback_days == 3
    (request,) = tick(pipeline)
    assert hourly_range(request)[0][:10] == str(yesterday.date())

    monkeypatch.setenv("BQ_PLATFORM_LOOKBACK_DAYS", "0")
    with pytest.raises(ValueError, match="BQ_PLATFORM_LOOKBACK_DAYS must be a positive whole"):
        build_resources("local")


def test_run_days_reads_hourly_ranges_and_daily_partitions():
    assert run_days(
        {
            "dagster/asset_partition_range_start": "1995-08-01T22",
            "dagster/asset_partition_range_end": "1995-08-03T01",
        }
    ) == [dt.date(1995, 8, 1), dt.date(1995, 8, 2), dt.date(1995, 8, 3)]
    assert run_days({"dagster/partition": "1995-08-02"}) == [dt.date(1995, 8, 2)]
    assert run_days(  # bq-platform run's daily run over a batch's days
        {
            "dagster/asset_partition_range_start": "1995-08-30",
            "dagster/asset_partition_range_end": "1995-08-31",
        }
    ) == [dt.date(1995, 8, 30), dt.date(1995, 8, 31)]
    assert run_days({}) == []


def test_a_day_whose_last_publish_failed_is_requested_again_until_a_run_succeeds(
    pipeline: Pipeline, monkeypatch
):
    """The report step fails after the tables were published (their records are current): the
    day is published again, also when a range run failed, until its latest run succeeds."""
    pipeline.land(DAY1.replace(hour=10), 10)
    pipeline.land(DAY2.replace(hour=10), 10)
    hourly = pipeline.definitions.resolve_job_def("pageviews_hourly_job")
    built = hourly.execute_in_process(  # both days in one Spark run
        instance=pipeline.instance,
        tags={
            "dagster/asset_partition_range_start": "1995-08-01T00",
            "dagster/asset_partition_range_end": "1995-08-02T23",
        },
    )
    assert built.success
    real_render = reports_assets.render_png
    failing = {"on": True}

    def render_png(*args, **kwargs):
        if failing["on"]:
            raise OSError("No space left on device: reports/completeness")
        return real_render(*args, **kwargs)

    monkeypatch.setattr(reports_assets, "render_png", render_png)
    daily = pipeline.definitions.resolve_job_def("pageviews_daily_job")
    failed = daily.execute_in_process(  # as bq-platform run publishes a batch: a range
        instance=pipeline.instance,
        tags={
            "dagster/asset_partition_range_start": "1995-08-01",
            "dagster/asset_partition_range_end": "1995-08-02",
        },
        raise_on_error=False,
    )
    assert not failed.success and published_rows(pipeline, DAY1) == 10
    failing["on"] = False
    said = f"last publish run {failed.run_id[:8]} failed in reports__pageviews_completeness"

    # Right after the failure the automation waits (retries back off), and says why.
    message = skip_message(pipeline)
    assert f"1995-08-01: {said}; the automation publishes it again from" in message
    assert f"1995-08-02: {said}; the automation publishes it again from" in message

    monkeypatch.setattr(planning, "RETRY_BACKOFF", dt.timedelta(0))
    requests = tick(pipeline)
    assert sorted(r.partition_key for r in requests) == ["1995-08-01", "1995-08-02"]
    assert all(r.job_name == "pageviews_daily_job" for r in requests)
    assert all(failed.run_id in r.run_key for r in requests)  # not the failed run's key
    (day1,) = [r for r in requests if r.partition_key == "1995-08-01"]
    assert day1.tags["bq_platform/reason"] == said
    pipeline.execute(day1)

    # The day a later run published is done; the other is still due.
    days = [DAY1.date(), DAY2.date()]
    assert list(failed_publishes(pipeline.instance, days)) == [DAY2.date()]
    (request,) = tick(pipeline)
    assert request.partition_key == "1995-08-02"
    pipeline.execute(request)
    assert failed_publishes(pipeline.instance, days) == {}
    message = skip_message(pipeline)
    assert "1995-08-01: up to date" in message and "1995-08-02: up to date" in message
    assert pipeline.store.exists(reports_assets.report_key("1995-08-02"))


def test_failed_publishes_reads_the_latest_run_of_each_day():
    """Without Spark: a stand-in daily job whose step ``a`` fails while ``FAIL`` is set."""
    daily = dg.DailyPartitionsDefinition(start_date="1995-07-01")
    fail = {"on": True}

    @dg.asset(partitions_def=daily)
    def a() -> None:
        if fail["on"]:
            raise OSError("boom")

    job = dg.define_asset_job("pageviews_daily_job", selection=[a], partitions_def=daily)
    job = dg.Definitions(assets=[a], jobs=[job]).resolve_job_def("pageviews_daily_job")
    d1, d2, d3, d4 = (dt.date(1995, 8, d) for d in (1, 2, 3, 4))
    with dg.instance_for_test() as instance:

        def run(**kwargs) -> str:
            result = job.execute_in_process(instance=instance, raise_on_error=False, **kwargs)
            return result.run_id

        assert failed_publishes(instance, [d1]) == {}  # never published: nothing failed
        first, second = run(partition_key=str(d1)), run(partition_key=str(d1))
        ranged = run(
            tags={
                "dagster/asset_partition_range_start": str(d2),
                "dagster/asset_partition_range_end": str(d3),
            }
        )
        found = failed_publishes(instance, [d1, d2, d3, d4])
        assert sorted(found) == [d1, d2, d3]
        assert (found[d1].run_id, found[d1].failures, found[d1].steps) == (second, 2, ("a",))
        assert found[d2].run_id == found[d3].run_id == ranged != first
        assert found[d1].status == "failed" and found[d1].ended.tzinfo is not None

        fail["on"] = False
        run(partition_key=str(d2))  # fixed by a later run
        assert sorted(failed_publishes(instance, [d1, d2, d3])) == [d1, d3]

        # Canceled (a signal), or marked failed from outside (a dead process): no step.
        canceled = instance.create_run_for_job(job, tags={"dagster/partition": str(d2)})
        instance.report_run_canceled(canceled, "stopped by SIGTERM")
        dead = instance.create_run_for_job(job, tags={"dagster/partition": str(d4)})
        instance.report_run_failed(dead, "its process is gone")
        found = failed_publishes(instance, [d2, d4])
        assert found[d2].describe() == f"last publish run {canceled.run_id[:8]} canceled"
        assert found[d4].describe() == f"last publish run {dead.run_id[:8]} failed"
