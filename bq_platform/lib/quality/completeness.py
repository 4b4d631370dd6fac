"""The daily completeness report: per site and UTC hour, source lines, pageviews, rejected.

Built from ``pageviews_audit`` rows (one per site and hour) and the day's hour manifests, so a
gap (an hour with no data, an hour not built, an unbalanced hour) is seen at a glance:

- :func:`hour_status`: per hour, built / audited / balanced, and the verdict of the day;
- :func:`markdown_report`: a bar line per site and measure (24 cells, one per hour) and the
  full table per site and hour, for Dagster's Markdown metadata;
- :func:`render_png`: the same as PNG heat maps, sites x hours (numpy and Pillow).

Dagster's UI sanitizes Markdown images to ``http(s)`` sources (``data:`` URIs are dropped): the
PNG is written to the object store, and the report embeds it by URL when
``BQ_PLATFORM_REPORTS_URL`` says where a browser reads that folder (``make dev`` serves it on
loopback; ``defs/resources.py``); the text bar chart is always there.
"""

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from bq_platform.lib.core.hours import day_hours, hour_label

MEASURES = ("source_lines", "pageviews", "rejected")
_BARS = "▁▂▃▄▅▆▇█"
_ZERO = "·"


@dataclasses.dataclass(frozen=True)
class DayStatus:
    """Completeness of one UTC day.

    Attributes:
        day: the UTC day.
        missing: hours with no audit rows from their current build (not built or not audited).
        unbalanced: hours where some site's accounting identity does not hold.
        empty: built hours with no source line at all (a gap in the data, not an error).
    """

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


def by_site_hour(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Mapping[str, Any]]]:
    """``{site: {hour label: audit row}}``."""
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["site"], {})[_label(row["hour"])] = row
    return out


def hour_status(
    day: dt.date, rows: Sequence[Mapping[str, Any]], fingerprints: Mapping[str, str]
) -> DayStatus:
    """Completeness of ``day`` from its audit rows and ``{hour label: manifest fingerprint}``.

    An hour counts as audited when it has rows whose fingerprint is its manifest's; a built
    hour with no site at all (nothing ever landed for any site) has no rows and counts as
    audited and empty.
    """
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
        if any(r["source_lines"] != _accounted(r) for r in hour_rows):
            unbalanced.append(hour)
        if sum(r["source_lines"] for r in hour_rows) == 0:
            empty.append(hour)
    return DayStatus(day, tuple(missing), tuple(unbalanced), tuple(empty))


def _accounted(row: Mapping[str, Any]) -> int:
    return sum(
        row[k] for k in ("pageviews", "non_page_hits", "rejected", "duplicates", "out_of_window")
    )


def bar_line(values: Sequence[int]) -> str:
    """One character per value: ``·`` for 0, else a bar scaled to the largest value."""
    top = max(values, default=0)
    if top <= 0:
        return _ZERO * len(values)
    return "".join(
        _ZERO if v <= 0 else _BARS[min(len(_BARS) - 1, (v * len(_BARS) - 1) // top)] for v in values
    )


def markdown_report(day: dt.date, rows: Sequence[Mapping[str, Any]], status: DayStatus) -> str:
    """Markdown: verdict, a 24-hour bar chart per site and measure, and the table per site and
    hour (hours as ``HH``, UTC)."""
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
        "Hours 00-23 left to right; `·` = 0; bars scale to each line's largest hour.",
        "",
        "| site | measure | 00 ··· 23 | total |",
        "|---|---|---|---|",
    ]
    for site, per_hour in sorted(sites.items()):
        for measure in MEASURES:
            values = [int(per_hour.get(h, {}).get(measure, 0)) for h in hours]
            lines.append(f"| {site} | {measure} | `{bar_line(values)}` | {sum(values)} |")
    if not sites:
        lines.append("| (no site) | | `" + _ZERO * 24 + "` | 0 |")
    lines += [
        "",
        "| site | hour | " + " | ".join(MEASURES) + " | balanced |",
        "|---|---|---|---|---|---|",
    ]
    for site, per_hour in sorted(sites.items()):
        for hour in hours:
            row = per_hour.get(hour)
            if row is None:
                lines.append(f"| {site} | {hour[-2:]} | - | - | - | **not audited** |")
                continue
            ok = row["source_lines"] == _accounted(row)
            values = " | ".join(str(row[m]) for m in MEASURES)
            lines.append(f"| {site} | {hour[-2:]} | {values} | {'yes' if ok else '**NO**'} |")
    return "\n".join(lines)


#: Sites drawn one row each in the PNG; the rest are summed into one "other sites" row.
PNG_MAX_SITES = 40


def site_matrix(
    day: dt.date, rows: Sequence[Mapping[str, Any]], max_sites: int = PNG_MAX_SITES
) -> tuple[list[str], dict[str, list[list[int]]]]:
    """Row labels and, per measure, a ``sites x 24`` matrix of lines per site and UTC hour.

    Sites are ordered by source lines (largest first); beyond ``max_sites`` the rest are summed
    into one row ``other sites (N)``, so the picture's size does not grow with the sites.
    """
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
    for measure in MEASURES:
        matrix = [[int(sites[s].get(h, {}).get(measure, 0)) for h in hours] for s in shown]
        if rest:
            matrix.append(
                [sum(int(sites[s].get(h, {}).get(measure, 0)) for s in rest) for h in hours]
            )
        matrices[measure] = matrix
    return labels, matrices


def render_png(day: dt.date, rows: Sequence[Mapping[str, Any]], status: DayStatus) -> bytes:
    """A PNG heat map per measure (source lines, pageviews, rejected): one row per site (at
    most :data:`PNG_MAX_SITES`, see :func:`site_matrix`), one column per UTC hour, color = lines
    (log scale), white = 0; hours not built or audited are hatched red.

    One image per measure costs the same for 2 or 2,000 sites (a bar chart per site took 20 s
    a day for 50 sites, docs/PERFORMANCE.md); drawn with numpy and Pillow
    (:mod:`bq_platform.lib.quality.heatmap`): ~50 ms, where a matplotlib figure took ~1 s (issue 9).
    """
    import numpy as np

    from bq_platform.lib.quality.heatmap import Panel, heatmaps_png

    labels, matrices = site_matrix(day, rows)
    labels = labels or ["(no site)"]
    hours = [hour_label(h) for h in day_hours(day)]
    panels = []
    for measure in MEASURES:
        values = np.array(matrices[measure] or [[0] * 24], dtype=float)
        panels.append(Panel(f"{measure} (total {int(values.sum()):,})", values))
    missing = f"; not built/audited: {', '.join(h[-2:] for h in status.missing)}"
    title = [
        f"Completeness {day}: {status.complete_hours}/24 hours complete"
        + (missing if status.missing else ""),
        "lines per site and UTC hour (log color scale); white: 0 lines; "
        "hatched red: hour not built or not audited",
    ]
    return heatmaps_png(
        title,
        labels,
        panels,
        {h: f"{h:02d}" for h in range(0, 24, 3)},
        "hour (UTC)",
        hatched_columns=[hours.index(h) for h in status.missing],
    )
