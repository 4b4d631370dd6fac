"""The daily completeness report: per site and UTC hour, source lines, pageviews, rejected.

Built from ``pageviews_audit`` rows (one per site and hour) and the day's hour manifests, so a
gap (an hour with no data, an hour not built, an unbalanced hour) is seen at a glance:

- :func:`hour_status`: per hour, built / audited / balanced, and the verdict of the day;
- :func:`markdown_report`: a bar line per site and measure (24 cells, one per hour) and the
  full table per site and hour, for Dagster's Markdown metadata;
- :func:`render_png`: the same as a PNG chart (matplotlib, Agg backend, no display needed).

Dagster's UI sanitizes Markdown images to ``http(s)`` sources (``data:`` URIs are dropped), so
the picture in the UI is the text bar chart; the PNG is written to the object store and linked
by path.
"""

import dataclasses
import datetime as dt
import io
from collections.abc import Mapping, Sequence
from typing import Any

from bq_platform.lib.hours import day_hours, hour_label

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


def render_png(day: dt.date, rows: Sequence[Mapping[str, Any]], status: DayStatus) -> bytes:
    """A PNG: one panel per site, hourly source lines, pageviews and rejected lines as bars;
    hours not built or audited are shaded red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [hour_label(h) for h in day_hours(day)]
    sites = by_site_hour(rows) or {"(no site)": {}}
    fig, axes = plt.subplots(
        len(sites), 1, figsize=(10, 2.4 * len(sites) + 0.6), squeeze=False, sharex=True
    )
    x = list(range(24))
    width = 0.28
    for ax, (site, per_hour) in zip(axes[:, 0], sorted(sites.items()), strict=True):
        for i, (measure, color) in enumerate(
            zip(MEASURES, ("#9aa5b1", "#2b6cb0", "#c53030"), strict=True)
        ):
            values = [int(per_hour.get(h, {}).get(measure, 0)) for h in hours]
            ax.bar([v + (i - 1) * width for v in x], values, width, label=measure, color=color)
        for h in status.missing:
            ax.axvspan(hours.index(h) - 0.5, hours.index(h) + 0.5, color="#fed7d7", zorder=0)
        ax.set_title(site, loc="left", fontsize=10)
        ax.set_ylabel("lines")
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8, ncols=3)
    axes[-1, 0].set_xticks(x, [f"{h:02d}" for h in x])
    axes[-1, 0].set_xlabel(f"hour of {day} (UTC)")
    fig.suptitle(f"Completeness {day}: {status.complete_hours}/24 hours complete", fontsize=11)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()
