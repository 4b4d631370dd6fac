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


#: Java regex (``rlike``) for a path, query removed, whose AWStats extension is in
#: :data:`NOT_PAGE_EXTENSIONS`: a dot, one of them, the end. The same paths as
#: :func:`path_extension` in the list: the extension is the 1-6 word characters after the *last*
#: dot (a word character is never a dot), and every listed extension has at most 6. ``(?i)``
#: without ``UNICODE_CASE`` folds ASCII letters only, as ``re.ASCII`` does for ``.lower()`` of an
#: ASCII-only extension. One regex instead of ``lower(regexp_extract(...))``: Spark 4's
#: ``lower`` maps case with ICU (``spark.sql.icu.caseMappings.enabled``, default true), and
#: the first call initialises ``CollationAwareUTF8String``'s title-case table, 1.2-1.3 s on one
#: core of a cold JVM while the other task threads that reach ``lower`` wait for it (measured:
#: ``Class.forName`` in a fresh JVM; docs/PERFORMANCE.md, issue 9).
NOT_PAGE_PATH_PATTERN = r"(?i)(?s)\.(?:" + "|".join(NOT_PAGE_EXTENSIONS) + r")\z"


def not_page_path_column(path: Column) -> Column:
    """Spark expression: ``path``'s extension (query removed) is in the NotPageList.

    Boolean, null for a null path; :func:`path_extension` in :data:`NOT_PAGE_EXTENSIONS` is
    the reference.
    """
    return F.substring_index(path, "?", 1).rlike(NOT_PAGE_PATH_PATTERN)


def is_page_column(method: Column, path: Column, status: Column) -> Column:
    """Spark expression of :func:`is_page`: a non-null boolean Column.

    The cheap tests come first, so the extension regex only runs for successful GETs
    (Spark short-circuits ``AND``).
    """
    condition = (
        method.isin(*sorted(PAGE_METHODS))
        & status.isin(*sorted(PAGE_STATUSES))
        & ~not_page_path_column(path)
    )
    return F.coalesce(condition, F.lit(False))
