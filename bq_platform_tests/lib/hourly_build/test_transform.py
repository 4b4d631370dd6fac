"""The Spark transform, checked line by line against the Python reference of each rule
(:mod:`bq_platform_tests.lib.hourly_build.transform_reference`): the same category, reason and
columns for
the fast path's edges, odd lines, real servers' variants and every one of the 81,744 real lines.
The transform's frame itself (schema, time zone, generated code): ``test_transform_frame.py``.
"""

import datetime as dt
import gzip

import pytest
from pyspark.sql import functions as F

from bq_platform.lib.core import logformat as lf
from bq_platform.lib.hourly_build.transform import (
    CATEGORIES,
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
)
from bq_platform_tests.lib.hourly_build.transform_reference import (
    COMPARED,
    HOUR,
    ODD_LINES,
    reference,
    run,
)
from bq_platform_tests.lib.server_variants import VARIANTS

#: Edges of the fast path (transform.FAST_LINE_PATTERN): lines it must read as LINE_PATTERN does,
#: or leave to LINE_PATTERN (tabs and double blanks in the request, no or odd protocol, an empty
#: target, escapes, vhost-like hosts, brackets, trailing blanks, extra fields).
FAST_PATH_LINES: list[bytes] = [
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET\t/tab.html HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /a.html\tHTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET  /two-blanks.html HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /a.html  HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /HTTP/1.0 HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /a HTTP/1.0 HTTP/1.1" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /a HTTP/1.x" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET " 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /esc\\"q.html HTTP/1.0" 200 5',
    b'h:80 - - [30/Aug/1995:10:00:00 -0400] "GET /vhost-like-host.html HTTP/1.0" 200 5',
    b'v.example:80 h - - [30/Aug/1995:10:00:00 -0400] "GET /vhost.html HTTP/1.0" 200 5',
    b'h [x] - [30/Aug/1995:10:00:00 -0400] "GET /bracket-ident.html HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /trailing-blank.html HTTP/1.0" 200 5 ',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /extra.html HTTP/1.0" 200 5 "-" "ua" 0.003',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /ua-escape.html HTTP/1.0" 200 5 "-" "a\\"b"',
]


@pytest.fixture(scope="module")
def fast_path_rows(spark) -> list[dict]:
    return run(spark, FAST_PATH_LINES)


@pytest.mark.parametrize("index", range(len(FAST_PATH_LINES)))
def test_fast_path_edge_matches_reference(fast_path_rows, index: int) -> None:
    got = {k: fast_path_rows[index][k] for k in COMPARED}
    assert got == reference(FAST_PATH_LINES[index], HOUR, index + 1), FAST_PATH_LINES[index]


def test_fast_pattern_reads_as_line_pattern_where_it_matches() -> None:
    """Wherever FAST_LINE_PATTERN matches, LINE_PATTERN gives the same groups (Python ``re``,
    same dialect), over the real lines' shapes, the odd lines, the variants and the edges."""
    import re

    from bq_platform.lib.hourly_build.transform import FAST_LINE_PATTERN

    fast = re.compile(FAST_LINE_PATTERN, re.ASCII | re.DOTALL)
    lines = [raw.decode("utf-8", "replace") for raw in ODD_LINES + FAST_PATH_LINES]
    lines += [v.line for v in VARIANTS]
    matched = 0
    for line in lines:
        m = fast.fullmatch(line)
        if m is None:
            continue
        matched += 1
        full = lf.LINE_RE.fullmatch(line)
        assert full is not None, line
        host, ident, user, ts, request, method, target, protocol, status, size, ref, ua = m.groups()
        assert full.groups()[:10] == (None, host, ident, user, ts, request, status, size, ref, ua)
        assert full.group(11) is None
        req = lf.REQUEST_RE.fullmatch(request)
        assert req is not None and req.groups() == (method, target, protocol), line
    assert matched > 20


def test_spark_takes_the_fast_path_where_the_fast_pattern_matches(spark, access_logs) -> None:
    """The fast rewrite (``transform._fast_groups``) has its 15 parts exactly where
    FAST_LINE_PATTERN matches (Python ``re``): over the odd lines, the edges, the variants and
    the first real lines of each bundled log. A wrong replacement or separator would send every
    line down the slow path with the same results, so only this test sees it."""
    import re

    from bq_platform.lib.hourly_build.transform import _FAST_PARTS, FAST_LINE_PATTERN, _fast_groups

    fast = re.compile(FAST_LINE_PATTERN, re.ASCII | re.DOTALL)
    lines = [raw.decode("utf-8", "replace") for raw in ODD_LINES + FAST_PATH_LINES]
    lines += [v.line for v in VARIANTS]
    for path in sorted(access_logs.glob("*/*.log.gz")):
        lines += gzip.decompress(path.read_bytes()).decode("utf-8", "replace").split("\n")[:50]
    lines = [line for line in lines if "\n" not in line]  # the transform's one_line guard
    frame = spark.createDataFrame([(i, line) for i, line in enumerate(lines)], "i int, line string")
    rows = frame.select("i", F.size(_fast_groups(F.col("line"))).alias("n")).collect()
    parts = {r["i"]: r["n"] for r in rows}
    expected = {i: _FAST_PARTS if fast.fullmatch(line) else 1 for i, line in enumerate(lines)}
    assert parts == expected
    assert sum(n == _FAST_PARTS for n in parts.values()) > 100


@pytest.fixture(scope="module")
def odd_rows(spark) -> list[dict]:
    return run(spark, ODD_LINES)


@pytest.mark.parametrize("index", range(len(ODD_LINES)), ids=lambda i: f"line{i + 1}")
def test_odd_line_matches_reference(odd_rows, index: int) -> None:
    got = dict(odd_rows[index])
    assert got.pop("line_no") == index + 1
    assert got == reference(ODD_LINES[index], HOUR, index + 1), ODD_LINES[index]


def test_odd_lines_cover_every_category_and_reason(odd_rows) -> None:
    assert {r["category"] for r in odd_rows} == set(CATEGORIES)
    # the window's own reasons (before_first_partition, future_timestamp) need a window:
    # test_landing_build.py covers them
    assert {r["reason"] for r in odd_rows} - {None} == set(lf.REJECT_REASONS) | {
        lf.REASON_OUT_OF_WINDOW
    }


def test_expected_classes_of_some_odd_lines(odd_rows) -> None:
    """Spot checks that do not go through the reference (guards against a shared bug)."""
    by_line = {r["line_no"]: r for r in odd_rows}
    epa_ctrl = by_line[3]
    assert epa_ctrl["category"] == CATEGORY_PAGE
    assert epa_ctrl["page_path"] == "/docs/lead/support_docs/mets\x7f.save.html"
    nasa = by_line[2]
    assert (nasa["category"], nasa["http_protocol"]) == (CATEGORY_PAGE, None)
    assert by_line[4]["category"] == CATEGORY_NON_PAGE  # a 304 gif is a hit, not a page
    assert by_line[5]["response_bytes"] is None
    combined = by_line[19]
    assert combined["referrer"] == "http://www.example.com/a b.html"
    assert combined["user_agent"] == 'Mozilla/4.08 [en] (Win98; I ;Nav) "q" "odd" ua'
    assert combined["event_ts"] == dt.datetime(1995, 8, 30, 14, 55, 36, tzinfo=dt.UTC).timestamp()
    assert by_line[22]["category"] == CATEGORY_NON_PAGE  # request "-"
    assert by_line[25]["raw"].startswith("caf\ufffd ")  # invalid UTF-8 replaced
    assert by_line[27]["reason"] == lf.REASON_EMPTY_LINE
    assert by_line[32]["reason"] == lf.REASON_MALFORMED  # truncated last line


@pytest.fixture(scope="module")
def variant_rows(spark) -> list[dict]:
    return run(spark, [v.line for v in VARIANTS])


@pytest.mark.parametrize("index", range(len(VARIANTS)), ids=lambda i: VARIANTS[i].id)
def test_real_server_variant_matches_reference(variant_rows, index: int) -> None:
    """Spark reads each real-server variant as the Python reference does, and as expected."""
    variant = VARIANTS[index]
    got = dict(variant_rows[index])
    assert got.pop("line_no") == index + 1
    assert got == reference(variant.line.encode(), HOUR, index + 1), variant.line
    assert got["reason"] == variant.reason
    if variant.reason is None:
        assert got["category"] in (CATEGORY_PAGE, CATEGORY_NON_PAGE)
    names = {"target": None, "method": "http_method", "protocol": "http_protocol"}
    for key, value in variant.expected.items():
        column = names.get(key, key)
        if column in got:
            assert got[column] == value, (variant.id, key)


def test_timestamps_agree_with_python_parser(spark) -> None:
    texts = [
        "30/Aug/1995:15:27:00 -0400",
        "30/aug/1995:15:27:00 -0400",
        "30/AUG/1995:15:27:00 +0000",
        "29/Feb/1996:12:00:00 +0000",
        "29/Feb/1995:12:00:00 +0000",
        "31/Apr/1995:00:00:00 +0000",
        "30/Aug/1995:24:00:00 +0000",
        "30/Aug/1995:23:60:00 +0000",
        "30/Aug/1995:23:59:60 +0000",
        "30/Aug/1995:15:27:00 +1800",
        "30/Aug/1995:15:27:00 -1800",
        "30/Aug/1995:15:27:00 +1801",
        "30/Aug/1995:15:27:00 +1759",
        "30/Aug/1995:15:27:00 -0060",
        "30/Aug/1995:15:27:00 +0030",
        "30/Sept/1995:15:27:00 -0400",
        "3/Aug/1995:15:27:00 -0400",
        "30/Aug/95:15:27:00 -0400",
        "30/Aug/1995:15:27:00",
        "30/Aug/1995:15:27:00 Z",
        "30/Aug/1995:15:27:00 +04:00",
        " 30/Aug/1995:15:27:00 -0400",
        "30/Aug/1995:15:27:00 -0400 ",
        "30/Aug/0000:00:00:00 +0000",
        "01/Jan/0001:00:00:00 +0000",
        "01/Jan/0001:00:30:00 +0100",
        "31/Dec/9999:23:59:59 +0000",
        "31/Dec/9999:23:30:00 -0100",
        "01/Jan/1970:00:00:00 +0000",
        "31/Dec/1969:23:59:59 +0000",
    ]
    lines = [f'h - - [{t}] "GET / HTTP/1.0" 200 1' for t in texts]
    rows = run(spark, lines)
    for text, row in zip(texts, rows, strict=True):
        want = lf.parse_timestamp_field(text)
        got = row["event_ts"]
        assert (got, row["reason"] == lf.REASON_BAD_TIMESTAMP) == (
            None if want is None else int(want.timestamp()),
            want is None,
        ), text


def test_every_real_line_matches_reference(spark, access_logs) -> None:
    """All 81,744 bundled lines: same category, reason and columns as the Python reference.

    Each line's partition hour is its own UTC hour, except every 97th line, which is given the
    next hour so that out-of-window lines are exercised on real data too.
    """
    raws: list[bytes] = []
    for path in sorted(access_logs.glob("*/*.log.gz")):
        raws += gzip.decompress(path.read_bytes()).split(b"\n")[:-1]
    labels = []
    for i, raw in enumerate(raws):
        ts = lf.parse_clf_timestamp(raw.decode("utf-8", errors="replace"))
        assert ts is not None
        if i % 97 == 0:
            ts += dt.timedelta(hours=1)
        labels.append(f"{ts:%Y-%m-%dT%H}")
    rows = run(spark, raws, labels)
    assert len(rows) == len(raws) == 81_744
    mismatches = []
    counts = dict.fromkeys(CATEGORIES, 0)
    for i, (raw, row) in enumerate(zip(raws, rows, strict=True)):
        got = dict(row)
        assert got.pop("line_no") == i + 1
        counts[got["category"]] += 1
        want = reference(raw, labels[i], i + 1)
        if got != want:
            mismatches.append((raw, got, want))
    assert mismatches[:3] == []
    assert counts[CATEGORY_OUT_OF_WINDOW] == len(range(0, len(raws), 97))
    assert counts[CATEGORY_REJECTED] == 0
    assert counts[CATEGORY_PAGE] > 25_000 and counts[CATEGORY_NON_PAGE] > 45_000
