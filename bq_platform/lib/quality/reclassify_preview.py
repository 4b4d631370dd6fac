"""What the installed traffic classifier would change in what is published, before anything is
restated: the published sample's rows classified again, per UTC day and site.

"Old" is each row's published ``traffic_class``; "new" is the classification the installed
crawler list and the configured thresholds give the same row
(:class:`~bq_platform.lib.traffic.thresholds.ClassificationThresholds`), with the rules of the
build (:mod:`bq_platform.lib.hourly_build.traffic`) as far as the sample's rows show them:

- the crawler list is applied once per distinct user agent
  (:func:`~bq_platform.lib.traffic.crawlers.crawler_pattern`); a listed one is ``bot``;
- the page-rate heuristic counts a visitor's rows per site and UTC hour of ``event_ts``: the
  sample keeps every page of a sampled visitor, so the count is the build's;
- a fetch of ``/robots.txt`` is no page and is not in the sample: a visitor's hour counts as
  having fetched it when one of its published rows of that hour carries that reason (a row the
  list classified hides it);
- a row without a user agent counts as one of a format with the field (Combined) when its
  published reason is the empty-user-agent heuristic, or when another row of its site and day
  has a user agent (a Common Log Format site has none).

A published row without a class counts as ``human``: it was published as a pageview. The
browser, OS and device families do not decide the class and are not compared. Pure Python;
reads nothing and writes nothing.
"""

import collections
import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bq_platform.lib.traffic.classes import BOT, BOT_CLASSES, HUMAN, SUSPECTED_BOT
from bq_platform.lib.traffic.crawlers import crawler_pattern, crawler_reason
from bq_platform.lib.traffic.heuristics import (
    empty_user_agent_reason,
    page_rate_reason,
    robots_txt_reason,
)
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.traffic.user_agent import has_user_agent

#: User agents per day and site that :func:`preview_sample` reports, most rows first.
TOP_MOVERS = 5
#: Directions of a move: a human row that becomes ``bot`` or ``suspected_bot``, and back.
TO_BOT = "human->bot"
TO_HUMAN = "bot->human"
#: How a row without a user agent is shown.
NO_USER_AGENT = "(no user agent)"


@dataclasses.dataclass(frozen=True)
class Mover:
    """Rows of one user agent (None: none) that move in one direction (:data:`TO_BOT` or
    :data:`TO_HUMAN`)."""

    user_agent: str | None
    direction: str
    rows: int


@dataclasses.dataclass(frozen=True)
class SitePreview:
    """One UTC day and site of the published sample, classified again.

    Attributes:
        rows: sample rows of the day and site.
        human_before: rows published ``human`` (or without a class).
        human_after: rows the installed classifier calls ``human``.
        to_bot: rows published ``human`` that become ``bot`` or ``suspected_bot``.
        to_human: rows published ``bot`` or ``suspected_bot`` that become ``human``.
        movers: the user agents that move most, at most :data:`TOP_MOVERS`, most rows first.
    """

    day: dt.date
    site: str
    rows: int
    human_before: int
    human_after: int
    to_bot: int
    to_human: int
    movers: tuple[Mover, ...]


def _hour(ts: dt.datetime) -> dt.datetime:
    return ts.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


def classify_again(
    rows: Sequence[Mapping[str, Any]], thresholds: ClassificationThresholds
) -> list[tuple[str, str | None]]:
    """``(traffic_class, bot_reason)`` of each row under the installed crawler list and
    ``thresholds``, in the order of ``rows`` (the module docstring gives the rules).

    Args:
        rows: sample rows with ``site``, ``event_date``, ``event_ts`` (aware), ``visitor_id``,
            ``user_agent`` and the published ``bot_reason``; all rows of each visitor's hour,
            as the sample keeps them.
    """
    robots, empty = robots_txt_reason(), empty_user_agent_reason()
    pages: collections.Counter[tuple[str, str, dt.datetime]] = collections.Counter()
    robots_hours: set[tuple[str, str, dt.datetime]] = set()
    days_with_agents: set[tuple[str, dt.date]] = set()
    for row in rows:
        visitor_hour = (row["site"], row["visitor_id"], _hour(row["event_ts"]))
        pages[visitor_hour] += 1
        if row.get("bot_reason") == robots:
            robots_hours.add(visitor_hour)
        if has_user_agent(row.get("user_agent")):
            days_with_agents.add((row["site"], row["event_date"]))
    listed: dict[str, str | None] = {}
    limit = thresholds.max_pages_per_visitor_hour
    out: list[tuple[str, str | None]] = []
    for row in rows:
        agent = row.get("user_agent")
        if has_user_agent(agent):
            if agent not in listed:
                pattern = crawler_pattern(agent)
                listed[agent] = None if pattern is None else crawler_reason(pattern)
            if listed[agent] is not None:
                out.append((BOT, listed[agent]))
                continue
        visitor_hour = (row["site"], row["visitor_id"], _hour(row["event_ts"]))
        if thresholds.robots_txt_marks_visitor and visitor_hour in robots_hours:
            out.append((SUSPECTED_BOT, robots))
        elif limit is not None and pages[visitor_hour] > limit:
            out.append((SUSPECTED_BOT, page_rate_reason(limit)))
        elif (
            thresholds.empty_user_agent_marks_line
            and not has_user_agent(agent)
            and (
                row.get("bot_reason") == empty
                or (row["site"], row["event_date"]) in days_with_agents
            )
        ):
            out.append((SUSPECTED_BOT, empty))
        else:
            out.append((HUMAN, None))
    return out


def preview_sample(
    rows: Iterable[Mapping[str, Any]], thresholds: ClassificationThresholds
) -> list[SitePreview]:
    """Per UTC day (``event_date``) and site of ``rows``, in that order: the rows, the human
    rows before and after, the moves and the top movers (:func:`classify_again`)."""
    rows = list(rows)
    new = classify_again(rows, thresholds)
    groups: dict[tuple[dt.date, str], list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault((row["event_date"], row["site"]), []).append(i)
    previews = []
    for (day, site), indexes in sorted(groups.items()):
        before_human = after_human = 0
        moves: collections.Counter[tuple[str | None, str]] = collections.Counter()
        for i in indexes:
            was_human = rows[i].get("traffic_class") not in BOT_CLASSES
            is_human = new[i][0] == HUMAN
            before_human += was_human
            after_human += is_human
            if was_human != is_human:
                agent = rows[i].get("user_agent")
                moves[
                    (agent if has_user_agent(agent) else None, TO_BOT if was_human else TO_HUMAN)
                ] += 1
        ranked = sorted(moves.items(), key=lambda kv: (-kv[1], kv[0][1], kv[0][0] or ""))
        previews.append(
            SitePreview(
                day=day,
                site=site,
                rows=len(indexes),
                human_before=before_human,
                human_after=after_human,
                to_bot=sum(n for (_, d), n in moves.items() if d == TO_BOT),
                to_human=sum(n for (_, d), n in moves.items() if d == TO_HUMAN),
                movers=tuple(Mover(a, d, n) for (a, d), n in ranked[:TOP_MOVERS]),
            )
        )
    return previews


def preview_lines(previews: Sequence[SitePreview], agent_width: int = 90) -> list[str]:
    """A compact table of ``previews``: one line per day and site (rows, published human
    rows, human rows under the installed classifier, moves), then one per top mover (user
    agents cut to ``agent_width`` characters)."""
    if not previews:
        return []
    width = max(12, *(len(p.site) for p in previews))
    lines = [
        f"{'day':<10}  {'site':<{width}} {'rows':>8} {'human':>8} {'new human':>9} "
        f"{TO_BOT:>10} {TO_HUMAN:>10}"
    ]
    for p in previews:
        lines.append(
            f"{p.day.isoformat():<10}  {p.site:<{width}} {p.rows:>8} {p.human_before:>8} "
            f"{p.human_after:>9} {p.to_bot:>10} {p.to_human:>10}"
        )
        for m in p.movers:
            agent = m.user_agent if m.user_agent is not None else NO_USER_AGENT
            if len(agent) > agent_width:
                agent = agent[: agent_width - 3] + "..."
            lines.append(f"{'':<12}{m.rows:>8}  {m.direction:<10}  {agent}")
    return lines
