"""Hourly pageview files: PySpark parses, classifies, pseudonymizes and samples landed logs."""

import time

import dagster as dg

from bq_platform.defs.landing.assets import pageview_logs
from bq_platform.defs.partitions import hourly_partitions
from bq_platform.defs.resources import ObjectStoreResource, PipelineSettings, SparkResource
from bq_platform.lib.accounting import unbalanced
from bq_platform.lib.build import build_hours
from bq_platform.lib.hours import hours_between
from bq_platform.lib.reporting import counts_markdown, totals

ACCOUNTING_CHECK = "accounting_identity"

HOURLY_RETRY = dg.RetryPolicy(
    max_retries=2, delay=15, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)
# A day's hours in one run, so one Spark session reads them in one pass instead of 24 runs.
HOURLY_BACKFILL = dg.BackfillPolicy.multi_run(max_partitions_per_run=24)


@dg.asset(
    key=["lake", "pageview_files"],
    deps=[pageview_logs],
    partitions_def=hourly_partitions,
    backfill_policy=HOURLY_BACKFILL,
    retry_policy=HOURLY_RETRY,
    group_name="pageviews",
    kinds={"spark", "parquet"},
    check_specs=[
        dg.AssetCheckSpec(
            ACCOUNTING_CHECK,
            asset=["lake", "pageview_files"],
            blocking=True,
            description="Per site and hour: source_lines = pageviews + non_page_hits + rejected"
            " + duplicates + out_of_window, and every landed file has its manifest's line count.",
        )
    ],
)
def pageview_files(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    object_store: ObjectStoreResource,
    settings: PipelineSettings,
) -> dg.MaterializeResult:
    """Parquet files of pageviews (AWStats "pages": successful or not-modified GETs of documents)
    per UTC hour, written under a per-attempt prefix and named by the hour's manifest
    (staging/pageviews/hour=<H>/_MANIFEST.json). Every line is accounted for: pages are stored,
    other hits counted, bad lines kept in the dead-letter area with a reason code, duplicate
    deliveries and lines outside the hour counted. visitor_id is an HMAC of the client address;
    the 1-in-200 visitor sample is written in the same pass."""
    window = context.partition_time_window
    hours = hours_between(window.start, window.end)
    attempt_id = f"{context.run_id}-{context.retry_number}"
    context.log.info(
        "building %d hours %s .. %s as attempt %s", len(hours), hours[0], hours[-1], attempt_id
    )
    started = time.monotonic()
    manifests = build_hours(
        spark.spark_session,
        object_store.get_store(),
        hours,
        attempt_id=attempt_id,
        visitor_key=settings.visitor_key,
        log=context.log,
    )
    seconds = time.monotonic() - started
    counts = [c for m in manifests for c in m.counts]
    bad = unbalanced(counts)
    mismatches = [dict(x) for m in manifests for x in m.file_mismatches]
    total = totals(counts)
    passed = not bad and not mismatches
    problems = [
        f"{c.site} {c.hour:%Y-%m-%dT%H}: source_lines {c.source_lines} != accounted {c.accounted}"
        for c in bad
    ] + [
        f"{m['data_key']}: manifest says {m['manifest_lines']} lines, file has {m['lines_read']}"
        for m in mismatches
    ]
    if problems:
        context.log.error("accounting does not balance:\n%s", "\n".join(problems[:50]))
    return dg.MaterializeResult(
        metadata={
            "hours": len(hours),
            "rows": sum(m.rows for m in manifests),
            **total,
            "seconds": round(seconds, 2),
            "attempt_id": attempt_id,
            "per_site_hour": dg.MetadataValue.md(counts_markdown(counts)),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=ACCOUNTING_CHECK,
                passed=passed,
                severity=dg.AssetCheckSeverity.ERROR,
                description=(
                    f"{len(counts)} site-hours balance"
                    if passed
                    else f"{len(problems)} problems: "
                    + "; ".join(problems[:5])
                    + ". Fix the landed files (bq-platform land) and re-run these hours."
                ),
                metadata={
                    "site_hours": len(counts),
                    "unbalanced": len(bad),
                    "file_mismatches": len(mismatches),
                    "source_lines": total["source_lines"],
                    "accounted": sum(c.accounted for c in counts),
                },
            )
        ],
    )
