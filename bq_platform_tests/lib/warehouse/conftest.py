"""Fixtures of the warehouse tests: ``wh``, a local DuckDB warehouse on its own database file
(one per test)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from bq_platform.lib.warehouse.duckdb import DuckDBWarehouse


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[DuckDBWarehouse]:
    warehouse = DuckDBWarehouse(tmp_path / "state" / "warehouse.duckdb", lock_timeout_s=10)
    yield warehouse
    warehouse.close()
