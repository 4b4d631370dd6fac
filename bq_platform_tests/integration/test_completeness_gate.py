"""The completeness gate: a day with unbuilt hours is not published, at once, unless allowed."""

import datetime as dt

import dagster as dg
import pytest

from bq_platform.cli.runner import DAILY_JOB, PipelineRunner
from bq_platform.lib.landing.producer.land import land_file

pytestmark = pytest.mark.spark

UTC = dt.UTC
NASA = "ksc.nasa.gov"
HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=UTC) for h in (4, 5)]


def test_incomplete_day_fails_once_and_publishes_only_when_allowed(local_env, access_logs):
    (path,) = (access_logs / NASA).glob("*.gz")
    land_file(local_env.store, NASA, path)
    lines: list[str] = []
    runner = PipelineRunner.from_environment(
        "local", echo=lines.append, instance=local_env.instance
    )

    assert not runner.run(hours=HOURS)  # 2 of 24 hours built: the day is held

    (failed,) = [line for line in lines if "publish run" in line]
    assert "22 of 24 hours are not complete" in failed and "allow_incomplete_hours" in failed
    assert "Traceback" not in "\n".join(lines)
    (daily,) = local_env.instance.get_runs(filters=dg.RunsFilter(job_name=DAILY_JOB))
    events = local_env.instance.all_logs(daily.run_id)
    assert not [e for e in events if e.dagster_event and e.dagster_event.is_step_up_for_retry]
    published = local_env.query(
        "SELECT count(*) AS n FROM information_schema.tables WHERE table_name = 'pageviews'"
    )
    assert published[0]["n"] == 0  # nothing was copied, not even an empty table

    allowed = PipelineRunner.from_environment(
        "local", echo=lines.append, instance=local_env.instance
    )
    assert allowed.run(hours=HOURS, allow_incomplete=True)

    audit = local_env.query("SELECT sum(pageviews) AS n FROM pageviews_audit")[0]["n"]  # 04, 05
    assert local_env.query("SELECT count(*) AS n FROM pageviews")[0]["n"] == audit > 0
