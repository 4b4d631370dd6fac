"""kill -9 of a real ``bq-platform run`` at three points, then a re-run: a clean run's counts.

Each test lands the same slice of the real NASA log (its first 2,000 lines: 1995-08-01T04 and
05 UTC), starts ``bq-platform run`` as a subprocess, waits for a marker in the lake or in its
output, sends SIGKILL, and runs ``bq-platform run`` again. The re-run must succeed, mark the
killed Dagster run failed (it stayed STARTED before issue 7), and leave exactly the audit rows
and published rows of a run that was never killed, with no event_id twice.
"""

from pathlib import Path

import dagster as dg
import pytest

from bq_platform.cli.runner import DAILY_JOB
from bq_platform.lib.core import layout
from bq_platform.lib.core.hours import parse_hour
from bq_platform_tests.cli.cli_home import SLICE_LINES, CliHome

pytestmark = pytest.mark.spark

HOUR = parse_hour("1995-08-01T04")


def killed_then_rerun(tmp_path: Path, access_logs: Path, marker) -> tuple[CliHome, str]:
    home = CliHome(tmp_path)
    home.land_slice(access_logs, tmp_path)
    running = home.start("run")
    running.kill_when(lambda: marker(home, running))
    rerun = home.cli("run")
    assert rerun.returncode == 0, running.output + "\n---\n" + rerun.stdout
    return home, rerun.stdout


def assert_same_as_clean(home: CliHome, clean: CliHome, rerun_output: str) -> None:
    assert home.audit() == clean.audit()
    assert sum(row[2] for row in home.audit()) == SLICE_LINES
    rows, distinct = home.pageviews()
    assert rows == distinct == clean.pageviews()[0] > 0
    statuses = {run.status for run in home.runs()}
    assert dg.DagsterRunStatus.STARTED not in statuses
    assert "marked failed" in rerun_output
    assert dg.DagsterRunStatus.FAILURE in statuses


def spark_is_writing(home: CliHome, _running) -> bool:
    """An attempt folder exists: Spark has started writing this attempt's Parquet."""
    staging = home.lake / layout.STAGING_PREFIX
    return staging.is_dir() and any(p.name.startswith("attempt=") for p in staging.iterdir())


def parquet_written(home: CliHome, _running) -> bool:
    """The hour manifest exists: every Parquet file of the attempt is written."""
    return (home.lake / layout.hour_manifest_key(HOUR)).exists()


def publishing(home: CliHome, running) -> bool:
    """The day's publish run is STARTED in the instance."""
    if not any(line.endswith(": publishing") for line in running.lines):
        return False
    return any(
        run.job_name == DAILY_JOB and run.status == dg.DagsterRunStatus.STARTED
        for run in home.runs()
    )


def test_kill_during_the_spark_build(tmp_path, access_logs, clean_run):
    home, output = killed_then_rerun(tmp_path, access_logs, spark_is_writing)
    assert_same_as_clean(home, clean_run, output)


def test_kill_after_the_parquet_write(tmp_path, access_logs, clean_run):
    home, output = killed_then_rerun(tmp_path, access_logs, parquet_written)
    assert_same_as_clean(home, clean_run, output)


def test_kill_mid_publish(tmp_path, access_logs, clean_run):
    home, output = killed_then_rerun(tmp_path, access_logs, publishing)
    assert_same_as_clean(home, clean_run, output)
