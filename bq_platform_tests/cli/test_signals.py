"""SIGTERM and SIGINT stop ``bq-platform run`` at once: runs ended, one line, 128+N, no retry.

The first tests drive :mod:`bq_platform.cli.signals` in this process. The ``spark`` tests run a
real ``bq-platform run`` on the slice of the NASA log of the kill tests
(:mod:`bq_platform_tests.integration.test_kill`), signal it mid-build and mid-publish, to its
PID or to its process group (as a service manager or a terminal does), then run it again: the
result must be the reference run's, which was never interrupted.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import dagster as dg
import pytest

from bq_platform.cli.runner import DAILY_JOB
from bq_platform.cli.signals import (
    Stopped,
    end_runs,
    raise_if_stopped,
    received,
    stop_on_signals,
)
from bq_platform.defs.errors import fail_fast
from bq_platform.defs.run_tags import CLI_TRIGGER, IN_PROGRESS_STATUSES, PID_TAG, TRIGGER_TAG
from bq_platform_tests.cli.cli_home import BQ_PLATFORM, CliHome, RunningCli
from bq_platform_tests.integration.test_kill import publishing, spark_is_writing

#: Seconds a signalled ``run`` may take to end: a guard against a hang, not a measurement.
STOP_TIMEOUT = 120


def test_a_stop_signal_outside_a_run_raises_stopped_then_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)

    with pytest.raises(Stopped) as stopped:
        with stop_on_signals(echo=print):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 5)  # the handler raises before this returns

    assert (stopped.value.name, stopped.value.exit_code) == ("SIGTERM", 143)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stop_signal_during_a_run_cancels_it_without_a_retry_and_is_raised_after_it():
    calls = []

    @dg.asset(retry_policy=dg.RetryPolicy(max_retries=2, delay=0))
    @fail_fast
    def signalled(context: dg.AssetExecutionContext) -> None:
        calls.append(context.retry_number)
        os.kill(os.getpid(), signal.SIGINT)  # Dagster's handler takes it during the step
        signal.sigtimedwait([], 5)

    with dg.instance_for_test() as instance, pytest.raises(Stopped) as stopped:
        with stop_on_signals(echo=print):
            result = dg.materialize([signalled], instance=instance, raise_on_error=False)
            assert calls == [0]
            assert instance.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.CANCELED
            raise_if_stopped(result.run_id)

    assert (stopped.value.name, stopped.value.exit_code, stopped.value.run_id) == (
        "SIGINT",
        130,
        result.run_id,
    )
    assert received() is None  # the block is over: nothing pending for a later runner
    raise_if_stopped()


def test_the_runs_of_this_process_left_in_progress_are_marked_canceled():
    with dg.instance_for_test() as instance:
        ours = instance.add_run(
            dg.DagsterRun(
                job_name="job",
                status=dg.DagsterRunStatus.STARTED,
                tags={TRIGGER_TAG: CLI_TRIGGER, PID_TAG: str(os.getpid())},
            )
        )
        other = instance.add_run(
            dg.DagsterRun(
                job_name="job",
                status=dg.DagsterRunStatus.STARTED,
                tags={TRIGGER_TAG: CLI_TRIGGER, PID_TAG: "4242"},
            )
        )
        stop = Stopped(signal.SIGTERM)

        ended = end_runs(instance, stop)

        assert ended == {ours.run_id: "marked canceled"}
        assert instance.get_run_by_id(ours.run_id).status == dg.DagsterRunStatus.CANCELED
        assert instance.get_run_by_id(other.run_id).status == dg.DagsterRunStatus.STARTED
    assert stop.message(ended) == (
        f"stopped by SIGTERM: run {ours.run_id} marked canceled; "
        "run `bq-platform run` again to continue"
    )


def test_the_watchdog_ends_a_command_that_does_not_stop_in_its_grace_period():
    stuck = textwrap.dedent(
        """
        import os, signal, time
        from bq_platform.cli.signals import Stopped, stop_on_signals

        with stop_on_signals(echo=print, grace=0.5):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(60)
            except Stopped:
                time.sleep(60)  # a command that hangs on its way out
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}

    done = subprocess.run(
        [sys.executable, "-c", stuck], capture_output=True, text=True, timeout=50, env=env
    )

    assert done.returncode == 143, done.stderr
    assert done.stdout.splitlines() == [
        "stopped by SIGTERM: no run was in progress; run `bq-platform run` again to continue"
    ]


@pytest.mark.spark
def test_stop_spark_stops_the_session_this_process_started():
    script = textwrap.dedent(
        """
        from pyspark.sql import SparkSession
        from bq_platform.cli.signals import stop_spark
        from bq_platform.lib.hourly_build.spark import ensure_local_spark_env, spark_config

        ensure_local_spark_env()
        builder = SparkSession.builder
        for key, value in spark_config("local[1]", shuffle_partitions=1).items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        print("rows before:", session.range(3).count())
        stop_spark()
        print("active after:", SparkSession.getActiveSession())
        try:
            session.range(3).count()
        except Exception:
            print("usable after: no")
        """
    )
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env
    )

    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.endswith(("3", "None", "no"))]
    assert lines == ["rows before: 3", "active after: None", "usable after: no"], done.stdout


def start(home: CliHome) -> RunningCli:
    """``bq-platform run`` in a process group of its own, as a service manager starts it."""
    proc = subprocess.Popen(
        [BQ_PLATFORM, "run"],
        env=home.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    return RunningCli(proc)


def signal_when(running: RunningCli, marker, send) -> None:
    """Call ``send(pid)`` as soon as ``marker()`` is true (as the kill tests' ``kill_when``)."""
    deadline = time.monotonic() + 180
    while not marker():
        assert running.proc.poll() is None, f"ended before the marker:\n{running.output}"
        assert time.monotonic() < deadline, f"no marker after 180 s:\n{running.output}"
        time.sleep(0.05)
    send(running.proc.pid)


def assert_stopped(home: CliHome, running: RunningCli, signum: int, earlier: int = 0) -> None:
    """Ended by ``signum``'s exit status, with one line naming it (and the runs it canceled,
    after the ``earlier`` runs of the instance) and no traceback; no run in progress, and no
    step retried."""
    name = signal.Signals(signum).name
    code = running.wait(timeout=STOP_TIMEOUT)
    assert code == 128 + signum, running.output
    named = [line for line in running.lines if name in line]
    assert len(named) == 1 and named[0].startswith(f"stopped by {name}: "), running.output
    assert "Traceback" not in running.output
    runs = home.runs()  # newest first
    assert not [run.run_id for run in runs if run.status in IN_PROGRESS_STATUSES], running.output
    canceled = [r.run_id for r in runs[: len(runs) - earlier] if r.status.value == "CANCELED"]
    assert all(run_id in named[0] for run_id in canceled), running.output
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
        retries = instance.get_event_records(
            dg.EventRecordsFilter(event_type=dg.DagsterEventType.STEP_UP_FOR_RETRY)
        )
    assert not retries, running.output


def assert_same_as_reference(home: CliHome, reference: CliHome) -> None:
    rerun = home.cli("run")
    assert rerun.returncode == 0, rerun.stdout
    assert "lost its process" not in rerun.stdout  # every stopped run was ended by its process
    assert home.audit() == reference.audit()
    rows, distinct = home.pageviews()
    assert rows == distinct == reference.pageviews()[0] > 0


@pytest.mark.spark
def test_sigterm_to_the_pid_mid_build_then_mid_publish_then_a_run_continues(
    tmp_path, access_logs, clean_run
):
    home = CliHome(tmp_path)
    home.land_slice(access_logs, tmp_path)

    building = start(home)
    signal_when(building, lambda: spark_is_writing(home, building), _kill(signal.SIGTERM))
    assert_stopped(home, building, signal.SIGTERM)
    assert not [run for run in home.runs() if run.job_name == DAILY_JOB]  # stopped, not going on

    earlier = len(home.runs())
    publish = start(home)
    signal_when(publish, lambda: publishing(home, publish), _kill(signal.SIGTERM))
    assert_stopped(home, publish, signal.SIGTERM, earlier)

    assert_same_as_reference(home, clean_run)


@pytest.mark.spark
def test_sigterm_to_the_process_group_then_sigint_mid_publish_then_a_run_continues(
    tmp_path, access_logs, clean_run
):
    """To the group, SIGTERM also kills the Spark driver's JVM: no retry against it."""
    home = CliHome(tmp_path)
    home.land_slice(access_logs, tmp_path)

    building = start(home)
    signal_when(building, lambda: spark_is_writing(home, building), _killpg(signal.SIGTERM))
    assert_stopped(home, building, signal.SIGTERM)

    earlier = len(home.runs())
    publish = start(home)
    signal_when(publish, lambda: publishing(home, publish), _kill(signal.SIGINT))
    assert_stopped(home, publish, signal.SIGINT, earlier)

    assert_same_as_reference(home, clean_run)


def _kill(signum: int):
    return lambda pid: os.kill(pid, signum)


def _killpg(signum: int):
    return lambda pid: os.killpg(pid, signum)
