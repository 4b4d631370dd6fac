"""The daily rollups as Spark aggregations of a day's pageview rows.

- ``pageviews_daily_by_site``: per ``event_date`` and ``site``, ``human_pageviews`` (rows whose
  ``traffic_class`` is ``human``), ``bot_pageviews`` (``bot`` or ``suspected_bot``,
  :data:`~bq_platform.lib.traffic.classes.BOT_CLASSES`) and ``human_visitors`` (exact count of
  distinct ``visitor_id`` of the human rows); one row per site with at least one pageview.
- ``pageviews_daily_by_page``: per ``event_date``, ``site`` and ``page_path``, the human rows and
  their distinct visitors; one row per page with at least one human pageview.

The columns are the tables' (:func:`bq_platform.lib.warehouse.schema.rollup_spec`), in order.
Counts are exact (``count(DISTINCT ...)``, never an approximation): the checks compare them
with the published rows.
"""

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bq_platform.lib.traffic.classes import BOT_CLASSES, HUMAN
from bq_platform.lib.warehouse.schema import (
    DAILY_BY_PAGE_TABLE,
    DAILY_BY_SITE_TABLE,
    rollup_spec,
)

#: Part of every rollup's fingerprint (:func:`bq_platform.lib.core.job_ids.rollup_fingerprint`).
#: **Bump it whenever the aggregation's output changes**, or days already published keep their
#: old rollups (their load jobs are skipped).
ROLLUP_VERSION = "1"
#: The columns of ``pageviews`` the rollups read.
INPUT_COLUMNS: tuple[str, ...] = ("event_date", "site", "page_path", "visitor_id", "traffic_class")


def read_pages(spark: SparkSession, uris: Sequence[str]) -> DataFrame:
    """The :data:`INPUT_COLUMNS` of the pageview Parquet files ``uris`` (full files, as the
    hour manifests name them). Raises ValueError if ``uris`` is empty."""
    if not uris:
        raise ValueError("no pageview files to roll up")
    return spark.read.parquet(*uris).select(*INPUT_COLUMNS)


def by_site(pages: DataFrame) -> DataFrame:
    """``pageviews_daily_by_site`` of ``pages`` (rows with :data:`INPUT_COLUMNS`)."""
    traffic = F.col("traffic_class")
    human = traffic == F.lit(HUMAN)
    rolled = pages.groupBy("event_date", "site").agg(
        F.count_if(human).alias("human_pageviews"),
        F.count_if(traffic.isin(*sorted(BOT_CLASSES))).alias("bot_pageviews"),
        F.count_distinct(F.when(human, F.col("visitor_id"))).alias("human_visitors"),
    )
    return rolled.select(*rollup_spec(DAILY_BY_SITE_TABLE).column_names)


def by_page(pages: DataFrame) -> DataFrame:
    """``pageviews_daily_by_page`` of ``pages`` (rows with :data:`INPUT_COLUMNS`)."""
    rolled = (
        pages.where(F.col("traffic_class") == F.lit(HUMAN))
        .groupBy("event_date", "site", "page_path")
        .agg(
            F.count(F.lit(1)).alias("human_pageviews"),
            F.count_distinct("visitor_id").alias("human_visitors"),
        )
    )
    return rolled.select(*rollup_spec(DAILY_BY_PAGE_TABLE).column_names)


#: Each rollup table and the aggregation that computes it.
AGGREGATIONS = {DAILY_BY_SITE_TABLE: by_site, DAILY_BY_PAGE_TABLE: by_page}
