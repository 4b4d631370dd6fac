"""``SparkResource.start_in_background``: the session the run will use, started ahead of it."""

import logging
import subprocess
import sys
import threading

import dagster as dg
import dagster_pyspark.resources
import pytest

from bq_platform.defs import resources
from bq_platform.defs.resources import SparkResource
from bq_platform.lib import build_warmup
from bq_platform.lib.spark import spark_config


class FakeSession:
    """Stands for a started session: only its identity matters here."""


def test_the_background_start_builds_the_resources_own_session(monkeypatch) -> None:
    started: list[dict] = []
    monkeypatch.setattr(
        resources, "spark_session_from_config", lambda c: started.append(c) or FakeSession()
    )
    monkeypatch.setattr(build_warmup, "plan_build_pass", lambda session: 0.0)
    resource = SparkResource(spark_config=spark_config("local[1]"))
    resource.start_in_background().join(timeout=10)
    assert started == [resource.spark_config]


@pytest.mark.parametrize(
    ("failing", "logger", "message", "cause"),
    [
        ("start", resources.__name__, "pre-start failed", "Java gateway process exited"),
        ("warm-up", build_warmup.__name__, "warm-up failed", "no space left on device"),
    ],
)
def test_a_failed_background_start_or_warmup_is_one_debug_line(
    monkeypatch, caplog, failing, logger, message, cause
) -> None:
    """The run's own resource start reports a failed start, once; a failed warm-up only loses
    a head start. Either way the thread ends and logs one DEBUG line with the cause."""

    def fail(*args: object) -> None:
        raise RuntimeError(cause)

    start = fail if failing == "start" else (lambda config: FakeSession())
    monkeypatch.setattr(resources, "spark_session_from_config", start)
    monkeypatch.setattr(build_warmup, "plan_build_pass", fail)
    caplog.set_level(logging.DEBUG)
    thread = SparkResource(spark_config=spark_config("local[1]")).start_in_background()
    thread.join(timeout=10)
    assert not thread.is_alive()
    ours = [r for r in caplog.records if r.name in (resources.__name__, build_warmup.__name__)]
    (record,) = ours  # a failed start never reaches the warm-up
    assert record.name == logger and record.levelno == logging.DEBUG
    assert message in record.getMessage() and cause in record.exc_text


@pytest.mark.parametrize("master", ["local[2]", "spark://127.0.0.1:7077"])
def test_a_local_background_start_then_warms_the_builds_planning(monkeypatch, master) -> None:
    """A local driver is a new JVM per run: its planner is warmed on the started session (on a
    cluster, the tiny pass's file would be on the driver's disk only)."""
    session, warmed = FakeSession(), []
    monkeypatch.setattr(resources, "spark_session_from_config", lambda config: session)
    monkeypatch.setattr(resources, "ensure_local_spark_env", lambda: None)
    monkeypatch.setattr(build_warmup, "plan_build_pass", lambda s: warmed.append(s) or 0.0)
    SparkResource(spark_config=spark_config(master)).start_in_background().join(timeout=10)
    assert warmed == ([session] if master.startswith("local") else [])


def _fake_start(monkeypatch, start) -> None:
    """``start`` for both starts: the background one (ours) and the lazy property's
    (dagster-pyspark's ``LazyPySparkResource``)."""
    monkeypatch.setattr(resources, "spark_session_from_config", start)
    monkeypatch.setattr(dagster_pyspark.resources, "spark_session_from_config", start)
    monkeypatch.setattr(resources, "ensure_local_spark_env", lambda: None)


@pytest.mark.parametrize("master", ["local[2]", "spark://127.0.0.1:7077"])
def test_a_runs_local_session_is_warmed_once(monkeypatch, master) -> None:
    """A run launched from the UI or a sensor starts its session in the resource: a local one
    is warmed beside the run, once however many resources share it (``bq-platform run``'s
    pre-start thread has usually warmed it already)."""
    session, warmed = FakeSession(), []
    done = threading.Event()

    def plan(s: object) -> float:
        warmed.append(s)
        done.set()
        return 0.0

    _fake_start(monkeypatch, lambda config: session)
    monkeypatch.setattr(build_warmup, "plan_build_pass", plan)
    for _ in range(2):
        SparkResource(spark_config=spark_config(master)).setup_for_execution(
            dg.build_init_resource_context()
        )
    if master.startswith("local"):
        assert done.wait(timeout=10)
        build_warmup.warm_up_once(session)  # what the pre-start thread would do: nothing more
        assert warmed == [session]
    else:  # a warm-up thread, had one started, would have called the fake within this time
        assert not done.wait(timeout=0.5) and warmed == []


def test_a_runs_set_up_does_not_wait_for_the_session(monkeypatch) -> None:
    """The resource starts the session on a thread and returns: the build step lists and
    checks the landing zone meanwhile, and waits at its first use of ``spark_session``."""
    session, release, starts = FakeSession(), threading.Event(), []

    def start(config: dict) -> FakeSession:
        starts.append(threading.current_thread().name)
        assert release.wait(timeout=10), "the set-up waited for the session"
        return session

    _fake_start(monkeypatch, start)
    resource = SparkResource(spark_config=spark_config("spark://127.0.0.1:7077"))
    resource.setup_for_execution(dg.build_init_resource_context())
    release.set()  # only reached if the set-up returned while the session was starting
    assert resource.spark_session is session
    assert starts[0] == "spark-prestart"


def test_a_failed_start_is_raised_where_the_session_is_used(monkeypatch, caplog) -> None:
    """The background start's failure is one DEBUG line; the step's ``spark_session`` raises
    it, so Dagster reports it once, in the step that needed Spark."""

    def fail(config: dict) -> None:
        raise RuntimeError("Java gateway process exited before sending its port number")

    _fake_start(monkeypatch, fail)
    caplog.set_level(logging.DEBUG)
    resource = SparkResource(spark_config=spark_config("spark://127.0.0.1:7077"))
    resource.setup_for_execution(dg.build_init_resource_context())
    with pytest.raises(RuntimeError, match="Java gateway process exited"):
        resource.spark_session  # noqa: B018  # the property starts the session
    for thread in threading.enumerate():  # the background start, failed on its own
        if thread.name == "spark-prestart":
            thread.join(timeout=10)
    background = [r for r in caplog.records if r.name == resources.__name__]
    assert [r.levelno for r in background] == [logging.DEBUG]


@pytest.mark.parametrize("master", ["local[2]", "spark://127.0.0.1:7077"])
def test_only_a_local_master_binds_to_loopback(monkeypatch, master: str) -> None:
    bound: list[str] = []
    monkeypatch.setattr(resources, "ensure_local_spark_env", lambda: bound.append(master))
    SparkResource(spark_config=spark_config(master)).prepare_environment()
    assert bound == ([master] if master.startswith("local") else [])


def test_the_background_start_imports_pysparks_converters_meanwhile() -> None:
    """py4j's first argument conversion imports ``pyspark.testing.utils`` (pandas, pyarrow:
    ~0.27 s) once the JVM is up; the background start imports it while the JVM boots."""
    code = (
        "import sys, time\n"
        "from bq_platform.defs import resources\n"
        "from bq_platform.lib.spark import spark_config\n"
        "assert 'pyspark.testing.utils' not in sys.modules\n"
        "resources.spark_session_from_config = lambda config: None\n"
        "resources.SparkResource(spark_config=spark_config('local[1]')).start_in_background()\n"
        "deadline = time.monotonic() + 30\n"
        "while 'pyspark.testing.utils' not in sys.modules and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print('pyspark.testing.utils' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
