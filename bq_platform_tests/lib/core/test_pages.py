"""The pageview rule (AWStats "pages"): Python reference and the Spark expression agree."""

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from bq_platform.lib.core.pages import (
    NOT_PAGE_EXTENSIONS,
    is_page,
    is_page_column,
    not_page_path_column,
    path_extension,
)

CASES = [
    # (method, path, status, page?)
    ("GET", "/", 200, True),
    ("GET", "/shuttle/countdown/", 200, True),
    ("GET", "/Software.html", 200, True),
    ("GET", "/Software.html", 304, True),
    ("GET", "/docs/lead/support_docs/mets\x7f.save.html", 200, True),
    ("GET", "/shuttle/missions/sts-68/news/sts-68-mcc-05.txt", 200, True),
    ("GET", "/cgi-bin/imagemap/countdown?99,176", 200, True),
    ("GET", "/images/ksclogo-medium.gif", 200, False),
    ("GET", "/images/KSCLOGO.GIF", 200, False),
    ("GET", "/a.JpEg", 304, False),
    ("GET", "/style.css?v=3", 200, False),
    ("GET", "/app.js", 200, False),
    ("GET", "/Applet.class", 200, False),
    ("GET", "/favicon.ico", 200, False),
    ("GET", "/feed.rss", 200, False),
    ("GET", "/sitemap.xml", 200, False),
    ("GET", "/movie.swf", 200, False),
    ("GET", "/pic.png", 200, False),
    ("GET", "/pic.bmp", 200, False),
    ("GET", "/x.gif/", 200, True),  # a folder that looks like an image
    ("GET", "/page.html?img=a.gif", 200, True),  # extension is read before the query
    ("GET", "/archive.tar.gz", 200, True),  # gz is not in NotPageList
    ("GET", "/a.verylongext", 200, True),  # more than 6 word characters: no extension
    ("GET", "/a.b.Css", 200, False),  # the last dot's extension, any case
    ("GET", "/logo.xcss", 200, True),  # an extension that ends like a listed one
    ("GET", "/a.gif.x-y", 200, True),  # no extension: '-' is not a word character
    ("GET", "/a.JS/", 200, True),
    ("GET", "/.gif", 200, False),
    ("GET", "/A.SWF?x.html", 304, False),
    ("GET", "/caf\u00e9.gif", 200, False),
    ("GET", "/a.\u00c7SS", 200, True),  # case folds ASCII letters only, as re.ASCII does
    ("GET", "/history/apollo/apollo.html", 302, False),  # redirects are not pages
    ("GET", "/missing.html", 404, False),
    ("GET", "/error.html", 500, False),
    ("GET", "/index.html", 206, False),  # partial content is not in ValidHTTPCodes
    ("POST", "/cgi-bin/form", 200, False),
    ("HEAD", "/", 200, False),
    ("get", "/", 200, False),  # methods are case-sensitive
    (None, "/", 200, False),
    ("GET", None, 200, False),
    ("GET", "/", None, False),
]


@pytest.mark.parametrize(("method", "path", "status", "expected"), CASES)
def test_is_page(method: str | None, path: str | None, status: int | None, expected: bool) -> None:
    assert is_page(method, path, status) is expected


@pytest.mark.parametrize(
    ("path", "extension"),
    [
        ("/a.HTML", "html"),
        ("/a.b/c", ""),
        ("/", ""),
        ("/.gif", "gif"),
        ("/a.gif?b.html", "gif"),
        ("/a.x_1", "x_1"),
        ("/a.caf\u00e9", ""),  # \w is ASCII in both Python (re.ASCII) and Java
    ],
)
def test_path_extension(path: str, extension: str) -> None:
    assert path_extension(path) == extension


def test_not_page_list_is_awstats_default() -> None:
    # awstats.model.conf: NotPageList="css js class gif jpg jpeg png bmp ico rss xml swf"
    assert " ".join(NOT_PAGE_EXTENSIONS) == "css js class gif jpg jpeg png bmp ico rss xml swf"


def test_spark_expression_agrees_with_reference(spark) -> None:
    table = pa.table(
        {
            "i": list(range(len(CASES))),
            "method": [c[0] for c in CASES],
            "path": [c[1] for c in CASES],
            "status": pa.array([c[2] for c in CASES], pa.int64()),
        }
    )
    rows = (
        spark.createDataFrame(table)
        .select(
            "i",
            is_page_column(F.col("method"), F.col("path"), F.col("status")).alias("page"),
            not_page_path_column(F.col("path")).alias("not_page_path"),
        )
        .collect()
    )
    got = {r["i"]: (r["page"], r["not_page_path"]) for r in rows}
    for i, (method, path, status, expected) in enumerate(CASES):
        not_page_path = None if path is None else path_extension(path) in NOT_PAGE_EXTENSIONS
        assert got[i] == (expected, not_page_path), (method, path, status)
