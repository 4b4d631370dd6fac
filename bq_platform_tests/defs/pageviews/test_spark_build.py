"""Where the hourly build runs (``defs/pageviews/spark_build.py``): the run's own process, whose
session dagster-pyspark starts at its first use, or the build launched by ``spark-submit``
through Pipes, which reports what the in-process build reports."""

import datetime as dt
import os
import sys
from typing import Any

import dagster as dg
import pytest

from bq_platform.defs.pageviews.spark_build import (
    BUILD_APP,
    SparkResource,
    SparkSubmitBuild,
    hourly_build,
)
from bq_platform.defs.resources import LocalObjectStoreResource
from bq_platform.lib.core import layout
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.hourly_build import spark as spark_lib
from bq_platform.lib.hourly_build.spark import spark_config
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.defs.conftest import SITE, CountingSparkResource, Pipeline


@pytest.mark.parametrize("master", ["local[2]", "spark://127.0.0.1:7077"])
def test_a_runs_set_up_binds_only_a_local_master_to_loopback(monkeypatch, master: str) -> None:
    """The set-up prepares the process; the session itself is made at the build's first use
    of ``spark_session``."""
    bound: list[str] = []
    monkeypatch.setattr(spark_lib, "ensure_local_spark_env", lambda: bound.append(master))
    SparkResource(spark_config=spark_config(master)).setup_for_execution(
        dg.build_init_resource_context()
    )
    assert bound == ([master] if master.startswith("local") else [])


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
