"""Fixtures of the warehouse tests: ``wh``, a local DuckDB warehouse on its own database file
(one per test); ``backend``, the contract suite's warehouse (:mod:`.contract_backends`): DuckDB,
and BigQuery on the emulators (one of each per test module)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform_tests import emulators
from bq_platform_tests.lib.warehouse.contract_backends import (
    Backend,
    BigQueryBackend,
    DuckDBBackend,
)

gcs_emulator = emulators.gcs_emulator  # module-scoped: one of each per test module
bq_emulator = emulators.bq_emulator


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[DuckDBWarehouse]:
    warehouse = DuckDBWarehouse(tmp_path / "state" / "warehouse.duckdb", lock_timeout_s=10)
    yield warehouse
    warehouse.close()


@pytest.fixture(params=["duckdb", pytest.param("bigquery", marks=pytest.mark.emulator)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "duckdb":
        made: Backend = DuckDBBackend(tmp_path)
    else:
        bq = request.getfixturevalue("bq_emulator")
        gcs = request.getfixturevalue("gcs_emulator")
        bucket = emulators.unique_name("bqp").replace("_", "-")
        gcs.client().create_bucket(bucket)
        made = BigQueryBackend(bq, gcs, bucket, emulators.unique_name("bqp"))
    yield made
    made.close()
