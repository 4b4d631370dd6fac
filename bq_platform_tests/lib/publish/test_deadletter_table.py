"""The dead-letter table on the DuckDB warehouse, from a real Spark build of real log lines.

Checks the rows against the landed lines and the Python reference parser, that only the current
attempt's files count, that an unchanged day submits nothing, and that a fixed input replaces
the day partition (issue 7, "Dead letters for operators").
"""

import datetime as dt

import duckdb
import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core import logformat as lf
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.publish.deadletter_table import (
    built_hours_of,
    deadletter_load_plan,
    load_day_deadletters,
)
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.schema import DEADLETTERS_TABLE
from bq_platform_tests.lib.build_inputs import EPA, KEY, NASA, ODD, land, real_lines, utc

H1, H2, H_EPA = utc(1995, 8, 1, 4), utc(1995, 8, 1, 5), utc(1995, 8, 30, 3)
DAY, DAY_EPA = H1.date(), H_EPA.date()


def rows_of(path, day: dt.date) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as con:
        con.execute("SET TimeZone = 'UTC'")
        return con.execute(
            f"SELECT site, delivery_hour, delivery_date, data_key, line_no, reason, raw "
            f"FROM {DEADLETTERS_TABLE} WHERE delivery_date = ? ORDER BY data_key, line_no",
            [day],
        ).fetchall()


def load(path, store: LocalObjectStore, day: dt.date, run_id: str = "r1"):
    warehouse = DuckDBWarehouse(str(path))
    try:
        return load_day_deadletters(warehouse, store, day, asset=DEADLETTERS_TABLE, run_id=run_id)
    finally:
        warehouse.close()


@pytest.fixture
def lake(spark, access_logs, tmp_path):
    """Two NASA hours of 1995-08-01 (one with odd lines) and one EPA hour, built once."""
    store = LocalObjectStore(tmp_path / "lake")
    by_hour = real_lines(access_logs)
    bad = land(store, NASA, H1, by_hour[(NASA, H1)][:60] + ODD)
    land(store, NASA, H2, by_hour[(NASA, H2)][:60])
    land(store, EPA, H_EPA, by_hour[(EPA, H_EPA)][:60] + [b"not a log line"])
    build_hours(spark, store, [H1, H2, H_EPA], attempt_id="a1", visitor_key=KEY)
    return store, bad, by_hour


def test_day_partition_holds_every_dead_letter_with_reason_and_raw(lake, tmp_path) -> None:
    store, bad, _ = lake
    path = tmp_path / "wh.duckdb"
    result = load(path, store, DAY)
    rows = rows_of(path, DAY)
    assert result.outcome.action == "submitted"
    assert result.hours == 2 and result.files >= 2  # H2 has no dead letters: one empty file
    assert result.matches and result.partition_rows == len(rows) == result.expected_rows
    # each odd line is there once, with the reason the Python reference parser gives, and a
    # well-formed line of the hour is not a dead letter
    landed = {r[4]: r for r in rows if r[3] == bad.data_key}
    for line_no, raw in enumerate(ODD, start=61):
        text = raw.decode("utf-8", errors="replace")
        parsed = lf.parse_line(text)
        if parsed.reason is None and parsed.timestamp.replace(minute=0, second=0) == H1:
            assert line_no not in landed
            continue
        expected = parsed.reason or lf.REASON_OUT_OF_WINDOW
        assert landed.pop(line_no) == (NASA, H1, DAY, bad.data_key, line_no, expected, text)
    assert landed == {}  # the 60 real lines of the hour are all well-formed
    assert sum(result.rejected_by_reason.values()) + result.out_of_window == result.expected_rows
    assert rows_of(path, DAY_EPA) == []  # another day is its own partition
    epa = load(path, store, DAY_EPA)
    assert [r[5:] for r in rows_of(path, DAY_EPA)] == [("malformed", "not a log line")]
    assert epa.matches and len(rows_of(path, DAY)) == result.partition_rows


def test_unchanged_day_submits_nothing_and_other_attempts_never_count(
    lake, spark, tmp_path
) -> None:
    store, _, _ = lake
    path = tmp_path / "wh.duckdb"
    first = load(path, store, DAY)
    assert load(path, store, DAY).outcome.action == "skipped"
    # a second build of the same content (a crash, --force) leaves a second set of files
    build_hours(spark, store, [H1, H2], attempt_id="a2", visitor_key=KEY)
    again = load(path, store, DAY, run_id="r2")
    assert again.outcome.action == "skipped" and again.outcome.job_id == first.outcome.job_id
    assert again.partition_rows == first.expected_rows
    dead_files = store.list_keys(layout.DEADLETTER_PREFIX)
    assert any("attempt=a1/" in k for k in dead_files) and any(
        "attempt=a2/" in k for k in dead_files
    )
    # the job names only the files of the attempts the manifests name
    plan = deadletter_load_plan(
        store, DAY, built_hours_of(store, DAY), asset=DEADLETTERS_TABLE, run_id="x"
    )
    uris = plan.make_job(0).source_uris
    assert uris and all("attempt=a2/" in u for u in uris)


def test_fixed_input_replaces_the_day_partition(lake, spark, tmp_path) -> None:
    store, bad, by_hour = lake
    path = tmp_path / "wh.duckdb"
    before = load(path, store, DAY)
    assert before.expected_rows >= len(ODD) - 1
    # the producer re-delivers the hour without the odd lines
    store.delete_prefix(layout.landing_hour_prefix(NASA, H1))
    land(store, NASA, H1, by_hour[(NASA, H1)][:60])
    build_hours(spark, store, [H1], attempt_id="a3", visitor_key=KEY)
    after = load(path, store, DAY, run_id="r3")
    assert after.outcome.action == "submitted" and after.outcome.job_id != before.outcome.job_id
    rows = rows_of(path, DAY)
    assert after.matches and len(rows) == after.expected_rows < before.expected_rows
    assert not [r for r in rows if r[3] == bad.data_key]


def test_a_day_without_built_hours_is_refused(tmp_path) -> None:
    store = LocalObjectStore(tmp_path / "lake")
    with pytest.raises(ValueError, match="no hour of 1995-08-01 is built"):
        load(tmp_path / "wh.duckdb", store, DAY)
