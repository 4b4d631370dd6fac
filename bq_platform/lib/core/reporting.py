"""Summaries of accounting counts for logs, Dagster metadata and the CLI."""

import dataclasses
import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bq_platform.lib.core.accounting import SiteHourCounts, row_balanced

COUNT_FIELDS = (
    "source_lines",
    "pageviews",
    "human_pageviews",
    "bot_pageviews",
    "non_page_hits",
    "rejected",
    "duplicates",
    "out_of_window",
    "sample_rows",
)
"""The counts of :class:`~bq_platform.lib.core.accounting.SiteHourCounts` that are summed and
shown, in this order."""

#: The pages by traffic class (``pageviews = human_pageviews + bot_pageviews``); an audit row
#: may have them null (a table that gained the columns keeps its earlier rows).
TRAFFIC_FIELDS = ("human_pageviews", "bot_pageviews")

#: Bot reasons shown per hour or range, most pages first.
TOP_BOT_REASONS = 5


STEP_TOTALS = "step_totals"
"""Metadata key of a range step's totals (JSON: hours, rows, jobs, seconds), on each hour."""


PASS_PROGRESS = re.compile(r"^pass \d+/\d+: ")
"""Start of the log line of each Spark pass of the build (``pass 2/9: hours ...``), which
``bq-platform run`` prints as progress."""


#: Failure lines printed per failed step or check, then "and N more".
MAX_FAILURE_LINES = 5


@dataclasses.dataclass(frozen=True)
class CheckFailure:
    """A failed check result as ``bq-platform run`` prints it. ``description``: the check's
    own account of where (site, hour or day, file or table) and what to do, written by the
    check; ``blocking``: it failed its step (a blocking check with ERROR severity)."""

    asset: str
    check: str
    partition: str | None
    description: str
    blocking: bool = False

    def line(self) -> str:
        """``asset:check: description`` (the partition stands in for a missing description)."""
        text = self.description.strip() or f"failed on {self.partition or 'its run'}"
        return f"{self.asset}:{self.check}: {' '.join(text.split())}"


def capped(lines: Iterable[str], limit: int = MAX_FAILURE_LINES) -> list[str]:
    """``lines`` without repeats, the first ``limit`` of them, then ``and N more`` if any."""
    unique = list(dict.fromkeys(lines))
    more = len(unique) - limit
    return unique[:limit] + (
        [f"and {more} more (bq-platform -v run, or the Dagster UI)"] if more > 0 else []
    )


def totals(counts: Iterable[SiteHourCounts]) -> dict[str, int]:
    """Sum of each of :data:`COUNT_FIELDS` over ``counts`` (lines; pages for the pageviews)."""
    out = dict.fromkeys(COUNT_FIELDS, 0)
    for c in counts:
        for field in COUNT_FIELDS:
            out[field] += getattr(c, field)
    return out


def bot_share(human: int, bot: int) -> float:
    """The share of the pages that are not human, ``bot / (human + bot)`` (0..1); 0.0 when
    there is no page."""
    return bot / (human + bot) if human + bot else 0.0


def bot_reason_totals(counts: Iterable[SiteHourCounts]) -> dict[str, int]:
    """Bot pages per ``bot_reason``, summed over ``counts``, most pages first (ties by reason)."""
    out: dict[str, int] = {}
    for c in counts:
        for reason, pages in c.bot_reasons.items():
            out[reason] = out.get(reason, 0) + int(pages)
    return dict(sorted(out.items(), key=lambda item: (-item[1], item[0])))


def top_bot_reasons(reasons: Mapping[str, int], limit: int = TOP_BOT_REASONS) -> dict[str, int]:
    """The ``limit`` reasons of ``reasons`` (reason -> pages) with the most pages, most first
    (ties by reason)."""
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked[:limit])


def bot_reasons_markdown(reasons: Mapping[str, int], limit: int = TOP_BOT_REASONS) -> str:
    """A Markdown table of the top ``limit`` of ``reasons`` (reason -> bot pages): pages and
    share of the bot pages, then one line for the rest; ``(no bot pages)`` when empty."""
    total = sum(reasons.values())
    if not total:
        return "(no bot pages)"
    top = top_bot_reasons(reasons, limit)
    lines = ["| bot_reason | pages | share of bot pages |", "|---|---:|---:|"]
    lines += [f"| `{reason}` | {pages:,} | {pages / total:.1%} |" for reason, pages in top.items()]
    rest = {r: p for r, p in reasons.items() if r not in top}
    if rest:
        pages = sum(rest.values())
        lines.append(f"| {len(rest)} more reasons | {pages:,} | {pages / total:.1%} |")
    return "\n".join(lines)


def traffic_sums(rows: Iterable[Mapping[str, Any]]) -> tuple[int, int, int]:
    """``(human_pageviews, bot_pageviews, unclassified)`` summed over audit ``rows``: the
    pageviews of a row that lacks either (built before its table had them) count as
    unclassified."""
    human = bot = unclassified = 0
    for row in rows:
        h, b = row.get("human_pageviews"), row.get("bot_pageviews")
        if h is None or b is None:
            unclassified += int(row.get("pageviews") or 0)
        else:
            human, bot = human + int(h), bot + int(b)
    return human, bot, unclassified


def pages_text(pageviews: int, human: int, bot: int) -> str:
    """``'8,100 (human 4,727, bot 3,373)'``, with ``, not classified N`` for the pages that
    are neither (``pageviews - human - bot``) when there are any."""
    rest = pageviews - human - bot
    return f"{pageviews:,} (human {human:,}, bot {bot:,}" + (
        f", not classified {rest:,})" if rest else ")"
    )


def counts_markdown(counts: Iterable[SiteHourCounts], max_rows: int = 200) -> str:
    """A Markdown table of non-empty site-hours (the Dagster UI renders it)."""
    rows = [c for c in counts if c.source_lines or c.accounted]
    header = "| site | hour (UTC) | " + " | ".join(COUNT_FIELDS) + " | balanced |"
    lines = [header, "|" + "---|" * (len(COUNT_FIELDS) + 3)]
    for c in rows[:max_rows]:
        values = " | ".join(str(getattr(c, f)) for f in COUNT_FIELDS)
        lines.append(
            f"| {c.site} | {c.hour:%Y-%m-%dT%H} | {values} | {'yes' if c.balanced else '**NO**'} |"
        )
    if len(rows) > max_rows:
        lines.append(f"\n{len(rows) - max_rows} more site-hours not shown")
    if not rows:
        lines.append("| (no landed data in these hours) |" + " |" * (len(COUNT_FIELDS) + 2))
    return "\n".join(lines)


def summary_table(
    rows_by_day: Mapping[dt.date, Sequence[Mapping[str, Any]]],
    checks_by_day: Mapping[dt.date, Sequence[tuple[str, str, bool]]],
    failures_by_day: Mapping[dt.date, Sequence[CheckFailure]] | None = None,
) -> list[str]:
    """``bq-platform run``'s closing table: per UTC day and site, the :data:`COUNT_FIELDS` sums
    (human and bot pages ``-`` where an audit row lacks them) and balanced hours, the day's
    pageviews with human and bot apart (:func:`pages_text`), then one line per check (asset,
    check name) of that day, each failed one followed by its failures' lines (:func:`capped`).

    ``rows_by_day``: the ``pageviews_audit`` rows of each day (one per site and hour), in the
    order shown; a site with no source line that day and every hour balanced is left out (a day
    with none left says so). ``checks_by_day``: ``(asset, check, passed)`` per partition
    evaluated.
    ``failures_by_day``: the failures to detail (those not printed before).
    """
    by_day: dict[dt.date, dict[str, list[Mapping[str, Any]]]] = {}
    for day, rows in rows_by_day.items():
        by_site = by_day[day] = {}
        for row in rows:
            by_site.setdefault(row["site"], []).append(row)
    width = max([16, *(len(site) for by_site in by_day.values() for site in by_site)])
    header = (
        f"{'day':<10} {'site':<{width}} {'source':>8} {'pages':>8} {'human':>8} {'bot':>8} "
        f"{'non-page':>8} {'rejected':>8} {'dupes':>6} {'out-win':>7} {'sample':>6} "
        f"{'hours ok':>9}"
    )
    lines = [header, "-" * len(header)]
    for day, by_site in by_day.items():
        shown: list[Mapping[str, Any]] = []
        for site, site_rows in sorted(by_site.items()):
            s = {k: sum(r[k] for r in site_rows) for k in COUNT_FIELDS if k not in TRAFFIC_FIELDS}
            ok = sum(row_balanced(r) for r in site_rows)
            if not s["source_lines"] and ok == len(site_rows):
                continue  # nothing landed for this site that day
            shown += site_rows
            human, bot, unclassified = traffic_sums(site_rows)
            none = unclassified and unclassified == s["pageviews"]  # no page classified
            apart = ("-", "-") if none else (str(human), str(bot))
            lines.append(
                f"{day!s:<10} {site:<{width}} {s['source_lines']:>8} {s['pageviews']:>8} "
                f"{apart[0]:>8} {apart[1]:>8} {s['non_page_hits']:>8} {s['rejected']:>8} "
                f"{s['duplicates']:>6} {s['out_of_window']:>7} {s['sample_rows']:>6} "
                f"{ok:>4}/{len(site_rows):<4}"
            )
        if not shown:
            lines.append(f"{day!s:<10} (no lines landed for this day)")
        else:
            human, bot, _ = traffic_sums(shown)
            pages = sum(r["pageviews"] for r in shown)
            lines.append(f"{'':<10} pageviews {pages_text(pages, human, bot)}")
        outcomes: dict[tuple[str, str], list[bool]] = {}
        for asset, check, passed in checks_by_day.get(day, []):
            outcomes.setdefault((asset, check), []).append(passed)
        for (asset, check), results in outcomes.items():
            failed = results.count(False)
            verdict = f"FAILED ({failed} of {len(results)})" if failed else "passed"
            times = f" x{len(results)}" if len(results) > 1 and not failed else ""
            lines.append(f"{'':<10} check {asset}:{check}: {verdict}{times}")
            details = [
                f.line()
                for f in (failures_by_day or {}).get(day, ())
                if (f.asset, f.check) == (asset, check)
            ]
            lines += [f"{'':<10}   {line}" for line in capped(details)]
    return lines
