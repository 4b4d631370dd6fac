"""Where the hourly build runs (``defs/pageviews/spark_build.py``): ``SparkResource.start_in_background``,
the session the run will use, started ahead of it; and the build launched by ``spark-submit``
through Pipes, which reports what the in-process build reports."""

import datetime as dt
import logging
import os
import subprocess
import sys
import threading
from typing import Any

import dagster as dg
import dagster_pyspark.resources
import pytest

from bq_platform.defs.pageviews import spark_build as module
from bq_platform.defs.pageviews.spark_build import BUILD_APP, SparkResource, SparkSubmitBuild, hourly_build
from bq_platform.defs.resources import LocalObjectStoreResource
from bq_platform.lib.core import layout
from bq_platform.lib.build import spark as spark_lib
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.build.spark import spark_config
from bq_platform_tests.defs.conftest import SITE, CountingSparkResource, Pipeline


class FakeSession:
    """Stands for a started session: only its identity matters here."""


def test_the_background_start_builds_the_resources_own_session(monkeypatch) -> None:
    started: list[dict] = []
    monkeypatch.setattr(
        module, "spark_session_from_config", lambda c: started.append(c) or FakeSession()
    )
    resource = SparkResource(spark_config=spark_config("local[1]"))
    resource.start_in_background().join(timeout=10)
    assert started == [resource.spark_config]


def test_a_failed_background_start_is_one_debug_line(monkeypatch, caplog) -> None:
    """The run's own resource start reports a failed start, once; the background thread ends
    and logs one DEBUG line with the cause."""

    def fail(config: dict) -> None:
        raise RuntimeError("Java gateway process exited")

    monkeypatch.setattr(module, "spark_session_from_config", fail)
    caplog.set_level(logging.DEBUG)
    thread = SparkResource(spark_config=spark_config("local[1]")).start_in_background()
    thread.join(timeout=10)
    assert not thread.is_alive()
    (record,) = [r for r in caplog.records if r.name == module.__name__]
    assert record.levelno == logging.DEBUG
    assert "pre-start failed" in record.getMessage()
    assert "Java gateway process exited" in record.exc_text


def _fake_start(monkeypatch, start) -> None:
    """``start`` for both starts: the background one (ours) and the lazy property's
    (dagster-pyspark's ``LazyPySparkResource``)."""
    monkeypatch.setattr(module, "spark_session_from_config", start)
    monkeypatch.setattr(dagster_pyspark.resources, "spark_session_from_config", start)
    monkeypatch.setattr(spark_lib, "ensure_local_spark_env", lambda: None)


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
    background = [r for r in caplog.records if r.name == module.__name__]
    assert [r.levelno for r in background] == [logging.DEBUG]


@pytest.mark.parametrize("master", ["local[2]", "spark://127.0.0.1:7077"])
def test_only_a_local_master_binds_to_loopback(monkeypatch, master: str) -> None:
    bound: list[str] = []
    monkeypatch.setattr(spark_lib, "ensure_local_spark_env", lambda: bound.append(master))
    SparkResource(spark_config=spark_config(master)).prepare_environment()
    assert bound == ([master] if master.startswith("local") else [])


def test_the_background_start_imports_pysparks_converters_meanwhile() -> None:
    """py4j's first argument conversion imports ``pyspark.testing.utils`` (pandas, pyarrow:
    ~0.27 s) once the JVM is up; the background start imports it while the JVM boots."""
    code = (
        "import sys, time\n"
        "from bq_platform.defs import hourly_build as module\n"
        "from bq_platform.lib.build.spark import spark_config\n"
        "assert 'pyspark.testing.utils' not in sys.modules\n"
        "module.spark_session_from_config = lambda config: None\n"
        "module.SparkResource(spark_config=spark_config('local[1]')).start_in_background()\n"
        "deadline = time.monotonic() + 30\n"
        "while 'pyspark.testing.utils' not in sys.modules and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print('pyspark.testing.utils' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_the_environment_chooses_where_the_build_runs(monkeypatch) -> None:
    monkeypatch.delenv("BQ_PLATFORM_BUILD", raising=False)
    assert isinstance(hourly_build(spark_config("local[2]")), SparkResource)
    monkeypatch.setenv("BQ_PLATFORM_BUILD", "spark-submit")
    monkeypatch.setenv("BQ_PLATFORM_SPARK_SUBMIT", "/opt/spark/bin/spark-submit")
    launcher = hourly_build(spark_config("spark://10.0.0.1:7077"))
    assert isinstance(launcher, SparkSubmitBuild)
    hours = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (23, 22)]
    command = launcher.command(hours, "run-1-0")
    assert command[:3] == ["/opt/spark/bin/spark-submit", "--master", "spark://10.0.0.1:7077"]
    assert command[-5:] == [
        str(BUILD_APP),
        "1995-08-01T22",
        "1995-08-01T23",
        "--attempt-id",
        "run-1-0",
    ]
    assert "spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods" in command
    assert not any(arg.startswith("spark.master=") for arg in command)
    with pytest.raises(ValueError, match="consecutive"):
        launcher.command([hours[0], hours[0] + dt.timedelta(hours=2)], "run-1-0")
    monkeypatch.setenv("BQ_PLATFORM_BUILD", "dataproc-serverless")
    with pytest.raises(ValueError, match="BQ_PLATFORM_BUILD must be one of"):
        hourly_build(spark_config("local[2]"))


def with_build(pipeline: Pipeline, launcher: SparkSubmitBuild, **resources: Any) -> dg.Definitions:
    """The pipeline's definitions with ``launcher`` as the ``spark`` resource (and any other
    resource given)."""
    return dg.Definitions(
        assets=pipeline.definitions.assets,
        asset_checks=pipeline.definitions.asset_checks,
        jobs=pipeline.definitions.jobs,
        resources={**pipeline.resources, **resources, "spark": launcher},
        executor=dg.in_process_executor,
    )


@pytest.mark.spark
def test_a_spark_submit_build_reports_what_an_in_process_build_reports(
    pipeline: Pipeline, monkeypatch
) -> None:
    """The hourly job of one day, built by ``spark-submit`` through Pipes: no session in the
    run's process, the hour manifests of the run's attempt, and the same materializations and
    check results as the in-process build of the same day."""
    day = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in range(24)]
    pipeline.land(day[7], 30)
    pipeline.land(day[8], 12, path="/logo.gif")
    tags = {
        "dagster/asset_partition_range_start": hour_label(day[0]),
        "dagster/asset_partition_range_end": hour_label(day[-1]),
    }
    job = pipeline.definitions.resolve_job_def("pageviews_hourly_job")
    local = job.execute_in_process(instance=pipeline.instance, tags=tags)
    assert local.success and len(CountingSparkResource.setups) == 1
    fingerprints = {
        hour: HourManifest.from_json(
            pipeline.store.read_text(layout.hour_manifest_key(hour))
        ).fingerprint
        for hour in day
    }

    # The run's settings reach the application, not the environment's (a decoy key here).
    monkeypatch.setenv("BQ_PLATFORM_VISITOR_KEY", "not-the-runs-key")
    monkeypatch.setenv("BQ_PLATFORM_BUILD", "spark-submit")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    launcher = hourly_build(spark_config("local[2]", shuffle_partitions=2))
    definitions = with_build(pipeline, launcher)
    submitted = definitions.resolve_job_def("pageviews_hourly_job").execute_in_process(
        instance=pipeline.instance, tags=tags
    )
    assert submitted.success
    assert len(CountingSparkResource.setups) == 1  # no session in this run's process
    for hour in day:
        manifest = HourManifest.from_json(pipeline.store.read_text(layout.hour_manifest_key(hour)))
        assert manifest.attempt_id == f"{submitted.run_id}-0"
        assert manifest.fingerprint == fingerprints[hour]  # the same visitor key

    def reported(result: dg.ExecuteInProcessResult) -> tuple[list, list]:
        materializations = sorted(
            (m.partition, m.metadata["rows"].value, m.metadata["non_page_hits"].value)
            for m in result.asset_materializations_for_node("lake__pageview_files")
        )
        checks = sorted(
            (e.partition, e.check_name, e.passed, e.description)
            for e in result.get_asset_check_evaluations()
            if e.asset_key == dg.AssetKey(["lake", "pageview_files"])
        )
        return materializations, checks

    assert reported(submitted) == reported(local)
    by_hour = {m[0]: m[1:] for m in reported(submitted)[0]}
    assert by_hour[hour_label(day[7])] == (30, 0) and by_hour[hour_label(day[8])] == (0, 12)


@pytest.mark.spark
def test_a_landing_fault_in_a_spark_submit_build_fails_once_naming_the_file(
    pipeline: Pipeline, monkeypatch
) -> None:
    """The application's landing fault reaches the asset as the ``LandingError`` it was (by
    its error file), so the step fails once with its message, not retried as a crash of the
    application would be (``defs/errors.py``)."""
    hour = dt.datetime(1995, 8, 1, 7, tzinfo=dt.UTC)
    pipeline.land(hour, 5)
    data_keys = [
        k
        for k in pipeline.store.list_keys(layout.landing_hour_prefix(SITE, hour) + "/")
        if k.endswith(layout.LANDED_DATA_SUFFIX)
    ]
    assert len(data_keys) == 1
    os.remove(pipeline.store.uri(data_keys[0]))  # lost after its manifest was written
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    launcher = SparkSubmitBuild(spark_config=spark_config("local[1]", shuffle_partitions=2))
    definitions = with_build(pipeline, launcher)
    result = definitions.resolve_job_def("pageviews_hourly_job").execute_in_process(
        instance=pipeline.instance, partition_key=hour_label(hour), raise_on_error=False
    )
    assert not result.success
    retried = [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert retried == []
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert "LandingError" in message and data_keys[0] in message
    assert not pipeline.store.exists(layout.hour_manifest_key(hour))


def test_a_spark_submit_build_of_another_lake_is_refused(pipeline: Pipeline, tmp_path) -> None:
    """The application reads its lake from the environment; a run whose object_store resource
    says otherwise fails at once, naming both, and is not retried (nothing is launched)."""
    elsewhere = LocalObjectStore(tmp_path / "elsewhere")
    hour = dt.datetime(1995, 8, 1, 7, tzinfo=dt.UTC)
    launcher = SparkSubmitBuild(spark_config=spark_config("local[1]"), spark_submit="/bin/false")
    other = LocalObjectStoreResource(root=str(elsewhere.root))
    definitions = with_build(pipeline, launcher, object_store=other)
    result = definitions.resolve_job_def("pageviews_hourly_job").execute_in_process(
        instance=pipeline.instance, partition_key=hour_label(hour), raise_on_error=False
    )
    assert not result.success
    assert [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"] == []
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert str(elsewhere.root) in message and str(pipeline.store.root) in message


def test_the_background_stop_ends_the_session_and_its_jvm_and_a_new_one_can_start() -> None:
    """``bq-platform run`` stops its session once its last build is done: the driver JVM exits
    then (not 0.3-0.4 s after this process), and a session asked for later gets a new JVM. In
    a process of its own: the tests share one session."""
    code = (
        "from pyspark import SparkContext\n"
        "from pyspark.sql import SparkSession\n"
        "from bq_platform.defs import hourly_build as module\n"
        "from bq_platform.lib.build.spark import ensure_local_spark_env, spark_config\n"
        "ensure_local_spark_env()\n"
        "config = spark_config('local[1]')\n"
        "first = module.spark_session_from_config(config)\n"
        "jvm = SparkContext._gateway.proc\n"
        "module.stop_session_in_background().join(timeout=60)\n"
        "print('exit', jvm.poll())  # the stop waited for the JVM's exit\n"
        "second = module.spark_session_from_config(config)\n"
        "print('new JVM', SparkContext._gateway.proc.pid != jvm.pid)\n"
        "print('rows', second.range(5).count())\n"
        "module.stop_session_in_background().join(timeout=60)\n"
        "module.stop_session_in_background().join(timeout=60)  # no session: nothing to do\n"
        "print('stopped', SparkContext._gateway is None)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.split("\n")[:4] == ["exit 0", "new JVM True", "rows 5", "stopped True"]
