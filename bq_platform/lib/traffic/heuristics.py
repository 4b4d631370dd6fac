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
- :data:`REQUEST_RATE` (``heuristic:request_rate>120/h`` for 120): the visitor made more than
  the threshold of requests (log lines, pages or not) in the hour: all its lines of that hour
  are marked.
- :data:`EMPTY_USER_AGENT` (``heuristic:empty_user_agent``): the line's format has a
  user-agent field (Combined) and the field is empty or ``-``. A Common Log Format line has no
  such field and is never marked by it: such lines are classified by the other heuristics
  alone.

When several apply to a line, the first in :data:`HEURISTICS` names its reason. Which of them
run, and the rate threshold, are configuration
(:class:`bq_platform.lib.traffic.thresholds.ClassificationThresholds`).
"""

#: Every heuristic's ``bot_reason`` starts with this.
REASON_PREFIX = "heuristic:"

ROBOTS_TXT = "robots_txt"
REQUEST_RATE = "request_rate"
EMPTY_USER_AGENT = "empty_user_agent"
#: Every heuristic, in the order that picks a line's reason when several apply.
HEURISTICS: tuple[str, ...] = (ROBOTS_TXT, REQUEST_RATE, EMPTY_USER_AGENT)

#: The path whose fetch marks a visitor (RFC 9309: robots.txt is at the root of the host).
ROBOTS_TXT_PATH = "/robots.txt"


def is_positive_int(value: object) -> bool:
    """True for an ``int`` of at least 1 (a ``bool`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def robots_txt_reason() -> str:
    """``bot_reason`` of a line marked by :data:`ROBOTS_TXT`: ``heuristic:robots_txt``."""
    return REASON_PREFIX + ROBOTS_TXT


def request_rate_reason(max_requests_per_hour: int) -> str:
    """``bot_reason`` of a line marked by :data:`REQUEST_RATE` with this threshold:
    ``heuristic:request_rate>{max_requests_per_hour}/h``.

    Raises:
        ValueError: the threshold is not a positive integer.
    """
    if not is_positive_int(max_requests_per_hour):
        raise ValueError(
            f"the request-rate threshold must be a positive integer, got {max_requests_per_hour!r}"
        )
    return f"{REASON_PREFIX}{REQUEST_RATE}>{max_requests_per_hour}/h"


def empty_user_agent_reason() -> str:
    """``bot_reason`` of a line marked by :data:`EMPTY_USER_AGENT`:
    ``heuristic:empty_user_agent``."""
    return REASON_PREFIX + EMPTY_USER_AGENT
