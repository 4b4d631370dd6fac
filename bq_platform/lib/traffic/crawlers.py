"""Known robots: the crawler-user-agents list (PyPI ``crawler-user-agents``, module
``crawleruseragents``, source github.com/monperrus/crawler-user-agents).

The list is ``crawleruseragents.CRAWLER_USER_AGENTS_DATA``: entries with a ``pattern`` (a
regular expression, searched anywhere in the user agent) and ``instances`` (example user agents
it matches). Matching is the package's own ``matching_crawlers``, case-sensitive (its default;
its harness asserts that ``"test googlebot/2.0 test"`` is no crawler). A user agent that several
entries match is attributed to the first of them in the list's order: the first index
``matching_crawlers`` returns. Its per-entry scan calls ``re.search`` with the pattern text,
and the list has more entries than ``re``'s cache of compiled patterns, so the scan recompiles
them; here the package's ``is_crawler`` tells whether any entry matches, and the entries,
compiled once per process, are then searched in order. Callers classify each *distinct* user
agent once.
"""

import functools
import re

import crawleruseragents

from bq_platform.lib.traffic.user_agent import has_user_agent

#: ``bot_reason`` of a row the list classifies: this prefix, then the entry's pattern as the
#: list writes it (``crawler-user-agents:Googlebot\\/``).
REASON_PREFIX = "crawler-user-agents:"


def crawler_patterns() -> tuple[str, ...]:
    """Every entry's ``pattern``, in the list's order."""
    return tuple(entry["pattern"] for entry in crawleruseragents.CRAWLER_USER_AGENTS_DATA)


@functools.cache
def _compiled_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((pattern, re.compile(pattern)) for pattern in crawler_patterns())


def crawler_pattern(user_agent: str | None) -> str | None:
    """The ``pattern`` of the first list entry that ``user_agent`` matches, or None when none
    does or there is no user agent (None, ``''``, ``'-'``). The same answer for the same text
    under the same installed list."""
    if not has_user_agent(user_agent) or not crawleruseragents.is_crawler(user_agent):
        return None
    return next((p for p, regex in _compiled_patterns() if regex.search(user_agent)), None)


def crawler_reason(pattern: str) -> str:
    """``bot_reason`` for a row whose user agent matched the entry ``pattern``."""
    return REASON_PREFIX + pattern
