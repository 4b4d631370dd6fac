"""The heuristics that mark a line ``suspected_bot``, and the ``bot_reason`` each writes.

They apply to lines whose user agent is not on the crawler list (a listed one is ``bot``,
:mod:`bq_platform.lib.traffic.classes`), and each is explainable from one site's lines of one
UTC hour. A *visitor* is a ``visitor_id`` (the pseudonymized client address). The build computes
them; this module names them and spells their reasons (``heuristic:<name>``, a threshold
written after the name):

- :data:`ROBOTS_TXT` (``heuristic:robots_txt``): the visitor requested :data:`ROBOTS_TXT_PATH`
  (the request's path, query removed; any method and status) in the hour: all its lines of
  that hour are marked. Crawlers that honour the Robots Exclusion Protocol (RFC 9309) fetch it
  before crawling; a browser has no reason to.
- :data:`PAGE_RATE` (``heuristic:page_rate>720/h`` for 720): the visitor requested more
  pages (rows of ``pageviews``) than the threshold in the hour: all its pages of that hour are
  marked. Pages, not all requests: a browser fetches a page's images, scripts and styles with
  it, so the request count of a human grows with the pages' weight, not with their number.
- :data:`EMPTY_USER_AGENT` (``heuristic:empty_user_agent``): the line's format has a
  user-agent field (Combined) and the field is empty or ``-``. A Common Log Format line has no
  such field and is never marked by it: such lines are classified by the other heuristics
  alone.

When several apply to a line, the first in :data:`HEURISTICS` names its reason. Which of them
run, and the page-rate threshold, are configuration
(:class:`bq_platform.lib.traffic.thresholds.ClassificationThresholds`).
"""

#: Every heuristic's ``bot_reason`` starts with this.
REASON_PREFIX = "heuristic:"

ROBOTS_TXT = "robots_txt"
PAGE_RATE = "page_rate"
EMPTY_USER_AGENT = "empty_user_agent"
#: Every heuristic, in the order that picks a line's reason when several apply.
HEURISTICS: tuple[str, ...] = (ROBOTS_TXT, PAGE_RATE, EMPTY_USER_AGENT)

#: The path whose fetch marks a visitor (RFC 9309: robots.txt is at the root of the host).
ROBOTS_TXT_PATH = "/robots.txt"


def is_positive_int(value: object) -> bool:
    """True for an ``int`` of at least 1 (a ``bool`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def robots_txt_reason() -> str:
    """``bot_reason`` of a line marked by :data:`ROBOTS_TXT`: ``heuristic:robots_txt``."""
    return REASON_PREFIX + ROBOTS_TXT


def page_rate_reason(max_pages_per_hour: int) -> str:
    """``bot_reason`` of a line marked by :data:`PAGE_RATE` with this threshold:
    ``heuristic:page_rate>{max_pages_per_hour}/h``.

    Raises:
        ValueError: the threshold is not a positive integer.
    """
    if not is_positive_int(max_pages_per_hour):
        raise ValueError(
            f"the page-rate threshold must be a positive integer, got {max_pages_per_hour!r}"
        )
    return f"{REASON_PREFIX}{PAGE_RATE}>{max_pages_per_hour}/h"


def empty_user_agent_reason() -> str:
    """``bot_reason`` of a line marked by :data:`EMPTY_USER_AGENT`:
    ``heuristic:empty_user_agent``."""
    return REASON_PREFIX + EMPTY_USER_AGENT
