"""Warehouse tables: hourly stage tables, the audit table, and the published daily tables."""

import dagster as dg

from bq_platform.defs.pageviews.assets import HOURLY_BACKFILL, HOURLY_RETRY, pageview_files
from bq_platform.defs.partitions import daily_partitions, hourly_partitions
from bq_platform.defs.resources import ObjectStoreResource, PipelineSettings, WarehouseResource
from bq_platform.lib.accounting import audit_records
from bq_platform.lib.hours import hours_between
from bq_platform.lib.layout import hour_label
from bq_platform.lib.publish import (
    day_completeness,
    load_stage_hour,
    publish_day,
    read_hour_manifest,
)
from bq_platform.lib.sampling_check import sample_ratio

STAGE_CHECK = "stage_matches_manifest"
DAY_CHECK = "day_equals_sum_of_hours"
SAMPLE_CHECK = "sample_ratio"
WAREHOUSE_POOL = "warehouse"

_STAGE_DOCS = {
    "full": "One table per UTC hour (pageviews_stage_YYYYMMDDHH) holding exactly the pageviews "
    "of that hour, replaced by a WRITE_TRUNCATE load job whose ID is built from the hour's "
    "content fingerprint: re-running an unchanged hour submits no job. Expires after 7 days.",
    "sample": "One table per UTC hour (pageviews_sample_stage_YYYYMMDDHH) with the 1-in-200 "
    "visitor sample of that hour, loaded like pageviews_stage.",
}
_PUBLISHED_DOCS = {
    "full": "Pageviews, one row per page request, in day partitions on event_date (UTC), "
    "clustered by site. Each day is published once per content by a single WRITE_TRUNCATE "
    "copy job of its 24 stage tables into pageviews$YYYYMMDD, only when every hour balances.",
    "sample": "0.5% visitor sample of pageviews (1 in 200 visitors by a hash of visitor_id, so "
    "a sampled visitor's whole history is here), published like pageviews.",
}


class PublishConfig(dg.Config):
    """Run configuration of the daily publish."""

    allow_incomplete_hours: bool = False
    """Publish even if some hours are not complete (they are left out). Operator's decision."""


def _stage_asset(kind: str) -> dg.AssetsDefinition:
    name = "pageviews_stage" if kind == "full" else "pageviews_sample_stage"
    key = ["warehouse", name]

    @dg.asset(
        key_prefix="warehouse",
        name=name,
        deps=[pageview_files],
        partitions_def=hourly_partitions,
        backfill_policy=HOURLY_BACKFILL,
        retry_policy=HOURLY_RETRY,
        group_name="warehouse",
        kinds={"bigquery", "table"},
        pool=WAREHOUSE_POOL,
        description=_STAGE_DOCS[kind],
        check_specs=[
            dg.AssetCheckSpec(
                STAGE_CHECK,
                asset=key,
                blocking=True,
                description="Each hour's stage table holds exactly the rows its manifest names.",
            )
        ],
    )
    def stage(
        context: dg.AssetExecutionContext,
        object_store: ObjectStoreResource,
        warehouse: WarehouseResource,
        settings: PipelineSettings,
    ) -> dg.MaterializeResult:
        window = context.partition_time_window
        store, wh = object_store.get_store(), warehouse.get_warehouse()
        results, missing = [], []
        for hour in hours_between(window.start, window.end):
            manifest = read_hour_manifest(store, hour)
            if manifest is None:
                missing.append(hour_label(hour))
                continue
            results.append(
                load_stage_hour(
                    wh,
                    store,
                    manifest,
                    kind,
                    asset=name,
                    run_id=context.run_id,
                    budget=settings.budget(),
                    log=context.log,
                )
            )
        if missing:
            raise dg.Failure(
                f"hours {', '.join(missing[:5])}{'...' if len(missing) > 5 else ''} have no "
                "hour manifest: materialize lake/pageview_files for them first",
            )
        wrong = [r for r in results if not r.matches]
        actions = [r.outcome.action for r in results]
        return dg.MaterializeResult(
            metadata={
                "hours": len(results),
                "rows": sum(r.table_rows or 0 for r in results),
                "jobs_submitted": actions.count("submitted"),
                "jobs_adopted": actions.count("adopted"),
                "jobs_skipped": actions.count("skipped"),
                "job_ids": dg.MetadataValue.md(
                    "\n".join(
                        f"- `{r.table}`: `{r.outcome.job_id}` ({r.outcome.action})"
                        for r in results[:48]
                    )
                ),
            },
            check_results=[
                dg.AssetCheckResult(
                    check_name=STAGE_CHECK,
                    passed=not wrong,
                    description="; ".join(
                        f"{r.table}: {r.table_rows} rows, manifest {r.expected_rows}"
                        for r in wrong[:5]
                    )
                    or f"{len(results)} stage tables match their manifests",
                    metadata={"hours": len(results), "mismatched": len(wrong)},
                )
            ],
        )

    return stage


pageviews_stage = _stage_asset("full")
pageviews_sample_stage = _stage_asset("sample")


@dg.asset(
    key=["warehouse", "pageviews_audit"],
    deps=[pageview_files],
    partitions_def=hourly_partitions,
    backfill_policy=HOURLY_BACKFILL,
    retry_policy=HOURLY_RETRY,
    group_name="warehouse",
    kinds={"bigquery", "table"},
    pool=WAREHOUSE_POOL,
)
def pageviews_audit(
    context: dg.AssetExecutionContext,
    object_store: ObjectStoreResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """Accounting per site and UTC hour: source_lines (from the producers' manifests),
    pageviews, non_page_hits, rejected, duplicates, out_of_window, with the build's fingerprint
    and run. source_lines = pageviews + non_page_hits + rejected + duplicates + out_of_window
    holds in every row of a complete hour. An hour's rows are replaced atomically."""
    window = context.partition_time_window
    store, wh = object_store.get_store(), warehouse.get_warehouse()
    hours = hours_between(window.start, window.end)
    rows = []
    for hour in hours:
        manifest = read_hour_manifest(store, hour)
        if manifest is None:
            raise dg.Failure(f"hour {hour_label(hour)} has no manifest: build it first")
        rows.extend(audit_records(manifest.counts, manifest.fingerprint, context.run_id))
    wh.replace_audit_rows(hours, rows)
    return dg.MaterializeResult(
        metadata={
            "hours": len(hours),
            "rows": len(rows),
            "source_lines": sum(r["source_lines"] for r in rows),
            "pageviews": sum(r["pageviews"] for r in rows),
        }
    )


def _published_asset(kind: str) -> dg.AssetsDefinition:
    name = "pageviews" if kind == "full" else "pageviews_sample"
    stage_key = pageviews_stage.key if kind == "full" else pageviews_sample_stage.key
    key = ["warehouse", name]
    checks = [
        dg.AssetCheckSpec(
            DAY_CHECK,
            asset=key,
            description="The published day partition holds exactly the sum of its stage tables.",
        )
    ]
    if kind == "sample":
        checks.append(
            dg.AssetCheckSpec(
                SAMPLE_CHECK,
                asset=key,
                description="Sampled visitors are within a binomial bound of 1 in 200.",
            )
        )

    @dg.asset(
        key_prefix="warehouse",
        name=name,
        deps=[stage_key, pageviews_audit],
        partitions_def=daily_partitions,
        group_name="warehouse",
        kinds={"bigquery", "table"},
        pool=WAREHOUSE_POOL,
        retry_policy=dg.RetryPolicy(
            max_retries=2, delay=30, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
        ),
        description=_PUBLISHED_DOCS[kind],
        check_specs=checks,
    )
    def published(
        context: dg.AssetExecutionContext,
        config: PublishConfig,
        object_store: ObjectStoreResource,
        warehouse: WarehouseResource,
        settings: PipelineSettings,
    ) -> dg.MaterializeResult:
        day = context.partition_time_window.start.date()
        store, wh = object_store.get_store(), warehouse.get_warehouse()
        completeness = day_completeness(wh, store, day, kind)
        if not completeness.complete:
            message = f"{day}: {len(completeness.problems)} of 24 hours are not complete: " + (
                completeness.describe()
            )
            if not config.allow_incomplete_hours:
                raise dg.Failure(
                    description=message + ". Re-run those hours (lake/pageview_files and the "
                    "stage tables), or, if you accept a partial day, launch this run with "
                    "config allow_incomplete_hours: true.",
                )
            context.log.warning("publishing an incomplete day (operator's choice): %s", message)
        result = publish_day(
            wh,
            completeness,
            kind,
            asset=name,
            run_id=context.run_id,
            require_partition_filter=warehouse.require_partition_filter,
            budget=settings.budget(),
            log=context.log,
        )
        context.log.info(
            "%s: %s by %s (%s), %d rows",
            result.destination,
            result.outcome.action,
            result.outcome.job_id,
            result.fingerprint[:12],
            result.partition_rows,
        )
        check_results = [
            dg.AssetCheckResult(
                check_name=DAY_CHECK,
                passed=result.partition_rows == result.expected_rows,
                description=f"partition {result.destination} has {result.partition_rows} rows; "
                f"its {result.hours} stage tables have {result.expected_rows}",
                metadata={
                    "partition_rows": result.partition_rows,
                    "stage_rows": result.expected_rows,
                },
            )
        ]
        if kind == "sample":
            counts = [c for m in completeness.manifests.values() for c in m.counts]
            ratio = sample_ratio(
                sum(c.visitors for c in counts), sum(c.sample_visitors for c in counts)
            )
            check_results.append(
                dg.AssetCheckResult(
                    check_name=SAMPLE_CHECK,
                    passed=ratio.passed,
                    severity=dg.AssetCheckSeverity.WARN,
                    description=ratio.describe(),
                    metadata={
                        "visitor_hours": ratio.units,
                        "sampled": ratio.sampled,
                        "expected": round(ratio.expected, 2),
                        "skipped": ratio.skipped,
                    },
                )
            )
        return dg.MaterializeResult(
            metadata={
                "destination": result.destination,
                "rows": result.partition_rows,
                "hours_published": result.hours,
                "incomplete_hours": len(completeness.problems),
                "job_id": result.outcome.job_id,
                "job_action": result.outcome.action,
                "fingerprint": result.fingerprint,
            },
            check_results=check_results,
        )

    return published


pageviews = _published_asset("full")
pageviews_sample = _published_asset("sample")
