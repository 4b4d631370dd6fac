"""The local DuckDB warehouse (:mod:`bq_platform.lib.warehouse.duckdb`): tables, metadata, the
publish ledger, the audit table, reads, expiry, and other processes. Its jobs:
``test_duckdb_jobs.py``; its enforcement of BigQuery's rules: ``test_duckdb_rules.py``. Every
test gets its own database file.
"""

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from bq_platform.lib.accounting import SiteHourCounts, audit_records
from bq_platform.lib.warehouse import duckdb as duckdb_module
from bq_platform.lib.warehouse import duckdb_sql
from bq_platform.lib.warehouse.base import (
    CopyJob,
    PublishRecord,
    SchemaMismatchError,
    TableExistsError,
    WarehouseError,
)
from bq_platform.lib.warehouse.duckdb import DuckDBWarehouse
from bq_platform.lib.warehouse.duckdb_jobs import DUCKDB_TYPES
from bq_platform.lib.warehouse.ledger import LEDGER_COLUMNS
from bq_platform.lib.warehouse.rules import RuleViolation
from bq_platform.lib.warehouse.schema import (
    AUDIT_COLUMNS_SPEC,
    PAGEVIEW_COLUMNS,
    Column,
    TableSpec,
    audit_spec,
    pageviews_sample_spec,
    pageviews_spec,
    stage_spec,
)
from bq_platform_tests.lib.warehouse.duckdb_rows import (
    ARROW,
    DAY1,
    DAY2,
    HOUR,
    UTC,
    pageviews,
    stage,
)


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[DuckDBWarehouse]:
    warehouse = DuckDBWarehouse(tmp_path / "state" / "warehouse.duckdb", lock_timeout_s=10)
    yield warehouse
    warehouse.close()


# ----------------------------------------------------------------------- tables


def test_duckdb_types_cover_every_column_type() -> None:
    for column in PAGEVIEW_COLUMNS + AUDIT_COLUMNS_SPEC:
        assert column.type in DUCKDB_TYPES
    assert DUCKDB_TYPES["TIMESTAMP"] == "TIMESTAMP WITH TIME ZONE"
    assert DUCKDB_TYPES["INT64"] == "BIGINT"
    assert duckdb_module.DUCKDB_TYPES is DUCKDB_TYPES  # re-exported where it used to be


def test_ensure_table_creates_table_with_types_layout_and_parent_folder(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    spec = pageviews_spec()
    wh.ensure_table(spec)

    assert (tmp_path / "state" / "warehouse.duckdb").is_file()
    assert wh.metadata_operations == {"pageviews": 2}  # one read, one create
    assert wh.table_exists("pageviews") and not wh.table_exists("pageviews_sample")
    assert wh.table_rows("pageviews") == 0
    assert wh.table_rows("pageviews_sample") is None
    described = wh.describe_table("pageviews")
    assert described is not None
    assert described.columns == tuple(
        dataclasses.replace(c, description="") for c in PAGEVIEW_COLUMNS
    )
    assert described.partition_field == "event_date"
    assert described.clustering == ("site", "page_path")
    assert described.require_partition_filter is True
    assert described.fingerprint() == spec.fingerprint()
    types = {
        r["column_name"]: (r["data_type"], r["is_nullable"])
        for r in wh.query(
            "SELECT column_name, data_type, is_nullable FROM duckdb_columns() WHERE table_name = ?",
            ["pageviews"],
        )
    }
    assert types["event_ts"] == ("TIMESTAMP WITH TIME ZONE", False)
    assert types["status"] == ("BIGINT", False)
    assert types["event_date"] == ("DATE", False)
    assert types["query_string"] == ("VARCHAR", True)


def test_ensure_table_is_cached_per_fingerprint(wh: DuckDBWarehouse) -> None:
    wh.ensure_table(pageviews_spec())
    wh.ensure_table(pageviews_spec())
    wh.ensure_table(pageviews_spec())
    assert wh.metadata_operations == {"pageviews": 2}

    stage_name = stage_spec("full", HOUR).name
    wh.ensure_table(stage_spec("full", HOUR))
    wh.ensure_table(stage_spec("full", HOUR))
    assert wh.metadata_operations == {"pageviews": 2, stage_name: 2}

    # A new instance (a new run) checks once, and finds the table as it should be.
    again = DuckDBWarehouse(wh.path)
    again.ensure_table(pageviews_spec())
    again.ensure_table(pageviews_spec())
    assert again.metadata_operations == {"pageviews": 1}


def test_ensure_tables_creates_the_missing_ones_together_and_checks_the_others(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    hours = [HOUR + dt.timedelta(hours=i) for i in range(3)]
    kept = stage(wh, tmp_path, hours[0], pageviews(hours[0], 3), "load1")  # exists, 3 rows
    later = DuckDBWarehouse(wh.path)  # a new run: nothing ensured yet
    try:
        specs = [stage_spec("full", h) for h in hours]
        later.ensure_tables([*specs, specs[1]])  # a spec repeated as is is ensured once

        names = [s.name for s in specs]
        assert later.ensured_tables() == [names[0], names[1], names[2]]
        # One read each; one create for each missing table; the existing one is only read.
        assert later.metadata_operations == {names[0]: 1, names[1]: 2, names[2]: 2}
        assert later.table_rows(kept) == 3
        for spec in specs[1:]:
            described = later.describe_table(spec.name)
            assert described is not None and described.fingerprint() == spec.fingerprint()
            assert later.table_rows(spec.name) == 0

        other = dataclasses.replace(specs[0], labels={**specs[0].labels, "role": "other"})
        with pytest.raises(ValueError, match="two different specs"):
            later.ensure_tables([specs[0], other])
    finally:
        later.close()


def test_ensure_tables_falls_back_to_one_by_one_when_a_table_appears_meanwhile(
    wh: DuckDBWarehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another client creates one of the tables between the read and the create: the batch
    # is rolled back whole, then each table is created on its own and the 409 one checked.
    hours = [HOUR + dt.timedelta(hours=i) for i in range(3)]
    raced = stage(wh, tmp_path, hours[1], pageviews(hours[1], 2), "load1")
    later = DuckDBWarehouse(wh.path)
    real_describe = later._describe_table
    reads: list[str] = []

    def describe_missing_first(table: str) -> TableSpec | None:
        reads.append(table)
        if table == raced and reads.count(table) == 1:
            later._count_metadata(table)
            return None  # read before the other client's create
        return real_describe(table)

    monkeypatch.setattr(later, "_describe_table", describe_missing_first)
    try:
        specs = [stage_spec("full", h) for h in hours]
        later.ensure_tables(specs)

        assert sorted(later.ensured_tables()) == sorted(s.name for s in specs)
        assert reads.count(raced) == 2  # read again after the 409, then checked
        assert later.table_rows(raced) == 2  # the other client's rows are kept
        for spec in (specs[0], specs[2]):
            assert later.table_rows(spec.name) == 0
    finally:
        later.close()


def test_stage_tables_have_the_published_layout(wh: DuckDBWarehouse) -> None:
    # BigQuery copies into a column-partitioned table only from sources partitioned and
    # clustered the same way (apache/airflow PR 42130, apache/beam issue 34571).
    for kind, published in (("full", pageviews_spec()), ("sample", pageviews_sample_spec())):
        wh.ensure_table(stage_spec(kind, HOUR))
        stage = wh.describe_table(stage_spec(kind, HOUR).name)
        assert stage is not None
        assert stage.columns == tuple(
            dataclasses.replace(c, description="") for c in published.columns
        )
        assert (stage.partition_field, stage.clustering) == ("event_date", published.clustering)
        assert (stage.expiration_days, stage.require_partition_filter) == (7, False)
        assert stage.labels == {"app": "bq_platform", "role": "stage"}


def test_ensure_table_adds_nullable_column_and_keeps_rows(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    table = stage(wh, tmp_path, HOUR, pageviews(HOUR, 3), "load1")
    spec = stage_spec("full", HOUR)
    wider = dataclasses.replace(
        spec, columns=spec.columns + (Column("country", "STRING", "NULLABLE"),)
    )

    wh.ensure_table(wider)

    assert wh.metadata_operations == {table: 4}  # read + create, then read + patch
    assert wh.table_rows(table) == 3
    assert wh.query(f"SELECT DISTINCT country FROM {table}") == [{"country": None}]
    described = wh.describe_table(table)
    assert described is not None and described.fingerprint() == wider.fingerprint()


def test_ensure_table_records_label_change(wh: DuckDBWarehouse) -> None:
    wh.ensure_table(pageviews_spec())
    relabelled = dataclasses.replace(pageviews_spec(), labels={"app": "bq_platform", "x": "y"})
    wh.ensure_table(relabelled)
    described = wh.describe_table("pageviews")
    assert described is not None and described.labels == {"app": "bq_platform", "x": "y"}


def _changed_type(spec: TableSpec) -> TableSpec:
    cols = tuple(
        Column(c.name, "STRING", c.mode) if c.name == "status" else c for c in spec.columns
    )
    return dataclasses.replace(spec, columns=cols)


def _new_required(spec: TableSpec) -> TableSpec:
    new = Column("country", "STRING", "REQUIRED")
    return dataclasses.replace(spec, columns=spec.columns + (new,))


def _removed(spec: TableSpec) -> TableSpec:
    return dataclasses.replace(spec, columns=tuple(c for c in spec.columns if c.name != "referrer"))


def _relaxed(spec: TableSpec) -> TableSpec:
    cols = tuple(
        Column(c.name, c.type, "NULLABLE") if c.name == "site" else c for c in spec.columns
    )
    return dataclasses.replace(spec, columns=cols)


def _repartitioned(spec: TableSpec) -> TableSpec:
    return dataclasses.replace(spec, partition_field="event_ts")


def _reordered(spec: TableSpec) -> TableSpec:
    # Columns are matched by position, as BigQuery does: same names in another order differ.
    cols = spec.columns
    return dataclasses.replace(spec, columns=(cols[1], cols[0], *cols[2:]))


@pytest.mark.parametrize(
    ("change", "column", "words"),
    [
        (_changed_type, "status", "the spec says status STRING"),
        (_new_required, "country", "only NULLABLE columns can be added"),
        (_removed, "referrer", "the spec says user_agent"),
        (_relaxed, "site", "the spec says site STRING NULLABLE"),
        (_repartitioned, "event_ts", "partitioning cannot change"),
        (_reordered, "event_ts", "column 1 is event_id STRING REQUIRED, the spec says event_ts"),
    ],
)
def test_ensure_table_refuses_incompatible_change(
    wh: DuckDBWarehouse, change: Any, column: str, words: str
) -> None:
    wh.ensure_table(pageviews_spec())
    with pytest.raises(SchemaMismatchError) as err:
        wh.ensure_table(change(pageviews_spec()))
    message = str(err.value)
    assert "table pageviews" in message and column in message and words in message
    described = wh.describe_table("pageviews")
    assert described is not None and described.fingerprint() == pageviews_spec().fingerprint()


def test_internal_table_names_are_reserved(wh: DuckDBWarehouse) -> None:
    for name in ("_bq_platform_jobs", "_bq_platform_tables"):
        with pytest.raises(ValueError, match="reserved"):
            wh.ensure_table(dataclasses.replace(pageviews_spec(), name=name))


def test_table_info_from_metadata(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    assert wh.table_info("pageviews") is None
    assert wh.partition_rows("pageviews", DAY1) == 0  # missing table: empty
    before = dt.datetime.now(UTC)
    table = stage(wh, tmp_path, HOUR, pageviews(HOUR, 3), "s1")

    info = wh.table_info(table)
    assert info is not None and (info.table, info.rows) == (table, 3)
    assert before <= info.created <= dt.datetime.now(UTC)
    assert wh.partition_rows(table, DAY1) == 3  # stage tables are partitioned too
    assert wh.partition_rows(table, DAY2) == 0
    day = wh.table_info(f"{table}$19950801")
    assert day is not None and (day.rows, day.created) == (3, info.created)

    wh.ensure_table(TableSpec("flat", PAGEVIEW_COLUMNS))
    with pytest.raises(RuleViolation, match="flat is not partitioned"):
        wh.partition_rows("flat", DAY1)
    # Not read from a Python variable of that name (DuckDB's replacement scans are off).
    assert wh.table_info("table") is None and wh.table_info("destination") is None


def test_creating_an_existing_table_is_a_409_and_changes_nothing(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    table = stage(wh, tmp_path, HOUR, pageviews(HOUR, 3), "s1")
    other = DuckDBWarehouse(tmp_path / "state" / "warehouse.duckdb")  # shares wh's file
    other._con, other._internal_ready = wh._con, True  # ... and its open connection
    with pytest.raises(TableExistsError, match=f"Already Exists: Table {table}"):
        other._create_table(stage_spec("full", HOUR))
    assert wh.table_rows(table) == 3


def test_a_new_table_replaces_the_layout_row_a_dropped_one_left(wh: DuckDBWarehouse) -> None:
    spec = TableSpec("flat", PAGEVIEW_COLUMNS, description="first")
    wh.ensure_table(spec)
    first = wh.table_info("flat")
    with wh._connect() as con:  # dropped outside the warehouse: its layout row stays
        con.execute('DROP TABLE "flat"')
    wh.forget_table("flat")
    time.sleep(0.01)
    wh.ensure_table(dataclasses.replace(spec, description="second"))

    again = wh.table_info("flat")
    assert first is not None and again is not None and again.created > first.created
    assert wh.describe_table("flat").description == "second"  # type: ignore[union-attr]
    (count,) = wh.query("SELECT count(*) AS n FROM _bq_platform_tables WHERE table_name = 'flat'")
    assert count["n"] == 1


# ----------------------------------------------------------------------- publish records


def test_reading_a_publish_record_reads_no_metadata_once_the_ledger_is_ensured(
    wh: DuckDBWarehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    table_info = wh.table_info
    monkeypatch.setattr(wh, "table_info", lambda t: reads.append(t) or table_info(t))
    assert wh.read_publish_record("pageviews", "19950801") is None
    assert reads == ["_bq_platform_published"]  # does the ledger exist yet?
    record = PublishRecord(
        "pageviews", "19950801", "job_g0", "f" * 64, 10, dt.datetime(2024, 1, 1, 12, tzinfo=UTC)
    )
    wh.write_publish_records([record])  # ensures the ledger
    reads.clear()
    assert wh.read_publish_record("pageviews", "19950801") == record
    assert reads == []


def test_publish_records_round_trip_and_replace(wh: DuckDBWarehouse) -> None:
    assert wh.read_publish_record("pageviews", "19950801") is None
    first = PublishRecord(
        "pageviews", "19950801", "job_g0", "f" * 64, 10, dt.datetime(2024, 1, 1, 12, tzinfo=UTC)
    )
    wh.write_publish_records([first])
    assert wh.read_publish_record("pageviews", "19950801") == first
    tz_plus2 = dt.timezone(dt.timedelta(hours=2))
    second = dataclasses.replace(
        first, job_id="job_g1", rows=11, published_at=dt.datetime(2024, 1, 2, 14, tzinfo=tz_plus2)
    )
    wh.write_publish_records([second])

    got = wh.read_publish_record("pageviews", "19950801")
    assert got == dataclasses.replace(second, published_at=dt.datetime(2024, 1, 2, 12, tzinfo=UTC))
    assert got is not None and got.published_at.tzinfo is UTC
    assert wh.read_publish_record("pageviews", "19950802") is None

    # Append-only, read back latest-wins: a late writer of an older record does not win.
    wh.write_publish_records([dataclasses.replace(first, job_id="job_late")])
    assert wh.read_publish_record("pageviews", "19950801") == got
    rows = wh.query("SELECT * FROM _bq_platform_published ORDER BY published_at, job_id")
    assert [r["job_id"] for r in rows] == ["job_g0", "job_late", "job_g1"]
    assert (
        list(rows[0])
        == [c.name for c in LEDGER_COLUMNS]
        == [
            "destination",
            "partition_key",
            "job_id",
            "fingerprint",
            "row_count",
            "published_at",
        ]
    )
    # The same time twice: the larger job ID wins, so every reader picks the same row.
    wh.write_publish_records([dataclasses.replace(second, job_id="job_g2")])
    latest = wh.read_publish_record("pageviews", "19950801")
    assert latest is not None and latest.job_id == "job_g2"
    with pytest.raises(ValueError, match="timezone-aware"):
        wh.write_publish_records([dataclasses.replace(first, published_at=dt.datetime(2024, 1, 1))])


# ----------------------------------------------------------------------- audit rows


def audit(hour: dt.datetime, site: str, lines: int, fingerprint: str = "fp1") -> dict[str, Any]:
    counts = SiteHourCounts(site=site, hour=hour, source_lines=lines, pageviews=lines)
    return audit_records([counts], fingerprint, "run-1")[0]


def test_replace_audit_rows_replaces_exactly_the_given_hours(wh: DuckDBWarehouse) -> None:
    h4, h5, h6 = (HOUR + dt.timedelta(hours=i) for i in range(3))
    wh.replace_audit_rows(
        [h4, h5], [audit(h4, "a.org", 1), audit(h4, "b.org", 2), audit(h5, "a.org", 3)]
    )
    wh.replace_audit_rows([h5, h6], [audit(h5, "b.org", 4, "fp2"), audit(h6, "a.org", 5, "fp2")])

    rows = wh.audit_rows(h4, h6 + dt.timedelta(hours=1))
    assert [(r["hour"], r["site"], r["source_lines"], r["fingerprint"]) for r in rows] == [
        (h4, "a.org", 1, "fp1"),
        (h4, "b.org", 2, "fp1"),
        (h5, "b.org", 4, "fp2"),
        (h6, "a.org", 5, "fp2"),
    ]
    assert all(r["hour"].tzinfo is UTC and r["event_date"] == DAY1 for r in rows)
    assert [r["site"] for r in wh.audit_rows(h5, h6)] == ["b.org"]
    assert wh.metadata_operations == {"pageviews_audit": 2}  # ensured once: read + create


def test_audit_rows_before_any_audit_is_empty(wh: DuckDBWarehouse) -> None:
    assert wh.audit_rows(HOUR, HOUR + dt.timedelta(hours=1)) == []


def test_replace_audit_rows_validates_before_touching_anything(wh: DuckDBWarehouse) -> None:
    wh.replace_audit_rows([HOUR], [audit(HOUR, "a.org", 1)])
    other = HOUR + dt.timedelta(hours=1)
    with pytest.raises(ValueError, match="not among the hours"):
        wh.replace_audit_rows([HOUR], [audit(HOUR, "a.org", 9), audit(other, "a.org", 9)])
    with pytest.raises(ValueError, match="unknown columns"):
        wh.replace_audit_rows([HOUR], [audit(HOUR, "a.org", 9) | {"sorce_lines": 1}])
    with pytest.raises(ValueError, match="timezone-aware"):
        wh.replace_audit_rows([HOUR.replace(tzinfo=None)], [])
    assert [r["source_lines"] for r in wh.audit_rows(HOUR, other)] == [1]


def test_replace_audit_rows_is_atomic(wh: DuckDBWarehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    wh.replace_audit_rows([HOUR], [audit(HOUR, "a.org", 1)])
    # Fail inside the transaction, after the DELETE: a NULL slips past validation.
    spec = audit_spec()
    broken = pa.Table.from_pylist(
        [audit(HOUR, "a.org", 2) | {"run_id": None}],
        schema=pa.schema([pa.field(c.name, ARROW[c.type]) for c in spec.columns]),
    )
    monkeypatch.setattr(duckdb_sql, "_audit_arrow", lambda *a: broken)

    with pytest.raises(Exception, match="NOT NULL"):
        wh.replace_audit_rows([HOUR], [audit(HOUR, "a.org", 2)])

    assert [r["source_lines"] for r in wh.audit_rows(HOUR, HOUR + dt.timedelta(hours=1))] == [1]


# ----------------------------------------------------------------------- reads, expiry


def test_query_takes_parameters_and_refuses_writes(wh: DuckDBWarehouse) -> None:
    ts = dt.datetime(2024, 5, 6, 7, 8, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    assert wh.query("SELECT ? AS n, CAST(? AS TIMESTAMPTZ) AS ts", [2, ts]) == [{"n": 2, "ts": ts}]
    assert wh.query("SELECT CAST(? AS TIMESTAMPTZ) AS ts", [ts])[0]["ts"].tzinfo is UTC
    for sql in ("DELETE FROM _bq_platform_jobs", "SELECT 1; SELECT 2", "DROP TABLE x"):
        with pytest.raises(ValueError, match="read-only"):
            wh.query(sql)
    with pytest.raises(WarehouseError):
        wh.query("SELECT * FROM no_such_table")


def test_drop_expired_tables(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    table = stage(wh, tmp_path, HOUR, pageviews(HOUR, 1), "s1")
    wh.ensure_table(pageviews_spec())
    now = dt.datetime.now(UTC)
    assert wh.drop_expired_tables(now) == []
    assert wh.drop_expired_tables(now + dt.timedelta(days=8)) == [table]
    assert not wh.table_exists(table) and wh.table_exists("pageviews")
    wh.ensure_table(stage_spec("full", HOUR))  # the cache forgot it: recreated
    assert wh.table_exists(table)


def test_memory_database_is_refused() -> None:
    with pytest.raises(ValueError, match="memory"):
        DuckDBWarehouse(":memory:")


def test_one_duckdb_thread_unless_asked(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    threads = "SELECT current_setting('threads') AS threads"
    assert wh.query(threads) == [{"threads": 1}]  # issue 9: small loads, 2-core machine
    other = DuckDBWarehouse(tmp_path / "other.duckdb", threads=2)
    try:
        assert other.query(threads) == [{"threads": 2}]
    finally:
        other.close()
    with pytest.raises(ValueError, match="threads"):
        DuckDBWarehouse(tmp_path / "x.duckdb", threads=0)


def test_duckdb_memory_is_bounded(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    """DuckDB would take 80% of the RAM; the run's driver process must stay flat (issue 9)."""
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
    """A day's copy appends after a partly filled row group; merging them again cost 0.26 s at
    the close of each daily run (issue 9). DuckDB's default (100 vacuum tasks) merges them."""
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


def _string_compressions(warehouse: DuckDBWarehouse) -> set[str]:
    """Compressions DuckDB chose for a checkpointed column of 20k distinct URL-like paths."""
    with warehouse._connect() as con:
        con.execute(
            "CREATE TABLE paths AS SELECT '/shuttle/missions/sts-' || i || '/mission-sts-' || i "
            "|| '.html' AS path FROM range(20000) t(i)"
        )
        con.execute("CHECKPOINT")
        rows = con.execute(
            "SELECT DISTINCT compression FROM pragma_storage_info('paths') "
            "WHERE segment_type = 'VARCHAR'"
        ).fetchall()
    return {r[0] for r in rows}


def test_strings_are_stored_without_fsst_unless_asked(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    """FSST cost ~20% of the stage loads' time (issue 9); ``""`` gives DuckDB every method."""
    assert "FSST" not in _string_compressions(wh)
    other = DuckDBWarehouse(tmp_path / "other.duckdb", disabled_compression="")
    try:
        assert "FSST" in _string_compressions(other)
    finally:
        other.close()
    with pytest.raises(ValueError, match="disabled_compression='nope'"):
        DuckDBWarehouse(tmp_path / "x.duckdb", disabled_compression="nope").table_rows("t")


# ----------------------------------------------------------------------- other processes

_HOLD_LOCK = textwrap.dedent(
    """
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
    """
)


def _hold_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_locked_file_times_out_with_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    DuckDBWarehouse(path).ensure_table(pageviews_spec())
    proc = _hold_lock(path, 30)
    try:
        started = time.monotonic()
        with pytest.raises(WarehouseError, match="another process") as err:
            DuckDBWarehouse(path, lock_timeout_s=0.5).table_rows("pageviews")
        assert time.monotonic() - started < 5
        assert "dagster dev" in str(err.value) and str(path) in str(err.value)
    finally:
        proc.kill()
        proc.wait()


def test_locked_file_is_retried_until_released(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    DuckDBWarehouse(path).ensure_table(pageviews_spec())
    proc = _hold_lock(path, 1.0)
    try:
        assert DuckDBWarehouse(path, lock_timeout_s=30).table_rows("pageviews") == 0
    finally:
        proc.wait(timeout=30)


_OTHER_ZONE = textwrap.dedent(
    """
    import datetime as dt, json, sys
    from bq_platform.lib.warehouse.duckdb import DuckDBWarehouse
    wh = DuckDBWarehouse(sys.argv[1])
    row = wh.query("SELECT min(event_ts) AS ts, CAST(min(event_ts) AS DATE) AS d FROM "
                   + sys.argv[2])[0]
    n = wh.partition_rows("pageviews", dt.date(1995, 8, 1))
    print(json.dumps({"ts": row["ts"].isoformat(), "d": row["d"].isoformat(), "n": n}))
    """
)


def test_results_are_utc_whatever_the_machine_time_zone(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    # 00:30 UTC on Aug 1 is still Jul 31 in New York: a session in local time would say so.
    midnight = dt.datetime(1995, 8, 1, 0, tzinfo=UTC)
    wh.ensure_table(pageviews_spec())
    table = stage(wh, tmp_path, midnight, pageviews(midnight + dt.timedelta(minutes=30), 2), "s1")
    assert wh.submit_job(CopyJob("c1", (table,), "pageviews$19950801")).succeeded
    wh.close()  # release the file: the reader below is another process
    env = os.environ | {"TZ": "America/New_York", "PYTHONPATH": str(Path(__file__).parents[3])}
    out = subprocess.run(
        [sys.executable, "-c", _OTHER_ZONE, str(wh.path), table],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == {"ts": "1995-08-01T00:30:00+00:00", "d": "1995-08-01", "n": 2}
