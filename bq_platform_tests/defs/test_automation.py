"""The automation sensor, tick by tick, against a real local pipeline (Spark, DuckDB).

Each tick is evaluated with ``dg.build_sensor_context``; its run requests are executed in
process as the daemon would launch them, and the next tick sees what they materialized.
"""

import datetime as dt

import dagster as dg
import pytest

from bq_platform.defs.automation import pageviews_automation_sensor, run_days
from bq_platform.defs.resources import build_resources
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
