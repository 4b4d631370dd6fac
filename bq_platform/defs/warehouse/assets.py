"""Warehouse tables: hourly stage tables, the audit table, and the published daily tables."""

import datetime as dt
import time

import dagster as dg

from bq_platform.defs.check_events import PartitionCheck, comparison
from bq_platform.defs.daily import DayReport, report_days
from bq_platform.defs.errors import fail_fast
from bq_platform.defs.metadata import OWNERS, job_links_markdown, partition_results
from bq_platform.defs.pageviews.assets import HOURLY_BACKFILL, HOURLY_RETRY, pageview_files
from bq_platform.defs.partitions import (
    daily_partitions,
    hourly_partitions,
    partition_days,
    partition_hours,
)
from bq_platform.defs.resources import (
    WAREHOUSE_POOL,
    ObjectStoreResource,
    PipelineSettings,
    WarehouseResource,
)
from bq_platform.defs.warehouse.stage import STAGE_KEYS
from bq_platform.lib.core import commands
from bq_platform.lib.core.accounting import audit_records
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.layout import hour_manifest_key
from bq_platform.lib.core.manifest import read_hour_manifests
from bq_platform.lib.core.pseudonymize import SAMPLE_MODULUS
from bq_platform.lib.publish.protocol import (
    REJECTED_SHARE_PROBLEM,
    DayCompleteness,
    day_completeness,
    publish_days,
)
from bq_platform.lib.quality.sampling import sample_ratio

DAY_CHECK = "day_equals_sum_of_hours"
SAMPLE_CHECK = "sample_ratio"
#: Retry policy of the daily warehouse steps (transient faults; defs/errors.py fails the rest).
DAILY_RETRY = dg.RetryPolicy(
    max_retries=2, delay=30, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)

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
    allow_rejected_share: bool = False
    """Publish hours whose rejected share is above ``BQ_PLATFORM_MAX_REJECTED_SHARE`` (the
    rejects stay in the dead letters). Operator's decision (``bq-platform run
    --allow-rejected``)."""


@dg.asset(
    key=["warehouse", "pageviews_audit"],
    deps=[pageview_files],
    partitions_def=hourly_partitions,
    backfill_policy=HOURLY_BACKFILL,
    retry_policy=HOURLY_RETRY,
    group_name="warehouse",
    owners=OWNERS,
    kinds={"bigquery", "table"},
    pool=WAREHOUSE_POOL,
)
@fail_fast
def pageviews_audit(
    context: dg.AssetExecutionContext,
    object_store: ObjectStoreResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """Accounting per site and UTC hour, with the build's fingerprint and run:
    source_lines = pageviews + non_page_hits + rejected + duplicates + out_of_window holds in
    every row of a complete hour. An hour's rows are replaced atomically."""
    store, wh = object_store.get_store(), warehouse.get_warehouse()
    started = time.monotonic()
    hours = partition_hours(context)
    rows_of: dict[str, list[dict]] = {}
    for hour, manifest in read_hour_manifests(store, hours).items():
        if manifest is None:
            missing = store.uri(hour_manifest_key(hour))
            raise dg.Failure(
                f"hour {hour_label(hour)} has no hour manifest ({missing}): it was not built. "
                f"Fix: build it first: {commands.run_hours(hour)}"
            )
        rows_of[hour_label(hour)] = audit_records(
            manifest.counts, manifest.fingerprint, context.run_id
        )
    rows = [row for hour_rows in rows_of.values() for row in hour_rows]
    wh.replace_audit_rows(hours, rows)
    return partition_results(
        context,
        {hour: _audit_summary(hour_rows) for hour, hour_rows in rows_of.items()},
        {
            "hours": len(hours),
            **_audit_summary(rows),
            "duration_seconds": round(time.monotonic() - started, 2),
        },
    )


def gate_fix(completeness: DayCompleteness) -> str:
    """What to do about a day the completeness gate holds back: the commands that fix its
    landed files or build its hours again, and the flags that publish it anyway."""
    day = completeness.day
    text = (
        f"Fix: land the files named again ({commands.LAND_TEMPLATE}) or build "
        f"the hours again ({commands.run_day(day)}); or publish the complete hours only: "
        f"{commands.run_day(day, '--allow-incomplete')} (config allow_incomplete_hours: true)."
    )
    rejected = sorted(
        h
        for h, reasons in completeness.problems.items()
        if any(REJECTED_SHARE_PROBLEM in r for r in reasons)
    )
    if rejected:
        text += (
            f" The rejected lines: {commands.deadletters(rejected[0], rejected[-1])}; if they "
            f"are expected, publish them: {commands.run_day(day, '--allow-rejected')} (config "
            "allow_rejected_share: true)."
        )
    return text


def _audit_summary(rows: list[dict]) -> dict[str, int]:
    """Audit rows (one per site and hour), their sites and their line counts."""
    return {
        "rows": len(rows),
        "sites": len({r["site"] for r in rows}),
        "source_lines": sum(r["source_lines"] for r in rows),
        "pageviews": sum(r["pageviews"] for r in rows),
        "rejected": sum(r["rejected"] for r in rows),
    }


def _published_asset(kind: str) -> dg.AssetsDefinition:
    name = "pageviews" if kind == "full" else "pageviews_sample"
    stage_key = STAGE_KEYS[kind]
    key = ["warehouse", name]
    checks = [
        dg.AssetCheckSpec(
            DAY_CHECK,
            asset=key,
            partitions_def=daily_partitions,
            description="The published day partition holds exactly the sum of its stage tables.",
        )
    ]
    if kind == "sample":
        checks.append(
            dg.AssetCheckSpec(
                SAMPLE_CHECK,
                asset=key,
                partitions_def=daily_partitions,
                description="Sampled visitors are within a binomial bound of 1 in 200.",
            )
        )

    @dg.asset(
        key_prefix="warehouse",
        name=name,
        deps=[stage_key, pageviews_audit],
        partitions_def=daily_partitions,
        group_name="warehouse",
        owners=OWNERS,
        kinds={"bigquery", "table"},
        pool=WAREHOUSE_POOL,
        retry_policy=DAILY_RETRY,
        description=_PUBLISHED_DOCS[kind],
        check_specs=checks,
    )
    @fail_fast
    def published(
        context: dg.AssetExecutionContext,
        config: PublishConfig,
        object_store: ObjectStoreResource,
        warehouse: WarehouseResource,
        settings: PipelineSettings,
    ):  # no return annotation (Dagster types outputs from it); returns Iterator[CheckedEvent]
        store, wh = object_store.get_store(), warehouse.get_warehouse()
        max_share = None if config.allow_rejected_share else settings.max_rejected_share

        started = time.monotonic()

        def gate(day: dt.date) -> DayCompleteness:
            """The day's completeness; a day that may not be published fails the step."""
            completeness = day_completeness(wh, store, day, kind, max_rejected_share=max_share)
            if not completeness.complete:
                message = f"{day}: {len(completeness.problems)} of 24 hours are not complete: " + (
                    completeness.describe()
                )
                if not config.allow_incomplete_hours:
                    raise dg.Failure(description=message + ". " + gate_fix(completeness))
                context.log.warning("publishing an incomplete day (operator's choice): %s", message)
            return completeness

        days = [gate(day) for day in partition_days(context)]
        # The days' copy jobs are submitted together and run side by side.
        results = publish_days(
            wh,
            days,
            kind,
            asset=name,
            run_id=context.run_id,
            require_partition_filter=warehouse.require_partition_filter,
            budget=settings.budget(),
            log=context.log,
        )
        by_day = {r.day: (r, c) for r, c in zip(results, days, strict=True)}
        seconds = round(time.monotonic() - started, 2)  # of all the days: their jobs overlap

        def one_day(day: dt.date) -> DayReport:
            result, completeness = by_day[day]
            context.log.info(
                "%s: %s by %s (%s), %d rows",
                result.destination,
                result.outcome.action,
                result.outcome.job_id,
                result.fingerprint[:12],
                result.partition_rows,
            )
            partition = day.isoformat()
            checks = [
                PartitionCheck(
                    check_name=DAY_CHECK,
                    partition=partition,
                    passed=result.partition_rows == result.expected_rows,
                    description=f"{day}: partition {result.destination} has "
                    f"{result.partition_rows} rows; its {result.hours} stage tables have "
                    f"{result.expected_rows}"
                    + (
                        ""
                        if result.partition_rows == result.expected_rows
                        else f". Fix: publish the day again: {commands.run_day(day)}"
                    ),
                    metadata=comparison(
                        result.expected_rows,
                        result.partition_rows,
                        table=result.destination,
                        job_id=result.outcome.job_id,
                    ),
                )
            ]
            if kind == "sample":
                counts = [c for m in completeness.manifests.values() for c in m.counts]
                ratio = sample_ratio(
                    sum(c.visitors for c in counts), sum(c.sample_visitors for c in counts)
                )
                checks.append(
                    PartitionCheck(
                        check_name=SAMPLE_CHECK,
                        partition=partition,
                        passed=ratio.passed,
                        severity=dg.AssetCheckSeverity.WARN,
                        description=ratio.describe(),
                        metadata={
                            **comparison(round(ratio.expected, 2), ratio.sampled),
                            "visitor_hours": ratio.units,
                            "sample_rate": f"1/{SAMPLE_MODULUS}",
                            "skipped": ratio.skipped,
                            "table": result.destination,
                        },
                    )
                )
            metadata = {
                "destination": result.destination,
                "rows": result.partition_rows,
                "hours_published": result.hours,
                "incomplete_hours": len(completeness.problems),
                "stage_tables": result.hours,
                "duration_seconds": seconds,
                "job_id": job_links_markdown(
                    warehouse, [(result.destination, result.outcome.job_id, result.outcome.action)]
                ),
                "job_action": result.outcome.action,
                "fingerprint": result.fingerprint,
                **({"sample_rate": f"1/{SAMPLE_MODULUS}"} if kind == "sample" else {}),
            }
            return metadata, checks

        return report_days(context, one_day)

    return published


pageviews = _published_asset("full")
pageviews_sample = _published_asset("sample")
