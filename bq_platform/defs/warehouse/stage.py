"""The hourly stage tables: ``warehouse/pageviews_stage`` and ``warehouse/pageviews_sample_stage``,
materialized together by one step (:func:`stage_tables`)."""

import time

import dagster as dg

from bq_platform.defs.check_events import PartitionCheck, comparison, report
from bq_platform.defs.errors import fail_fast
from bq_platform.defs.metadata import OWNERS, job_link, partition_results
from bq_platform.defs.pageviews.assets import HOURLY_BACKFILL, HOURLY_RETRY, pageview_files
from bq_platform.defs.partitions import hourly_partitions, partition_hours
from bq_platform.defs.resources import (
    WAREHOUSE_POOL,
    ObjectStoreResource,
    PipelineSettings,
    WarehouseResource,
)
from bq_platform.lib.core import commands
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.layout import hour_manifest_key
from bq_platform.lib.core.manifest import (
    HourManifest,
    read_hour_manifests,
    stage_bytes,
    stage_files,
)
from bq_platform.lib.publish.protocol import StageResult, load_stage_hours
from bq_platform.lib.storage.base import ObjectStore

STAGE_CHECK = "stage_matches_manifest"
_STAGE_DOCS = {
    "full": "One table per UTC hour (pageviews_stage_YYYYMMDDHH) holding exactly the pageviews "
    "of that hour, replaced by a WRITE_TRUNCATE load job whose ID is built from the hour's "
    "content fingerprint: re-running an unchanged hour submits no job. Expires after 7 days.",
    "sample": "One table per UTC hour (pageviews_sample_stage_YYYYMMDDHH) with the 1-in-200 "
    "visitor sample of that hour, loaded like pageviews_stage.",
}
#: Each kind's stage asset (its name is also the label its load jobs carry).
STAGE_ASSETS = {"full": "pageviews_stage", "sample": "pageviews_sample_stage"}
STAGE_KEYS = {kind: dg.AssetKey(["warehouse", name]) for kind, name in STAGE_ASSETS.items()}


@dg.multi_asset(
    name="warehouse__stage_tables",
    specs=[
        dg.AssetSpec(
            key,
            deps=[pageview_files],
            group_name="warehouse",
            owners=OWNERS,
            kinds={"bigquery", "table"},
            description=_STAGE_DOCS[kind],
        )
        for kind, key in STAGE_KEYS.items()
    ],
    check_specs=[
        dg.AssetCheckSpec(
            STAGE_CHECK,
            asset=key,
            blocking=True,
            partitions_def=hourly_partitions,
            description="Each hour's stage table holds exactly the rows its manifest names.",
        )
        for key in STAGE_KEYS.values()
    ],
    partitions_def=hourly_partitions,
    backfill_policy=HOURLY_BACKFILL,
    retry_policy=HOURLY_RETRY,
    pool=WAREHOUSE_POOL,
    can_subset=True,
)
@fail_fast
def stage_tables(
    context: dg.AssetExecutionContext,
    object_store: ObjectStoreResource,
    warehouse: WarehouseResource,
    settings: PipelineSettings,
):  # no return annotation (Dagster types outputs from it); returns Iterator[CheckedEvent]
    """Both hourly stage tables in one step (either alone when the run selects one), all load
    jobs submitted before any is waited for. A failed load fails the step; the loads that
    succeeded are in the ledger, and the re-run skips them."""
    store, wh = object_store.get_store(), warehouse.get_warehouse()
    started = time.monotonic()
    kinds = [kind for kind, key in STAGE_KEYS.items() if key in context.selected_asset_keys]
    manifests, missing = [], []
    for hour, manifest in read_hour_manifests(store, partition_hours(context)).items():
        if manifest is None:
            missing.append(hour)
        else:
            manifests.append(manifest)
    results = load_stage_hours(
        wh,
        store,
        manifests,
        {kind: STAGE_ASSETS[kind] for kind in kinds},
        run_id=context.run_id,
        budget=settings.budget(),
        log=context.log,
    )
    if missing:
        raise dg.Failure(
            f"hours {', '.join(hour_label(h) for h in missing[:5])}"
            f"{f' and {len(missing) - 5} more' if len(missing) > 5 else ''} have no hour "
            f"manifest ({store.uri(hour_manifest_key(missing[0]))}): they were not built. Fix: "
            f"build them first: {commands.run_hours(missing[0], missing[-1])}",
        )
    seconds = time.monotonic() - started
    materializations, checks = [], []
    for kind in kinds:
        result, kind_checks = _stage_report(
            context, store, warehouse, kind, results[kind], manifests, seconds
        )
        materializations.append(result)
        checks.extend(kind_checks)
    return report(context, materializations, checks)


def _stage_report(
    context: dg.AssetExecutionContext,
    store: ObjectStore,
    warehouse: WarehouseResource,
    kind: str,
    results: list[StageResult],
    manifests: list[HourManifest],
    seconds: float,
) -> tuple[dg.MaterializeResult, list[PartitionCheck]]:
    """One stage asset's materialization (each hour's table, rows, files, bytes and job; the
    step's totals) and its ``stage_matches_manifest`` check per hour."""
    name, key = STAGE_ASSETS[kind], STAGE_KEYS[kind]
    actions = [r.outcome.action for r in results]
    rows = sum(r.table_rows or 0 for r in results)
    context.log.info(
        "%s: %d hours, %d rows; jobs %d submitted, %d skipped, %d adopted; %.1f s",
        name,
        len(results),
        rows,
        actions.count("submitted"),
        actions.count("skipped"),
        actions.count("adopted"),
        seconds,
    )
    by_hour = {}
    for r, manifest in zip(results, manifests, strict=True):
        files = stage_files(manifest, kind)
        by_hour[hour_label(r.hour)] = {
            "table": r.table,
            "rows": r.table_rows or 0,
            "expected_rows": r.expected_rows,
            "files": len(files),
            "bytes": stage_bytes(store, manifest, kind),
            "job_id": job_link(warehouse, r.outcome.job_id),
            "job_action": r.outcome.action,
        }
    result = partition_results(
        context,
        by_hour,
        {
            "hours": len(results),
            "rows": rows,
            "files": sum(h["files"] for h in by_hour.values()),
            "bytes": sum(h["bytes"] for h in by_hour.values()),
            "jobs_submitted": actions.count("submitted"),
            "jobs_adopted": actions.count("adopted"),
            "jobs_skipped": actions.count("skipped"),
            "duration_seconds": round(seconds, 2),
        },
        asset_key=key,
    )
    checks = [
        PartitionCheck(
            check_name=STAGE_CHECK,
            partition=hour_label(r.hour),
            passed=r.matches,
            description=f"{hour_label(r.hour)}: stage table {r.table} has {r.table_rows} rows, "
            f"its hour manifest names {r.expected_rows}"
            + ("" if r.matches else f". Fix: load the hour again: {commands.run_hours(r.hour)}"),
            metadata=comparison(
                r.expected_rows, r.table_rows or 0, table=r.table, job_id=r.outcome.job_id
            ),
            asset_key=key,
        )
        for r in results
    ]
    return result, checks
