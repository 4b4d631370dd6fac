"""The Spark transform, checked line by line against the Python reference of each rule.

The reference for a line is built from :func:`logformat.parse_line`, :func:`pages.is_page` and
:func:`pseudonymize.visitor_id`; the Spark transform must give the same category, reason and
columns for odd lines and for every one of the 81,744 real lines.
"""

import datetime as dt
import gzip
import hashlib
from collections.abc import Sequence

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bq_platform.lib import logformat as lf
from bq_platform.lib.pages import is_page
from bq_platform.lib.pseudonymize import in_sample, visitor_id
from bq_platform.lib.transform import (
    CATEGORIES,
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    OUTPUT_COLUMNS,
    PAGEVIEW_COLUMN_NAMES,
    transform_lines,
)
from bq_platform_tests.lib.server_variants import VARIANTS

KEY = "test-visitor-key"
SHA = "ab" * 32
SITE = "epa.gov"
HOUR = "1995-08-30T14"  # 10:xx -0400

COMPARED = (
    "category",
    "reason",
    "event_id",
    "event_ts",
    "event_date",
    "visitor_id",
    "page_path",
    "query_string",
    "http_method",
    "http_protocol",
    "status",
    "response_bytes",
    "referrer",
    "user_agent",
    "vhost",
    "extra_fields",
    "in_sample",
    "raw",
)


def frame(
    spark, lines: Sequence[bytes | str], hour_labels: Sequence[str] | str = HOUR
) -> DataFrame:
    """Transform input: raw lines as exact bytes (invalid UTF-8 included), line_no 1..n."""
    raws = [x.encode("utf-8") if isinstance(x, str) else x for x in lines]
    labels = [hour_labels] * len(raws) if isinstance(hour_labels, str) else list(hour_labels)
    table = pa.table(
        {
            "site": [SITE] * len(raws),
            "hour_label": labels,
            "data_key": ["landing/x.log.gz"] * len(raws),
            "file_sha256": [SHA] * len(raws),
            "line_no": pa.array(range(1, len(raws) + 1), pa.int64()),
            "raw_bytes": pa.array(raws, pa.binary()),
        }
    )
    # binary -> string keeps the bytes as they are, like the text reader does
    return spark.createDataFrame(table).withColumn("raw", F.col("raw_bytes").cast("string"))


def reference(raw: bytes, hour_label: str, line_no: int, key: str = KEY) -> dict:
    """What the transform must output for one line, from the Python reference rules."""
    text = raw.decode("utf-8", errors="replace")
    parsed = lf.parse_line(text)
    request = parsed.parsed_request
    row = {
        "raw": text,
        "reason": parsed.reason,
        "event_id": None,
        "visitor_id": None,
        "event_ts": None,
        "event_date": None,
        "in_sample": False,
        "status": parsed.status,
        "response_bytes": parsed.response_bytes,
        "referrer": parsed.referrer,
        "user_agent": parsed.user_agent,
        "vhost": parsed.vhost,
        "extra_fields": parsed.extra_fields,
        "http_method": request.method if request else None,
        "page_path": request.path if request else None,
        "query_string": request.query if request else None,
        "http_protocol": request.protocol if request else None,
    }
    ts = parsed.timestamp
    if ts is not None:
        row["event_ts"] = int(ts.timestamp())  # compared as Unix seconds (see run())
        row["event_date"] = ts.date()
    if parsed.reason is not None:
        row["category"] = CATEGORY_REJECTED
        return row
    assert ts is not None
    if f"{ts:%Y-%m-%dT%H}" != hour_label:
        row["category"], row["reason"] = CATEGORY_OUT_OF_WINDOW, lf.REASON_OUT_OF_WINDOW
    elif is_page(row["http_method"], row["page_path"], parsed.status):
        row["category"] = CATEGORY_PAGE
        row["visitor_id"] = visitor_id(key, parsed.host)
        row["in_sample"] = in_sample(row["visitor_id"])
        row["event_id"] = hashlib.sha256(f"{SHA}:{line_no}".encode()).hexdigest()
    else:
        row["category"] = CATEGORY_NON_PAGE
    return row


def run(spark, lines: Sequence[bytes | str], hour_labels: Sequence[str] | str = HOUR) -> list[dict]:
    """Transform ``lines``; ``event_ts`` comes back as Unix seconds.

    (PySpark turns a TIMESTAMP into a naive datetime in the *Python process's* local zone, and
    cannot represent year 1 in zones west of UTC, so instants are compared as numbers.)
    """
    out = transform_lines(frame(spark, lines, hour_labels), visitor_key=KEY)
    columns = [F.unix_seconds(c).alias(c) if c == "event_ts" else F.col(c) for c in COMPARED]
    rows = out.select("line_no", *columns).collect()
    return [r.asDict() for r in sorted(rows, key=lambda r: r["line_no"])]


ODD_LINES: list[bytes] = [
    # real lines (EPA, NASA)
    b'141.243.1.172 - - [30/Aug/1995:10:53:25 -0400] "GET /Software.html HTTP/1.0" 200 1497',
    b'in24.inetnebr.com - - [30/Aug/1995:10:00:01 -0400] "GET /shuttle/missions/sts-68/news/'
    b'sts-68-mcc-05.txt" 200 1839',
    b'ad12-049.compuserve.com - - [30/Aug/1995:10:27:00 -0400] "GET /docs/lead/support_docs/'
    b'mets\x7f.save.html HTTP/1.0" 200 56',
    b'uplherc.upl.com - - [30/Aug/1995:10:00:08 -0400] "GET /images/ksclogo-medium.gif" 304 0',
    b'wpbfl2-45.gate.net - - [30/Aug/1995:10:54:37 -0400] "GET /Access/ HTTP/1.0" 302 -',
    b'h - - [30/Aug/1995:10:00:00 -0400] "POST /cgi-bin/waisgate HTTP/1.0" 200 -',
    b'h - - [30/Aug/1995:10:00:00 -0400] "HEAD /index.html HTTP/1.0" 200 0',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /missing.html HTTP/1.0" 404 -',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /cgi-bin/broken HTTP/1.0" 500 0',
    # URLs with spaces, quotes, queries, CR
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /my docs/a file.html HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /my docs/a file.html" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /say "hi" there.html?q="x" HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /x" 200 3" 404 7',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /a.html? HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /crlf.html HTTP/1.0" 200 5\r',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /a\rb.html HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /nul\x00.html HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /soh\x01.html HTTP/1.0" 200 5',
    # Combined Log Format, IPv6
    b'2001:db8::7 - alice [30/Aug/1995:07:55:36 -0700] "GET /start.html?x=1 HTTP/1.1" 200 2326'
    b' "http://www.example.com/a b.html" "Mozilla/4.08 [en] (Win98; I ;Nav) \\"q\\" "odd" ua"',
    b'::1 - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.1" 304 - "-" "-"',
    b'::1 - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.1" 200 5 "" ""',
    # requests that are not METHOD target: non-page hits
    b'h - - [30/Aug/1995:10:00:00 -0400] "-" 408 -',
    b'h - - [30/Aug/1995:10:00:00 -0400] "" 400 0',
    b'h - - [30/Aug/1995:10:00:00 -0400] "\x16\x03\x01" 400 0',
    # non-UTF-8
    b'caf\xe9 - - [30/Aug/1995:10:00:00 -0400] "GET /\xff\xfe.html HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /\xe2\x82.html HTTP/1.0" 200 5',
    # rejected
    b"",
    b"   \t",
    b"\r",
    b"garbage",
    b"\xff\xfe\xfd",
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /trunc',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" 200 5 "http://r" "Moz',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" 2000 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" - 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" 200 5k',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" 200 99999999999999999999',
    b'h - - [30/Aug/1995 10:00:00 -0400] "GET / HTTP/1.0" 200 5',
    b'h - - [31/Sep/1995:10:00:00 -0400] "GET / HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 +1900] "GET / HTTP/1.0" 200 5',
    b'h - - [01/Jan/0001:00:30:00 +0100] "GET / HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:00:00 -0400] "GET /a\nb HTTP/1.0" 200 5',
    # out of the partition's hour (14 UTC)
    b'h - - [30/Aug/1995:09:59:59 -0400] "GET / HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:11:00:00 -0400] "GET / HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:14:30:00 +0000] "GET /pic.gif HTTP/1.0" 200 5',
    b'h - - [30/Aug/1995:10:30:00 +0000] "GET / HTTP/1.0" 200 5',
]

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

    from bq_platform.lib.transform import FAST_LINE_PATTERN

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

    from bq_platform.lib.transform import _FAST_PARTS, FAST_LINE_PATTERN, _fast_groups

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


def test_result_does_not_depend_on_the_session_time_zone(spark) -> None:
    lines = [ODD_LINES[0], ODD_LINES[18], ODD_LINES[-1], ODD_LINES[-3]]
    expected = run(spark, lines)
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Pacific/Kiritimati")  # UTC+14
    try:
        out = transform_lines(frame(spark, lines), visitor_key=KEY)
        # compare instants, not their rendering in the session zone
        got = out.select(
            "line_no",
            "category",
            "reason",
            "event_date",
            F.unix_seconds("event_ts").alias("secs"),
        ).collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    got_rows = sorted(got, key=lambda r: r["line_no"])
    for want, row in zip(expected, got_rows, strict=True):
        assert (row["category"], row["reason"], row["event_date"]) == (
            want["category"],
            want["reason"],
            want["event_date"],
        )
        assert row["secs"] == want["event_ts"]


def test_schema_and_one_row_per_line(spark) -> None:
    inputs = frame(spark, ODD_LINES * 3)
    out = transform_lines(inputs, visitor_key=KEY)
    assert tuple(out.columns) == OUTPUT_COLUMNS
    types = {f.name: f.dataType.simpleString() for f in out.schema.fields}
    assert {c: types[c] for c in PAGEVIEW_COLUMN_NAMES} == {
        "event_id": "string",
        "event_ts": "timestamp",
        "event_date": "date",
        "site": "string",
        "visitor_id": "string",
        "page_path": "string",
        "query_string": "string",
        "http_method": "string",
        "http_protocol": "string",
        "status": "bigint",
        "response_bytes": "bigint",
        "referrer": "string",
        "user_agent": "string",
        "vhost": "string",
        "extra_fields": "string",
    }
    line_nos = [r["line_no"] for r in out.select("line_no").collect()]
    assert sorted(line_nos) == list(range(1, 3 * len(ODD_LINES) + 1))


#: HotSpot compiles no method over 8,000 bytes of bytecode by default (DontCompileHugeMethods):
#: a fused transform above it runs interpreted, at about 1.7x the CPU time. The fast path puts
#: the build's transform over it, so the JVMs run with JIT_HUGE_METHODS (lib/spark.py); the
#: generated code must still stay within one method's bytecode (64 KiB), and not grow unnoticed.
JIT_HUGE_METHOD_LIMIT = 8000
GENERATED_METHOD_BUDGET = 12_000


def max_generated_method_bytes(spark, frame_: DataFrame) -> int:
    """Largest method Spark's whole-stage codegen generates for ``frame_`` (AQE off: the
    adaptive plan is only final at run time)."""
    previous = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        subtrees = frame_._jdf.queryExecution().debug().codegenToSeq()
        sizes = [subtrees.apply(i)._3().maxMethodCodeSize() for i in range(subtrees.size())]
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", previous)
    assert sizes, "no whole-stage codegen"
    return max(sizes)


def test_generated_code_is_jit_compiled(spark, tmp_path) -> None:
    """The fused parse (alone and as the build uses it) is JIT-compiled: either it stays under
    HotSpot's method size limit, or every JVM of the build runs with JIT_HUGE_METHODS.

    Read from Parquet, as the build reads files: an in-memory frame plans differently.
    """
    from bq_platform.lib.build_frames import slim
    from bq_platform.lib.spark import JIT_HUGE_METHODS, spark_config

    lines = (
        frame(spark, ODD_LINES[:2])
        .drop("raw_bytes")
        .select("*", F.lit(0).alias("file_no"), F.lit(0).alias("unit_no"))
    )
    lines.write.parquet(str(tmp_path / "lines"))
    out = transform_lines(
        spark.read.parquet(str(tmp_path / "lines")),
        visitor_key=KEY,
        keep=["file_no", "unit_no"],
    )
    largest = max(
        max_generated_method_bytes(spark, out), max_generated_method_bytes(spark, slim(out))
    )
    assert largest < GENERATED_METHOD_BUDGET
    if largest >= JIT_HUGE_METHOD_LIMIT:
        for master in ("local[2]", "spark://host:7077", "yarn"):
            config = spark_config(master)
            assert JIT_HUGE_METHODS in config["spark.driver.extraJavaOptions"].split()
            assert JIT_HUGE_METHODS in config["spark.executor.extraJavaOptions"].split()
        jvm_flags = (
            spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
        )
        assert JIT_HUGE_METHODS in list(jvm_flags.getInputArguments())


def test_transform_maps_no_case_with_icu(spark) -> None:
    """No ``lower``/``upper``/``initcap`` in the transform's plan: Spark 4 maps their case with
    ICU, and the first call in a JVM initialises a title-case table for 1.2-1.3 s of one core
    while the other task threads wait (lib/pages.py, NOT_PAGE_PATH_PATTERN; docs/PERFORMANCE.md).
    """
    out = transform_lines(frame(spark, ODD_LINES[:2]), visitor_key=KEY)
    plan = out._jdf.queryExecution().analyzed().toString().lower()
    for function in ("lower(", "upper(", "initcap("):
        assert function not in plan


def test_kept_columns_pass_through_after_the_output_columns(spark) -> None:
    lines = frame(spark, ODD_LINES[:3]).withColumn("file_no", F.col("line_no").cast("int") * 10)
    out = transform_lines(lines, visitor_key=KEY, keep=["file_no"])
    assert out.columns == [*OUTPUT_COLUMNS, "file_no"]
    assert sorted((r["line_no"], r["file_no"]) for r in out.collect()) == [
        (1, 10),
        (2, 20),
        (3, 30),
    ]
    with pytest.raises(ValueError, match="file_id"):
        transform_lines(lines, visitor_key=KEY, keep=["file_id"])


def test_event_id_is_stable_and_names_file_and_line(spark) -> None:
    page = ODD_LINES[0]
    first = run(spark, [page, page])
    again = run(spark, [page, page])
    assert [r["event_id"] for r in first] == [r["event_id"] for r in again]
    assert first[1]["event_id"] == hashlib.sha256(f"{SHA}:2".encode()).hexdigest()
    assert first[0]["event_id"] != first[1]["event_id"]
    assert first[0]["visitor_id"] == first[1]["visitor_id"]


def test_missing_input_column_is_refused(spark) -> None:
    with pytest.raises(ValueError, match="file_sha256"):
        transform_lines(frame(spark, ODD_LINES[:1]).drop("file_sha256"), visitor_key=KEY)


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
