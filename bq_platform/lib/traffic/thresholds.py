"""The configuration of the traffic-classification heuristics
(:mod:`bq_platform.lib.traffic.heuristics`): which run, and the request-rate threshold."""

import dataclasses

from bq_platform.lib.traffic.heuristics import (
    empty_user_agent_reason,
    is_positive_int,
    request_rate_reason,
    robots_txt_reason,
)

#: The request-rate threshold when none is configured: more than this many requests by one
#: visitor in one hour marks it.
DEFAULT_MAX_REQUESTS_PER_VISITOR_HOUR = 120


@dataclasses.dataclass(frozen=True)
class ClassificationThresholds:
    """Which heuristics mark lines ``suspected_bot``, with their thresholds.

    Attributes:
        max_requests_per_visitor_hour: a visitor with more requests (log lines) than this in one
            hour is suspected; None turns the request-rate heuristic off.
        robots_txt_marks_visitor: a visitor that fetched ``/robots.txt`` in the hour is
            suspected.
        empty_user_agent_marks_line: a line of a format with a user-agent field whose field is
            empty or ``-`` is suspected.

    Raises:
        ValueError: (on construction) ``max_requests_per_visitor_hour`` is neither None nor a
            positive integer, or a flag is not a bool.
    """

    max_requests_per_visitor_hour: int | None = DEFAULT_MAX_REQUESTS_PER_VISITOR_HOUR
    robots_txt_marks_visitor: bool = True
    empty_user_agent_marks_line: bool = True

    def __post_init__(self) -> None:
        rate = self.max_requests_per_visitor_hour
        if rate is not None and not is_positive_int(rate):
            raise ValueError(
                f"traffic classification: max_requests_per_visitor_hour must be a positive "
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
        if self.max_requests_per_visitor_hour is not None:
            reasons.append(request_rate_reason(self.max_requests_per_visitor_hour))
        if self.empty_user_agent_marks_line:
            reasons.append(empty_user_agent_reason())
        return tuple(reasons)
