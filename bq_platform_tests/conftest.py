"""Shared fixtures: one local SparkSession per test session, paths to the bundled real logs, a
Dagster instance that counts its event-log connections."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("BQ_PLATFORM_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
ACCESS_LOGS = SHARED_DATA / "access_logs"


@pytest.fixture(autouse=True)
def _event_batch_size_kept() -> Iterator[None]:
    """Each test ends with the ``DAGSTER_EVENT_BATCH_SIZE`` it started with: opening a local
    instance sets it (``bq_platform/event_log.py``), which would leak into the next test."""
    from bq_platform.event_log import BATCH_SIZE_ENV

    before = os.environ.get(BATCH_SIZE_ENV)
    yield
    if before is None:
        os.environ.pop(BATCH_SIZE_ENV, None)
    else:
        os.environ[BATCH_SIZE_ENV] = before


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``(instance, connections)``: a Dagster instance on our batched event log, and the
    database files it connects to, in order (``event_log_entries.counting_instance``)."""
    from bq_platform_tests.event_log_entries import counting_instance

    return counting_instance(tmp_path, monkeypatch)


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

    from bq_platform.lib.build.spark import ensure_local_spark_env, spark_config

    ensure_local_spark_env()
    builder = SparkSession.builder
    for key, value in spark_config("local[2]", shuffle_partitions=2).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()
