"""The real modern Combined logs of ``shared/data/modern_logs`` (its README gives the sources),
read line by line with the reference parser, and user agents taken from them."""

import functools
import gzip
from collections.abc import Iterator
from pathlib import Path

import pytest

from bq_platform.lib.core.logformat import ParsedLine, parse_line
from bq_platform_tests.conftest import SHARED_DATA

MODERN_LOGS = SHARED_DATA / "modern_logs"

# User agents copied from the modern logs (test_named_user_agents_are_in_the_logs checks it).
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
BINGBOT = "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"
AHREFSBOT = "Mozilla/5.0 (compatible; AhrefsBot/6.1; +http://ahrefs.com/robot/)"
PYTHON_REQUESTS = "python-requests/2.26.0"
ZGRAB = "Mozilla/5.0 zgrab/0.x"
CHROME_ANDROID = (
    "Mozilla/5.0 (Linux; Android 7.0; FRD-L09) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/70.0.3538.80 Mobile Safari/537.36"
)
SAFARI_IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 12_1_2 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/12.0 Mobile/15E148 Safari/604.1"
)
FIREFOX_WINDOWS = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:64.0) Gecko/20100101 Firefox/64.0"

BOTS = (GOOGLEBOT, BINGBOT, AHREFSBOT, PYTHON_REQUESTS, ZGRAB)
BROWSERS = (CHROME_ANDROID, SAFARI_IPHONE, FIREFOX_WINDOWS)


def log_files() -> list[Path]:
    """``<site>/<file>.log.gz`` under :data:`MODERN_LOGS`; fails the test if there are none."""
    files = sorted(MODERN_LOGS.glob("*/*.log.gz"))
    if not files:
        pytest.fail(f"modern logs not found under {MODERN_LOGS}; set BQ_PLATFORM_SHARED_DATA")
    return files


def parsed_lines(path: Path) -> Iterator[ParsedLine]:
    """Every line of one gzip log, parsed (UTF-8 with replacement, as the pipeline reads)."""
    text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
    for line in text.split("\n"):
        if line:
            yield parse_line(line)


@functools.cache
def distinct_user_agents() -> tuple[str, ...]:
    """The distinct user agents (``-`` excluded) of every modern log, sorted."""
    found = {line.user_agent for path in log_files() for line in parsed_lines(path)}
    return tuple(sorted(agent for agent in found if agent is not None))
