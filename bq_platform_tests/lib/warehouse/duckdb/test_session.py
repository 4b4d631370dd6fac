"""The local DuckDB warehouse's session settings
(:mod:`bq_platform.lib.warehouse.duckdb.session`): a file database only, one thread and bounded
memory unless asked, checkpoints that do not merge row groups, strings stored without FSST, on
the warehouse's connection and on its job workers alike. Every test gets its own database file
(the ``wh`` fixture of ``conftest.py``).
"""

from pathlib import Path

import duckdb
import pytest

from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse


def test_memory_database_is_refused() -> None:
    with pytest.raises(ValueError, match="memory"):
        DuckDBWarehouse(":memory:")


def test_one_duckdb_thread_unless_asked(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    threads = "SELECT current_setting('threads') AS threads"
    assert wh.query(threads) == [{"threads": 1}]
    other = DuckDBWarehouse(tmp_path / "other.duckdb", threads=2)
    try:
        assert other.query(threads) == [{"threads": 2}]
    finally:
        other.close()
    with pytest.raises(ValueError, match="threads"):
        DuckDBWarehouse(tmp_path / "x.duckdb", threads=0)


def test_duckdb_memory_is_bounded(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    """DuckDB would take 80% of the RAM; the run's driver process must stay flat."""
    limit = "SELECT current_setting('memory_limit') AS m"
    assert wh.query(limit) == [{"m": "488.2 MiB"}]  # 512MB = 512 x 10^6 bytes
    other = DuckDBWarehouse(tmp_path / "other.duckdb", memory_limit="256MB")
    try:
        assert other.query(limit) == [{"m": "244.1 MiB"}]
    finally:
        other.close()


def _row_groups_after_two_appends(warehouse: DuckDBWarehouse) -> int:
    """Row groups of a table appended to in two commits, once the warehouse is closed."""
    with warehouse._connect() as con:
        con.execute("CREATE TABLE t AS SELECT i, 'row ' || i AS s FROM range(5000) r(i)")
        con.execute("CHECKPOINT")
        con.execute("INSERT INTO t SELECT i, 'row ' || i FROM range(5000, 10000) r(i)")
    warehouse.close()  # its checkpoint
    con = duckdb.connect(str(warehouse.path), read_only=True)
    try:
        (found,) = con.execute(
            "SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('t')"
        ).fetchone()
    finally:
        con.close()
    return found


def test_checkpoints_do_not_merge_row_groups_unless_asked(tmp_path: Path) -> None:
    """A day's copy appends after a partly filled row group; the checkpoint keeps both row
    groups. DuckDB's default (100 vacuum tasks) merges them."""
    assert _row_groups_after_two_appends(DuckDBWarehouse(tmp_path / "a.duckdb")) == 2
    merged = DuckDBWarehouse(tmp_path / "b.duckdb", max_vacuum_tasks=100)
    assert _row_groups_after_two_appends(merged) == 1
    with pytest.raises(ValueError, match="max_vacuum_tasks"):
        DuckDBWarehouse(tmp_path / "c.duckdb", max_vacuum_tasks=-1)


def test_checkpoint_settings_hold_on_job_workers_too(tmp_path: Path) -> None:
    """Jobs commit on the workers' connections: they must run with the same settings."""
    wh = DuckDBWarehouse(tmp_path / "w.duckdb", concurrent_jobs=2)
    asked = (
        "SELECT current_setting('max_vacuum_tasks'), "
        "current_setting('auto_checkpoint_skip_wal_threshold'), "
        "current_setting('python_enable_replacements')"
    )
    try:
        with wh._connect() as con:
            main = con.execute(asked).fetchone()
        worker = wh._job_connection().execute(asked).fetchone()
    finally:
        wh.close()
    assert main == worker == (0, 1_000_000_000, False)


def _compressions(warehouse: DuckDBWarehouse, table: str, rows: str) -> set[str]:
    """Compressions DuckDB chose for the checkpointed string column of ``CREATE TABLE table AS
    rows``."""
    with warehouse._connect() as con:
        con.execute(f"CREATE TABLE {table} AS {rows}")
        con.execute("CHECKPOINT")
        found = con.execute(
            "SELECT DISTINCT compression FROM pragma_storage_info(?) "
            "WHERE segment_type = 'VARCHAR'",
            [table],
        ).fetchall()
    return {r[0] for r in found}


def _string_compressions(warehouse: DuckDBWarehouse) -> set[str]:
    """For a column of 20k distinct URL-like paths."""
    return _compressions(
        warehouse,
        "paths",
        "SELECT '/shuttle/missions/sts-' || i || '/mission-sts-' || i || '.html' AS path "
        "FROM range(20000) t(i)",
    )


def _site_compressions(warehouse: DuckDBWarehouse) -> set[str]:
    """For a column of 200k rows of 50 site names."""
    return _compressions(
        warehouse,
        "sites",
        "SELECT 'site' || (i % 50) || '.example.gov' AS site FROM range(200000) t(i)",
    )


def test_strings_are_stored_without_fsst_or_dictionaries_unless_asked(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    """``fsst,dictionary`` are off by default; ``""`` gives DuckDB every method."""
    assert "FSST" not in _string_compressions(wh)
    assert "Dictionary" not in _site_compressions(wh)
    other = DuckDBWarehouse(tmp_path / "other.duckdb", disabled_compression="")
    try:
        assert "FSST" in _string_compressions(other)
        assert "Dictionary" in _site_compressions(other)
    finally:
        other.close()
    with pytest.raises(ValueError, match="disabled_compression='nope'"):
        DuckDBWarehouse(tmp_path / "x.duckdb", disabled_compression="nope").table_rows("t")
