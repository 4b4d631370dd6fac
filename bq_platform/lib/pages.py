"""What counts as a pageview: AWStats' "pages" as opposed to "hits".

A request is a *page* when all three hold:

- the method is ``GET`` (DESIGN.md: "successful or not-modified GETs of documents");
- the status is one of AWStats' default ``ValidHTTPCodes="200 304"``: redirects are not pages
  (the page they lead to is counted when it is served), errors are not pages;
- the path's extension is not in AWStats' default ``NotPageList="css js class gif jpg jpeg png
  bmp ico rss xml swf"`` (images, stylesheets, scripts, applets, icons, feeds, Flash). The
  extension is taken as AWStats does: the path before the query (``?``), then
  ``\\.(\\w{1,6})$`` (1-6 ASCII word characters after the last dot, at the very end), compared
  case-insensitively. A path without such an extension (``/``, ``/shuttle/countdown/``,
  ``/cgi-bin/imagemap``) is a page.

Sources: AWStats ``wwwroot/cgi-bin/awstats.model.conf`` (github.com/eldy/AWStats), whose
``NotPageList`` comment says those extensions are "counted as 'Hit only' and not as a 'Hit'
and 'Page/Download'" and whose ``ValidHTTPCodes`` default is ``"200 304"``; the extension
rule is ``$regext = qr/\\.(\\w{1,6})$/`` in ``awstats.pl``. Differences from AWStats, on
purpose: only ``GET`` counts, and only ``?`` separates the query (AWStats'
``URLQuerySeparators`` also has ``;``, which we keep in the path as servers do for
``;jsessionid=``).

Two implementations that must agree: :func:`is_page` (pure Python, the reference) and
:func:`is_page_column` (a Spark Column expression, native functions only).
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
    """Reference rule: is this request a pageview?

    Args:
        method: HTTP method as logged (case-sensitive: ``get`` is not ``GET``).
        path: requested path; anything from the first ``?`` on is ignored.
        status: HTTP status code.

    Returns:
        True for a page; False otherwise, including when any argument is None.
    """
    if method is None or path is None or status is None:
        return False
    return (
        method in PAGE_METHODS and status in PAGE_STATUSES and path_extension(path) not in _NOT_PAGE
    )


def extension_column(path: Column) -> Column:
    """Spark expression of :func:`path_extension` (``''`` when there is none; null for null)."""
    without_query = F.substring_index(path, "?", 1)
    return F.lower(F.regexp_extract(without_query, "(?s)" + EXTENSION_PATTERN + r"\z", 1))


def is_page_column(method: Column, path: Column, status: Column) -> Column:
    """Spark expression of :func:`is_page`: a non-null boolean Column.

    The cheap tests come first, so the extension regex only runs for successful GETs
    (Spark short-circuits ``AND``).
    """
    condition = (
        method.isin(*sorted(PAGE_METHODS))
        & status.isin(*sorted(PAGE_STATUSES))
        & ~extension_column(path).isin(*NOT_PAGE_EXTENSIONS)
    )
    return F.coalesce(condition, F.lit(False))
