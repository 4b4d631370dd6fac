"""Browser, OS and device families: ua-parser with its builtin rules, without a cache."""

import pytest
import ua_parser

from bq_platform.lib.traffic.ua_families import (
    RESOLVERS,
    UNKNOWN_FAMILY,
    UserAgentFamilies,
    build_resolver,
    families_with,
    parse_families,
    resolver_name,
)
from bq_platform_tests.lib.traffic.modern_logs import BOTS, BROWSERS, distinct_user_agents

APPLEBOT = (
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_10_1) AppleWebKit/600.2.5 (KHTML, like Gecko) "
    "Version/8.0.2 Safari/600.2.5 (Applebot/0.1; +http://www.apple.com/go/applebot)"
)

# Outputs that ua-parser and uap-core document for these user agents.
DOCUMENTED = [
    # ua-parser's README, "Quick Start".
    (
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_4) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/41.0.2272.104 Safari/537.36",
        UserAgentFamilies("Chrome", "Mac OS X", "Mac"),
    ),
    # uap-core tests/test_ua.yaml, test_os.yaml and test_device.yaml.
    (
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        UserAgentFamilies("Googlebot", "Other", "Spider"),
    ),
    (
        "Mozilla/5.0 (Linux; Android 4.4.2; Nexus 5 Build/KOT49H) AppleWebKit/537.36 "
        "(KHTML, like Gecko) Chrome/35.0.1916.122 Mobile Safari/537.36",
        UserAgentFamilies("Chrome Mobile", "Android", "Nexus 5"),
    ),
    # ua-parser's guide, "Custom Global Parser": parse("foo") resolves no domain.
    ("foo", UserAgentFamilies(UNKNOWN_FAMILY, UNKNOWN_FAMILY, UNKNOWN_FAMILY)),
]


def library_families(user_agent: str) -> UserAgentFamilies:
    """ua-parser's own top-level ``parse`` (its default, cached parser), defaults applied."""
    result = ua_parser.parse(user_agent).with_defaults()
    return UserAgentFamilies(result.user_agent.family, result.os.family, result.device.family)


@pytest.mark.parametrize(("user_agent", "expected"), DOCUMENTED, ids=lambda v: str(v)[:40])
def test_documented_outputs(user_agent, expected):
    assert parse_families(user_agent) == expected
    assert families_with(build_resolver("basic"), user_agent) == expected


@pytest.mark.parametrize("user_agent", [None, "", "-"])
def test_no_user_agent_has_no_families(user_agent):
    assert parse_families(user_agent) is None


@pytest.mark.parametrize("user_agent", BOTS + BROWSERS)
def test_real_user_agents_parse_as_ua_parser_parses_them(user_agent):
    families = parse_families(user_agent)
    assert families is not None
    assert all(isinstance(family, str) and family for family in families)
    assert families == library_families(user_agent)


def test_the_fastest_resolver_is_used():
    # ua-parser-rs is pinned in pyproject.toml, so the regex resolver is available.
    assert resolver_name() == RESOLVERS[0] == "regex"


def test_every_distinct_log_user_agent_parses_as_ua_parser_parses_it():
    agents = distinct_user_agents()
    used = [parse_families(agent) for agent in agents]
    assert None not in used
    assert used == [library_families(agent) for agent in agents]


def test_resolvers_differ_on_a_real_long_user_agent():
    # "Applebot" lies past the 100 characters that uap-core's Spider rule ``^.{0,100}(bot|...)``
    # reads; the regex resolver rewrites the repetition as unbounded (uap-rust's rewrite_regex).
    # So the resolver is part of the classifier version.
    assert APPLEBOT in distinct_user_agents()
    assert APPLEBOT.index("Applebot") > 100
    assert parse_families(APPLEBOT).device_family == "Spider"
    assert families_with(build_resolver("basic"), APPLEBOT).device_family != "Spider"


def test_an_unknown_resolver_is_refused():
    with pytest.raises(ValueError, match="unknown ua-parser resolver 'fast'"):
        build_resolver("fast")
