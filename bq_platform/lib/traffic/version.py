"""The classifier's version: what decides a row's ``traffic_class``, ``bot_reason`` and
families, as one stable string for the hour's fingerprint.

It names the installed versions of :data:`DISTRIBUTIONS` (the crawler list, ua-parser and its
rules), the ua-parser resolver in use with its engine's version (resolvers differ on a few user
agents: :mod:`bq_platform.lib.traffic.ua_families`), and the heuristics that run with their
thresholds, e.g.::

    crawler-user-agents==1.67.0;ua-parser==1.0.2;ua-parser-builtins==202610;
    resolver=regex;ua-parser-rs==0.1.5;
    heuristics=heuristic:robots_txt,heuristic:page_rate>720/h,heuristic:empty_user_agent

(one line, without the breaks). The same versions and thresholds give the same string on every
machine and run; changing any of them changes it.
"""

import importlib.metadata

from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.traffic.ua_families import RESOLVER_ENGINES, resolver_name

#: The distributions whose data decides the classification, as pip names them.
DISTRIBUTIONS: tuple[str, ...] = ("crawler-user-agents", "ua-parser", "ua-parser-builtins")


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution`` (a pip name).

    Raises:
        importlib.metadata.PackageNotFoundError: it is not installed (run ``make install``).
    """
    return importlib.metadata.version(distribution)


def installed_rules() -> tuple[str, ...]:
    """``name==version`` of each of :data:`DISTRIBUTIONS`, ``resolver=<name>`` of the ua-parser
    resolver in use, then ``name==version`` of its engine's distribution when it has one."""
    resolver = resolver_name()
    engine = RESOLVER_ENGINES[resolver]
    return (
        *(f"{name}=={installed_version(name)}" for name in DISTRIBUTIONS),
        f"resolver={resolver}",
        *((f"{engine}=={installed_version(engine)}",) if engine is not None else ()),
    )


def classifier_version(thresholds: ClassificationThresholds) -> str:
    """The stable string of the module docstring for what is installed and ``thresholds``
    (``heuristics=none`` when no heuristic runs)."""
    heuristics = ",".join(thresholds.heuristic_reasons()) or "none"
    return ";".join([*installed_rules(), f"heuristics={heuristics}"])
