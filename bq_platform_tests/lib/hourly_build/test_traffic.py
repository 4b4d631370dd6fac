"""The traffic classification of a build's pages, on real lines: an hour of the modern zanbil.ir
Combined log (user agents, many of them crawlers) with a few lines written after it, and an
hour of the 1995 NASA log (Common Log Format, no user agent), built once.

Expectations are computed independently in Python from the reference parser
(:func:`bq_platform.lib.core.logformat.parse_line`), the page rule and the traffic library.
"""

import collections
import dataclasses
import datetime as dt
import gzip
import re

import pytest

from bq_platform.lib.core import logformat as lf
from bq_platform.lib.core.accounting import SiteHourCounts
from bq_platform.lib.core.pages import is_page
from bq_platform.lib.core.pseudonymize import visitor_id
from bq_platform.lib.hourly_build import traffic
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.traffic.classes import BOT, HUMAN, SUSPECTED_BOT
from bq_platform.lib.traffic.crawlers import crawler_pattern, crawler_reason
from bq_platform.lib.traffic.heuristics import (
    empty_user_agent_reason,
    page_rate_reason,
    robots_txt_reason,
)
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.traffic.ua_families import parse_families
from bq_platform.lib.traffic.user_agent import has_user_agent
from bq_platform.lib.warehouse.schema import PAGEVIEW_COLUMNS, TRAFFIC_COLUMNS
from bq_platform_tests.lib.build_inputs import H_NASA_1, KEY, NASA, land, real_lines
from bq_platform_tests.lib.built_slice import read_parquet
from bq_platform_tests.lib.traffic.modern_logs import MODERN_LOGS

SHOP = "zanbil.ir"
#: Modern lines landed (the first of the busiest UTC hour): enough for crawlers, browsers
#: and a visitor over the page-rate threshold below.
SHOP_LINES = 1500
#: A low page-rate threshold, so that the slice has visitors above it.
MAX_PAGES = 25
BROWSER = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:64.0) Gecko/20100101 Firefox/64.0 test-robots"
)


def shop_hour() -> tuple[dt.datetime, list[bytes]]:
    """The busiest UTC hour of the zanbil.ir log and its first :data:`SHOP_LINES` lines."""
    (path,) = (MODERN_LOGS / SHOP).glob("*.log.gz")
    by_hour: dict[dt.datetime, list[bytes]] = collections.defaultdict(list)
    for raw in gzip.decompress(path.read_bytes()).split(b"\n"):
        ts = lf.parse_clf_timestamp(raw.decode("utf-8", errors="replace")) if raw else None
        if ts is not None:
            by_hour[ts.astimezone(dt.UTC).replace(minute=0, second=0)].append(raw)
    hour = max(by_hour, key=lambda h: len(by_hour[h]))
    return hour, by_hour[hour][:SHOP_LINES]


def written_lines(hour: dt.datetime) -> list[bytes]:
    """Lines in ``hour``: a browser that fetches /robots.txt and a page, and a page without a
    user agent ('-' and empty)."""
    stamp = hour.strftime("%d/%b/%Y:%H:%M:%S +0000")
    return [
        f'10.9.9.1 - - [{stamp}] "GET /robots.txt HTTP/1.1" 200 10 "-" "{BROWSER}"'.encode(),
        f'10.9.9.1 - - [{stamp}] "GET /about HTTP/1.1" 200 100 "-" "{BROWSER}"'.encode(),
        f'10.9.9.2 - - [{stamp}] "GET /contact HTTP/1.1" 200 100 "-" "-"'.encode(),
        f'10.9.9.3 - - [{stamp}] "GET /help HTTP/1.1" 200 100 "-" ""'.encode(),
    ]


@dataclasses.dataclass
class Slice:
    rows: list[dict]
    lines: list[bytes]
    clf_lines: list[bytes]
    classified_agents: list[str]
    counts: list[SiteHourCounts]


@pytest.fixture(scope="module")
def built(spark, access_logs, tmp_path_factory) -> Slice:
    hour, lines = shop_hour()
    lines = lines + written_lines(hour)
    clf_lines = real_lines(access_logs)[(NASA, H_NASA_1)][:400]
    store = LocalObjectStore(tmp_path_factory.mktemp("lake"))
    land(store, SHOP, hour, lines)
    land(store, NASA, H_NASA_1, clf_lines)
    calls: list[str] = []
    with pytest.MonkeyPatch.context() as patch:

        def counting(agent: str | None):
            calls.append(agent)
            return parse_families(agent)

        patch.setattr(traffic, "parse_families", counting)
        manifests = build_hours(
            spark,
            store,
            [H_NASA_1, hour],
            attempt_id="attempt-1",
            visitor_key=KEY,
            thresholds=ClassificationThresholds(max_pages_per_visitor_hour=MAX_PAGES),
        )
    keys = [k for m in manifests for k in m.full_files]
    counts = [c for m in manifests for c in m.counts]
    return Slice(read_parquet(store, keys).to_pylist(), lines, clf_lines, calls, counts)


def reference(lines: list[bytes]) -> collections.Counter:
    """Every page as ``((visitor_id, path, UTC time, user agent), (class, reason))``, counted,
    in Python."""
    texts = [raw.decode("utf-8", errors="replace") for raw in lines]
    parsed = [lf.parse_line(text) for text in texts]
    # Combined: a quoted referrer follows the status and bytes (Common stops at the bytes).
    combined = [re.search(r'" \d{3} (\d+|-) "', text) is not None for text in texts]
    pages = collections.Counter()
    robots = set()
    for p in parsed:
        if p.reason is None and p.parsed_request is not None:
            if p.parsed_request.path == "/robots.txt":
                robots.add(p.host)
            if is_page(p.parsed_request.method, p.parsed_request.path, p.status):
                pages[p.host] += 1
    out: collections.Counter = collections.Counter()
    for p, has_field in zip(parsed, combined, strict=True):
        request = p.parsed_request
        if not (p.reason is None and request and is_page(request.method, request.path, p.status)):
            continue
        agent = p.user_agent if has_user_agent(p.user_agent) else None
        pattern = crawler_pattern(agent)
        if pattern is not None:
            want = (BOT, crawler_reason(pattern))
        elif p.host in robots:
            want = (SUSPECTED_BOT, robots_txt_reason())
        elif pages[p.host] > MAX_PAGES:
            want = (SUSPECTED_BOT, page_rate_reason(MAX_PAGES))
        elif has_field and agent is None:
            want = (SUSPECTED_BOT, empty_user_agent_reason())
        else:
            want = (HUMAN, None)
        key = (visitor_id(KEY, p.host), request.path, p.timestamp.astimezone(dt.UTC), agent)
        out[(key, want)] += 1
    return out


def test_traffic_columns_are_the_last_of_the_table(built) -> None:
    assert PAGEVIEW_COLUMNS[-len(TRAFFIC_COLUMNS) :] == TRAFFIC_COLUMNS
    assert list(built.rows[0])[-len(TRAFFIC_COLUMNS) :] == [c.name for c in TRAFFIC_COLUMNS]


def test_every_page_is_classified_as_the_reference_says(built) -> None:
    want = reference(built.lines + built.clf_lines)
    got = collections.Counter(
        (
            (row["visitor_id"], row["page_path"], row["event_ts"], row["user_agent"]),
            (row["traffic_class"], row["bot_reason"]),
        )
        for row in built.rows
    )
    assert got == want
    classes = {want_class for (_, (want_class, _)) in want}
    reasons = {reason for (_, (_, reason)) in want}
    assert classes == {HUMAN, BOT, SUSPECTED_BOT}
    assert page_rate_reason(MAX_PAGES) in reasons  # the slice exercises every heuristic


def test_a_listed_user_agent_is_never_human(built) -> None:
    listed = [r for r in built.rows if crawler_pattern(r["user_agent"]) is not None]
    assert listed
    assert {r["traffic_class"] for r in listed} == {BOT}
    assert all(r["bot_reason"] == crawler_reason(crawler_pattern(r["user_agent"])) for r in listed)


def test_families_are_filled_exactly_where_a_user_agent_exists(built) -> None:
    for row in built.rows:
        families = (row["browser_family"], row["os_family"], row["device_family"])
        if row["user_agent"] is None:
            assert families == (None, None, None)
        else:
            assert tuple(parse_families(row["user_agent"])) == families


def test_common_log_format_pages_are_classified_by_heuristics_alone(built) -> None:
    clf = [r for r in built.rows if r["site"] == NASA]
    assert clf
    assert all(r["user_agent"] is None and r["browser_family"] is None for r in clf)
    assert {r["traffic_class"] for r in clf} <= {HUMAN, SUSPECTED_BOT}
    assert empty_user_agent_reason() not in {r["bot_reason"] for r in clf}


def test_written_lines_get_their_heuristic(built) -> None:
    by_path = {r["page_path"]: r for r in built.rows if r["site"] == SHOP}
    assert by_path["/about"]["bot_reason"] == robots_txt_reason()
    assert by_path["/about"]["browser_family"] == "Firefox"
    for path in ("/contact", "/help"):
        assert (by_path[path]["traffic_class"], by_path[path]["bot_reason"]) == (
            SUSPECTED_BOT,
            empty_user_agent_reason(),
        )


def test_user_agents_are_parsed_once_per_distinct_user_agent(built) -> None:
    page_agents = {r["user_agent"] for r in built.rows if r["user_agent"] is not None}
    assert sorted(built.classified_agents) == sorted(page_agents)


def test_the_manifests_count_human_and_bot_pages_per_site(built) -> None:
    for c in built.counts:
        rows = [
            r
            for r in built.rows
            if r["site"] == c.site and r["event_ts"].replace(minute=0, second=0) == c.hour
        ]
        human = sum(r["traffic_class"] == HUMAN for r in rows)
        assert (c.pageviews, c.human_pageviews, c.bot_pageviews) == (
            len(rows),
            human,
            len(rows) - human,
        )
        assert c.classes_balanced
    assert {c.site for c in built.counts if c.bot_pageviews} == {SHOP}


def test_the_manifests_count_bot_pages_per_reason(built) -> None:
    """Per site-hour, the bot pages per ``bot_reason`` are those of the reference, and sum to
    the bot pages; a site-hour without bot pages has none."""
    expected = {SHOP: reference(built.lines), NASA: reference(built.clf_lines)}
    checked = 0
    for c in built.counts:
        assert sum(c.bot_reasons.values()) == c.bot_pageviews
        if not c.pageviews:
            assert c.bot_reasons == {}
            continue
        want: collections.Counter = collections.Counter()
        for (_, (traffic_class, reason)), n in expected[c.site].items():
            if traffic_class != HUMAN:
                want[reason] += n
        assert dict(c.bot_reasons) == dict(want), c.site
        checked += 1
    assert checked == 2
    (shop,) = [c for c in built.counts if c.site == SHOP and c.pageviews]
    assert len(shop.bot_reasons) > 3  # crawler entries and every heuristic
    assert SiteHourCounts.from_json(shop.to_json()).bot_reasons == shop.bot_reasons
