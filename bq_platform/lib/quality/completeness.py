"""The daily completeness report: per site and UTC hour, source lines, pageviews (human and
bot apart), rejected.

Built from ``pageviews_audit`` rows and the day's hour manifests, so that a gap (an hour with
no data, not built, or unbalanced) shows at a glance, as Markdown and as PNG heat maps. Dagster's
UI shows Markdown images from ``http(s)`` sources only (``data:`` URIs are dropped), so the PNG
is written to the object store and embedded by URL when ``BQ_PLATFORM_REPORTS_URL`` is set.
"""

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from bq_platform.lib.core.accounting import row_balanced
from bq_platform.lib.core.hours import day_hours, hour_label
from bq_platform.lib.core.reporting import pages_text, traffic_sums

#: What the bars show per site and hour (and :func:`site_matrix` gives).
MEASURES = ("source_lines", "pageviews", "bot_pageviews", "rejected")
#: The PNG's panels, one heat map each (a panel more would pass the width the UI shows).
PNG_MEASURES = ("source_lines", "pageviews", "rejected")
#: The columns of the table per site and hour (an audit row without the pages by traffic
#: class shows ``-`` for them).
TABLE_COLUMNS = ("source_lines", "pageviews", "human_pageviews", "bot_pageviews", "rejected")
_BARS = "▁▂▃▄▅▆▇█"
_ZERO = "·"


@dataclasses.dataclass(frozen=True)
class DayStatus:
    """Completeness of one UTC day: hours ``missing`` (no audit rows from their current build),
    ``unbalanced`` (some site's identity does not hold) and ``empty`` (built, but no source
    line: a gap in the data, not an error)."""

    day: dt.date
    missing: tuple[str, ...]
    unbalanced: tuple[str, ...]
    empty: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.missing and not self.unbalanced

    @property
    def complete_hours(self) -> int:
        return 24 - len(set(self.missing) | set(self.unbalanced))


def _label(value: Any) -> str:
    """Hour label of an audit row's ``hour`` (a warehouse may return it naive: it is UTC)."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return hour_label(aware.astimezone(dt.UTC))
    return str(value)


def unbalanced_sites(rows: Sequence[Mapping[str, Any]], hour: str) -> list[str]:
    """The sites whose audit row of ``hour`` (``YYYY-MM-DDTHH``) does not balance, sorted."""
    return sorted(
        {str(r["site"]) for r in rows if _label(r["hour"]) == hour and not row_balanced(r)}
    )


def by_site_hour(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Mapping[str, Any]]]:
    """``{site: {hour label: audit row}}``."""
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["site"], {})[_label(row["hour"])] = row
    return out


def hour_status(
    day: dt.date, rows: Sequence[Mapping[str, Any]], fingerprints: Mapping[str, str]
) -> DayStatus:
    """Completeness of ``day`` from its audit rows and ``{hour label: manifest fingerprint}``:
    an hour is audited when its rows carry its manifest's fingerprint; a built hour with no
    site at all has no rows and counts as audited and empty."""
    audited: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        audited.setdefault(_label(row["hour"]), []).append(row)
    missing, unbalanced, empty = [], [], []
    for hour in (hour_label(h) for h in day_hours(day)):
        fingerprint = fingerprints.get(hour)
        hour_rows = audited.get(hour, [])
        if fingerprint is None or any(r.get("fingerprint") != fingerprint for r in hour_rows):
            missing.append(hour)
            continue
        if not all(row_balanced(r) for r in hour_rows):
            unbalanced.append(hour)
        if sum(r["source_lines"] for r in hour_rows) == 0:
            empty.append(hour)
    return DayStatus(day, tuple(missing), tuple(unbalanced), tuple(empty))


def measure(row: Mapping[str, Any] | None, name: str) -> int:
    """``row[name]`` as an int; 0 for no row or a null value (an audit row built before its
    table had the pages by traffic class)."""
    return int((row or {}).get(name) or 0)


def day_pages_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """The day's pageviews with human and bot apart, e.g. ``8,100 (human 4,727, bot 3,373)``
    (:func:`~bq_platform.lib.core.reporting.pages_text`)."""
    human, bot, _ = traffic_sums(rows)
    return pages_text(sum(measure(r, "pageviews") for r in rows), human, bot)


def bar_line(values: Sequence[int]) -> str:
    """One character per value: ``·`` for 0, else a bar scaled to the largest value."""
    top = max(values, default=0)
    if top <= 0:
        return _ZERO * len(values)
    return "".join(
        _ZERO if v <= 0 else _BARS[min(len(_BARS) - 1, (v * len(_BARS) - 1) // top)] for v in values
    )


def markdown_report(day: dt.date, rows: Sequence[Mapping[str, Any]], status: DayStatus) -> str:
    """Markdown: verdict, the day's pageviews with human and bot apart, a 24-hour bar chart per
    site and measure of :data:`MEASURES`, and the table per site and hour of
    :data:`TABLE_COLUMNS` (hours as ``HH``, UTC)."""
    hours = [hour_label(h) for h in day_hours(day)]
    sites = by_site_hour(rows)
    lines = [
        f"**{day} (UTC): {status.complete_hours}/24 hours complete**"
        + (
            f"; not built/audited: {', '.join(h[-2:] for h in status.missing)}"
            if status.missing
            else ""
        )
        + (
            f"; unbalanced: {', '.join(h[-2:] for h in status.unbalanced)}"
            if status.unbalanced
            else ""
        )
        + (f"; empty hours: {len(status.empty)}" if status.empty else ""),
        "",
        f"Pageviews {day_pages_text(rows)}.",
        "",
        "Hours 00-23 left to right; `·` = 0; bars scale to each line's largest hour.",
        "",
        "| site | measure | 00 ··· 23 | total |",
        "|---|---|---|---|",
    ]
    for site, per_hour in sorted(sites.items()):
        for name in MEASURES:
            values = [measure(per_hour.get(h), name) for h in hours]
            lines.append(f"| {site} | {name} | `{bar_line(values)}` | {sum(values)} |")
    if not sites:
        lines.append("| (no site) | | `" + _ZERO * 24 + "` | 0 |")
    lines += [
        "",
        "| site | hour | " + " | ".join(TABLE_COLUMNS) + " | balanced |",
        "|---|---|" + "---|" * len(TABLE_COLUMNS) + "---|",
    ]
    for site, per_hour in sorted(sites.items()):
        for hour in hours:
            row = per_hour.get(hour)
            if row is None:
                dashes = " | ".join("-" for _ in TABLE_COLUMNS)
                lines.append(f"| {site} | {hour[-2:]} | {dashes} | **not audited** |")
                continue
            ok = row_balanced(row)
            values = " | ".join("-" if row.get(c) is None else str(row[c]) for c in TABLE_COLUMNS)
            lines.append(f"| {site} | {hour[-2:]} | {values} | {'yes' if ok else '**NO**'} |")
    return "\n".join(lines)


#: Sites drawn one row each in the PNG; the rest are summed into one "other sites" row.
PNG_MAX_SITES = 40


def site_matrix(
    day: dt.date, rows: Sequence[Mapping[str, Any]], max_sites: int = PNG_MAX_SITES
) -> tuple[list[str], dict[str, list[list[int]]]]:
    """Row labels and, per measure, a ``sites x 24`` matrix of lines; sites by source lines,
    largest first, those beyond ``max_sites`` summed into one ``other sites (N)`` row."""
    hours = [hour_label(h) for h in day_hours(day)]
    sites = by_site_hour(rows)
    total = {
        s: sum(int(r.get("source_lines", 0)) for r in per.values()) for s, per in sites.items()
    }
    ordered = sorted(sites, key=lambda s: (-total[s], s))
    shown, rest = ordered[:max_sites], ordered[max_sites:]
    if len(rest) == 1:  # one more row costs no more than an "other" row
        shown, rest = ordered, []
    labels = list(shown) + ([f"other sites ({len(rest)})"] if rest else [])
    matrices: dict[str, list[list[int]]] = {}
    for name in MEASURES:
        matrix = [[measure(sites[s].get(h), name) for h in hours] for s in shown]
        if rest:
            matrix.append([sum(measure(sites[s].get(h), name) for s in rest) for h in hours])
        matrices[name] = matrix
    return labels, matrices


def render_png(day: dt.date, rows: Sequence[Mapping[str, Any]], status: DayStatus) -> bytes:
    """A PNG heat map per measure of :data:`PNG_MEASURES`: rows of :func:`site_matrix`, one
    column per UTC hour, color = lines (log scale), white = 0; incomplete hours are hatched
    red."""
    import numpy as np

    from bq_platform.lib.quality.heatmap import Panel, heatmaps_png

    labels, matrices = site_matrix(day, rows)
    labels = labels or ["(no site)"]
    hours = [hour_label(h) for h in day_hours(day)]
    panels = []
    for name in PNG_MEASURES:
        values = np.array(matrices[name] or [[0] * 24], dtype=float)
        panels.append(Panel(f"{name} (total {int(values.sum()):,})", values))
    verdict = f"Completeness {day} (UTC): {status.complete_hours}/24 hours complete"
    if status.missing:
        verdict += f"; not built/audited: {', '.join(h[-2:] for h in status.missing)}"
    if status.unbalanced:
        verdict += f"; unbalanced: {', '.join(h[-2:] for h in status.unbalanced)}"
    title = [
        verdict,
        "lines per site and UTC hour (log color scale); white: 0 lines; "
        "hatched red: hour incomplete",
    ]
    incomplete = sorted(set(status.missing) | set(status.unbalanced))
    return heatmaps_png(
        title,
        labels,
        panels,
        {h: f"{h:02d}" for h in range(0, 24, 3)},
        "hour (UTC)",
        hatched_columns=[hours.index(h) for h in incomplete],
    )
