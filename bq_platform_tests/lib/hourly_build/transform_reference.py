"""The Python reference of the Spark transform, for its tests: what
:func:`~bq_platform.lib.hourly_build.transform.transform_lines` must give for a line, built from
:func:`logformat.parse_line`, :func:`pages.is_page` and :func:`pseudonymize.visitor_id`
(:func:`reference`); a frame of lines as the build reads them (:func:`frame`), the transform run
on it (:func:`run`), and the odd lines every category and reason comes from (:data:`ODD_LINES`).
"""

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bq_platform.lib.core import logformat as lf
from bq_platform.lib.core.pages import is_page
from bq_platform.lib.core.pseudonymize import in_sample, visitor_id
from bq_platform.lib.hourly_build.transform import (
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    event_id,
    transform_lines,
)

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
        row["event_id"] = event_id(SITE, SHA, line_no)
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
