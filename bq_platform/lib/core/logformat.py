"""Common Log Format and Combined Log Format: patterns, reason codes, a Python reference parser.

One access-log line (Apache ``LogFormat "%h %l %u %t \\"%r\\" %>s %b"`` for Common, plus
``\\"%{Referer}i\\" \\"%{User-agent}i\\"`` for Combined; nginx's ``combined`` is the same;
Apache's ``vhost_combined`` puts ``%v:%p`` in front)::

    [vhost:port] host ident authuser [dd/MMM/yyyy:HH:mm:ss +zzzz] "request" status bytes
        ["referrer" "agent"] [extra fields...] [blanks]

The Spark transform (:mod:`bq_platform.lib.build.transform`) and the lander
(:mod:`bq_platform.lib.landing.producer.land`, which splits files by the hour of
:func:`parse_clf_timestamp`) must read a line the same way, so both use the patterns defined
here: :data:`LINE_PATTERN` etc. are written in the regex dialect common to Python ``re`` (with
``re.ASCII | re.DOTALL``, ``fullmatch``; possessive quantifiers need Python 3.11) and Java
``java.util.regex`` (through :func:`java_regex`, which adds ``(?s)^(?: ... )\\z``).
:func:`parse_line` is the Python reference of the Spark parse; the tests check that both agree
line by line on the bundled real logs and on a table of real-server variants.

Rules (each one is what real logs need):

- A line is split on ``\\n`` only; one trailing ``\\r`` is stripped (CRLF files). Bytes that are
  not UTF-8 are decoded with U+FFFD replacement characters (as Python's
  ``bytes.decode("utf-8", "replace")`` and Spark's ``make_valid_utf8`` both do). Other control
  characters stay as they are (a real EPA URL contains DEL). A text containing ``\\n`` is not
  one line: it is ``malformed`` (the Spark parse uses ``\\n`` as its internal separator).
- DESIGN.md ("Formats"): a line is rejected only when no reading of it is sound, and a field
  never swallows the next one. So each quoted field is first read *strictly*, as Apache
  writes it: ``\\"`` and ``\\\\`` are escapes and the first unescaped quote ends the field
  (a backslash-escaped quote never does). Only when no strict reading of the whole line exists
  are unescaped quotes allowed inside a field (old servers): the request is then matched
  greedily up to the *last* ``" <3 digits> <digits or ->`` that a sound rest follows (so quotes
  inside URLs work), the referrer and the user agent each as the shortest quoted field that
  fits. The escapes are undone in the request, referrer and user agent (:func:`unescape`).
- After the bytes (or the user agent): any number of extra fields (Apache ``%D``/``%T``, nginx
  ``$request_time``, a quoted ``"$http_x_forwarded_for"``), each a strictly quoted field or a
  token without blanks or quotes, then any trailing blanks (spaces, tabs). The extra fields are
  kept as written in ``extra_fields``; the pipeline stores them in the column of that name.
- ``vhost_combined``: a first token ``host:port`` before the usual three is the virtual host
  (``vhost``); a line with four tokens before the timestamp whose first is not ``host:port`` is
  not a log line.
- The request is ``METHOD target [HTTP/x.y]``: the target is everything between the method and
  a trailing `` HTTP/x.y`` token, or to the end when there is none (HTTP/0.9-style two-token
  lines, and the NASA logs, whose protocol token was dropped). URLs with spaces work. A request
  that is ``-``, empty or a single token is *not a request*: the line is well-formed and counts
  as a non-page hit, not as rejected.
- ``bytes`` is ``-`` (nothing sent, becomes null) or a decimal that fits a signed 64-bit int.
- The status is any three digits (``000`` and ``499`` occur in real logs); anything else is
  ``bad_status``.
- The timestamp must be ``dd/MMM/yyyy:HH:mm:ss +hhmm`` with English month abbreviations (any
  case, as Spark's parser accepts), a real calendar date and time (no leap seconds), an offset of
  at most 18:00, and fall in years 1-9999 once converted to UTC.

Reason codes, in the order they are decided (the first that applies wins):

- :data:`REASON_EMPTY_LINE`: the line is empty or only whitespace (``' \\t\\v\\f\\r'``).
- :data:`REASON_BAD_STATUS`: the line has the CLF shape but the status is not 3 digits.
- :data:`REASON_BAD_BYTES`: the line has the CLF shape but bytes is neither ``-`` nor a
  64-bit decimal.
- :data:`REASON_MALFORMED`: anything else that is not a CLF/Combined line: garbage, a line
  truncated mid-field, a missing bracket or quote, an extra field that is neither a quoted field
  nor a token, an embedded ``\\n``.
- :data:`REASON_BAD_TIMESTAMP`: well-formed, but the timestamp cannot be read (see above).
- :data:`REASON_OUT_OF_WINDOW`: well-formed with a readable timestamp outside the partition's
  UTC hour (assigned by the transform, which knows the hour; never by :func:`parse_line`).

The first five make a line ``rejected``; the last one ``out_of_window`` (see
:mod:`bq_platform.lib.core.accounting`). Both kinds go to the dead-letter area with the raw line.
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
#: Out of window because the timestamp is before the first hourly partition, or later than now
#: plus the allowed clock skew (:mod:`bq_platform.lib.core.partition_window`; issue 7).
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
#: Reasons that make a line ``out_of_window``: a readable timestamp outside the partition's UTC
#: hour (decided by the transform, which knows the hour and the window).
OUT_OF_WINDOW_REASONS: tuple[str, ...] = (
    REASON_OUT_OF_WINDOW,
    REASON_BEFORE_FIRST_PARTITION,
    REASON_FUTURE_TIMESTAMP,
)
#: Every reason code with a one-line description (for docs, the UI and dead-letter readers).
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
#: escapes, so a quote after a backslash never ends the field. Possessive: a field's end is its
#: first unescaped quote, nothing to backtrack into.
STRICT_FIELD = r'[^"\\]*+(?:\\.[^"\\]*+)*+'
#: A field with unescaped quotes inside (old servers, the NASA/EPA logs), longest first; still
#: escape-aware, so ``\"`` never ends it.
LOOSE_FIELD_LONGEST = r"[^\\]*(?:\\.[^\\]*)*"
#: The same, shortest first (a loose referrer or user agent never swallows the next field).
LOOSE_FIELD_SHORTEST = r"[^\\]*?(?:\\.[^\\]*?)*?"
#: One field after the user agent (Apache ``%D``/``%T``, nginx ``$request_time``, a quoted
#: ``"$http_x_forwarded_for"``): a strictly quoted field or a token without blanks or quotes.
EXTRA_FIELD = rf'(?:"{STRICT_FIELD}"|[^\s"]++)'
#: A CLF, Combined or ``vhost_combined`` line with optional extra fields and trailing blanks.
#: Groups: 1 vhost (``host:port``, unmatched without), 2 host, 3 ident, 4 authuser,
#: 5 timestamp text, 6 request, 7 status, 8 bytes, 9 referrer, 10 user agent (9 and 10 unmatched
#: for Common lines), 11 the extra fields as written, blanks between them kept (unmatched if
#: none). Each quoted field is read strictly first (escapes, no inner quote) and loosely only
#: when no strict reading of the whole line exists.
LINE_PATTERN = (
    r"(?:(\S+:\d+) )?(\S+) (\S+) (\S+) \[([^\]]*)\] "
    rf'"({STRICT_FIELD}|{LOOSE_FIELD_LONGEST})" (\d{{3}}) (\d+|-)'
    rf'(?: "({STRICT_FIELD}|{LOOSE_FIELD_SHORTEST})" "({STRICT_FIELD}|{LOOSE_FIELD_SHORTEST})")?'
    rf"(?:[ \t]+({EXTRA_FIELD}(?:[ \t]+{EXTRA_FIELD})*+))?[ \t]*"
)
#: Number of groups of :data:`LINE_PATTERN`.
LINE_GROUPS = 11
#: The CLF shape with any status and bytes tokens, request matched lazily: only used to tell
#: ``bad_status``/``bad_bytes`` from ``malformed`` for lines :data:`LINE_PATTERN` rejects.
#: Groups: 1 request, 2 status token, 3 bytes token.
LOOSE_LINE_PATTERN = r'(?:\S+:\d+ )?\S+ \S+ \S+ \[[^\]]*\] "(.*?)" (\S+) (\S+)(?:[ \t].*)?'
#: Number of groups of :data:`LOOSE_LINE_PATTERN`.
LOOSE_LINE_GROUPS = 3
#: An escape inside a quoted field (``\"`` or ``\\``); replaced by group 1, left to right.
ESCAPE_PATTERN = r'\\(["\\])'
#: ``METHOD target [HTTP/x.y]``. Groups: 1 method, 2 target, 3 protocol (unmatched if absent).
REQUEST_PATTERN = r"(\S+) (.+?)(?: (HTTP/[0-9]+(?:\.[0-9]+)?))?"
#: The timestamp text inside the brackets.
TIMESTAMP_PATTERN = r"(\d{2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})"
#: Spark datetime pattern equivalent to :data:`TIMESTAMP_PATTERN` (``Z`` reads ``+hhmm``).
SPARK_TIMESTAMP_FORMAT = "dd/MMM/yyyy:HH:mm:ss Z"
#: Prefix of a line up to the timestamp (``vhost_combined``'s ``host:port`` too); the lander
#: reads the hour of malformed lines with it. Group 4 is the timestamp text.
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
    """Anchor one of this module's patterns for Java (Spark's ``rlike``/``regexp_*``).

    ``(?s)`` lets ``.`` match ``\\r`` and other line terminators inside a line (Java's ``.``
    excludes them by default, Python's only excludes ``\\n``), and ``\\z`` is the absolute end
    (Java's ``$`` also matches before a final line terminator); the group keeps a top-level
    alternation (``a|b``) inside the anchors. The result matches exactly what
    ``re.fullmatch(pattern, text, re.ASCII | re.DOTALL)`` matches.
    """
    return "(?s)^(?:" + pattern + r")\z"


def clean_line(line: str) -> str:
    """The line the parse sees: without one trailing ``\\r``."""
    return line[:-1] if line.endswith("\r") else line


def is_blank(line: str) -> bool:
    """True for an empty line or one made only of :data:`BLANK_CHARS`."""
    return line.strip(BLANK_CHARS) == ""


def parse_timestamp_field(text: str) -> dt.datetime | None:
    """Read the text between the brackets, e.g. ``30/Aug/1995:15:27:00 -0400``.

    Returns:
        The instant as a UTC-aware datetime, or None if the text is not a valid timestamp
        (rules in the module docstring; the same ones Spark's ``try_to_timestamp`` with
        :data:`SPARK_TIMESTAMP_FORMAT` applies, plus the year range).
    """
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
    """UTC time of a log line, or of a bare timestamp field.

    Args:
        text: a whole log line (``host ident user [timestamp] ...``; only the part up to the
            closing bracket is looked at, so a line with a broken request still has a time), or
            the timestamp field itself, with or without its brackets.

    Returns:
        A timezone-aware UTC datetime, or None if no valid timestamp is found. For every line the
        Spark transform parses as well-formed, this is exactly its ``event_ts``; the month names
        are English whatever the process locale.
    """
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
            :data:`REJECT_REASONS`.
        host, ident, authuser: the first three fields (None if the line is not CLF-shaped).
        timestamp: UTC time, None if unreadable.
        request: the raw request field (between the quotes).
        parsed_request: its parts, None if it is not ``METHOD target``.
        status: HTTP status; response_bytes: None for ``-``.
        referrer, user_agent: Combined fields; None for Common lines, ``-`` or empty.
        vhost: ``host:port`` of a ``vhost_combined`` line, else None.
        extra_fields: what follows the last standard field (``%D``, ``$request_time``,
            ``"$http_x_forwarded_for"``...) as written, outer blanks trimmed; None if nothing.

    ``request``, ``referrer`` and ``user_agent`` are unescaped (``\\"`` -> ``"``,
    ``\\\\`` -> ``\\``); ``extra_fields`` is kept as written.
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
    """Undo Apache's escapes in a quoted field: ``\\"`` -> ``"``, ``\\\\`` -> ``\\``.

    One left-to-right pass (:data:`ESCAPE_PATTERN`), the same as Spark's ``regexp_replace``;
    other backslashes (``\\x22``, ``\\n``, a lone ``\\``) stay as they are. Apache writes
    ``"`` and ``\\`` in ``%r`` and ``%{...}i`` this way (mod_log_config, "Format Notes").
    """
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
    """Parse one decoded log line (without its ``\\n``) by the rules of the module docstring.

    Args:
        line: the line as text (decode bytes with ``errors="replace"`` first).

    Returns:
        A :class:`ParsedLine`; never raises for any input.
    """
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
