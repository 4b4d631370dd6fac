"""Browser, OS and device family of a user agent: ua-parser (PyPI ``ua-parser``,
github.com/ua-parser/uap-python) with the rules of ``ua-parser-builtins`` (uap-core's
``regexes.yaml``, precompiled).

ua-parser applies the rules through a *resolver*; its guide ("Builtin Resolvers") ranks them
fastest first: ``regex`` (needs ``ua-parser-rs``), ``re2`` (needs ``google-re2``), ``basic``
(the standard library's ``re``). :func:`resolver_name` is the first whose engine imports here,
the order ua-parser's own default parser uses. Unlike ``ua_parser.parse``, no cache is put in
front: callers parse each distinct user agent once.

The resolvers do not agree on every user agent: ``regex`` and ``re2`` rewrite uap-core's large
bounded repetitions as unbounded ones (``^.{0,100}(bot|...)`` becomes ``^.*(bot|...)``:
``rewrite_regex`` in uap-rust's ``ua-parser/src/lib.rs``, ``ua_parser.utils.fa_simplifier``), so
a rule can match further into a long user agent than with ``basic``. The resolver and its
engine's version are therefore part of the classifier version
(:mod:`bq_platform.lib.traffic.version`).

A domain no rule matches is ``"Other"``, ua-parser's default (``Result.with_defaults``).
"""

import functools
from typing import NamedTuple

import ua_parser
from ua_parser.loaders import load_builtins, load_lazy_builtins

from bq_platform.lib.traffic.user_agent import has_user_agent

#: ua-parser's resolvers, fastest first (its guide, "Builtin Resolvers").
RESOLVERS: tuple[str, ...] = ("regex", "re2", "basic")
#: The distribution each resolver's engine comes from (None: the standard library).
RESOLVER_ENGINES: dict[str, str | None] = {
    "regex": "ua-parser-rs",
    "re2": "google-re2",
    "basic": None,
}
#: The family of a domain that no rule matches (ua-parser's ``DefaultedResult``).
UNKNOWN_FAMILY = "Other"


class UserAgentFamilies(NamedTuple):
    """What the published rows carry of a user agent (uap-core's ``family`` of each domain).

    Attributes:
        browser_family: the user-agent domain's family (``Chrome Mobile``, ``Mobile Safari``,
            ``Googlebot``, ``Python Requests``, ...).
        os_family: ``Android``, ``iOS``, ``Windows``, ...
        device_family: ``iPhone``, ``Spider``, ``Samsung SM-G960F``, ...
    """

    browser_family: str
    os_family: str
    device_family: str


def build_resolver(name: str) -> ua_parser.Resolver:
    """A new, cache-free ua-parser resolver ``name`` (one of :data:`RESOLVERS`) over the
    builtin rules.

    Raises:
        ImportError: its engine (``ua-parser-rs`` for ``regex``, ``google-re2`` for ``re2``) is
            not installed.
        ValueError: ``name`` is not one of :data:`RESOLVERS`.
    """
    if name == "regex":
        from ua_parser.regex import Resolver as RegexResolver

        return RegexResolver(load_lazy_builtins())
    if name == "re2":
        from ua_parser.re2 import Resolver as Re2Resolver

        return Re2Resolver(load_lazy_builtins())
    if name == "basic":
        return ua_parser.BasicResolver(load_builtins())
    raise ValueError(f"unknown ua-parser resolver {name!r}; choose one of {', '.join(RESOLVERS)}")


@functools.cache
def _best_resolver() -> tuple[str, ua_parser.Resolver]:
    *optional, fallback = RESOLVERS
    for name in optional:
        try:
            return name, build_resolver(name)
        except ImportError:
            continue
    return fallback, build_resolver(fallback)


def resolver_name() -> str:
    """The resolver :func:`parse_families` uses in this process (one of :data:`RESOLVERS`)."""
    return _best_resolver()[0]


def families_with(resolver: ua_parser.Resolver, user_agent: str | None) -> UserAgentFamilies | None:
    """:func:`parse_families` through a given resolver (from :func:`build_resolver`)."""
    if not has_user_agent(user_agent):
        return None
    result = resolver(user_agent, ua_parser.Domain.ALL).complete().with_defaults()
    return UserAgentFamilies(
        browser_family=result.user_agent.family,
        os_family=result.os.family,
        device_family=result.device.family,
    )


def parse_families(user_agent: str | None) -> UserAgentFamilies | None:
    """Browser, OS and device family of ``user_agent``; None when there is no user agent (None,
    ``''``, ``'-'``), else each family is a string (:data:`UNKNOWN_FAMILY` where no rule
    matches). Pure: no cache, the same answer for the same text under the same installed rules.
    The resolver is built once per process, on first use."""
    return families_with(_best_resolver()[1], user_agent)
