"""The traffic classes in ``lake/pageview_files``' metadata: each hour's human and bot pages,
bot share and top bot reasons, and the step's totals over the range."""

import datetime as dt
import gzip

import dagster as dg

from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.reporting import STEP_TOTALS
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.traffic.crawlers import crawler_pattern, crawler_reason
from bq_platform.lib.traffic.heuristics import empty_user_agent_reason, robots_txt_reason
from bq_platform_tests.defs.conftest import SITE, Pipeline

HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (7, 8)]
CRAWLER = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
BROWSER = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:64.0) Gecko/20100101 Firefox/64.0"


def combined(hour: dt.datetime, client: str, path: str, agent: str, n: int) -> list[str]:
    stamp = hour.strftime("%d/%b/%Y:%H")
    return [
        f'{client} - - [{stamp}:{i:02d}:00 +0000] "GET {path} HTTP/1.1" 200 100 "-" "{agent}"'
        for i in range(n)
    ]


def hour_lines(hour: dt.datetime, crawler_pages: int) -> list[str]:
    """``crawler_pages`` pages of a listed crawler, 3 pages of a browser that fetched
    /robots.txt (a page itself), 1 page without a user agent and 4 human pages."""
    return [
        *combined(hour, "10.0.0.1", "/a.html", CRAWLER, crawler_pages),
        *combined(hour, "10.0.0.2", "/robots.txt", BROWSER, 1),
        *combined(hour, "10.0.0.2", "/b.html", BROWSER, 2),
        *combined(hour, "10.0.0.3", "/c.html", "-", 1),
        *combined(hour, "10.0.0.4", "/d.html", BROWSER, 4),
    ]


def hour_metadata(pipeline: Pipeline, hour: dt.datetime) -> dict:
    (record,) = pipeline.instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(["lake", "pageview_files"]), asset_partitions=[hour_label(hour)]
        ),
        limit=1,
    ).records
    metadata = record.asset_materialization.metadata  # type: ignore[union-attr]
    return {k: getattr(v, "value", v) for k, v in metadata.items()}


def test_each_hour_and_the_step_show_human_and_bot_pages_and_the_top_reasons(
    pipeline: Pipeline,
) -> None:
    file = pipeline.home / "modern.log.gz"
    lines = hour_lines(HOURS[0], 4) + hour_lines(HOURS[1], 7)
    file.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    land_file(pipeline.store, SITE, file)
    crawler = crawler_reason(crawler_pattern(CRAWLER))

    result = pipeline.definitions.resolve_job_def("pageviews_hourly_job").execute_in_process(
        instance=pipeline.instance,
        tags={
            "dagster/asset_partition_range_start": hour_label(HOURS[0]),
            "dagster/asset_partition_range_end": hour_label(HOURS[1]),
        },
    )

    assert result.success
    for hour, crawler_pages in zip(HOURS, (4, 7), strict=True):
        got = hour_metadata(pipeline, hour)
        bot = crawler_pages + 3 + 1
        assert (got["pageviews"], got["human_pageviews"], got["bot_pageviews"]) == (
            bot + 4,
            4,
            bot,
        )
        assert got["bot_share"] == round(bot / (bot + 4), 4)
        table = got["top_bot_reasons"].splitlines()
        assert table[0] == "| bot_reason | pages | share of bot pages |"
        # most pages first: the crawler, the robots.txt visitor, the line without agent
        assert [row.split(" | ")[:2] for row in table[2:]] == [
            [f"| `{crawler}`", str(crawler_pages)],
            [f"| `{robots_txt_reason()}`", "3"],
            [f"| `{empty_user_agent_reason()}`", "1"],
        ]
        assert "human_pageviews | bot_pageviews" in got["per_site_hour"]
        totals = got[STEP_TOTALS]
        assert (totals["pageviews"], totals["human_pageviews"], totals["bot_pageviews"]) == (
            27,
            8,
            19,
        )
        assert totals["bot_share"] == round(19 / 27, 4)
        assert totals["top_bot_reasons"] == [  # most pages first
            {"bot_reason": crawler, "pages": 11},
            {"bot_reason": robots_txt_reason(), "pages": 6},
            {"bot_reason": empty_user_agent_reason(), "pages": 2},
        ]
