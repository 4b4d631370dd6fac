"""The completeness report: hour status, the text bars and the PNG; and hour runs."""

import datetime as dt
import struct

from bq_platform.lib.core.hours import day_hours, hour_label
from bq_platform.lib.planning import contiguous
from bq_platform.lib.quality import heatmap
from bq_platform.lib.quality.completeness import (
    bar_line,
    hour_status,
    markdown_report,
    render_png,
    site_matrix,
)

DAY = dt.date(1995, 8, 1)
HOURS = day_hours(DAY)


def row(hour: dt.datetime, source: int, pages: int, rejected: int = 0, fp: str = "f") -> dict:
    return {
        "site": "example.org",
        "hour": hour.replace(tzinfo=None),  # warehouses may return naive UTC
        "source_lines": source,
        "pageviews": pages,
        "non_page_hits": source - pages - rejected,
        "rejected": rejected,
        "duplicates": 0,
        "out_of_window": 0,
        "fingerprint": fp,
    }


def test_bar_line_marks_zero_hours_as_gaps():
    assert bar_line([0, 0]) == "··"
    line = bar_line([0, 10, 5, 0])
    assert line[0] == line[3] == "·" and line[1] == "█" and line[2] not in "·█"


def test_hour_status_names_missing_and_unbalanced_hours():
    fingerprints = {hour_label(h): "f" for h in HOURS[:23]}  # 23:00 never built
    rows = [row(HOURS[4], 10, 6), row(HOURS[5], 10, 6, fp="old")]
    bad = dict(row(HOURS[6], 10, 6))
    bad["pageviews"] = 1  # 10 != 1 + 4
    status = hour_status(DAY, [*rows, bad], fingerprints)
    assert status.missing == ("1995-08-01T05", "1995-08-01T23")  # stale audit, not built
    assert status.unbalanced == ("1995-08-01T06",)
    assert status.complete_hours == 21 and not status.complete
    text = markdown_report(DAY, [*rows, bad], status)
    assert "21/24 hours complete" in text and "not built/audited: 05, 23" in text


def test_render_png_writes_a_png():
    status = hour_status(DAY, [row(HOURS[4], 10, 6)], {hour_label(h): "f" for h in HOURS})
    assert status.complete and status.complete_hours == 24
    assert render_png(DAY, [row(HOURS[4], 10, 6)], status)[:8] == b"\x89PNG\r\n\x1a\n"


def test_contiguous_splits_hours_into_runs():
    runs = contiguous([HOURS[1], HOURS[2], HOURS[5], HOURS[6], HOURS[9]])
    assert [[h.hour for h in r] for r in runs] == [[1, 2], [5, 6], [9]]


def test_site_matrix_keeps_the_largest_sites_and_sums_the_rest():
    rows = [
        {**row(HOURS[h], 10 * (s + 1), s, fp="f"), "site": f"s{s:02d}"}
        for s in range(5)
        for h in (2, 3)
    ]
    labels, matrices = site_matrix(DAY, rows, max_sites=3)
    assert labels == ["s04", "s03", "s02", "other sites (2)"]  # by source lines, then the rest
    assert matrices["source_lines"][0][2:4] == [50, 50]
    assert matrices["source_lines"][3][2:4] == [10 + 20, 10 + 20]
    assert matrices["pageviews"][3][:4] == [0, 0, 0 + 1, 0 + 1]
    assert sum(map(sum, matrices["source_lines"])) == sum(r["source_lines"] for r in rows)
    assert site_matrix(DAY, rows, max_sites=4)[0][-1] == "s00"  # one left over: drawn as itself


def test_render_png_size_does_not_grow_with_sites():
    many = [{**row(HOURS[1], 5, 2), "site": f"site{s:04d}"} for s in range(400)]
    status = hour_status(DAY, many, {hour_label(h): "f" for h in HOURS})
    png = render_png(DAY, many, status)
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and height < 1400 and width > height / 2
    assert 400 < width <= 1300  # the browser test wants > 400 px; the UI's report is ~1350


def test_render_png_hatches_the_incomplete_hours_and_names_them(monkeypatch):
    drawn = {}

    def heatmaps_png(title, row_labels, panels, column_labels, x_label, hatched_columns=()):
        drawn.update(title=title, rows=row_labels, panels=panels, hatched=hatched_columns)
        return b"png"

    monkeypatch.setattr(heatmap, "heatmaps_png", heatmaps_png)
    fingerprints = {hour_label(h): "f" for h in HOURS[:23]}  # 23:00 never built
    bad = {**row(HOURS[6], 10, 6), "pageviews": 1}
    rows = [row(HOURS[4], 10, 6, rejected=1), bad]
    assert render_png(DAY, rows, hour_status(DAY, rows, fingerprints)) == b"png"
    assert drawn["hatched"] == [6, 23]
    assert "22/24 hours complete" in drawn["title"][0]
    assert "not built/audited: 23" in drawn["title"][0] and "unbalanced: 06" in drawn["title"][0]
    assert drawn["rows"] == ["example.org"]
    assert [p.values[0][4] for p in drawn["panels"]] == [10, 6, 1]  # source, pageviews, rejected


def test_the_report_shows_human_and_bot_pages_apart():
    """The day's line and the table give human and bot pages; a row built before the audit
    table had them shows ``-`` and its pages as not classified."""
    classified = {**row(HOURS[4], 10, 6), "human_pageviews": 4, "bot_pageviews": 2}
    older = {**row(HOURS[5], 10, 3), "human_pageviews": None, "bot_pageviews": None}
    status = hour_status(DAY, [classified, older], {hour_label(h): "f" for h in HOURS})
    text = markdown_report(DAY, [classified, older], status)
    assert "Pageviews 9 (human 4, bot 2, not classified 3)." in text
    header = "| site | hour | source_lines | pageviews | human_pageviews | bot_pageviews |"
    assert header in text
    assert "| example.org | 04 | 10 | 6 | 4 | 2 | 0 | yes |" in text
    assert "| example.org | 05 | 10 | 3 | - | - | 0 | yes |" in text
    assert "| example.org | bot_pageviews | `" in text
    labels, matrices = site_matrix(DAY, [classified, older])
    assert matrices["bot_pageviews"][0][4:6] == [2, 0]
    assert render_png(DAY, [classified, older], status)[:8] == b"\x89PNG\r\n\x1a\n"
