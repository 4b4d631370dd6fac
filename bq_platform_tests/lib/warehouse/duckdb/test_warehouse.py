"""The local DuckDB warehouse (:mod:`bq_platform.lib.warehouse.duckdb.warehouse`): its tables
and their metadata, expiry, the publish ledger, the audit rows and read queries. Elsewhere: its
session settings (``test_session.py``), its file opened by other processes (``test_open.py``),
its jobs (``test_jobs.py``, ``test_background.py``) and its enforcement of BigQuery's rules
(``test_rules.py``). Every test gets its own database file (the ``wh`` fixture of
``conftest.py``).
"""

import dataclasses
import datetime as dt
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from bq_platform.lib.core.accounting import SiteHourCounts, audit_records
from bq_platform.lib.warehouse.base import (
    PublishRecord,
    SchemaMismatchError,
    TableExistsError,
    Warehouse,
    WarehouseError,
)
from bq_platform.lib.warehouse.duckdb import warehouse as duckdb_warehouse
from bq_platform.lib.warehouse.duckdb.sql import DUCKDB_TYPES
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
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

# ----------------------------------------------------------------------- tables


def test_duckdb_types_cover_every_column_type() -> None:
    for column in PAGEVIEW_COLUMNS + AUDIT_COLUMNS_SPEC:
        assert column.type in DUCKDB_TYPES
    assert DUCKDB_TYPES["TIMESTAMP"] == "TIMESTAMP WITH TIME ZONE"
    assert DUCKDB_TYPES["INT64"] == "BIGINT"


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
    read = later._describe_tables
    reads: list[str] = []

    def describe_missing_first(tables: Sequence[str]) -> dict[str, TableSpec | None]:
        reads.extend(tables)
        found = read(tables)
        if reads.count(raced) == 1 and raced in tables:
            found[raced] = None  # read before the other client's create
        return found

    monkeypatch.setattr(later, "_describe_tables", describe_missing_first)
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


def test_batch_reads_count_a_metadata_read_per_table_and_survive_a_drop(
    wh: DuckDBWarehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = stage(wh, tmp_path, HOUR, pageviews(HOUR, 3), "s1")
    later = DuckDBWarehouse(wh.path)
    try:
        specs = later.table_specs([kept, "missing"])
        assert specs[kept] == wh.describe_table(kept) and specs["missing"] is None
        assert later.metadata_operations == {kept: 1, "missing": 1}  # as tables.get each
        with pytest.raises(ValueError, match="reserved"):
            later.table_specs(["_bq_platform_jobs"])
        # A table dropped between the existence read and the counts: each is read alone.
        real = later._count_tables

        def dropped_meanwhile(tables: Sequence[str]) -> dict[str, int | None]:
            monkeypatch.setattr(later, "_count_tables", real)
            raise duckdb.CatalogException(f"Table with name {kept} does not exist!")

        monkeypatch.setattr(later, "_count_tables", dropped_meanwhile)
        assert later.tables_rows([kept, "missing"]) == {kept: 3, "missing": None}
    finally:
        later.close()


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


# ----------------------------------------------------------------------- expiry


def test_drop_expired_tables(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    table = stage(wh, tmp_path, HOUR, pageviews(HOUR, 1), "s1")
    wh.ensure_table(pageviews_spec())
    now = dt.datetime.now(UTC)
    assert wh.drop_expired_tables(now) == []
    assert wh.drop_expired_tables(now + dt.timedelta(days=8)) == [table]
    assert not wh.table_exists(table) and wh.table_exists("pageviews")
    wh.ensure_table(stage_spec("full", HOUR))  # the cache forgot it: recreated
    assert wh.table_exists(table)


# ----------------------------------------------------------------------- publish records


def test_reading_a_publish_record_reads_no_metadata_even_before_the_ledger_exists(
    wh: DuckDBWarehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One statement per read: a missing ledger is DuckDB's catalog error, read as no record.
    reads: list[str] = []
    table_info = wh.table_info
    monkeypatch.setattr(wh, "table_info", lambda t: reads.append(t) or table_info(t))
    assert wh.table_exists("_bq_platform_published") is False
    reads.clear()
    assert wh.read_publish_record("pageviews", "19950801") is None
    record = PublishRecord(
        "pageviews", "19950801", "job_g0", "f" * 64, 10, dt.datetime(2024, 1, 1, 12, tzinfo=UTC)
    )
    wh.write_publish_records([record])  # creates the ledger
    assert wh.read_publish_record("pageviews", "19950801") == record
    assert reads == []
    fresh = DuckDBWarehouse(wh.path)  # nothing ensured: the next run's object
    try:
        assert fresh.read_publish_record("pageviews", "19950801") == record
        assert fresh.metadata_operations == {}
    finally:
        fresh.close()


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
    # The builds the gate compares with the manifests: one SELECT DISTINCT, as from the rows.
    builds = wh.audited_builds(h4, h6 + dt.timedelta(hours=1))
    assert builds == {(h4, "fp1"), (h5, "fp2"), (h6, "fp2")}
    assert builds == Warehouse.audited_builds(wh, h4, h6 + dt.timedelta(hours=1))
    assert all(hour.tzinfo is UTC for hour, _ in builds)
    assert wh.audited_builds(h5, h6) == {(h5, "fp2")}


def test_audit_rows_before_any_audit_is_empty(wh: DuckDBWarehouse) -> None:
    assert wh.audit_rows(HOUR, HOUR + dt.timedelta(hours=1)) == []
    assert wh.audited_builds(HOUR, HOUR + dt.timedelta(hours=1)) == set()


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
    monkeypatch.setattr(duckdb_warehouse, "_audit_arrow", lambda *a: broken)

    with pytest.raises(Exception, match="NOT NULL"):
        wh.replace_audit_rows([HOUR], [audit(HOUR, "a.org", 2)])

    assert [r["source_lines"] for r in wh.audit_rows(HOUR, HOUR + dt.timedelta(hours=1))] == [1]


# ----------------------------------------------------------------------- reads


def test_query_takes_parameters_and_refuses_writes(wh: DuckDBWarehouse) -> None:
    ts = dt.datetime(2024, 5, 6, 7, 8, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    assert wh.query("SELECT ? AS n, CAST(? AS TIMESTAMPTZ) AS ts", [2, ts]) == [{"n": 2, "ts": ts}]
    assert wh.query("SELECT CAST(? AS TIMESTAMPTZ) AS ts", [ts])[0]["ts"].tzinfo is UTC
    for sql in ("DELETE FROM _bq_platform_jobs", "SELECT 1; SELECT 2", "DROP TABLE x"):
        with pytest.raises(ValueError, match="read-only"):
            wh.query(sql)
    with pytest.raises(WarehouseError):
        wh.query("SELECT * FROM no_such_table")
