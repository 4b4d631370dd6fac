"""Common Log Format and Combined Log Format: patterns, reason codes, a Python reference parser.

A line is Apache's Common ``LogFormat "%h %l %u %t \\"%r\\" %>s %b"``, Combined (plus
``\\"%{Referer}i\\" \\"%{User-agent}i\\"``, as nginx's ``combined``) or ``vhost_combined``
(``%v:%p`` in front), with any extra fields (``%D``, ``$request_time``) kept as written.
The Spark transform and the lander use these patterns, written in the dialect common to Python
``re`` (``re.ASCII | re.DOTALL``, ``fullmatch``) and ``java.util.regex`` (:func:`java_regex`);
:func:`parse_line` is the Python reference of the Spark parse, and tests make them agree.

Rules (DESIGN.md, "Formats": a line is rejected only when no reading of it is sound):

- One trailing ``\\r`` is stripped; bytes that are not UTF-8 become U+FFFD; a text containing
  ``\\n`` is ``malformed``.
- Each quoted field is read *strictly* first, as Apache escapes it (mod_log_config, "Format
  Notes"); only when no strict reading exists are inner quotes allowed (old servers): the
  request then runs to the *last* ``" <3 digits> <digits or ->`` that a sound rest follows.
- A request that is ``-``, empty or one token is no request: the line is a non-page hit.
- ``bytes`` is ``-`` (null) or a signed 64-bit decimal; the status is any three digits.
- The timestamp is ``dd/MMM/yyyy:HH:mm:ss +hhmm`` (English months, any case), a real time with
  an offset of at most 18:00, in years 1-9999 once in UTC.

Reason codes are in :data:`REASONS`; the first of :data:`REJECT_REASONS` that applies wins.
Only the transform, which knows the hour, assigns :data:`OUT_OF_WINDOW_REASONS`.
"""

import dataclasses
import datetime as dt
import re

REASON_EMPTY_LINE = "empty_line"
REASON_MALFORMED = "malformed"
REASON_BAD_STATUS = "bad_status"
REASON_BAD_BYTES = "bad_bytes"
REASON_BAD_TIMESTAMP = "bad_timestamp"
REASON_OUT_OF_WINDOW = "out_of_window"
#: Out of the window of :mod:`bq_platform.lib.core.partition_window`.
REASON_BEFORE_FIRST_PARTITION = "before_first_partition"
REASON_FUTURE_TIMESTAMP = "future_timestamp"

#: Reasons that make a line ``rejected``, in the order they are decided.
REJECT_REASONS: tuple[str, ...] = (
    REASON_EMPTY_LINE,
    REASON_BAD_STATUS,
    REASON_BAD_BYTES,
    REASON_MALFORMED,
    REASON_BAD_TIMESTAMP,
)
#: Reasons that make a line ``out_of_window`` (a readable timestamp outside the hour).
OUT_OF_WINDOW_REASONS: tuple[str, ...] = (
    REASON_OUT_OF_WINDOW,
    REASON_BEFORE_FIRST_PARTITION,
    REASON_FUTURE_TIMESTAMP,
)
#: Every reason code with a one-line description.
REASONS: dict[str, str] = {
    REASON_EMPTY_LINE: "empty or whitespace-only line",
    REASON_BAD_STATUS: "CLF-shaped line whose status is not 3 digits",
    REASON_BAD_BYTES: "CLF-shaped line whose byte count is neither '-' nor a 64-bit number",
    REASON_MALFORMED: "not a Common/Combined Log Format line (garbage, truncated, unbalanced)",
    REASON_BAD_TIMESTAMP: "timestamp not dd/MMM/yyyy:HH:mm:ss +hhmm or not a real time",
    REASON_OUT_OF_WINDOW: "readable timestamp outside the partition's UTC hour",
    REASON_BEFORE_FIRST_PARTITION: "timestamp before the first hourly partition",
    REASON_FUTURE_TIMESTAMP: "timestamp later than now plus the allowed clock skew",
}

#: Inside a quoted field as Apache writes it (``ap_escape_logitem``): ``\"`` and ``\\`` are
#: escapes; possessive, so the first unescaped quote ends it.
STRICT_FIELD = r'[^"\\]*+(?:\\.[^"\\]*+)*+'
#: A field with unescaped quotes inside (old servers), longest first; still escape-aware.
LOOSE_FIELD_LONGEST = r"[^\\]*(?:\\.[^\\]*)*"
#: The same, shortest first (a loose referrer or user agent never swallows the next field).
LOOSE_FIELD_SHORTEST = r"[^\\]*?(?:\\.[^\\]*?)*?"
#: One extra field: a strictly quoted field or a token without blanks or quotes.
EXTRA_FIELD = rf'(?:"{STRICT_FIELD}"|[^\s"]++)'
#: A whole line. Groups: 1 vhost, 2 host, 3 ident, 4 authuser, 5 timestamp text, 6 request,
#: 7 status, 8 bytes, 9 referrer, 10 user agent, 11 the extra fields (unmatched if absent).
LINE_PATTERN = (
    r"(?:(\S+:\d+) )?(\S+) (\S+) (\S+) \[([^\]]*)\] "
    rf'"({STRICT_FIELD}|{LOOSE_FIELD_LONGEST})" (\d{{3}}) (\d+|-)'
    rf'(?: "({STRICT_FIELD}|{LOOSE_FIELD_SHORTEST})" "({STRICT_FIELD}|{LOOSE_FIELD_SHORTEST})")?'
    rf"(?:[ \t]+({EXTRA_FIELD}(?:[ \t]+{EXTRA_FIELD})*+))?[ \t]*"
)
LINE_GROUPS = 11
#: The CLF shape with any status and bytes tokens: tells ``bad_status``/``bad_bytes`` from
#: ``malformed``. Groups: 1 request, 2 status token, 3 bytes token.
LOOSE_LINE_PATTERN = r'(?:\S+:\d+ )?\S+ \S+ \S+ \[[^\]]*\] "(.*?)" (\S+) (\S+)(?:[ \t].*)?'
LOOSE_LINE_GROUPS = 3
#: An escape inside a quoted field (``\"`` or ``\\``); replaced by group 1, left to right.
ESCAPE_PATTERN = r'\\(["\\])'
#: ``METHOD target [HTTP/x.y]``. Groups: 1 method, 2 target, 3 protocol (unmatched if absent).
REQUEST_PATTERN = r"(\S+) (.+?)(?: (HTTP/[0-9]+(?:\.[0-9]+)?))?"
TIMESTAMP_PATTERN = r"(\d{2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})"
#: Spark datetime pattern equivalent to :data:`TIMESTAMP_PATTERN` (``Z`` reads ``+hhmm``).
SPARK_TIMESTAMP_FORMAT = "dd/MMM/yyyy:HH:mm:ss Z"
#: Prefix of a line up to the timestamp, so malformed lines still have an hour. Group 4: the text.
LINE_PREFIX_PATTERN = r"(?:\S+:\d+ )?(\S+) (\S+) (\S+) \[([^\]]*)\]"

#: Characters that count as blank for :data:`REASON_EMPTY_LINE`.
BLANK_CHARS = " \t\x0b\x0c\r"
#: A "line" containing this character is malformed (it cannot come from a line split).
NEWLINE = "\n"

#: Unix seconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the readable range.
MIN_UNIX_SECONDS = -62135596800
MAX_UNIX_SECONDS = 253402300799
#: Largest offset Java's ``ZoneOffset`` (hence Spark) accepts: 18:00.
MAX_OFFSET_MINUTES = 18 * 60
MAX_BYTES = 2**63 - 1

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_FLAGS = re.ASCII | re.DOTALL
LINE_RE = re.compile(LINE_PATTERN, _FLAGS)
LOOSE_LINE_RE = re.compile(LOOSE_LINE_PATTERN, _FLAGS)
REQUEST_RE = re.compile(REQUEST_PATTERN, _FLAGS)
TIMESTAMP_RE = re.compile(TIMESTAMP_PATTERN, _FLAGS)
_PREFIX_RE = re.compile(LINE_PREFIX_PATTERN, _FLAGS)
_ESCAPE_RE = re.compile(ESCAPE_PATTERN, _FLAGS)
_STATUS_RE = re.compile(r"\d{3}", _FLAGS)
_BYTES_RE = re.compile(r"\d+|-", _FLAGS)


def java_regex(pattern: str) -> str:
    """Anchor a pattern for Java (Spark's ``rlike``/``regexp_*``) so it matches exactly what
    ``re.fullmatch(pattern, text, re.ASCII | re.DOTALL)`` does (``\\z``: Java's ``$`` also
    matches before a final line terminator)."""
    return "(?s)^(?:" + pattern + r")\z"


def clean_line(line: str) -> str:
    """The line the parse sees: without one trailing ``\\r``."""
    return line[:-1] if line.endswith("\r") else line


def is_blank(line: str) -> bool:
    """True for an empty line or one made only of :data:`BLANK_CHARS`."""
    return line.strip(BLANK_CHARS) == ""


def parse_timestamp_field(text: str) -> dt.datetime | None:
    """The UTC instant of the text between the brackets (``30/Aug/1995:15:27:00 -0400``), or
    None where Spark's ``try_to_timestamp`` with :data:`SPARK_TIMESTAMP_FORMAT` (plus the year
    range) gives null."""
    match = TIMESTAMP_RE.fullmatch(text)
    if not match:
        return None
    day, mon, year, hour, minute, second, sign, off_h, off_m = match.groups()
    month = _MONTHS.get(mon.lower())
    offset_minutes = int(off_h) * 60 + int(off_m)
    if month is None or int(off_m) > 59 or offset_minutes > MAX_OFFSET_MINUTES:
        return None
    offset = dt.timedelta(minutes=offset_minutes if sign == "+" else -offset_minutes)
    try:
        local = dt.datetime(
            int(year),
            month,
            int(day),
            int(hour),
            int(minute),
            int(second),
            tzinfo=dt.timezone(offset),
        )
        return local.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        return None


def parse_clf_timestamp(text: str) -> dt.datetime | None:
    """UTC time of a log line (only its part up to the timestamp is read), or of a bare
    timestamp field with or without brackets; None if there is no valid timestamp. For a
    well-formed line this is exactly the Spark transform's ``event_ts``."""
    match = _PREFIX_RE.match(clean_line(text))
    if match:
        return parse_timestamp_field(match.group(4))
    field = text.strip(BLANK_CHARS)
    if field.startswith("[") and field.endswith("]"):
        field = field[1:-1]
    return parse_timestamp_field(field)


@dataclasses.dataclass(frozen=True)
class Request:
    """The parts of a request line ``METHOD target [HTTP/x.y]``.

    Attributes:
        method: e.g. ``GET``.
        target: the URL as logged (path and query), possibly with spaces.
        protocol: ``HTTP/1.0`` etc., or None for two-token (HTTP/0.9-style) requests.
    """

    method: str
    target: str
    protocol: str | None

    @property
    def path(self) -> str:
        """Target before the first ``?``."""
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str | None:
        """Target after the first ``?`` (may be empty), or None if there is no ``?``."""
        parts = self.target.split("?", 1)
        return parts[1] if len(parts) == 2 else None


def parse_request(request: str) -> Request | None:
    """Split a request field; None if it is not ``METHOD target`` (``-``, empty, one token)."""
    match = REQUEST_RE.fullmatch(request)
    if not match:
        return None
    return Request(method=match.group(1), target=match.group(2), protocol=match.group(3))


@dataclasses.dataclass(frozen=True)
class ParsedLine:
    """A log line as the pipeline reads it (Python reference of the Spark parse).

    Attributes:
        reason: None for a well-formed line with a readable timestamp, else one of
            :data:`REJECT_REASONS`; the other fields are None where not parsed.
        request: the request field, unescaped (:func:`unescape`) as referrer and user agent.
        parsed_request: its parts, None if it is not ``METHOD target``.
        timestamp: UTC; response_bytes: None for ``-``; vhost: ``host:port`` or None.
        referrer, user_agent: None for Common lines, ``-`` or empty.
        extra_fields: what follows the last standard field, as written; None if nothing.
    """

    reason: str | None
    host: str | None = None
    ident: str | None = None
    authuser: str | None = None
    timestamp: dt.datetime | None = None
    request: str | None = None
    parsed_request: Request | None = None
    status: int | None = None
    response_bytes: int | None = None
    referrer: str | None = None
    user_agent: str | None = None
    vhost: str | None = None
    extra_fields: str | None = None


def unescape(field: str) -> str:
    """Undo Apache's escapes in a quoted field: ``\\"`` -> ``"``, ``\\\\`` -> ``\\`` (one
    left-to-right pass, as Spark's ``regexp_replace``; other backslashes stay)."""
    return _ESCAPE_RE.sub(r"\1", field) if "\\" in field else field


def _optional_field(value: str | None) -> str | None:
    return None if value in (None, "", "-") else value


def _diagnose(line: str) -> str:
    if is_blank(line):
        return REASON_EMPTY_LINE
    loose = LOOSE_LINE_RE.fullmatch(line)
    if loose is None or NEWLINE in line:
        return REASON_MALFORMED
    if not _STATUS_RE.fullmatch(loose.group(2)):
        return REASON_BAD_STATUS
    if not _BYTES_RE.fullmatch(loose.group(3)):
        return REASON_BAD_BYTES
    return REASON_MALFORMED


def parse_line(line: str) -> ParsedLine:
    """Parse one log line (text without its ``\\n``, decoded with ``errors="replace"``) by
    the rules of the module docstring; never raises."""
    line = clean_line(line)
    match = LINE_RE.fullmatch(line)
    if match is None or NEWLINE in line:
        return ParsedLine(reason=_diagnose(line))
    vhost, host, ident, authuser, ts_text, raw_request, status, nbytes, referrer, agent, extra = (
        match.groups()
    )
    request = unescape(raw_request)
    response_bytes = None if nbytes == "-" else int(nbytes)
    timestamp = parse_timestamp_field(ts_text)
    reason = None
    if response_bytes is not None and response_bytes > MAX_BYTES:
        reason, response_bytes = REASON_BAD_BYTES, None
    elif timestamp is None:
        reason = REASON_BAD_TIMESTAMP
    return ParsedLine(
        reason=reason,
        host=host,
        ident=ident,
        authuser=authuser,
        timestamp=timestamp,
        request=request,
        parsed_request=parse_request(request),
        status=int(status),
        response_bytes=response_bytes,
        referrer=_optional_field(None if referrer is None else unescape(referrer)),
        user_agent=_optional_field(None if agent is None else unescape(agent)),
        vhost=vhost,
        extra_fields=extra or None,
    )
