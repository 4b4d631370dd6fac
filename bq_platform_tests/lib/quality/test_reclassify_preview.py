"""The reclassification preview (:mod:`bq_platform.lib.quality.reclassify_preview`): published
sample rows classified again with the installed list and given thresholds, per day and site."""

import datetime as dt

from bq_platform.lib.quality.reclassify_preview import (
    NO_USER_AGENT,
    TO_BOT,
    TO_HUMAN,
    Mover,
    classify_again,
    preview_lines,
    preview_sample,
)
from bq_platform.lib.traffic.crawlers import crawler_pattern, crawler_reason
from bq_platform.lib.traffic.heuristics import (
    empty_user_agent_reason,
    page_rate_reason,
    robots_txt_reason,
)
from bq_platform.lib.traffic.thresholds import ClassificationThresholds

HOUR = dt.datetime(2019, 1, 22, 10, tzinfo=dt.UTC)
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
BROWSER = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36"
DEFAULTS = ClassificationThresholds()


def row(visitor, agent=BROWSER, cls="human", reason=None, site="shop", minute=0, hour=HOUR):
    ts = hour + dt.timedelta(minutes=minute)
    return {
        "site": site,
        "event_date": ts.date(),
        "event_ts": ts,
        "visitor_id": visitor,
        "page_path": "/",
        "user_agent": agent,
        "traffic_class": cls,
        "bot_reason": reason,
    }


def test_the_list_wins_then_the_heuristics_in_their_order():
    assert crawler_pattern(GOOGLEBOT) and not crawler_pattern(BROWSER)
    rows = [
        row("crawler", GOOGLEBOT),
        row("robots", reason=robots_txt_reason(), cls="suspected_bot"),
        row("robots", minute=1),  # the same visitor's hour: marked too
        row("robots", minute=1, hour=HOUR + dt.timedelta(hours=1)),  # another hour: not
        row("human"),
    ]
    assert classify_again(rows, DEFAULTS) == [
        ("bot", crawler_reason(crawler_pattern(GOOGLEBOT))),
        ("suspected_bot", robots_txt_reason()),
        ("suspected_bot", robots_txt_reason()),
        ("human", None),
        ("human", None),
    ]
    off = ClassificationThresholds(robots_txt_marks_visitor=False)
    assert [c for c, _ in classify_again(rows, off)] == ["bot", "human", "human", "human", "human"]


def test_the_page_rate_is_counted_per_visitor_site_and_hour():
    rows = [row("busy", minute=m) for m in range(3)] + [row("busy", site="other")]
    rows += [row("busy", minute=59, hour=HOUR - dt.timedelta(hours=1))]
    classes = classify_again(rows, ClassificationThresholds(max_pages_per_visitor_hour=2))
    assert classes == [("suspected_bot", page_rate_reason(2))] * 3 + [("human", None)] * 2


def test_an_empty_user_agent_marks_a_row_only_of_a_format_with_the_field():
    rows = [
        row("x", agent=None, site="clf"),  # Common Log Format: no such field
        row("y", agent=None, site="combined"),  # its site and day carry user agents
        row("z", agent=BROWSER, site="combined"),
        row("w", agent=None, site="alone", cls="suspected_bot", reason=empty_user_agent_reason()),
    ]
    assert [c for c, _ in classify_again(rows, DEFAULTS)] == [
        "human",
        "suspected_bot",
        "human",
        "suspected_bot",
    ]


def test_the_same_classifier_moves_nothing_and_another_says_what_moves():
    published = [
        row("g", GOOGLEBOT, cls="bot", reason=crawler_reason(crawler_pattern(GOOGLEBOT))),
        *(row("busy", minute=m) for m in range(3)),
        row("quiet", agent=None, site="clf"),
    ]
    (clf, same) = preview_sample(published, DEFAULTS)  # by day, then site
    assert (same.rows, same.to_bot, same.to_human, same.movers) == (4, 0, 0, ())
    assert (same.human_before, same.human_after) == (3, 3)
    assert (clf.site, clf.rows, clf.to_bot) == ("clf", 1, 0)

    strict = ClassificationThresholds(max_pages_per_visitor_hour=2)
    (_, shop) = preview_sample(published, strict)
    assert (shop.to_bot, shop.to_human, shop.human_after) == (3, 0, 0)
    assert shop.movers == (Mover(BROWSER, TO_BOT, 3),)

    # A row published as a bot that the list no longer knows moves back.
    stale = row("old", BROWSER, cls="bot", reason="crawler-user-agents:Chrome")
    (back,) = preview_sample([stale], DEFAULTS)
    assert (back.to_human, back.human_before, back.human_after) == (1, 0, 1)
    assert back.movers == (Mover(BROWSER, TO_HUMAN, 1),)


def test_the_table_has_one_line_per_day_and_site_then_its_top_movers():
    rows = [row(f"v{i}", agent=f"agent-{i % 7}", cls="bot", reason="x") for i in range(14)]
    # No user agent on a site whose other rows have one: still suspected, it does not move.
    rows += [row("n", agent=None, cls="suspected_bot", reason=empty_user_agent_reason())]
    (preview,) = preview_sample(rows, DEFAULTS)
    assert preview.to_human == 14 and len(preview.movers) == 5
    assert preview.movers[0] == Mover("agent-0", TO_HUMAN, 2)
    lines = preview_lines([preview], agent_width=20)
    assert lines[1].split() == ["2019-01-22", "shop", "15", "0", "14", "0", "14"]
    assert len(lines) == 2 + 5
    long = preview_lines([preview_sample([row("v", agent="x" * 50, cls="bot")], DEFAULTS)[0]], 20)
    assert long[-1].endswith(" " + "x" * 17 + "...")
    (clf,) = preview_sample([row("v", agent=None, cls="suspected_bot", reason="x")], DEFAULTS)
    assert preview_lines([clf])[-1].endswith(f"1  {TO_HUMAN}  {NO_USER_AGENT}")
