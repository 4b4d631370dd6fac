"""Hourly pageview files: PySpark parses, classifies, pseudonymizes and samples landed logs."""

import time
from typing import Any

import dagster as dg

from bq_platform.defs.check_events import PartitionCheck, comparison, report
from bq_platform.defs.errors import fail_fast
from bq_platform.defs.landing.assets import pageview_logs
from bq_platform.defs.metadata import OWNERS, partition_results
from bq_platform.defs.pageviews.spark_build import HourlyBuildResource
from bq_platform.defs.partitions import hourly_partitions, partition_hours
from bq_platform.defs.resources import ObjectStoreResource, PipelineSettings
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.manifest import HourManifest, stage_bytes
from bq_platform.lib.core.pseudonymize import SAMPLE_MODULUS
from bq_platform.lib.core.reporting import COUNT_FIELDS, counts_markdown, totals
from bq_platform.lib.publish.protocol import KINDS
from bq_platform.lib.quality import rejected_share as quality
from bq_platform.lib.storage.base import ObjectStore

ACCOUNTING_CHECK = "accounting_identity"
REJECTED_SHARE_CHECK = "rejected_share"

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
    owners=OWNERS,
    kinds={"spark", "parquet"},
    check_specs=[
        dg.AssetCheckSpec(
            ACCOUNTING_CHECK,
            asset=["lake", "pageview_files"],
            blocking=True,
            partitions_def=hourly_partitions,
            description="Per site and hour: source_lines = pageviews + non_page_hits + rejected"
            " + duplicates + out_of_window, and every landed file has its manifest's line count.",
        ),
        # Not blocking: the hour is still staged and audited; the daily publish holds the day.
        dg.AssetCheckSpec(
            REJECTED_SHARE_CHECK,
            asset=["lake", "pageview_files"],
            partitions_def=hourly_partitions,
            description="Per site and hour: rejected lines / delivered lines. WARN above 1%, "
            "ERROR above the configured share (BQ_PLATFORM_MAX_REJECTED_SHARE, default 5%), "
            "which also holds the day's publish. Metadata: rate, top reasons, sample lines.",
        ),
    ],
)
@fail_fast
def pageview_files(
    context: dg.AssetExecutionContext,
    spark: HourlyBuildResource,
    object_store: ObjectStoreResource,
    settings: PipelineSettings,
):  # no return annotation: Dagster types the outputs from it; returns Iterator[CheckedEvent]
    """Parquet files of pageviews (AWStats "pages": successful or not-modified GETs of documents)
    per UTC hour, named by the hour's manifest (staging/pageviews/hour=<H>/_MANIFEST.json).
    Every line is accounted for: pages stored, other hits counted, bad lines kept as dead
    letters with a reason code. visitor_id is an HMAC of the client address; the 1-in-200
    visitor sample is written in the same pass."""
    hours = partition_hours(context)
    attempt_id = f"{context.run_id}-{context.retry_number}"
    context.log.info(
        "building %d hours %s .. %s as attempt %s",
        len(hours),
        hour_label(hours[0]),
        hour_label(hours[-1]),
        attempt_id,
    )
    store = object_store.get_store()
    started = time.monotonic()
    manifests = spark.build(
        context, store, hours, attempt_id=attempt_id, pipeline_settings=settings
    )
    seconds = time.monotonic() - started
    problems = [p for m in manifests for p in m.accounting_problems()]
    if problems:
        context.log.error("accounting does not balance:\n%s", "\n".join(problems[:50]))
    by_hour = {hour_label(m.hour): _hour_metadata(store, m, attempt_id) for m in manifests}
    summed = ("rows", "files", "bytes", "dead_letter_files", "dead_letter_lines", *COUNT_FIELDS)
    result = partition_results(
        context,
        by_hour,
        {
            "hours": len(hours),
            **{key: sum(h[key] for h in by_hour.values()) for key in summed},
            "duration_seconds": round(seconds, 2),
            "attempt_id": attempt_id,
        },
    )
    checks = [accounting_check(m) for m in manifests] + [
        rejected_share_check(m, settings.max_rejected_share) for m in manifests
    ]
    return report(context, result, checks)


def _hour_metadata(store: ObjectStore, manifest: HourManifest, attempt_id: str) -> dict[str, Any]:
    """One hour's materialization metadata: its files, rows, counts and per-site table."""
    files = [*manifest.full_files, *manifest.sample_files]
    total = totals(manifest.counts)
    return {
        "rows": manifest.rows,
        "sample_rate": dg.MetadataValue.text(f"1/{SAMPLE_MODULUS}"),
        "files": len(files),
        "bytes": sum(stage_bytes(store, manifest, kind) for kind in KINDS),
        "dead_letter_files": len(manifest.deadletter_files),
        "dead_letter_lines": total["rejected"] + total["out_of_window"],
        **total,
        "attempt_id": attempt_id,
        "per_site_hour": dg.MetadataValue.md(counts_markdown(manifest.counts)),
    }


def accounting_check(manifest: HourManifest) -> PartitionCheck:
    """The hour's accounting identity as a check result on its partition: expected (source
    lines the manifests announce) against actual (lines accounted for), and what disagrees."""
    counts = manifest.counts
    problems = manifest.accounting_problems()
    expected = sum(c.source_lines for c in counts)
    actual = sum(c.accounted for c in counts)
    return PartitionCheck(
        check_name=ACCOUNTING_CHECK,
        partition=hour_label(manifest.hour),
        passed=not problems,
        description=(
            f"{len(counts)} site(s) balance: {expected} source lines accounted for"
            if not problems
            else f"{len(problems)} problems: "
            + "; ".join(problems[:5])
            + ". Fix the landed files (bq-platform land) and re-run this hour."
        ),
        metadata={
            **comparison(expected, actual),
            "unbalanced_sites": dg.MetadataValue.json(
                sorted(c.site for c in counts if not c.balanced)
            ),
            "files": dg.MetadataValue.json(
                [
                    {
                        "file": m["data_key"],
                        "expected": m["manifest_lines"],
                        "actual": m["lines_read"],
                    }
                    for m in manifest.file_mismatches
                ]
            ),
            "orphan_files": dg.MetadataValue.json(list(manifest.orphan_files)),
        },
    )


def rejected_share_check(manifest: HourManifest, max_share: float) -> PartitionCheck:
    """The hour's rejected share per site (:mod:`bq_platform.lib.quality.rejected_share`) as a
    check result: passes when every site is ``ok``, else WARN or ERROR by the worst site."""
    verdicts = quality.grade_counts(manifest.counts, max_share)
    level = quality.worst_level(verdicts)
    flagged = [v for v in verdicts if v.level != quality.LEVEL_OK]
    flagged.sort(key=lambda v: -v.rate)
    worst = max(verdicts, key=lambda v: v.rate, default=None)
    if not flagged:
        description = f"{len(verdicts)} sites at or below {quality.WARN_SHARE:.0%} rejected"
    else:
        description = "; ".join(v.describe() for v in flagged[:5])
        if level == quality.LEVEL_ERROR:
            description += (
                f". Above {max_share:.1%}: the day is not published. Look at the samples (a "
                "new LogFormat upstream?), fix and re-land, or publish anyway with "
                "--allow-rejected (config allow_rejected_share: true)."
            )
    return PartitionCheck(
        check_name=REJECTED_SHARE_CHECK,
        partition=hour_label(manifest.hour),
        passed=level == quality.LEVEL_OK,
        severity=(
            dg.AssetCheckSeverity.ERROR
            if level == quality.LEVEL_ERROR
            else dg.AssetCheckSeverity.WARN
        ),
        description=description,
        metadata={
            "rate": dg.MetadataValue.float(round(worst.rate, 6) if worst else 0.0),
            "rejected": sum(v.rejected for v in verdicts),
            "lines": sum(v.lines for v in verdicts),
            "max_rejected_share": dg.MetadataValue.float(max_share),
            "warn_share": dg.MetadataValue.float(quality.WARN_SHARE),
            "top_reasons": dg.MetadataValue.json({v.site: dict(v.top_reasons) for v in flagged}),
            "sample_lines": dg.MetadataValue.json({v.site: list(v.samples) for v in flagged}),
            "sites": dg.MetadataValue.json([v.to_metadata() for v in flagged]),
        },
    )
