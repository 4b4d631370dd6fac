"""The pageview transform: raw access-log lines in, one classified row per line out.

Native Spark SQL functions only (no Python UDF), none that throws on bad input (ANSI mode:
``try_cast``, ``try_to_timestamp``, ``get``). Every input row gives exactly one output row.

Input: :data:`INPUT_COLUMNS` (``hour_label`` is the partition's UTC hour ``YYYY-MM-DDTHH``,
``line_no`` BIGINT 1-based). Output: :data:`OUTPUT_COLUMNS`, the parsed pageview columns
(:data:`PARSED_COLUMN_NAMES`: :data:`bq_platform.lib.warehouse.schema.PAGEVIEW_COLUMNS` but the
traffic columns, which :mod:`bq_platform.lib.hourly_build.traffic` adds) in that order and
types, then:

- ``category``: one of :data:`CATEGORIES` (``out_of_window``: timestamp outside ``hour_label``);
- ``reason``: null for pages and non-pages, else a code of :mod:`bq_platform.lib.core.logformat`;
- ``raw``: the line as valid UTF-8, ``\\r`` kept;
- pageview columns: complete for pages, what could be parsed otherwise; ``event_id``
  (:func:`event_id`, stable across re-runs) and ``visitor_id`` only for pages;
- ``in_sample``: the page's visitor is in the 1-in-200 sample;
- ``client``: the client address as logged (``visitor_id`` is its keyed hash), for every line
  that has one, so that a visitor's lines of the hour can be grouped;
- ``user_agent_field``: the line's format has a user-agent field (Combined), whether or not
  it holds one; false for Common Log Format lines.

Each regex runs once per line: ``regexp_replace`` rewrites the line into its groups joined by
``\\n`` (which no line contains) and the result is split. :data:`FAST_LINE_PATTERN` reads the
common shape first; only the lines it misses run the full patterns. The fused method exceeds
HotSpot's 8,000-byte JIT limit, so :func:`bq_platform.lib.hourly_build.spark.spark_config` sets
``-XX:-DontCompileHugeMethods``.
"""

import hashlib
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bq_platform.lib.core import logformat as lf
from bq_platform.lib.core.pages import is_page_column
from bq_platform.lib.core.partition_window import HourWindow, out_of_window_reason_column
from bq_platform.lib.core.pseudonymize import in_sample_column, visitor_id_column
from bq_platform.lib.warehouse.schema import PAGEVIEW_COLUMNS, TRAFFIC_COLUMNS

#: Bump whenever the output for the same input changes (it is part of every hour's fingerprint,
#: hence of the load job IDs: a new version reloads, an unchanged one is skipped).
TRANSFORM_VERSION = "pageviews-transform/5"

CATEGORY_PAGE = "page"
CATEGORY_NON_PAGE = "non_page"
CATEGORY_REJECTED = "rejected"
CATEGORY_OUT_OF_WINDOW = "out_of_window"
CATEGORIES: tuple[str, ...] = (
    CATEGORY_PAGE,
    CATEGORY_NON_PAGE,
    CATEGORY_REJECTED,
    CATEGORY_OUT_OF_WINDOW,
)

INPUT_COLUMNS: tuple[str, ...] = ("site", "hour_label", "data_key", "file_sha256", "line_no", "raw")
#: ``raw`` is one line: a value containing ``\n`` is classified ``malformed``.
#: Every column of ``pageviews``, in the table's order.
PAGEVIEW_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in PAGEVIEW_COLUMNS)
#: The pageview columns the transform fills: all but the traffic classification.
PARSED_COLUMN_NAMES: tuple[str, ...] = tuple(
    name for name in PAGEVIEW_COLUMN_NAMES if name not in {c.name for c in TRAFFIC_COLUMNS}
)
OUTPUT_COLUMNS: tuple[str, ...] = (
    ("hour_label", "data_key", "line_no", "category", "reason", "raw")
    + PARSED_COLUMN_NAMES
    + ("in_sample", "client", "user_agent_field")
)

_SEP = lf.NEWLINE  # field separator of a rewritten line: cannot occur in a line
_SECONDS_PER_HOUR = 3600
_SECONDS_PER_DAY = 86400
_STATUS_TOKEN = lf.java_regex(r"\d{3}")
#: Quoted fields whose escapes are undone (:func:`logformat.unescape`).
_ESCAPED_FIELDS = ("request", "referrer", "user_agent")
_BYTES_TOKEN = lf.java_regex(r"\d+|-")


#: The common shape of a Common or Combined line (no vhost, no extra fields, no escapes),
#: read as ``LINE_PATTERN`` would. Groups: 1 host, 2 ident, 3 authuser,
#: 4 timestamp text, 5 request, 6 method, 7 target, 8 protocol, 9 status, 10 bytes,
#: 11 referrer, 12 user agent (11 and 12 unmatched for Common lines).
FAST_LINE_PATTERN = (
    r'([^\s"\[\]]+) ([^\s"\[\]]+) ([^\s"\[\]]+) \[([^\[\]]*)\] '
    r'"(([^\s"\\]+) ([^\s"\\]+)(?: (HTTP/[0-9]+(?:\.[0-9]+)?))?)" (\d{3}) (\d+|-)'
    r'(?: "([^"\\]*)" "([^"\\]*)")?'
)
#: The fast match as ``LINE_PATTERN``'s 11 groups, then ``REQUEST_PATTERN``'s 3 and an empty
#: part: 15 parts, so every field below is a ``get`` of the same index on either path.
_FAST_PARTS_ORDER = ("", "$1", "$2", "$3", "$4", "$5", "$9", "$10", "$11", "$12", "")
_FAST_REPLACEMENT = _SEP.join((*_FAST_PARTS_ORDER, "$6", "$7", "$8", ""))
_FAST_PARTS = 15
_FAST_REQUEST_AT = 11  # 0-based index of the method among the parts


def _fast_groups(line: Column) -> Column:
    """``array<string>`` of :data:`_FAST_PARTS` parts if ``line`` has the fast shape."""
    rewritten = F.regexp_replace(line, lf.java_regex(FAST_LINE_PATTERN), _FAST_REPLACEMENT)
    return F.split(rewritten, _SEP)


def _groups(text: Column, pattern: str, groups: int) -> Column:
    """``array<string>``: the pattern's groups (``''`` if unmatched) then ``''`` if ``text``
    fully matches it; else ``text`` split on ``\\n`` (see :func:`_matched`)."""
    replacement = _SEP.join(f"${i}" for i in range(1, groups + 1)) + _SEP
    return F.split(F.regexp_replace(text, lf.java_regex(pattern), replacement), _SEP)


def _matched(parts: Column, groups: int) -> Column:
    """The :func:`_groups` rewrite matched; only valid for a text without ``\\n``."""
    return F.coalesce(F.size(parts) == groups + 1, F.lit(False))


def _optional(value: Column) -> Column:
    """Null for '', '-' and null (Combined fields)."""
    return F.when(~value.isin("", "-"), value)


def _unescape(value: Column) -> Column:
    """:func:`logformat.unescape`: ``\\"`` -> ``"``, ``\\\\`` -> ``\\``, as one left-to-right pass.

    Three literal replaces rather than a regex (less generated code): ``\\\\`` -> ``\\n`` (no
    line contains it), ``\\"`` -> ``"``, ``\\n`` -> ``\\``.
    """
    pairs = F.replace(value, F.lit("\\\\"), F.lit(_SEP))
    quotes = F.replace(pairs, F.lit('\\"'), F.lit('"'))
    return F.replace(quotes, F.lit(_SEP), F.lit("\\"))


def _has_user_agent_field(line: Column, field: Sequence[Column]) -> Column:
    """The matched line is Combined: it has a referrer, user agent or later field, or it ends
    with the closing quote of an empty user agent (a Common line ends with its bytes)."""
    return (field[8] != "") | (field[9] != "") | (field[10] != "") | line.endswith('"')


def _diagnose(line: Column, one_line: Column, loose: Column) -> Column:
    """Reason code for a line that does not match :data:`logformat.LINE_PATTERN`.

    ``loose`` is ``_groups(line, LOOSE_LINE_PATTERN, LOOSE_LINE_GROUPS)`` from an earlier
    projection, so it runs once.
    """
    groups = lf.LOOSE_LINE_GROUPS
    blank = F.length(F.trim(line, F.lit(lf.BLANK_CHARS))) == 0
    return (
        F.when(blank, F.lit(lf.REASON_EMPTY_LINE))
        .when(~(one_line & _matched(loose, groups)), F.lit(lf.REASON_MALFORMED))
        .when(~F.get(loose, 1).rlike(_STATUS_TOKEN), F.lit(lf.REASON_BAD_STATUS))
        .when(~F.get(loose, 2).rlike(_BYTES_TOKEN), F.lit(lf.REASON_BAD_BYTES))
        .otherwise(F.lit(lf.REASON_MALFORMED))
    )


def event_id(site: str, file_sha256: str, line_no: int) -> str:
    """The ``event_id`` of the page on line ``line_no`` (1-based) of the landed file with hex
    SHA-256 ``file_sha256``, delivered for ``site``: the hex SHA-256 of the UTF-8 text
    ``'<site>:<file_sha256>:<line_no>'``.

    Unique across sites and hours: a site name has no ``:``
    (:func:`bq_platform.lib.core.layout.validate_site`) and a checksum is 64 hex digits, so
    distinct triples give distinct texts; a site's hour reads each checksum once (a repeated
    delivery counts as ``duplicates``), and a line is a page only in the hour of its timestamp.
    :func:`event_id_column` is the same in Spark.
    """
    return hashlib.sha256(f"{site}:{file_sha256}:{line_no}".encode()).hexdigest()


def event_id_column(site: Column, file_sha256: Column, line_no: Column) -> Column:
    """:func:`event_id` as a Spark column (null if an input is null)."""
    text = F.concat(site, F.lit(":"), file_sha256, F.lit(":"), line_no.cast("string"))
    return F.sha2(text, 256)


def transform_lines(
    lines: DataFrame,
    *,
    visitor_key: str | bytes,
    window: HourWindow | None = None,
    keep: Sequence[str] = (),
) -> DataFrame:
    """Classify and parse access-log lines (see the module docstring for the columns).

    Args:
        lines: a DataFrame with at least :data:`INPUT_COLUMNS`; other columns are dropped.
        visitor_key: the pseudonymization key.
        window: the partitions' hours; None: always ``out_of_window``.
        keep: other columns of ``lines`` passed through, after :data:`OUTPUT_COLUMNS`.

    Raises:
        ValueError: at plan time, if a column is missing or the key is empty.
    """
    missing = [c for c in (*INPUT_COLUMNS, *keep) if c not in lines.columns]
    if missing:
        raise ValueError(f"transform_lines: input lacks columns {missing}; has {lines.columns}")
    spark = lines.sparkSession
    meta = [F.col(c) for c in ("site", "hour_label", "data_key", "file_sha256", "line_no", *keep)]

    # Stage 1: valid UTF-8, one trailing CR stripped.
    valid = lines.select(*meta, F.make_valid_utf8(F.col("raw")).alias("raw"))
    raw = F.col("raw")
    no_cr = F.when(raw.endswith("\r"), raw.substr(F.lit(1), F.length(raw) - 1)).otherwise(raw)
    cleaned = valid.select(
        *meta, raw, no_cr.alias("line"), (~F.contains(raw, F.lit(_SEP))).alias("one_line")
    )

    # Stage 2: the fast pattern, and the line pattern only for lines it does not match.
    groups = lf.LINE_GROUPS
    one_line = F.col("one_line")
    split = cleaned.select(*meta, "raw", "line", "one_line", _fast_groups(F.col("line")).alias("q"))
    q = F.col("q")
    fast = one_line & (F.size(q) == _FAST_PARTS)
    p = _groups(F.col("line"), lf.LINE_PATTERN, groups)
    loose_groups = _groups(F.col("line"), lf.LOOSE_LINE_PATTERN, lf.LOOSE_LINE_GROUPS)
    checked = split.select(
        *meta,
        "raw",
        "line",
        "one_line",
        F.when(fast, q).when(one_line, p).alias("fp"),
    )
    fp = F.col("fp")
    line_matched = F.coalesce(F.size(fp) >= groups + 1, F.lit(False))
    checked = checked.select(
        *meta,
        "raw",
        "line",
        "one_line",
        F.when(line_matched, fp).alias("f"),
        F.when(~line_matched, loose_groups).alias("loose"),
    )
    f = F.col("f")
    matched = f.isNotNull()
    # 0 vhost, 1 host, 2 ident, 3 authuser, 4 timestamp, 5 request, 6 status, 7 bytes,
    # 8 referrer, 9 user agent, 10 extra fields (logformat.LINE_PATTERN's groups 1..11)
    field = [F.get(f, i) for i in range(groups)]
    bytes_value = F.when(field[7] != "-", field[7].try_cast("bigint"))
    fields = checked.select(
        *meta,
        "raw",
        matched.alias("matched"),
        F.when(~matched, _diagnose(F.col("line"), F.col("one_line"), F.col("loose"))).alias(
            "parse_reason"
        ),
        field[1].alias("host"),
        F.try_to_timestamp(field[4], F.lit(lf.SPARK_TIMESTAMP_FORMAT)).alias("ts_raw"),
        field[5].alias("request"),
        field[6].try_cast("bigint").alias("status"),
        bytes_value.alias("response_bytes"),
        (field[7].isNotNull() & (field[7] != "-") & bytes_value.isNull()).alias("bad_bytes"),
        _optional(field[8]).alias("referrer"),
        _optional(field[9]).alias("user_agent"),
        _has_user_agent_field(F.col("line"), field).alias("user_agent_field"),
        F.when(field[0] != "", field[0]).alias("vhost"),
        F.when(field[10] != "", field[10]).alias("extra_fields"),
        F.when(F.size(f) == _FAST_PARTS, F.slice(f, _FAST_REQUEST_AT + 1, 4)).alias("fast_request"),
    )

    # Stage 2b: Apache's escapes undone. The transform is one generated method, kept small
    # (test_transform_frame.py checks its size): HotSpot interprets methods over 8,000 bytes.
    unescaped = fields.select(
        *[F.col(c) for c in fields.columns if c not in _ESCAPED_FIELDS],
        *[_unescape(F.col(c)).alias(c) for c in _ESCAPED_FIELDS],
    )

    # Stage 3: the request pattern, once per line; time arithmetic without the session zone.
    ts_raw = F.col("ts_raw")
    in_range = F.unix_seconds(ts_raw).between(lf.MIN_UNIX_SECONDS, lf.MAX_UNIX_SECONDS)
    with_ts = unescaped.withColumn("event_ts", F.when(in_range, ts_raw)).drop("ts_raw")
    r = F.coalesce(F.col("fast_request"), _groups(F.col("request"), lf.REQUEST_PATTERN, 3))
    secs = F.unix_seconds(F.col("event_ts"))
    epoch_day = F.floor(secs / _SECONDS_PER_DAY).cast("int")
    parsed = with_ts.select(
        *meta,
        "raw",
        "matched",
        "parse_reason",
        "host",
        "event_ts",
        "status",
        "response_bytes",
        "bad_bytes",
        "referrer",
        "user_agent",
        "user_agent_field",
        "vhost",
        "extra_fields",
        r.alias("r"),
        F.date_from_unix_date(epoch_day).alias("event_date"),
        F.floor(secs / _SECONDS_PER_HOUR).alias("epoch_hour"),
    )
    r = F.col("r")
    is_request = _matched(r, 3)  # a request comes from a line, so it has no \n
    target = F.when(is_request, F.get(r, 1))
    has_query = F.instr(target, "?") > 0
    event_hour_label = F.concat(
        F.col("event_date").cast("string"),
        F.lit("T"),
        F.lpad(F.pmod(F.col("epoch_hour"), F.lit(24)).cast("string"), 2, "0"),
    )
    requests = parsed.select(
        *meta,
        "raw",
        "matched",
        "parse_reason",
        "host",
        "event_ts",
        "event_date",
        "status",
        "response_bytes",
        "bad_bytes",
        "referrer",
        "user_agent",
        "user_agent_field",
        "vhost",
        "extra_fields",
        F.when(is_request, F.get(r, 0)).alias("http_method"),
        F.substring_index(target, "?", 1).alias("page_path"),
        F.when(has_query, target.substr(F.instr(target, "?") + 1, F.length(target))).alias(
            "query_string"
        ),
        F.when(is_request & (F.get(r, 2) != ""), F.get(r, 2)).alias("http_protocol"),
        F.coalesce(event_hour_label == F.col("hour_label"), F.lit(False)).alias("in_window"),
    )

    # Stage 4: classification; the hashes only for pages (the only rows that keep them).
    reject_reason = (
        F.when(~F.col("matched"), F.col("parse_reason"))
        .when(F.col("bad_bytes"), F.lit(lf.REASON_BAD_BYTES))
        .when(F.col("event_ts").isNull(), F.lit(lf.REASON_BAD_TIMESTAMP))
    )
    page = is_page_column(F.col("http_method"), F.col("page_path"), F.col("status"))
    category = (
        F.when(reject_reason.isNotNull(), F.lit(CATEGORY_REJECTED))
        .when(~F.col("in_window"), F.lit(CATEGORY_OUT_OF_WINDOW))
        .when(page, F.lit(CATEGORY_PAGE))
        .otherwise(F.lit(CATEGORY_NON_PAGE))
    )
    classified = requests.select(
        "*", reject_reason.alias("reject_reason"), category.alias("category")
    )
    is_page_row = F.col("category") == CATEGORY_PAGE
    event_key = event_id_column(F.col("site"), F.col("file_sha256"), F.col("line_no"))
    hashed = classified.select(
        "*",
        F.when(is_page_row, visitor_id_column(F.col("host"), visitor_key, spark)).alias(
            "visitor_id"
        ),
        F.when(is_page_row, event_key).alias("event_id"),
        F.when(
            F.col("category") == CATEGORY_OUT_OF_WINDOW,
            out_of_window_reason_column(F.col("event_ts"), window),
        )
        .otherwise(F.col("reject_reason"))
        .alias("reason"),
    )
    return hashed.select(
        "hour_label",
        "data_key",
        "line_no",
        "category",
        "reason",
        "raw",
        *PARSED_COLUMN_NAMES,
        in_sample_column(F.col("visitor_id")).alias("in_sample"),
        F.col("host").alias("client"),
        F.coalesce(F.col("user_agent_field"), F.lit(False)).alias("user_agent_field"),
        *keep,
    )
