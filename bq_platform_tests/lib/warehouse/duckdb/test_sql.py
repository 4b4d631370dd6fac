"""The local DuckDB warehouse's SQL (:mod:`bq_platform.lib.warehouse.duckdb.sql`): the publish
ledger, the audit rows and read queries. Every test gets its own database file (the ``wh``
fixture of ``conftest.py``).
"""

import dataclasses
import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from bq_platform.lib.core.accounting import SiteHourCounts, audit_records
from bq_platform.lib.warehouse.duckdb import sql as duckdb_sql
from bq_platform.lib.warehouse.base import (
    PublishRecord,
    Warehouse,
    WarehouseError,
)
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.ledger import LEDGER_COLUMNS
from bq_platform.lib.warehouse.schema import (
    audit_spec,
)
from bq_platform_tests.lib.warehouse.duckdb_rows import (
    ARROW,
    DAY1,
    HOUR,
    UTC,
)

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
