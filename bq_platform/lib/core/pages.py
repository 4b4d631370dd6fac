"""What counts as a pageview: AWStats' "pages" as opposed to "hits".

A request is a *page* when all three hold:

- the method is ``GET`` (DESIGN.md: "successful or not-modified GETs of documents");
- the status is one of AWStats' default ``ValidHTTPCodes="200 304"`` (redirects and errors are
  not pages);
- the path's extension is not in AWStats' default ``NotPageList`` (:data:`NOT_PAGE_EXTENSIONS`).
  The extension is taken as AWStats does: the path before ``?``, then ``\\.(\\w{1,6})$``,
  case-insensitively. A path without one (``/``, ``/cgi-bin/imagemap``) is a page.

Sources: AWStats ``wwwroot/cgi-bin/awstats.model.conf`` (github.com/eldy/AWStats) for
``NotPageList`` and ``ValidHTTPCodes``; ``$regext`` in ``awstats.pl`` for the extension.
Differences on purpose: only ``GET`` counts, and only ``?`` separates the query (``;`` stays in
the path, as in ``;jsessionid=``). :func:`is_page` is the reference of :func:`is_page_column`.
"""

import re

from pyspark.sql import Column
from pyspark.sql import functions as F

PAGE_METHODS: frozenset[str] = frozenset({"GET"})
PAGE_STATUSES: frozenset[int] = frozenset({200, 304})
#: AWStats' default NotPageList, in its order.
NOT_PAGE_EXTENSIONS: tuple[str, ...] = (
    "css",
    "js",
    "class",
    "gif",
    "jpg",
    "jpeg",
    "png",
    "bmp",
    "ico",
    "rss",
    "xml",
    "swf",
)
#: The extension rule of awstats.pl (``$regext``), without the end anchor.
EXTENSION_PATTERN = r"\.(\w{1,6})"

_EXTENSION_RE = re.compile(EXTENSION_PATTERN + r"\Z", re.ASCII)
_NOT_PAGE = frozenset(NOT_PAGE_EXTENSIONS)


def path_extension(path: str) -> str:
    """Lower-case extension of ``path`` (query removed) by AWStats' rule, or ``''`` if none."""
    match = _EXTENSION_RE.search(path.split("?", 1)[0])
    return match.group(1).lower() if match else ""


def is_page(method: str | None, path: str | None, status: int | None) -> bool:
    """Reference rule: is this request a pageview? ``method`` is case-sensitive; ``path`` is
    read up to its first ``?``; False when any argument is None."""
    if method is None or path is None or status is None:
        return False
    return (
        method in PAGE_METHODS and status in PAGE_STATUSES and path_extension(path) not in _NOT_PAGE
    )


#: Java regex (``rlike``) for a path, query removed, whose extension is in
#: :data:`NOT_PAGE_EXTENSIONS`: the same paths as :func:`path_extension`. ``(?i)`` folds ASCII
#: only. One regex rather than ``lower(...)``, whose ICU case mapping is slow to initialise.
NOT_PAGE_PATH_PATTERN = r"(?i)(?s)\.(?:" + "|".join(NOT_PAGE_EXTENSIONS) + r")\z"


def not_page_path_column(path: Column) -> Column:
    """Spark boolean: ``path``'s extension (query removed) is in the NotPageList; null for null."""
    return F.substring_index(path, "?", 1).rlike(NOT_PAGE_PATH_PATTERN)


def is_page_column(method: Column, path: Column, status: Column) -> Column:
    """Spark expression of :func:`is_page`: a non-null boolean Column (regex last: ``AND``
    short-circuits)."""
    condition = (
        method.isin(*sorted(PAGE_METHODS))
        & status.isin(*sorted(PAGE_STATUSES))
        & ~not_page_path_column(path)
    )
    return F.coalesce(condition, F.lit(False))
