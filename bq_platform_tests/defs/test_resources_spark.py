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
from bq_platform.lib.spark import spark_config


class FakeSession:
    """Stands for a started session: only its identity matters here."""


def test_the_background_start_builds_the_resources_own_session(monkeypatch) -> None:
    started: list[dict] = []
    monkeypatch.setattr(
        resources, "spark_session_from_config", lambda c: started.append(c) or FakeSession()
    )
    resource = SparkResource(spark_config=spark_config("local[1]"))
    resource.start_in_background().join(timeout=10)
    assert started == [resource.spark_config]


def test_a_failed_background_start_is_one_debug_line(monkeypatch, caplog) -> None:
    """The run's own resource start reports a failed start, once; the background thread ends
    and logs one DEBUG line with the cause."""

    def fail(config: dict) -> None:
        raise RuntimeError("Java gateway process exited")

    monkeypatch.setattr(resources, "spark_session_from_config", fail)
    caplog.set_level(logging.DEBUG)
    thread = SparkResource(spark_config=spark_config("local[1]")).start_in_background()
    thread.join(timeout=10)
    assert not thread.is_alive()
    (record,) = [r for r in caplog.records if r.name == resources.__name__]
    assert record.levelno == logging.DEBUG
    assert "pre-start failed" in record.getMessage()
    assert "Java gateway process exited" in record.exc_text


def _fake_start(monkeypatch, start) -> None:
    """``start`` for both starts: the background one (ours) and the lazy property's
    (dagster-pyspark's ``LazyPySparkResource``)."""
    monkeypatch.setattr(resources, "spark_session_from_config", start)
    monkeypatch.setattr(dagster_pyspark.resources, "spark_session_from_config", start)
    monkeypatch.setattr(resources, "ensure_local_spark_env", lambda: None)


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
