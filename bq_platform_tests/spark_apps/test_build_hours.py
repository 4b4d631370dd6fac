"""The hourly build's main file (``spark_apps/build_hours.py``): its arguments, errors and exit
statuses, its plain-Python start, and, under Dagster Pipes through ``spark-submit``, the same
outputs as the build in the Dagster process (``test_build_cluster.py`` runs it on a standalone
cluster)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from bq_platform.defs.pageviews.spark_build import installed_spark_submit
from bq_platform.defs.partitions import hourly_partitions
from bq_platform.lib.core import layout
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.hourly_build import application as build_job
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.spark_apps import build_hours as app
from bq_platform_tests.lib.build_inputs import (
    EPA,
    H_EMPTY,
    H_EPA_1,
    H_NASA_1,
    H_NASA_2,
    KEY,
    NASA,
    ODD,
    PER_HOUR,
    land,
    parquet_rows,
    real_lines,
)

APP = Path(app.__file__)


def test_arguments_accept_pipes_parameters_and_refuse_unknown_options(capsys) -> None:
    args = app.parse_args(
        ["1995-08-01T04", "--dagster-pipes-context", "x", "--dagster-pipes-messages", "y"]
    )
    assert (args.first, args.last, args.attempt_id, args.error_file) == (
        "1995-08-01T04",
        None,
        None,
        None,
    )
    with pytest.raises(SystemExit) as exited:
        app.parse_args(["1995-08-01T04", "--hours", "3"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --hours" in capsys.readouterr().err


def test_bad_settings_exit_2_logged_once(monkeypatch, caplog) -> None:
    monkeypatch.setenv("BQ_PLATFORM_ENV", "prod")
    monkeypatch.delenv("BQ_PLATFORM_VISITOR_KEY", raising=False)
    assert app.main(["1995-08-01T04"]) == 2
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage() == (
        "build_hours: BQ_PLATFORM_ENV=prod: set BQ_PLATFORM_VISITOR_KEY (README, "
        "'Running on Google Cloud')"
    )
    assert record.exc_info is None


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"BQ_PLATFORM_ENV": "prod"}, "BQ_PLATFORM_VISITOR_KEY"),
        ({"BQ_PLATFORM_ENV": "prod", "BQ_PLATFORM_VISITOR_KEY": "k"}, "BQ_PLATFORM_BUCKET"),
        ({"BQ_PLATFORM_ENV": "staging"}, "'local' or 'prod'"),
        ({"BQ_PLATFORM_LINES_PER_PASS": "0"}, "BQ_PLATFORM_LINES_PER_PASS"),
    ],
)
def test_bad_settings_are_named(monkeypatch, env, named) -> None:
    for name in ("BQ_PLATFORM_VISITOR_KEY", "BQ_PLATFORM_BUCKET", "BQ_PLATFORM_GCP_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=re.escape(named)):
        app.resolve_job("1995-08-01T04", None, None)


def test_the_application_builds_with_the_configured_page_rate(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("BQ_PLATFORM_ENV", "local")
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.setenv("BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR", "40")
    job = app.resolve_job("1995-08-01T04", None, "attempt-1")
    assert job.thresholds == ClassificationThresholds(max_pages_per_visitor_hour=40)
    monkeypatch.delenv("BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR")
    assert app.resolve_job("1995-08-01T04", None, "attempt-1").thresholds == (
        ClassificationThresholds()
    )


def test_no_first_hour_is_named() -> None:
    with pytest.raises(ValueError, match="give the first UTC hour"):
        app.resolve_job(None, None, None)


def test_the_own_session_follows_the_environment(monkeypatch) -> None:
    """Started as plain Python, the application's session is the Dagster resource's: the
    master of ``BQ_PLATFORM_SPARK_MASTER`` (default ``local[*]``), quiet unless verbose."""
    monkeypatch.delenv("BQ_PLATFORM_SPARK_MASTER", raising=False)
    monkeypatch.delenv("BQ_PLATFORM_SPARK_VERBOSE", raising=False)
    assert app.session_config()["spark.master"] == "local[*]"
    assert "log4j2" in app.session_config()["spark.driver.extraJavaOptions"]
    monkeypatch.setenv("BQ_PLATFORM_SPARK_MASTER", "local[1]")
    monkeypatch.setenv("BQ_PLATFORM_SPARK_VERBOSE", "1")
    monkeypatch.setenv("BQ_PLATFORM_SPARK_DRIVER_MEMORY", "3g")
    config = app.session_config()
    assert config["spark.master"] == "local[1]" and config["spark.driver.memory"] == "3g"
    assert "log4j2" not in config["spark.driver.extraJavaOptions"]


def test_no_hours_exit_2(caplog) -> None:
    assert app.main([]) == 2
    assert "give the first UTC hour" in caplog.text


def test_a_landed_file_gone_fails_the_job_naming_it_before_spark_starts(
    tmp_path, monkeypatch, caplog
) -> None:
    store = LocalObjectStore(tmp_path / "lake")
    landed = land(
        store, NASA, H_NASA_1, [b'h - - [01/Aug/1995:00:00:01 -0400] "GET / HTTP/1.0" 200 1']
    )
    os.remove(store.uri(landed.data_key))
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.setattr(build_job, "job_session", lambda config: pytest.fail("Spark was started"))
    assert app.main([hour_label(H_NASA_1), "--attempt-id", "gone"]) == 1
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and landed.data_key in errors[0].getMessage()
    assert errors[0].exc_info is None  # a landing error says what to do; no traceback
    assert not store.exists(layout.hour_manifest_key(H_NASA_1))


@pytest.mark.spark
def test_an_hour_that_does_not_balance_is_built_and_named(tmp_path) -> None:
    """Started as plain Python (PySpark starts the JVM): a landed file with fewer lines than
    its manifest says is built, exit 0, each problem (the site's identity, the file's count)
    logged once as an ERROR, and the summary, the last line on stdout, lists them as the hour's
    manifest does."""
    store = LocalObjectStore(tmp_path / "lake")
    line = b'h - - [01/Aug/1995:00:00:01 -0400] "GET /index.html HTTP/1.0" 200 1'
    short = land(store, NASA, H_NASA_1, [line, line], manifest_lines=3)
    env = {
        **os.environ,
        "BQ_PLATFORM_HOME": str(tmp_path),
        "BQ_PLATFORM_ENV": "local",
        "BQ_PLATFORM_SPARK_MASTER": "local[1]",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("BQ_PLATFORM_VISITOR_KEY", None)
    label = hour_label(H_NASA_1)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bq_platform.spark_apps.build_hours",
            label,
            "--attempt-id",
            "short",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["hours"], result["rows"], result["source_lines"]) == (1, 2, 3)
    assert result["problems"] == [
        f"{NASA} {label}: source_lines 3 != accounted 2",
        f"{short.data_key}: manifest says 3 lines, file has 2",
    ]
    errors = [e for e in done.stderr.splitlines() if " ERROR " in e]
    assert [e.split(" ERROR ", 1)[1] for e in errors] == [
        f"accounting does not balance: {p}" for p in result["problems"]
    ]
    manifest = HourManifest.from_json(store.read_text(layout.hour_manifest_key(H_NASA_1)))
    assert manifest.attempt_id == "short" and len(manifest.file_mismatches) == 1


@pytest.mark.spark
def test_under_pipes_spark_submit_builds_what_the_dagster_process_builds(
    spark, access_logs, tmp_path
) -> None:
    """One hourly partition range through ``PipesSubprocessClient`` -> ``spark-submit`` ->
    ``spark_apps/build_hours.py``: the attempt ID comes from the Pipes context, the
    materialization goes back through it; counts, fingerprints and rows equal an in-process
    build's."""
    store = LocalObjectStore(tmp_path / "lake")
    by_hour = real_lines(access_logs)
    for site, hour in [(NASA, H_NASA_1), (NASA, H_NASA_2), (EPA, H_EPA_1)]:
        lines = by_hour[(site, hour)][:PER_HOUR] + (ODD if hour == H_NASA_1 else [])
        land(store, site, hour, lines)
    hours = [H_NASA_1, H_NASA_2, H_EMPTY]
    local = {
        m.hour: m
        for m in build_hours(spark, store, hours, attempt_id="in-process", visitor_key=KEY)
    }

    @dg.asset(partitions_def=hourly_partitions)
    def pageview_files_by_pipes(context: dg.AssetExecutionContext, pipes: dg.PipesSubprocessClient):
        spark_submit = installed_spark_submit()
        command = [str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
        hours = context.partition_key_range  # Pipes passes no range itself: see build_job
        command += [str(APP), hours.start, hours.end]
        return pipes.run(command=command, context=context).get_results()

    env = {
        "BQ_PLATFORM_HOME": str(tmp_path),
        "BQ_PLATFORM_ENV": "local",
        "BQ_PLATFORM_VISITOR_KEY": KEY,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    result = dg.materialize(
        [pageview_files_by_pipes],
        resources={"pipes": dg.PipesSubprocessClient(env=env)},
        tags={
            "dagster/asset_partition_range_start": hour_label(hours[0]),
            "dagster/asset_partition_range_end": hour_label(hours[-1]),
        },
    )
    assert result.success
    attempt = f"{result.run_id}-0"
    remote = {
        h: HourManifest.from_json(store.read_text(layout.hour_manifest_key(h))) for h in hours
    }
    for hour in hours:
        a, b = local[hour], remote[hour]
        assert (a.counts, a.fingerprint, a.rows, a.sample_rows) == (
            b.counts,
            b.fingerprint,
            b.rows,
            b.sample_rows,
        ), hour
        assert all(f"attempt={attempt}/" in k for k in (*b.full_files, *b.deadletter_files))
        for files in ("full_files", "sample_files", "deadletter_files"):
            assert parquet_rows(store, getattr(a, files)) == parquet_rows(
                store, getattr(b, files)
            ), (hour, files)
    materializations = result.asset_materializations_for_node("pageview_files_by_pipes")
    assert sorted(m.partition for m in materializations) == [hour_label(h) for h in hours]
    metadata = materializations[0].metadata
    assert metadata["attempt_id"].value == attempt
    assert metadata["rows"].value == sum(m.rows for m in local.values()) > 0
    assert (
        metadata["rejected"].value == sum(c.rejected for m in local.values() for c in m.counts) > 0
    )
    assert metadata["problems"].value == []
