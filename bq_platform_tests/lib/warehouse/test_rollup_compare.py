"""The rollup comparison statement on DuckDB: keys that differ, keys only one side has, the
limit on examples, and names BigQuery accepts (the emulator run is
``integration/test_emulator_day.py``)."""

import datetime as dt
import re
from pathlib import Path

import duckdb
import pytest

from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.rollup_compare import EXAMPLES, comparison_sql
from bq_platform.lib.warehouse.schema import (
    DAILY_BY_PAGE_TABLE,
    DAILY_BY_SITE_TABLE,
    PAGEVIEWS_TABLE,
    ROLLUP_TABLES,
    pageviews_spec,
    rollup_spec,
)

DAY = dt.date(1995, 8, 1)
#: (site, page_path, visitor_id, traffic_class) of DAY; one more row on the next day.
ROWS = [
    ("a.org", "/a", "v1", "human"),
    ("a.org", "/a", "v1", "human"),
    ("a.org", "/a", "v7", "human"),
    ("a.org", "/b", "v2", "human"),
    ("a.org", "/c", "v3", "bot"),
    ("b.org", "/x", "v1", "suspected_bot"),
    ("c.org", "/y", "v9", "human"),
]
#: GoogleSQL's reserved keywords (cloud.google.com/bigquery/docs/reference/standard-sql/lexical,
#: "Reserved keywords"): not usable as unquoted names.
RESERVED = set(
    "ALL AND ANY ARRAY AS ASC ASSERT_ROWS_MODIFIED AT BETWEEN BY CASE CAST COLLATE CONTAINS "
    "CREATE CROSS CUBE CURRENT DEFAULT DEFINE DESC DISTINCT ELSE END ENUM ESCAPE EXCEPT EXCLUDE "
    "EXISTS EXTRACT FALSE FETCH FOLLOWING FOR FROM FULL GROUP GROUPING GROUPS HASH HAVING IF "
    "IGNORE IN INNER INTERSECT INTERVAL INTO IS JOIN LATERAL LEFT LIKE LIMIT LOOKUP MERGE NATURAL "
    "NEW NO NOT NULL NULLS OF ON OR ORDER OUTER OVER PARTITION PRECEDING PROTO QUALIFY RANGE "
    "RECURSIVE RESPECT RIGHT ROLLUP ROWS SELECT SET SOME STRUCT TABLESAMPLE THEN TO TREAT TRUE "
    "UNBOUNDED UNION UNNEST USING WHEN WHERE WINDOW WITH WITHIN".split()
)


def _warehouse(path: Path, pages, by_site, by_page) -> DuckDBWarehouse:
    """A warehouse file with ``pageviews`` and both rollups holding the given rows."""
    wh = DuckDBWarehouse(path)
    wh.ensure_tables([pageviews_spec(False), *(rollup_spec(t, False) for t in ROLLUP_TABLES)])
    wh.close()
    con = duckdb.connect(str(path))
    try:
        for i, (day, site, page, visitor, traffic) in enumerate(pages):
            con.execute(
                f"INSERT INTO {PAGEVIEWS_TABLE} (event_id, event_ts, event_date, site, "
                "visitor_id, page_path, http_method, status, traffic_class) "
                "VALUES (?, ?, ?, ?, ?, ?, 'GET', 200, ?)",
                [f"e{i}", dt.datetime.combine(day, dt.time(10)), day, site, visitor, page, traffic],
            )
        for table, rows in ((DAILY_BY_SITE_TABLE, by_site), (DAILY_BY_PAGE_TABLE, by_page)):
            for row in rows:
                con.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", list(row))
    finally:
        con.close()
    return DuckDBWarehouse(path)


def test_differing_and_one_sided_keys_are_counted_and_shown(tmp_path: Path) -> None:
    pages = [(DAY, *r) for r in ROWS] + [(DAY + dt.timedelta(days=1), "a.org", "/a", "v1", "human")]
    by_site = [
        (DAY, "a.org", 4, 1, 5),  # human_visitors wrong: 3
        (DAY, "b.org", 0, 1, 0),  # right
        (DAY, "d.org", 1, 0, 1),  # no published row; c.org has no rollup row
        (DAY + dt.timedelta(days=1), "a.org", 1, 0, 1),
    ]
    by_page = [(DAY, "a.org", "/a", 3, 2), (DAY, "a.org", "/b", 1, 1), (DAY, "c.org", "/y", 1, 1)]
    wh = _warehouse(tmp_path / "wh.duckdb", pages, by_site, by_page)
    try:
        site = wh.compare_rollup(DAILY_BY_SITE_TABLE, DAY, "human")
        assert site.keys_compared == 4
        assert site.differences == {"human_pageviews": 2, "bot_pageviews": 2, "human_visitors": 3}
        assert [e.key for e in site.examples] == [("a.org",), ("c.org",), ("d.org",)]
        a, c, d = site.examples
        assert (a.published["human_visitors"], a.rollup["human_visitors"]) == (3, 5)
        assert not a.differs("human_pageviews") and not a.differs("bot_pageviews")
        assert c.published == {"human_pageviews": 1, "bot_pageviews": 0, "human_visitors": 1}
        assert set(c.rollup.values()) == {None} and set(d.published.values()) == {None}

        page = wh.compare_rollup(DAILY_BY_PAGE_TABLE, DAY, "human")
        assert (page.keys_compared, page.examples) == (3, ())  # /c has only bots: no row
        assert page.differences == {"human_pageviews": 0, "human_visitors": 0}

        next_day = wh.compare_rollup(DAILY_BY_SITE_TABLE, DAY + dt.timedelta(days=1), "human")
        assert (next_day.keys_compared, next_day.examples) == (1, ())
        empty = wh.compare_rollup(DAILY_BY_SITE_TABLE, DAY + dt.timedelta(days=2), "human")
        assert (empty.keys_compared, sum(empty.differences.values()), empty.examples) == (0, 0, ())
    finally:
        wh.close()


def test_examples_are_the_first_differing_keys_by_key(tmp_path: Path) -> None:
    pages = [(DAY, "a.org", f"/p{i:03d}", "v1", "human") for i in range(EXAMPLES + 5)]
    wh = _warehouse(tmp_path / "wh.duckdb", pages, [], [])
    try:
        found = wh.compare_rollup(DAILY_BY_PAGE_TABLE, DAY, "human")
    finally:
        wh.close()
    assert found.keys_compared == EXAMPLES + 5
    assert found.differences == {"human_pageviews": EXAMPLES + 5, "human_visitors": EXAMPLES + 5}
    assert [e.key[1] for e in found.examples] == [f"/p{i:03d}" for i in range(EXAMPLES)]


@pytest.mark.parametrize("table", ROLLUP_TABLES)
def test_statement_names_no_reserved_keyword_and_no_join_on_true(table: str) -> None:
    sql = comparison_sql(table, lambda name: f"`p.d.{name}`", lambda name: f"@{name}")
    names = re.findall(r"\b(\w+) AS \(", sql) + re.findall(r"\bAS (\w+)", sql)
    assert names and not {n.upper() for n in names} & RESERVED, names
    # BigQuery runs an outer join only on an equality of fields from both sides.
    assert "ON TRUE" not in sql.upper()
    assert sql.count(" FULL OUTER JOIN ") == 1 and " LEFT JOIN " not in sql
