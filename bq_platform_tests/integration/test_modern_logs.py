"""End to end on the real modern Combined logs (``shared/data/modern_logs``, with user agents):
the published classification against an independent count from the raw lines.

The reference is computed from the files alone: each line parsed by the reference parser, a page
by :func:`~bq_platform.lib.core.pages.is_page`, a known robot by the crawler-user-agents
package's own ``is_crawler``. The pipeline's side is what ``pageviews`` holds after one
``PipelineRunner.run`` of every landed day.
"""

import collections
from collections.abc import Iterator

import crawleruseragents
import dagster as dg
import pytest

from bq_platform.cli.runner import PipelineRunner
from bq_platform.lib.core.pages import is_page
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.traffic.classes import BOT_CLASSES, HUMAN
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform_tests.lib.traffic.modern_logs import log_files, parsed_lines

Reference = collections.Counter[tuple[str, str]]


def reference_pages() -> tuple[Reference, Reference]:
    """Pages and pages from a listed user agent, per ``(site, UTC date)``, from the raw files."""
    pages: Reference = collections.Counter()
    listed: Reference = collections.Counter()
    for path in log_files():
        site = path.parent.name
        for line in parsed_lines(path):
            request = line.parsed_request
            if (
                line.reason is None
                and request
                and is_page(request.method, request.path, line.status)
            ):
                key = (site, line.timestamp.date().isoformat())
                pages[key] += 1
                if line.user_agent and crawleruseragents.is_crawler(line.user_agent):
                    listed[key] += 1
    return pages, listed


@pytest.fixture(scope="module")
def published(tmp_path_factory, spark) -> Iterator[DuckDBWarehouse]:
    """Every modern log landed into a fresh data folder and run once; the local warehouse."""
    home = tmp_path_factory.mktemp("modern") / "bqp"
    with pytest.MonkeyPatch.context() as patch, dg.instance_for_test() as instance:
        patch.setenv("BQ_PLATFORM_HOME", str(home))
        patch.delenv("BQ_PLATFORM_ENV", raising=False)
        store = LocalObjectStore(home / "lake")
        for path in log_files():
            land_file(store, path.parent.name, path)
        runner = PipelineRunner.from_environment(
            "local", echo=lambda _line: None, instance=instance
        )
        assert runner.run()
        checks = [c for day_checks in runner.check_results.values() for c in day_checks]
        assert checks and all(passed for _, _, passed in checks), [c for c in checks if not c[2]]
        warehouse = DuckDBWarehouse(home / "warehouse.duckdb")
        try:
            yield warehouse
        finally:
            warehouse.close()


def by_day(warehouse: DuckDBWarehouse, where: str = "TRUE") -> Reference:
    rows = warehouse.query(
        "SELECT site, CAST(event_date AS VARCHAR) AS day, count(*) AS n FROM pageviews "
        f"WHERE {where} GROUP BY 1, 2"
    )
    return collections.Counter({(r["site"], r["day"]): r["n"] for r in rows})


def test_every_page_is_published_once_with_a_class(published):
    pages, _ = reference_pages()

    assert by_day(published) == pages
    classes = {
        r["traffic_class"] for r in published.query("SELECT DISTINCT traffic_class FROM pageviews")
    }
    assert classes <= {HUMAN, *BOT_CLASSES}
    assert by_day(published, "traffic_class IS NULL") == collections.Counter()


def test_no_page_from_a_listed_user_agent_is_human(published):
    _, listed = reference_pages()
    rows = published.query("SELECT site, event_date, user_agent, traffic_class FROM pageviews")

    human_but_listed = [
        r
        for r in rows
        if r["traffic_class"] == HUMAN
        and r["user_agent"]
        and crawleruseragents.is_crawler(r["user_agent"])
    ]
    assert human_but_listed == []
    # Every listed page is published as a robot (bot for the list, suspected_bot never hides it).
    assert by_day(published, "traffic_class = 'bot'") == listed
    assert sum(listed.values()) > 0


def test_human_rows_carry_browser_and_os(published):
    (row,) = published.query(
        "SELECT count(*) AS humans, count(browser_family) AS browsers, count(os_family) AS os, "
        "count(device_family) AS devices, count(user_agent) AS agents "
        "FROM pageviews WHERE traffic_class = 'human'"
    )

    assert row["humans"] > 0
    # Families are NULL only where the line has no user agent.
    assert row["browsers"] == row["os"] == row["devices"] == row["agents"]
    assert row["agents"] >= 0.95 * row["humans"]


def test_rollups_equal_the_published_rows(published):
    by_site = published.query(
        "SELECT site, event_date, human_pageviews, bot_pageviews, human_visitors "
        "FROM pageviews_daily_by_site ORDER BY 1, 2"
    )
    from_rows = published.query(
        "SELECT site, event_date, count_if(traffic_class = 'human') AS human_pageviews, "
        "count_if(traffic_class <> 'human') AS bot_pageviews, "
        "count(DISTINCT visitor_id) FILTER (WHERE traffic_class = 'human') AS human_visitors "
        "FROM pageviews GROUP BY 1, 2 ORDER BY 1, 2"
    )
    by_page = published.query(
        "SELECT site, event_date, page_path, human_pageviews, human_visitors "
        "FROM pageviews_daily_by_page ORDER BY 1, 2, 3"
    )
    pages_from_rows = published.query(
        "SELECT site, event_date, page_path, count(*) AS human_pageviews, "
        "count(DISTINCT visitor_id) AS human_visitors FROM pageviews "
        "WHERE traffic_class = 'human' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    )

    assert by_site == from_rows
    assert {r["site"] for r in by_site} == {p.parent.name for p in log_files()}
    assert by_page == pages_from_rows
    assert sum(r["human_pageviews"] for r in by_page) == sum(r["human_pageviews"] for r in by_site)
