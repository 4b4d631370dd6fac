"""A local environment in a temporary folder: object store, DuckDB, Dagster instance."""

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse


@dataclasses.dataclass
class LocalEnv:
    home: Path
    store: LocalObjectStore
    instance: dg.DagsterInstance

    def warehouse(self) -> DuckDBWarehouse:
        return DuckDBWarehouse(self.home / "warehouse.duckdb")

    def query(self, sql: str) -> list[dict]:
        wh = self.warehouse()
        try:
            return wh.query(sql)
        finally:
            wh.close()


@pytest.fixture
def local_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark) -> Iterator[LocalEnv]:
    """BQ_PLATFORM_HOME in tmp_path, an ephemeral Dagster instance, the shared SparkSession."""
    home = tmp_path / "bqp"
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(home))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    with dg.instance_for_test() as instance:
        yield LocalEnv(home, LocalObjectStore(home / "lake"), instance)
