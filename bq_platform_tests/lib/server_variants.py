"""Lines as real Apache and nginx servers write them, with what the parse must read.

Shared by the Python reference tests (test_logformat.py) and the Spark agreement tests
(test_transform.py). Every line is in the UTC hour 1995-08-30T14 (10:xx -0400), the hour the
transform tests use. Formats: Apache ``LogFormat`` nicknames ``common``, ``combined`` and
``vhost_combined`` (httpd.conf), ``%D``/``%T`` added after the user agent, nginx's default
``main`` (``... "$http_x_forwarded_for"``) and ``$request_time``; escapes as Apache writes
them (``\\"``, ``\\\\``; mod_log_config "Format Notes"), trailing blanks as in the security
dataset of issue 7.
"""

import dataclasses
from typing import Any

TS = "[30/Aug/1995:10:55:36 -0400]"


@dataclasses.dataclass(frozen=True)
class Variant:
    """One line, the reason it must get (None: accepted) and fields it must read."""

    id: str
    line: str
    reason: str | None
    expected: dict[str, Any]


UA = "Mozilla/4.08 [en] (Win98; I ;Nav)"
REF = "http://www.example.com/start.html"
GET = '"GET /apache_pb.html HTTP/1.0" 200 2326'

VARIANTS: list[Variant] = [
    Variant(
        "apache-common",
        f"127.0.0.1 - frank {TS} {GET}",
        None,
        {"host": "127.0.0.1", "authuser": "frank", "target": "/apache_pb.html", "status": 200},
    ),
    Variant(
        "apache-combined",
        f'127.0.0.1 - frank {TS} {GET} "{REF}" "{UA}"',
        None,
        {"referrer": REF, "user_agent": UA, "vhost": None, "extra_fields": None},
    ),
    Variant(
        "apache-vhost-combined",
        f'www.example.com:80 127.0.0.1 - - {TS} "GET / HTTP/1.1" 200 123 "{REF}" "{UA}"',
        None,
        {"vhost": "www.example.com:80", "host": "127.0.0.1", "target": "/", "user_agent": UA},
    ),
    Variant(
        "apache-vhost-combined-ipv6-client",
        f'shop.example.org:443 2001:db8::1 - - {TS} "GET /cart.html HTTP/1.1" 200 9 "-" "-"',
        None,
        {"vhost": "shop.example.org:443", "host": "2001:db8::1", "user_agent": None},
    ),
    Variant(
        "apache-combined-%D",
        f'127.0.0.1 - - {TS} {GET} "{REF}" "{UA}" 1234',
        None,
        {"user_agent": UA, "extra_fields": "1234"},
    ),
    Variant(
        "apache-combined-%T-%D-status-lookalike",
        f'127.0.0.1 - - {TS} {GET} "{REF}" "{UA}" 200 1234',
        None,
        {"target": "/apache_pb.html", "status": 200, "user_agent": UA, "extra_fields": "200 1234"},
    ),
    Variant(
        "apache-common-%D",
        f"127.0.0.1 - - {TS} {GET} 5123",
        None,
        {"response_bytes": 2326, "referrer": None, "extra_fields": "5123"},
    ),
    Variant(
        "nginx-main-x-forwarded-for",
        f'10.1.2.3 - - {TS} "GET /index.html HTTP/1.1" 200 612 "-" "curl/7.68.0" "-"',
        None,
        {"referrer": None, "user_agent": "curl/7.68.0", "extra_fields": '"-"'},
    ),
    Variant(
        "nginx-combined-request-time",
        f'10.1.2.3 - - {TS} "GET /index.html HTTP/1.1" 200 612 "-" "curl/7.68.0" 0.005',
        None,
        {"user_agent": "curl/7.68.0", "extra_fields": "0.005"},
    ),
    Variant(
        "nginx-main-forwarded-and-upstream-times",
        f'10.1.2.3 - - {TS} "GET /a.html HTTP/1.1" 200 5 "-" "ua" "1.2.3.4, 5.6.7.8" 0.010 0.009',
        None,
        {"user_agent": "ua", "extra_fields": '"1.2.3.4, 5.6.7.8" 0.010 0.009'},
    ),
    Variant(
        "ua-then-quoted-extra-never-swallowed",
        f'1.2.3.4 - - {TS} "GET / HTTP/1.1" 200 5 "-" "Mozilla/4.0 (test)" "extra"',
        None,
        {"user_agent": "Mozilla/4.0 (test)", "extra_fields": '"extra"'},
    ),
    Variant(
        "trailing-blank-after-ua",
        f'1.2.3.4 - - {TS} "GET /x.html HTTP/1.1" 200 5 "{REF}" "{UA}" ',
        None,
        {"user_agent": UA, "extra_fields": None},
    ),
    Variant(
        "trailing-blanks-and-tab-after-ua",
        f'1.2.3.4 - - {TS} "GET /x.html HTTP/1.1" 200 5 "{REF}" "{UA}"  \t ',
        None,
        {"user_agent": UA, "extra_fields": None},
    ),
    Variant(
        "trailing-blank-after-bytes",
        f"1.2.3.4 - - {TS} {GET} ",
        None,
        {"response_bytes": 2326, "extra_fields": None},
    ),
    Variant(
        "trailing-blank-after-extra",
        f'1.2.3.4 - - {TS} {GET} "-" "ua" 77 ',
        None,
        {"user_agent": "ua", "extra_fields": "77"},
    ),
    Variant(
        "escaped-quotes-in-ua",
        f'1.2.3.4 - - {TS} {GET} "-" "Mozilla/5.0 \\"compatible\\" bot"',
        None,
        {"user_agent": 'Mozilla/5.0 "compatible" bot'},
    ),
    Variant(
        "escaped-quotes-in-request",
        f'1.2.3.4 - - {TS} "GET /search.html?q=\\"x y\\" HTTP/1.1" 200 5 "-" "ua"',
        None,
        {"target": '/search.html?q="x y"', "protocol": "HTTP/1.1", "user_agent": "ua"},
    ),
    Variant(
        "escaped-quote-then-quoted-extra",
        f'1.2.3.4 - - {TS} {GET} "-" "a \\" b" "extra"',
        None,
        {"user_agent": 'a " b', "extra_fields": '"extra"'},
    ),
    Variant(
        "escaped-backslash-ends-field",
        f'1.2.3.4 - - {TS} {GET} "http://r/\\\\" "ua\\\\"',
        None,
        {"referrer": "http://r/\\", "user_agent": "ua\\"},
    ),
    Variant(
        "nginx-hex-escape-kept",
        f'1.2.3.4 - - {TS} {GET} "-" "Mozilla \\x22q\\x22"',
        None,
        {"user_agent": "Mozilla \\x22q\\x22"},
    ),
    Variant(
        "ipv6-common",
        f'::1 - - {TS} "GET / HTTP/1.1" 200 5',
        None,
        {"host": "::1", "target": "/"},
    ),
    Variant(
        "ipv6-combined-http2",
        f'2001:db8:85a3::8a2e:370:7334 - - {TS} "GET /x.html HTTP/2.0" 200 5 "-" "ua"',
        None,
        {"host": "2001:db8:85a3::8a2e:370:7334", "protocol": "HTTP/2.0"},
    ),
    Variant(
        "nginx-400-no-request",
        f'1.2.3.4 - - {TS} "-" 400 0 "-" "-"',
        None,
        {"request": "-", "method": None, "status": 400},
    ),
    # no sound reading: rejected
    Variant(
        "escaped-quote-never-ends-a-field",
        f'1.2.3.4 - - {TS} {GET} "-" "ua \\"',
        "malformed",
        {},
    ),
    Variant(
        "extra-field-with-stray-quote",
        f'1.2.3.4 - - {TS} {GET} "-" "ua" x"y',
        "malformed",
        {},
    ),
    Variant(
        "four-tokens-without-host-port",
        f'www.example.com 1.2.3.4 - - {TS} "GET / HTTP/1.1" 200 5',
        "malformed",
        {},
    ),
    Variant(
        "bad-status-with-extra",
        f'1.2.3.4 - - {TS} "GET / HTTP/1.1" 20x 5 "-" "ua" 0.1',
        "bad_status",
        {},
    ),
]
