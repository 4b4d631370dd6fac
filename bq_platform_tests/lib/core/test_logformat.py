"""The Python reference parser of Common/Combined Log Format lines (no Spark here).

The Spark transform is checked against this reference line by line in test_transform.py.
"""

import datetime as dt
import gzip
import locale
import re

import pytest

from bq_platform.lib.core import logformat as lf
from bq_platform.lib.core.logformat import parse_clf_timestamp, parse_line, parse_request, unescape
from bq_platform_tests.lib.server_variants import VARIANTS, Variant

UTC = dt.UTC

# Lines copied from the bundled real logs (ITA EPA-HTTP and NASA-HTTP), then the odd cases.
EPA_CTRL = (
    "ad12-049.compuserve.com - - [30/Aug/1995:15:27:00 -0400] "
    '"GET /docs/lead/support_docs/mets\x7f.save.html HTTP/1.0" 200 56'
)
NASA_TWO_TOKEN = (
    "in24.inetnebr.com - - [01/Aug/1995:00:00:01 -0400] "
    '"GET /shuttle/missions/sts-68/news/sts-68-mcc-05.txt" 200 1839'
)
COMBINED = (
    '2001:db8::7 - alice [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif?x=1 HTTP/1.1" 200 2326 '
    '"http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav) \\"q\\" "odd" agent"'
)


@pytest.mark.parametrize(
    ("line", "reason", "expected"),
    [
        pytest.param(
            '141.243.1.172 - - [29/Aug/1995:23:53:25 -0400] "GET /Software.html HTTP/1.0" 200 1497',
            None,
            {
                "host": "141.243.1.172",
                "method": "GET",
                "target": "/Software.html",
                "protocol": "HTTP/1.0",
                "status": 200,
                "response_bytes": 1497,
                "timestamp": dt.datetime(1995, 8, 30, 3, 53, 25, tzinfo=UTC),
            },
            id="epa-plain",
        ),
        pytest.param(
            NASA_TWO_TOKEN,
            None,
            {
                "method": "GET",
                "target": "/shuttle/missions/sts-68/news/sts-68-mcc-05.txt",
                "protocol": None,
                "status": 200,
                "response_bytes": 1839,
            },
            id="nasa-http09-two-tokens",
        ),
        pytest.param(
            EPA_CTRL,
            None,
            {
                "target": "/docs/lead/support_docs/mets\x7f.save.html",
                "status": 200,
                "response_bytes": 56,
            },
            id="epa-url-with-DEL-control-char",
        ),
        pytest.param(
            'wpbfl2-45.gate.net - - [29/Aug/1995:23:54:37 -0400] "GET /Access/ HTTP/1.0" 302 -',
            None,
            {"status": 302, "response_bytes": None},
            id="bytes-dash",
        ),
        pytest.param(
            'h.example - - [30/Aug/1995:10:00:00 -0400] "POST /cgi-bin/waisgate HTTP/1.0" 500 0',
            None,
            {"method": "POST", "status": 500, "response_bytes": 0},
            id="post-5xx",
        ),
        pytest.param(
            'h.example - - [30/Aug/1995:10:00:00 -0400] "HEAD / HTTP/1.0" 404 -',
            None,
            {"method": "HEAD", "target": "/", "status": 404},
            id="head-4xx",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET /my docs/a file.html HTTP/1.0" 200 5',
            None,
            {"target": "/my docs/a file.html", "protocol": "HTTP/1.0"},
            id="url-with-spaces",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET /my docs/a file.html" 200 5',
            None,
            {"target": "/my docs/a file.html", "protocol": None},
            id="url-with-spaces-no-protocol",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET /say "hi" there HTTP/1.0" 200 5',
            None,
            {"target": '/say "hi" there', "status": 200},
            id="quotes-in-url",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET /x" 200 3" 404 7',
            None,
            {"target": '/x" 200 3', "status": 404, "response_bytes": 7},
            id="quote-status-lookalike-in-url-greedy",
        ),
        pytest.param(
            COMBINED,
            None,
            {
                "host": "2001:db8::7",
                "authuser": "alice",
                "target": "/apache_pb.gif?x=1",
                "referrer": "http://www.example.com/start.html",
                "user_agent": 'Mozilla/4.08 [en] (Win98; I ;Nav) "q" "odd" agent',
                "timestamp": dt.datetime(2000, 10, 10, 20, 55, 36, tzinfo=UTC),
            },
            id="combined-ipv6-agent-with-quotes-and-spaces",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" 200 5 "-" "-"',
            None,
            {"referrer": None, "user_agent": None},
            id="combined-dashes",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "-" 408 -',
            None,
            {"request": "-", "method": None, "status": 408},
            id="request-dash-not-a-request",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "" 400 0',
            None,
            {"request": "", "method": None},
            id="request-empty",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET /crlf HTTP/1.0" 200 5\r',
            None,
            {"target": "/crlf", "response_bytes": 5},
            id="trailing-cr-stripped",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET /a\rb HTTP/1.0" 200 5',
            None,
            {"target": "/a\rb"},
            id="cr-inside-url-stays",
        ),
        pytest.param(
            'caf\ufffd - - [30/Aug/1995:10:00:00 -0400] "GET /\ufffd\ufffd HTTP/1.0" 200 5',
            None,
            {"host": "caf\ufffd", "target": "/\ufffd\ufffd"},
            id="non-utf8-decoded-with-replacement",
        ),
        pytest.param("", lf.REASON_EMPTY_LINE, {}, id="empty"),
        pytest.param(" \t\r", lf.REASON_EMPTY_LINE, {}, id="whitespace-only"),
        pytest.param("GET / HTTP/1.0 garbage", lf.REASON_MALFORMED, {}, id="garbage"),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET /trunc',
            lf.REASON_MALFORMED,
            {},
            id="truncated-last-line",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" 200 5 "http://r" "Moz',
            lf.REASON_MALFORMED,
            {},
            id="truncated-combined",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" 2000 5',
            lf.REASON_BAD_STATUS,
            {},
            id="status-4-digits",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" OK 5',
            lf.REASON_BAD_STATUS,
            {},
            id="status-word",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" 200 12k',
            lf.REASON_BAD_BYTES,
            {},
            id="bytes-not-number",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" 200 99999999999999999999',
            lf.REASON_BAD_BYTES,
            {},
            id="bytes-overflow-int64",
        ),
        pytest.param(
            'h - - [30/Aug/1995 10:00:00 -0400] "GET / HTTP/1.0" 200 5',
            lf.REASON_BAD_TIMESTAMP,
            {"status": 200},
            id="timestamp-wrong-shape",
        ),
        pytest.param(
            'h - - [31/Sep/1995:10:00:00 -0400] "GET / HTTP/1.0" 200 5',
            lf.REASON_BAD_TIMESTAMP,
            {},
            id="timestamp-impossible-date",
        ),
        pytest.param(
            'h - - [30/Aug/1995:10:00:00 -0400] "GET /a\nb HTTP/1.0" 200 5',
            lf.REASON_MALFORMED,
            {},
            id="embedded-newline-is-not-one-line",
        ),
    ],
)
def test_parse_line(line: str, reason: str | None, expected: dict) -> None:
    _assert_parsed(line, reason, expected)


def _assert_parsed(line: str, reason: str | None, expected: dict) -> None:
    parsed = parse_line(line)
    assert parsed.reason == reason
    request = parsed.parsed_request
    actual = {
        "vhost": parsed.vhost,
        "extra_fields": parsed.extra_fields,
        "host": parsed.host,
        "authuser": parsed.authuser,
        "timestamp": parsed.timestamp,
        "request": parsed.request,
        "status": parsed.status,
        "response_bytes": parsed.response_bytes,
        "referrer": parsed.referrer,
        "user_agent": parsed.user_agent,
        "method": request.method if request else None,
        "target": request.target if request else None,
        "protocol": request.protocol if request else None,
    }
    assert {k: actual[k] for k in expected} == expected


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.id)
def test_real_server_variants(variant: Variant) -> None:
    """Apache common/combined/vhost_combined, %D, nginx main and $request_time, escapes..."""
    _assert_parsed(variant.line, variant.reason, variant.expected)
    if variant.reason is None:
        ts = parse_clf_timestamp(variant.line)  # the lander reads the hour the same way
        assert ts == dt.datetime(1995, 8, 30, 14, 55, 36, tzinfo=UTC)


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ('a \\"q\\" b', 'a "q" b'),
        ("a\\\\", "a\\"),
        ('a\\\\\\"b', 'a\\"b'),  # Apache's escape of a\"b
        ("\\x22 \\n \\", "\\x22 \\n \\"),  # other escapes stay
        ("plain", "plain"),
    ],
)
def test_unescape(field: str, expected: str) -> None:
    assert unescape(field) == expected


def test_rejected_lines_have_no_fields() -> None:
    parsed = parse_line("garbage")
    assert (parsed.host, parsed.timestamp, parsed.status) == (None, None, None)


@pytest.mark.parametrize(
    ("request_text", "expected"),
    [
        ("GET / HTTP/1.0", ("GET", "/", "HTTP/1.0")),
        ("GET /a b HTTP/1.1", ("GET", "/a b", "HTTP/1.1")),
        ("GET /a HTTP/1.0 HTTP/1.0", ("GET", "/a HTTP/1.0", "HTTP/1.0")),
        ("GET /x HTTP/2", ("GET", "/x", "HTTP/2")),
        ("GET /x http/1.0", ("GET", "/x http/1.0", None)),
        ("GET  HTTP/1.0", ("GET", " HTTP/1.0", None)),
        ("OPTIONS *", ("OPTIONS", "*", None)),
        ("-", None),
        ("", None),
        ("GET", None),
        ("GET ", None),
    ],
)
def test_parse_request(request_text: str, expected: tuple | None) -> None:
    parsed = parse_request(request_text)
    got = None if parsed is None else (parsed.method, parsed.target, parsed.protocol)
    assert got == expected


def test_request_path_and_query() -> None:
    request = parse_request("GET /a/b.html?x=1&y=?2 HTTP/1.0")
    assert request is not None
    assert (request.path, request.query) == ("/a/b.html", "x=1&y=?2")
    bare = parse_request("GET /a? HTTP/1.0")
    assert bare is not None and (bare.path, bare.query) == ("/a", "")
    plain = parse_request("GET /a HTTP/1.0")
    assert plain is not None and plain.query is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30/Aug/1995:15:27:00 -0400", dt.datetime(1995, 8, 30, 19, 27, tzinfo=UTC)),
        ("[30/Aug/1995:15:27:00 -0400]", dt.datetime(1995, 8, 30, 19, 27, tzinfo=UTC)),
        ("01/Aug/1995:00:00:01 -0400", dt.datetime(1995, 8, 1, 4, 0, 1, tzinfo=UTC)),
        ("01/Jan/2000:00:30:00 +0100", dt.datetime(1999, 12, 31, 23, 30, tzinfo=UTC)),
        ("30/aug/1995:15:27:00 +0000", dt.datetime(1995, 8, 30, 15, 27, tzinfo=UTC)),
        ("30/AUG/1995:15:27:00 +0000", dt.datetime(1995, 8, 30, 15, 27, tzinfo=UTC)),
        ("29/Feb/1996:12:00:00 +0000", dt.datetime(1996, 2, 29, 12, tzinfo=UTC)),
        ("30/Aug/1995:15:27:00 -1800", dt.datetime(1995, 8, 31, 9, 27, tzinfo=UTC)),
        ("29/Feb/1995:12:00:00 +0000", None),
        ("30/Aug/1995:24:00:00 +0000", None),
        ("30/Aug/1995:23:59:60 +0000", None),
        ("30/Aug/1995:15:27:00 +1801", None),
        ("30/Aug/1995:15:27:00 -0460", None),
        ("30/Sept/1995:15:27:00 -0400", None),
        ("30/Aou/1995:15:27:00 -0400", None),
        ("3/Aug/1995:15:27:00 -0400", None),
        ("30/Aug/1995:15:27:00", None),
        ("30/Aug/1995:15:27:00 Z", None),
        ("30/Aug/0000:15:27:00 +0000", None),
        ("01/Jan/0001:00:30:00 +0100", None),
        ("", None),
    ],
)
def test_parse_clf_timestamp_field(text: str, expected: dt.datetime | None) -> None:
    got = parse_clf_timestamp(text)
    assert got == expected
    if got is not None:
        assert got.utcoffset() == dt.timedelta(0)


def test_parse_clf_timestamp_of_whole_lines() -> None:
    assert parse_clf_timestamp(EPA_CTRL) == dt.datetime(1995, 8, 30, 19, 27, tzinfo=UTC)
    assert parse_clf_timestamp(COMBINED) == dt.datetime(2000, 10, 10, 20, 55, 36, tzinfo=UTC)
    # The lander needs the hour of lines the parse rejects for other reasons.
    truncated = 'h - - [30/Aug/1995:10:00:00 -0400] "GET /trunc'
    assert parse_clf_timestamp(truncated) == dt.datetime(1995, 8, 30, 14, tzinfo=UTC)
    assert parse_clf_timestamp("garbage") is None
    assert parse_clf_timestamp('h - - [30/Aug/1995:25:00:00 -0400] "GET /" 200 1') is None


def test_parse_clf_timestamp_ignores_the_process_locale() -> None:
    wanted = dt.datetime(1995, 8, 30, 19, 27, tzinfo=UTC)
    previous = locale.setlocale(locale.LC_TIME)
    changed = False
    for name in ("de_DE.UTF-8", "fr_FR.UTF-8", "C.UTF-8"):
        try:
            locale.setlocale(locale.LC_TIME, name)
            changed = True
            break
        except locale.Error:
            continue
    try:
        assert parse_clf_timestamp("30/Aug/1995:15:27:00 -0400") == wanted
    finally:
        locale.setlocale(locale.LC_TIME, previous)
    if not changed:
        pytest.skip("no other locale installed; parse is locale-free by construction")


def test_reason_codes_are_documented_and_distinct() -> None:
    assert set(lf.REJECT_REASONS) | set(lf.OUT_OF_WINDOW_REASONS) == set(lf.REASONS)
    assert not set(lf.REJECT_REASONS) & set(lf.OUT_OF_WINDOW_REASONS)
    assert len(set(lf.REASONS)) == len(lf.REASONS)
    assert all(re.fullmatch(r"[a-z_]+", code) for code in lf.REASONS)


def test_java_regex_anchors() -> None:
    assert lf.java_regex("a.b|-") == r"(?s)^(?:a.b|-)\z"


def test_bundled_logs_parse_completely(access_logs) -> None:
    """Every real line parses (the real logs have no rejects), hosts and statuses as expected."""
    statuses: dict[int, int] = {}
    two_token = 0
    lines = 0
    for path in sorted(access_logs.glob("*/*.log.gz")):
        for raw in gzip.decompress(path.read_bytes()).split(b"\n")[:-1]:
            lines += 1
            parsed = parse_line(raw.decode("utf-8", errors="replace"))
            assert parsed.reason is None, raw
            assert parsed.parsed_request is not None, raw
            statuses[parsed.status // 100] = statuses.get(parsed.status // 100, 0) + 1
            two_token += parsed.parsed_request.protocol is None
    assert lines == 47_748 + 33_996  # data/README.md
    assert two_token == 33_996  # the NASA conversion dropped every protocol token
    assert set(statuses) == {2, 3, 4, 5}
