"""The traffic classification of a build's pages: ``traffic_class``, ``bot_reason`` and the
browser, OS and device families (:data:`bq_platform.lib.warehouse.schema.TRAFFIC_COLUMNS`).

What depends on the user agent alone, the crawler list's entry
(:func:`bq_platform.lib.traffic.crawlers.crawler_pattern`) and the families
(:func:`bq_platform.lib.traffic.ua_families.parse_families`), is computed in Python on the
driver once per *distinct* user agent of the pass (:func:`user_agent_rows`), and joined back
with a broadcast join: the pages of a build share few user agents. What depends on the visitor
(:mod:`bq_platform.lib.traffic.heuristics`) is counted per site-hour and client address over
the hour's pages and ``/robots.txt`` fetches (a fetch of ``/robots.txt`` is no page), in one
aggregation the build's visitor counts share (:func:`visitor_activity`).

A line is ``bot`` when its user agent is on the list, else ``suspected_bot`` when a heuristic
of the configured :class:`~bq_platform.lib.traffic.thresholds.ClassificationThresholds` marks
it (the first of :data:`~bq_platform.lib.traffic.heuristics.HEURISTICS` names its reason),
else ``human``. A line of a format without a user-agent field (Common Log Format) has no list
entry, no families, and is classified by the visitor heuristics alone.
"""

import json
from collections.abc import Iterable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from bq_platform.lib.hourly_build.transform import CATEGORY_PAGE
from bq_platform.lib.traffic.classes import BOT, HUMAN, SUSPECTED_BOT
from bq_platform.lib.traffic.crawlers import crawler_pattern, crawler_reason
from bq_platform.lib.traffic.heuristics import (
    ROBOTS_TXT_PATH,
    empty_user_agent_reason,
    page_rate_reason,
    robots_txt_reason,
)
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.traffic.ua_families import parse_families
from bq_platform.lib.traffic.user_agent import has_user_agent
from bq_platform.lib.warehouse.schema import TRAFFIC_COLUMNS

#: The columns :func:`user_agent_rows` gives per distinct user agent.
USER_AGENT_SCHEMA = StructType(
    [
        StructField("user_agent", StringType(), False),
        StructField("crawler_reason", StringType(), True),
        StructField("browser_family", StringType(), True),
        StructField("os_family", StringType(), True),
        StructField("device_family", StringType(), True),
    ]
)
#: ``traffic_class`` of the pages of a build without the classification (the benchmark's
#: ``classify=False``): no class of :mod:`bq_platform.lib.traffic.classes`, so no check
#: counts such a page as human or bot.
UNCLASSIFIED = "unclassified"
#: Column set on the lines :func:`visitor_activity` reads beside the pages: fetches of
#: ``/robots.txt`` (any method and status, in the hour's window).
ROBOTS_TXT_COLUMN = "robots_txt"


def robots_txt_column(page_path: Column) -> Column:
    """True where the request's path (query removed) is ``/robots.txt``; never null."""
    return F.coalesce(page_path == ROBOTS_TXT_PATH, F.lit(False))


def user_agent_rows(user_agents: Iterable[str | None]) -> list[tuple[str, ...]]:
    """One row of :data:`USER_AGENT_SCHEMA` per distinct user agent of ``user_agents`` (those
    without one, None ``''`` ``'-'``, are left out): the list's ``bot_reason`` (None when
    unlisted) and the three families. Each distinct text is classified once."""
    rows = []
    for agent in sorted({a for a in user_agents if has_user_agent(a)}):
        pattern = crawler_pattern(agent)
        families = parse_families(agent)
        rows.append(
            (agent, None if pattern is None else crawler_reason(pattern), *(families or ()))
        )
    return rows


def user_agent_frame(spark: SparkSession, user_agents: Iterable[str | None]) -> DataFrame:
    """:func:`user_agent_rows` as a small DataFrame of :data:`USER_AGENT_SCHEMA`.

    The rows travel as one JSON literal that the plan parses (``from_json`` then ``inline``):
    one expression to analyse and generate code for, however many agents there are, and no
    Python-side server that hands data to the JVM (``createDataFrame`` from local rows starts
    one), so a signal that stops the build never lands in one."""
    names = USER_AGENT_SCHEMA.fieldNames()
    rows = [dict(zip(names, row, strict=True)) for row in user_agent_rows(user_agents)]
    parsed = F.from_json(F.lit(json.dumps(rows)), ArrayType(USER_AGENT_SCHEMA))
    return spark.range(1).select(F.inline(parsed))


def visitor_activity(lines: DataFrame) -> DataFrame:
    """Per visitor of a site-hour (``unit_no``, ``client``): ``visitor_pages`` (its pages),
    ``visitor_robots_txt`` (it fetched ``/robots.txt``) and ``visitor_sampled`` (it is in
    the sample), persisted: the first query that reads it computes it; the caller unpersists
    it after the pass.

    Both the visitor heuristics (:func:`marked_visitors`) and the build's visitor counts read
    it, so the lines are grouped by visitor once per pass. ``lines`` are the pass's lines with
    ``unit_no``, ``client``, ``category``, ``in_sample`` and :data:`ROBOTS_TXT_COLUMN`;
    ``unit_no`` and ``client`` are null on lines that are neither pages nor robots.txt
    fetches, which are left out. A client's pages share one ``visitor_id`` (its keyed hash),
    so one row with ``visitor_pages > 0`` is one distinct ``visitor_id`` of the site-hour.
    """
    keyed = lines.where(F.col("unit_no").isNotNull() & F.col("client").isNotNull())
    page = F.col("category") == CATEGORY_PAGE
    return (
        keyed.groupBy("unit_no", "client")
        .agg(
            F.count_if(page).alias("visitor_pages"),
            F.bool_or(F.col(ROBOTS_TXT_COLUMN)).alias("visitor_robots_txt"),
            F.bool_or(page & F.col("in_sample")).alias("visitor_sampled"),
        )
        .persist()
    )


def classify_pages(
    activity: DataFrame,
    pages: DataFrame,
    thresholds: ClassificationThresholds,
    *,
    classify: bool = True,
) -> DataFrame:
    """``pages`` with the traffic columns appended.

    Args:
        activity: the pass's :func:`visitor_activity`.
        pages: the pass's pages, with ``unit_no``, ``client``, ``category``, ``user_agent``
            and ``user_agent_field``.
        thresholds: which heuristics run.
        classify: False skips the whole traffic step (no job, no joins): ``traffic_class``
            is :data:`UNCLASSIFIED` (the column is REQUIRED in the files) and the other four
            columns are null. It exists only so that the benchmark
            (``benchmarks/benchmark.py``) can measure what the classification costs: rows
            built so have no class and break the ``pageviews = human + bot`` identity, so it
            must never be used for data that is published.

    Returns:
        ``pages``' columns, then ``traffic_class``, ``bot_reason``, ``browser_family``,
        ``os_family``, ``device_family``; one row per page. A page's ``bot_reason`` is null
        exactly when its class is ``human``. Runs one Spark job to collect the distinct user
        agents and one to keep their table (none when ``classify`` is False); the visitors a
        heuristic marks are broadcast from ``activity``.
    """
    if not classify:
        unset = F.lit(None).cast("string")
        return pages.select(
            *pages.columns,
            *[
                (F.lit(UNCLASSIFIED) if column.name == "traffic_class" else unset).alias(
                    column.name
                )
                for column in TRAFFIC_COLUMNS
            ],
        )
    spark = pages.sparkSession
    agents = [r[0] for r in pages.select("user_agent").distinct().collect()]
    # Kept: the agents' table is computed once, not in every query that joins it.
    per_agent = F.broadcast(
        user_agent_frame(spark, agents).localCheckpoint(eager=True)
    ).withColumnRenamed("user_agent", "agent")
    joined = pages.join(per_agent, F.col("user_agent") == F.col("agent"), "left")
    marked = marked_visitors(activity, thresholds)
    if marked is None:
        joined = joined.select(
            "*",
            F.lit(None).cast("long").alias("visitor_pages"),
            F.lit(None).cast("boolean").alias("visitor_robots_txt"),
        )
    else:
        joined = joined.join(F.broadcast(marked), ["unit_no", "client"], "left")
    reason = _reason(thresholds)
    traffic_class = (
        F.when(F.col("crawler_reason").isNotNull(), F.lit(BOT))
        .when(reason.isNotNull(), F.lit(SUSPECTED_BOT))
        .otherwise(F.lit(HUMAN))
    )
    return joined.select(
        *pages.columns,
        # Set on every page; a nullable column like every other of the Parquet files
        # (:func:`bq_platform.lib.hourly_build.outputs.pageview_arrow_schema`).
        F.when(F.col("category") == CATEGORY_PAGE, traffic_class).alias("traffic_class"),
        F.coalesce(F.col("crawler_reason"), reason).alias("bot_reason"),
        "browser_family",
        "os_family",
        "device_family",
    )


def marked_visitors(activity: DataFrame, thresholds: ClassificationThresholds) -> DataFrame | None:
    """The visitors (``unit_no``, ``client``) of :func:`visitor_activity` that a visitor
    heuristic marks, with ``visitor_pages`` and ``visitor_robots_txt``; None when no visitor
    heuristic runs.

    Marked visitors are few (a page-rate offender has more than the threshold's pages; a
    robots.txt fetch is rare), so they are broadcast to every use of the classified pages:
    the pages themselves are never shuffled to meet their visitor's counts.
    """
    limit = thresholds.max_pages_per_visitor_hour
    if limit is None and not thresholds.robots_txt_marks_visitor:
        return None
    marks = F.lit(False)
    if thresholds.robots_txt_marks_visitor:
        marks = marks | F.col("visitor_robots_txt")
    if limit is not None:
        marks = marks | (F.col("visitor_pages") > limit)
    return activity.where(marks).select("unit_no", "client", "visitor_pages", "visitor_robots_txt")


def _reason(thresholds: ClassificationThresholds) -> Column:
    """The first heuristic's ``bot_reason`` that marks the row, else null."""
    marks: list[tuple[Column, str]] = []
    if thresholds.robots_txt_marks_visitor:
        marks.append((F.coalesce(F.col("visitor_robots_txt"), F.lit(False)), robots_txt_reason()))
    limit = thresholds.max_pages_per_visitor_hour
    if limit is not None:
        rate = F.coalesce(F.col("visitor_pages") > limit, F.lit(False))
        marks.append((rate, page_rate_reason(limit)))
    if thresholds.empty_user_agent_marks_line:
        empty = F.col("user_agent_field") & F.col("user_agent").isNull()
        marks.append((empty, empty_user_agent_reason()))
    reason: Column = F.lit(None).cast("string")
    for condition, text in reversed(marks):
        reason = F.when(condition, F.lit(text)).otherwise(reason)
    return reason
