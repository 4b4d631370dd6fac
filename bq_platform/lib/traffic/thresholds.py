"""The configuration of the traffic-classification heuristics
(:mod:`bq_platform.lib.traffic.heuristics`): which run, and the page-rate threshold.

The page-rate default, :data:`DEFAULT_MAX_PAGES_PER_VISITOR_HOUR`, is 720 pages by one visitor
in one UTC hour: a page every 5 seconds, sustained for the whole hour, which no one reading the
pages does. The public analytics tools ship no rate rule to borrow: AWStats (``robots.pm``),
Matomo's log importer (``import_logs.py``, DeviceDetector's bot list) and GoAccess
(``browsers.c``) recognise robots by their user agent only. A rate rule therefore has to stay
well above human reading speed, or it classifies the heavy human visitors of a shop (many
product pages, a proxy shared by many people) as robots; it catches the scrapers that hide
behind a browser's user agent and fetch pages without pause. It counts pages, not requests: a
browser fetches each page's images, scripts and styles with it.
"""

import dataclasses

from bq_platform.lib.traffic.heuristics import (
    empty_user_agent_reason,
    is_positive_int,
    page_rate_reason,
    robots_txt_reason,
)

#: The page-rate threshold when none is configured: more than this many pages by one visitor
#: in one hour marks it (the module docstring gives the reasoning).
DEFAULT_MAX_PAGES_PER_VISITOR_HOUR = 720


@dataclasses.dataclass(frozen=True)
class ClassificationThresholds:
    """Which heuristics mark lines ``suspected_bot``, with their thresholds.

    Attributes:
        max_pages_per_visitor_hour: a visitor with more pages than this in one hour is
            suspected; None turns the page-rate heuristic off.
        robots_txt_marks_visitor: a visitor that fetched ``/robots.txt`` in the hour is
            suspected.
        empty_user_agent_marks_line: a line of a format with a user-agent field whose field is
            empty or ``-`` is suspected.

    Raises:
        ValueError: (on construction) ``max_pages_per_visitor_hour`` is neither None nor a
            positive integer, or a flag is not a bool.
    """

    max_pages_per_visitor_hour: int | None = DEFAULT_MAX_PAGES_PER_VISITOR_HOUR
    robots_txt_marks_visitor: bool = True
    empty_user_agent_marks_line: bool = True

    def __post_init__(self) -> None:
        rate = self.max_pages_per_visitor_hour
        if rate is not None and not is_positive_int(rate):
            raise ValueError(
                f"traffic classification: max_pages_per_visitor_hour must be a positive "
                f"integer or None (off), got {rate!r}; fix the configuration"
            )
        for name in ("robots_txt_marks_visitor", "empty_user_agent_marks_line"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"traffic classification: {name} must be true or false, got "
                    f"{getattr(self, name)!r}; fix the configuration"
                )

    def heuristic_reasons(self) -> tuple[str, ...]:
        """The ``bot_reason`` of each heuristic that runs, in the order of
        :data:`bq_platform.lib.traffic.heuristics.HEURISTICS` (empty when none runs)."""
        reasons: list[str] = []
        if self.robots_txt_marks_visitor:
            reasons.append(robots_txt_reason())
        if self.max_pages_per_visitor_hour is not None:
            reasons.append(page_rate_reason(self.max_pages_per_visitor_hour))
        if self.empty_user_agent_marks_line:
            reasons.append(empty_user_agent_reason())
        return tuple(reasons)
