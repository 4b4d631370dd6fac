"""Shared fixtures: one local SparkSession per test session, paths to the bundled real logs."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("BQ_PLATFORM_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
ACCESS_LOGS = SHARED_DATA / "access_logs"


@pytest.fixture(scope="session")
def access_logs() -> Path:
    """Folder of the bundled real logs (``<site>/<file>.log.gz``); fails if it is missing."""
    if not ACCESS_LOGS.is_dir():
        pytest.fail(f"bundled logs not found at {ACCESS_LOGS}; set BQ_PLATFORM_SHARED_DATA")
    return ACCESS_LOGS


@pytest.fixture(scope="session")
def spark() -> Iterator["object"]:
    """A ``local[2]`` SparkSession shared by all tests (starting one costs ~3 s)."""
    from pyspark.sql import SparkSession

    from bq_platform.lib.hourly_build.spark import ensure_local_spark_env, spark_config

    ensure_local_spark_env()
    builder = SparkSession.builder
    for key, value in spark_config("local[2]", shuffle_partitions=2).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def clean_run(tmp_path_factory, access_logs):
    """The reference of the kill and signal tests: the first ``SLICE_LINES`` lines of the NASA
    log landed and run once by a real ``bq-platform run``, never interrupted."""
    from bq_platform_tests.cli.cli_home import SLICE_LINES, CliHome

    home = CliHome(tmp_path_factory.mktemp("clean"))
    assert home.land_slice(access_logs, home.root) == SLICE_LINES
    result = home.cli("run")
    assert result.returncode == 0, result.stdout
    return home
