"""The rollups' Spark aggregation, their build into content-addressed folders, and their
fingerprints."""

import datetime as dt

import pyarrow.parquet as pq
import pytest

from bq_platform.lib.core.job_ids import day_fingerprint, job_id, rollup_fingerprint
from bq_platform.lib.core.layout import rollup_prefix
from bq_platform.lib.daily_build.build import build_rollups, parquet_keys
from bq_platform.lib.daily_build.rollup_files import RollupInputs, read_rollup_files
from bq_platform.lib.daily_build.rollups import ROLLUP_VERSION, by_page, by_site
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.schema import (
    DAILY_BY_PAGE_TABLE,
    DAILY_BY_SITE_TABLE,
    ROLLUP_TABLES,
    rollup_spec,
)

DAY = dt.date(1995, 8, 1)
#: (site, page_path, visitor_id, traffic_class): visitor v1 sees /a twice and /b once as a
#: human; v2 is human on /a; v3 is a bot on /a; v4 a suspected bot; b.org has only bots.
ROWS = [
    ("a.org", "/a", "v1", "human"),
    ("a.org", "/a", "v1", "human"),
    ("a.org", "/b", "v1", "human"),
    ("a.org", "/a", "v2", "human"),
    ("a.org", "/a", "v3", "bot"),
    ("a.org", "/c", "v4", "suspected_bot"),
    ("a.org", "/c", "v4", "suspected_bot"),
    ("b.org", "/", "v1", "bot"),
]


def _pages(spark, rows=ROWS):
    return spark.createDataFrame(
        [(DAY, *row) for row in rows],
        "event_date date, site string, page_path string, visitor_id string, traffic_class string",
    )


def _reference_by_site(rows):
    """The rollup by site computed in plain Python."""
    out = {}
    for site in {r[0] for r in rows}:
        mine = [r for r in rows if r[0] == site]
        human = [r for r in mine if r[3] == "human"]
        out[site] = (len(human), len(mine) - len(human), len({r[2] for r in human}))
    return out


def test_by_site_counts_classes_and_distinct_human_visitors(spark):
    got = {
        r["site"]: (r["human_pageviews"], r["bot_pageviews"], r["human_visitors"])
        for r in by_site(_pages(spark)).collect()
    }
    assert got == _reference_by_site(ROWS)
    assert got["a.org"] == (4, 3, 2)
    assert got["b.org"] == (0, 1, 0)  # a site with only bots still has its row


def test_by_page_has_only_pages_with_human_rows(spark):
    got = {
        (r["site"], r["page_path"]): (r["human_pageviews"], r["human_visitors"])
        for r in by_page(_pages(spark)).collect()
    }
    assert got == {("a.org", "/a"): (3, 2), ("a.org", "/b"): (1, 1)}


@pytest.mark.parametrize("table", ROLLUP_TABLES)
def test_columns_are_the_tables(spark, table):
    frame = (by_site if table == DAILY_BY_SITE_TABLE else by_page)(_pages(spark))
    assert tuple(frame.columns) == rollup_spec(table).column_names


def _inputs(store, spark, rows, hour_fp="a" * 64) -> RollupInputs:
    """One hour's full file holding ``rows``, written by Spark as the hourly build does."""
    folder = "staging/pageviews/attempt=t/full/hour=1995-08-01T00"
    _pages(spark, rows).coalesce(1).write.mode("overwrite").parquet(store.uri(folder))
    files = tuple(parquet_keys(store, folder))
    assert files
    return RollupInputs(DAY, {"1995-08-01T00": hour_fp}, files, ROLLUP_VERSION)


def test_build_writes_each_table_once_per_content(spark, tmp_path):
    store = LocalObjectStore(tmp_path)
    inputs = _inputs(store, spark, ROWS)
    built = build_rollups(spark, store, inputs)
    site = built[DAILY_BY_SITE_TABLE]
    assert (site.rows, site.human_pageviews, site.bot_pageviews) == (2, 4, 4)
    page = built[DAILY_BY_PAGE_TABLE]
    assert (page.rows, page.human_pageviews, page.bot_pageviews) == (2, 4, 0)
    for files in built.values():
        prefix = rollup_prefix(files.table, DAY, inputs.fingerprint)
        assert all(key.startswith(prefix + "/") for key in files.files)
        table = pq.read_table([store.uri(k) for k in files.files][0])
        assert table.num_rows == files.rows
        # the load sends the table's schema: the file carries its modes
        modes = {c.name: c.mode for c in rollup_spec(files.table).columns}
        assert {f.name: f.nullable for f in table.schema} == {
            name: mode != "REQUIRED" for name, mode in modes.items()
        }
    assert read_rollup_files(store, inputs, ROLLUP_TABLES) == built

    def no_session():
        raise AssertionError("a built content must not start Spark again")

    assert build_rollups(no_session, store, inputs) == built


def test_unfinished_folder_is_replaced(spark, tmp_path):
    store = LocalObjectStore(tmp_path)
    inputs = _inputs(store, spark, ROWS)
    prefix = rollup_prefix(DAILY_BY_PAGE_TABLE, DAY, inputs.fingerprint)
    store.write_bytes(f"{prefix}/part-99999-left-over.parquet", b"not parquet")
    built = build_rollups(spark, store, inputs, tables=[DAILY_BY_PAGE_TABLE])
    assert f"{prefix}/part-99999-left-over.parquet" not in built[DAILY_BY_PAGE_TABLE].files
    assert built[DAILY_BY_PAGE_TABLE].rows == 2


def test_day_without_human_rows_gives_an_empty_page_rollup(spark, tmp_path):
    store = LocalObjectStore(tmp_path)
    inputs = _inputs(store, spark, [r for r in ROWS if r[3] != "human"])
    built = build_rollups(spark, store, inputs)
    assert built[DAILY_BY_PAGE_TABLE].rows == 0
    assert built[DAILY_BY_PAGE_TABLE].files  # one file with the schema: a load needs a URI
    assert built[DAILY_BY_SITE_TABLE].bot_pageviews == 4


def test_fingerprint_and_job_ids_follow_the_content():
    hours = {"1995-08-01T00": "a" * 64, "1995-08-01T01": "b" * 64}
    inputs = RollupInputs(DAY, hours, ("k",), ROLLUP_VERSION)
    same = RollupInputs(DAY, dict(reversed(hours.items())), ("other",), ROLLUP_VERSION)
    changed = RollupInputs(DAY, {**hours, "1995-08-01T01": "c" * 64}, ("k",), ROLLUP_VERSION)
    bumped = RollupInputs(DAY, hours, ("k",), ROLLUP_VERSION + "-next")
    assert inputs.day_fingerprint == day_fingerprint(hours)
    assert inputs.fingerprint == rollup_fingerprint(day_fingerprint(hours), ROLLUP_VERSION)
    assert inputs.fingerprint != inputs.day_fingerprint

    def load_id(i: RollupInputs) -> str:
        return job_id("load", DAILY_BY_SITE_TABLE, "19950801", i.fingerprint)

    assert load_id(same) == load_id(inputs)
    assert load_id(changed) != load_id(inputs)
    assert load_id(bumped) != load_id(inputs)
