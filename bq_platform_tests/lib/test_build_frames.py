"""The build's per-line rows (:func:`bq_platform.lib.build_frames.slim`): what each category of
line keeps for the outputs and the per-file counts."""

from pyspark.sql import functions as F

from bq_platform.lib import logformat as lf
from bq_platform.lib.build_frames import slim
from bq_platform.lib.transform import (
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    transform_lines,
)
from bq_platform_tests.lib.test_transform import HOUR, KEY, SITE, frame

LINES = {
    CATEGORY_PAGE: '141.243.1.172 - - [30/Aug/1995:10:53:25 -0400] "GET /Software.html HTTP/1.0" '
    "200 1497",
    CATEGORY_NON_PAGE: 'h - - [30/Aug/1995:10:00:08 -0400] "GET /images/logo.gif HTTP/1.0" 200 9',
    CATEGORY_REJECTED: "not a log line",
    CATEGORY_OUT_OF_WINDOW: 'h - - [30/Aug/1995:12:00:00 -0400] "GET /a.html HTTP/1.0" 200 5',
}


def slim_rows(spark) -> dict[str, dict]:
    """``slim`` of one line per category, by category, as the build calls it."""
    lines = frame(spark, list(LINES.values())).withColumn("file_no", F.lit(7))
    rows = slim(transform_lines(lines, visitor_key=KEY, keep=["file_no"])).collect()
    return {r["category"]: r.asDict() for r in rows}


def test_every_line_keeps_its_file_number_line_and_category(spark) -> None:
    rows = slim_rows(spark)
    assert sorted(rows) == sorted(LINES)
    for line_no, category in enumerate(LINES, 1):
        assert (rows[category]["file_no"], rows[category]["line_no"]) == (7, line_no)


def test_a_non_page_line_keeps_no_text(spark) -> None:
    """Non-page lines are most lines; in the uncompressed cache every text costs its bytes."""
    row = slim_rows(spark)[CATEGORY_NON_PAGE]
    texts = {k: v for k, v in row.items() if isinstance(v, str) and k != "category"}
    assert texts == {}
    assert row["in_sample"] is False


def test_a_page_keeps_its_columns_but_not_the_file_or_raw_text(spark) -> None:
    row = slim_rows(spark)[CATEGORY_PAGE]
    assert (row["site"], row["hour_label"], row["page_path"]) == (SITE, HOUR, "/Software.html")
    assert row["event_id"] and row["visitor_id"]
    assert (row["data_key"], row["raw"], row["reason"]) == (None, None, None)


def test_a_dead_letter_keeps_what_its_row_needs(spark) -> None:
    rows = slim_rows(spark)
    for category, reason in (
        (CATEGORY_REJECTED, lf.REASON_MALFORMED),
        (CATEGORY_OUT_OF_WINDOW, lf.REASON_OUT_OF_WINDOW),
    ):
        row = rows[category]
        assert (row["site"], row["hour_label"], row["data_key"]) == (
            SITE,
            HOUR,
            "landing/x.log.gz",
        )
        assert (row["raw"], row["reason"]) == (LINES[category], reason)
        assert row["page_path"] is None
