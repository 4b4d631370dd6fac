"""Daily rollups of the published pageviews, for analysts: per site and per page, human and bot
apart, with exact distinct human visitors.

Each day's rollups are computed in Spark from the day's pageview files (the ``spark``
resource's ``build_rollups``: in the run's process or as its own application) and loaded into
``table$YYYYMMDD`` by one load job per table and day (:mod:`bq_platform.lib.publish.rollups`):
no query over ``pageviews`` builds them. Two blocking checks per day compare each rollup with
the published rows (one query per table and day).
"""

import time
from collections.abc import Sequence

import dagster as dg

from bq_platform.defs.check_events import PartitionCheck, comparison
from bq_platform.defs.daily import DayReport, report_days
from bq_platform.defs.errors import fail_fast
from bq_platform.defs.metadata import OWNERS, job_links_markdown
from bq_platform.defs.pageviews.spark_build import HourlyBuildResource
from bq_platform.defs.partitions import daily_partitions, partition_days
from bq_platform.defs.resources import (
    WAREHOUSE_POOL,
    ObjectStoreResource,
    PipelineSettings,
    WarehouseResource,
)
from bq_platform.defs.warehouse.assets import DAILY_RETRY, pageviews
from bq_platform.lib.core import commands
from bq_platform.lib.core.job_ids import day_partition
from bq_platform.lib.daily_build.rollup_files import read_rollup_files
from bq_platform.lib.publish.rollups import (
    RollupInputError,
    publish_rollups,
    published_day_inputs,
)
from bq_platform.lib.traffic.classes import HUMAN
from bq_platform.lib.warehouse.rollup_compare import KEYS, RollupComparison
from bq_platform.lib.warehouse.schema import (
    DAILY_BY_PAGE_TABLE,
    DAILY_BY_SITE_TABLE,
    PAGEVIEWS_TABLE,
    ROLLUP_TABLES,
    rollup_spec,
)

ROLLUP_CHECK = "rollup_equals_published"
VISITORS_CHECK = "human_visitors_exact"
#: The pageview counts :data:`ROLLUP_CHECK` compares, per rollup table.
COUNTED: dict[str, tuple[str, ...]] = {
    DAILY_BY_SITE_TABLE: ("human_pageviews", "bot_pageviews"),
    DAILY_BY_PAGE_TABLE: ("human_pageviews",),
}
#: Differing keys a failed check's description names.
SHOWN = 3

_CHECK_DOCS = {
    (DAILY_BY_SITE_TABLE, ROLLUP_CHECK): "Per site: human_pageviews and bot_pageviews equal "
    "the published pageviews partition's rows by traffic class.",
    (DAILY_BY_PAGE_TABLE, ROLLUP_CHECK): "Per (site, page_path): human_pageviews equals the "
    "published pageviews partition's human rows; no page without human rows.",
    (DAILY_BY_SITE_TABLE, VISITORS_CHECK): "Per site: human_visitors equals count(distinct "
    "visitor_id) of the published human rows.",
    (DAILY_BY_PAGE_TABLE, VISITORS_CHECK): "Per (site, page_path): human_visitors equals "
    "count(distinct visitor_id) of the published human rows.",
}


def _where(table: str, key: tuple[str, ...]) -> str:
    """``site a.org`` or ``site a.org page /x``."""
    return " ".join(
        f"{'page' if column == 'page_path' else column} {value}"
        for column, value in zip(KEYS[table], key, strict=True)
    )


def rollup_check(
    found: RollupComparison, check_name: str, measures: Sequence[str], destination: str
) -> PartitionCheck:
    """The check ``check_name`` of the rollup partition ``destination`` on ``measures``: passes
    when no key differs; a failure names the first keys, both numbers and the fix."""
    table, day = found.table, found.day
    what = "sites" if table == DAILY_BY_SITE_TABLE else "pages"
    differing = max(found.differences[m] for m in measures)
    if not differing:
        description = (
            f"{day}: {destination} equals {PAGEVIEWS_TABLE}${day_partition(day)} on "
            f"{', '.join(measures)} for all {found.keys_compared} {what}"
        )
    else:
        shown = []
        for example in found.differing(measures)[:SHOWN]:
            values = ", ".join(
                f"{m} {example.rollup[m]} in the rollup, {example.published[m]} published"
                for m in measures
                if example.differs(m)
            )
            shown.append(f"{_where(table, example.key)}: {values}")
        description = (
            f"{day}: {differing} of {found.keys_compared} {what} of {destination} differ from "
            f"{PAGEVIEWS_TABLE}${day_partition(day)} ({'; '.join(shown)}; None: no row). Fix: "
            f"if the partition was changed after its load, delete {destination} and publish the "
            f"day again: {commands.run_day(day, '--force')}; if the rollup is computed wrongly, "
            "fix bq_platform/lib/daily_build/rollups.py and bump its ROLLUP_VERSION."
        )
    return PartitionCheck(
        check_name=check_name,
        partition=day.isoformat(),
        passed=not differing,
        description=description,
        metadata={
            **comparison(0, differing, table=destination),
            "keys_compared": found.keys_compared,
            "differences": dg.MetadataValue.json({m: found.differences[m] for m in measures}),
        },
    )


def _rollup_asset(table: str) -> dg.AssetsDefinition:
    key = ["warehouse", table]
    checks = [
        dg.AssetCheckSpec(
            name,
            asset=key,
            blocking=True,
            partitions_def=daily_partitions,
            description=_CHECK_DOCS[(table, name)],
        )
        for name in (ROLLUP_CHECK, VISITORS_CHECK)
    ]

    @dg.asset(
        key=key,
        deps=[pageviews],
        partitions_def=daily_partitions,
        group_name="warehouse",
        owners=OWNERS,
        kinds={"spark", "bigquery", "table"},
        pool=WAREHOUSE_POOL,
        retry_policy=DAILY_RETRY,
        description=rollup_spec(table).description + " Computed in Spark from the day's "
        "pageview files and published by one WRITE_TRUNCATE load job into "
        f"{table}$YYYYMMDD per day and content.",
        check_specs=checks,
    )
    @fail_fast
    def rollup(
        context: dg.AssetExecutionContext,
        spark: HourlyBuildResource,
        object_store: ObjectStoreResource,
        warehouse: WarehouseResource,
        settings: PipelineSettings,
    ):  # no return annotation (Dagster types outputs from it); returns Iterator[CheckedEvent]
        store, wh = object_store.get_store(), warehouse.get_warehouse()
        started = time.monotonic()
        built = []
        for day in partition_days(context):
            try:
                inputs = published_day_inputs(wh, store, day, settings.max_rejected_share)
            except RollupInputError as exc:
                raise dg.Failure(description=f"{table} of {day}: {exc}") from None
            found = read_rollup_files(store, inputs, ROLLUP_TABLES)
            if found[table] is None:  # both rollups in one pass: the other asset finds its own
                found = spark.build_rollups(context, store, inputs)
            files = found[table]
            assert files is not None
            built.append(files)
        results = publish_rollups(
            wh,
            store,
            built,
            asset=table,
            run_id=context.run_id,
            require_partition_filter=warehouse.require_partition_filter,
            budget=settings.budget(),
            log=context.log,
        )
        by_day = {r.files.day: r for r in results}
        seconds = round(time.monotonic() - started, 2)  # of all the days

        def one_day(day) -> DayReport:
            result = by_day[day]
            files, outcome = result.files, result.outcome
            context.log.info(
                "%s: %s by %s (%s), %d rows",
                result.destination,
                outcome.action,
                outcome.job_id,
                files.fingerprint[:12],
                result.partition_rows,
            )
            found = wh.compare_rollup(table, day, HUMAN)
            checks = [
                rollup_check(found, ROLLUP_CHECK, COUNTED[table], result.destination),
                rollup_check(found, VISITORS_CHECK, ("human_visitors",), result.destination),
            ]
            metadata = {
                "destination": result.destination,
                "rows": result.partition_rows,
                "job_id": job_links_markdown(
                    warehouse, [(result.destination, outcome.job_id, outcome.action)]
                ),
                "job_action": outcome.action,
                "fingerprint": files.fingerprint,
                "day_fingerprint": files.day_fingerprint,
                "human_pageviews": files.human_pageviews,
                **({"bot_pageviews": files.bot_pageviews} if table == DAILY_BY_SITE_TABLE else {}),
                "files": dg.MetadataValue.json([store.uri(k) for k in files.files]),
                "duration_seconds": seconds,
            }
            return metadata, checks

        return report_days(context, one_day)

    return rollup


pageviews_daily_by_site = _rollup_asset(DAILY_BY_SITE_TABLE)
pageviews_daily_by_page = _rollup_asset(DAILY_BY_PAGE_TABLE)
