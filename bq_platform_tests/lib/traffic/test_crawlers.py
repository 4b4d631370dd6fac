"""Known robots: the pinned crawler-user-agents list, matched as the package itself matches."""

import re

import crawleruseragents
import pytest

from bq_platform.lib.core.pages import is_page
from bq_platform.lib.traffic.crawlers import (
    REASON_PREFIX,
    crawler_pattern,
    crawler_patterns,
    crawler_reason,
)
from bq_platform_tests.lib.traffic.modern_logs import (
    BOTS,
    BROWSERS,
    GOOGLEBOT,
    distinct_user_agents,
    log_files,
    parsed_lines,
)

PATTERNS = crawler_patterns()
_COMPILED = [(pattern, re.compile(pattern)) for pattern in PATTERNS]


def first_matching_pattern(user_agent: str) -> str | None:
    """Reference: the first entry, in list order, whose pattern ``re.search``-es the user agent
    (what ``crawleruseragents.matching_crawlers(user_agent)[0]`` names), one pattern at a time."""
    return next((pattern for pattern, regex in _COMPILED if regex.search(user_agent)), None)


def package_first_pattern(user_agent: str) -> str | None:
    """The package's own answer: the pattern of the first index ``matching_crawlers`` returns."""
    indices = crawleruseragents.matching_crawlers(user_agent)
    return crawleruseragents.CRAWLER_USER_AGENTS_DATA[indices[0]]["pattern"] if indices else None


def test_named_user_agents_are_in_the_logs():
    assert set(BOTS + BROWSERS) <= set(distinct_user_agents())


def test_patterns_are_the_installed_list_in_its_order():
    assert PATTERNS == tuple(e["pattern"] for e in crawleruseragents.CRAWLER_USER_AGENTS_DATA)
    assert len(PATTERNS) > 1000


@pytest.mark.parametrize("user_agent", BOTS)
def test_real_robots_match_the_entry_the_package_names(user_agent):
    pattern = crawler_pattern(user_agent)
    assert pattern is not None
    assert pattern == package_first_pattern(user_agent) == first_matching_pattern(user_agent)
    assert crawler_reason(pattern) == REASON_PREFIX + pattern


def test_googlebot_reason_names_the_entry_listing_it():
    # The list's own entry for Googlebot gives this exact user agent among its instances.
    pattern = crawler_pattern(GOOGLEBOT)
    entry = next(e for e in crawleruseragents.CRAWLER_USER_AGENTS_DATA if e["pattern"] == pattern)
    assert GOOGLEBOT in entry["instances"]
    assert crawler_reason(pattern) == "crawler-user-agents:Googlebot\\/"


@pytest.mark.parametrize("user_agent", BROWSERS)
def test_real_browsers_match_nothing(user_agent):
    assert crawler_pattern(user_agent) is None
    assert not crawleruseragents.is_crawler(user_agent)


@pytest.mark.parametrize("user_agent", [None, "", "-"])
def test_no_user_agent_matches_nothing(user_agent):
    assert crawler_pattern(user_agent) is None


def test_matching_is_case_sensitive_as_the_package():
    # The package's test_harness.py: "test googlebot/2.0 test" is no crawler by default.
    assert not crawleruseragents.is_crawler("test googlebot/2.0 test")
    assert crawler_pattern("test googlebot/2.0 test") is None
    assert crawler_pattern("test Googlebot/2.0 test") == package_first_pattern(
        "test Googlebot/2.0 test"
    )


def test_every_distinct_log_user_agent_agrees_with_the_reference():
    agents = distinct_user_agents()
    assert [crawler_pattern(a) for a in agents] == [first_matching_pattern(a) for a in agents]
    assert [crawler_pattern(a) is not None for a in agents] == [
        crawleruseragents.is_crawler(a) for a in agents
    ]


def test_every_instance_of_the_list_is_matched_by_its_first_entry():
    instances = sorted(
        {i for e in crawleruseragents.CRAWLER_USER_AGENTS_DATA for i in e["instances"]}
    )
    found = [crawler_pattern(i) for i in instances]
    assert None not in found
    assert found == [first_matching_pattern(i) for i in instances]


def test_a_user_agent_matched_by_two_entries_gets_the_earlier():
    # Every instance listed under one entry that an earlier entry also matches.
    shadowed = [
        (instance, entry["pattern"])
        for index, entry in enumerate(crawleruseragents.CRAWLER_USER_AGENTS_DATA)
        for instance in entry["instances"]
        if any(regex.search(instance) for _, regex in _COMPILED[:index])
    ]
    assert shadowed, "the list has no instance matched by two entries any more"
    for instance, own in shadowed:
        assert crawler_pattern(instance) == package_first_pattern(instance) != own


# shared/data/README.md, "Modern Combined logs": pages by the AWStats rule, and of them those
# whose user agent crawler-user-agents 1.67.0 lists, counted independently of this code.
README_PAGES = {"zanbil.ir": (8_100, 3_278), "adver.tools": (224, 57)}


def test_known_crawler_pages_of_the_modern_logs_match_the_readme():
    counted = {}
    for path in log_files():
        pages = crawlers = 0
        for line in parsed_lines(path):
            request = line.parsed_request if line.reason is None else None
            if request and is_page(request.method, request.path, line.status):
                pages += 1
                crawlers += crawler_pattern(line.user_agent) is not None
        counted[path.parent.name] = (pages, crawlers)
    assert counted == README_PAGES
