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
from bq_platform.lib.core import commands, layout
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.manifest import HourManifest, stage_bytes
from bq_platform.lib.core.pseudonymize import SAMPLE_MODULUS
from bq_platform.lib.core.reporting import (
    COUNT_FIELDS,
    bot_reason_totals,
    bot_reasons_markdown,
    bot_share,
    counts_markdown,
    top_bot_reasons,
    totals,
)
from bq_platform.lib.landing.provenance import landed_sources
from bq_platform.lib.planning import reclassifications, reclassify_refusal
from bq_platform.lib.publish.protocol import KINDS
from bq_platform.lib.quality import rejected_share as quality
from bq_platform.lib.storage.base import ObjectStore

ACCOUNTING_CHECK = "accounting_identity"
REJECTED_SHARE_CHECK = "rejected_share"
TRAFFIC_CHECK = "traffic_classes"

HOURLY_RETRY = dg.RetryPolicy(
    max_retries=2, delay=15, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)
# A day's hours in one run, so one Spark session reads them in one pass instead of 24 runs.
HOURLY_BACKFILL = dg.BackfillPolicy.multi_run(max_partitions_per_run=24)


class PageviewFilesConfig(dg.Config):
    """Run config of ``lake/pageview_files``."""

    reclassify: bool = False
    """Build hours whose landed input is unchanged but whose manifest names another traffic
    classifier than the installed one (:func:`bq_platform.lib.planning.reclassifications`);
    without it such a run fails, naming them, before anything is built."""


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
        dg.AssetCheckSpec(
            TRAFFIC_CHECK,
            asset=["lake", "pageview_files"],
            blocking=True,
            partitions_def=hourly_partitions,
            description="Per site and hour: pageviews = human_pageviews + bot_pageviews (every "
            "page has a traffic class).",
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
    config: PageviewFilesConfig,
    spark: HourlyBuildResource,
    object_store: ObjectStoreResource,
    settings: PipelineSettings,
):  # no return annotation: Dagster types the outputs from it; returns Iterator[CheckedEvent]
    """Parquet files of pageviews (AWStats "pages": successful or not-modified GETs of documents)
    per UTC hour, named by the hour's manifest (staging/pageviews/hour=<H>/_MANIFEST.json).
    Every line is accounted for: pages stored, other hits counted, bad lines kept as dead
    letters with a reason code. visitor_id is an HMAC of the client address; the 1-in-200
    visitor sample is written in the same pass. Hours whose input is unchanged but whose
    traffic classifier is not the installed one are built only with run config
    ``reclassify: true``."""
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
    if not config.reclassify:
        held = reclassifications(store, hours, settings.traffic_thresholds())
        if held:
            raise dg.Failure(description=reclassify_refusal(held), allow_retries=False)
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
    step = {key: sum(h[key] for h in by_hour.values()) for key in summed}
    result = partition_results(
        context,
        by_hour,
        {
            "hours": len(hours),
            **step,
            "bot_share": round(bot_share(step["human_pageviews"], step["bot_pageviews"]), 4),
            "top_bot_reasons": [  # a list: JSON metadata does not keep a mapping's order
                {"bot_reason": reason, "pages": pages}
                for reason, pages in top_bot_reasons(
                    bot_reason_totals(c for m in manifests for c in m.counts)
                ).items()
            ],
            "duration_seconds": round(seconds, 2),
            "attempt_id": attempt_id,
        },
    )
    checks = (
        [accounting_check(m, store) for m in manifests]
        + [traffic_check(m) for m in manifests]
        + [rejected_share_check(m, settings.max_rejected_share) for m in manifests]
    )
    return report(context, result, checks)


def _hour_metadata(store: ObjectStore, manifest: HourManifest, attempt_id: str) -> dict[str, Any]:
    """One hour's materialization metadata: its files, rows, counts (the pages by traffic
    class among them), ``bot_share`` (bot pages / pages, 0..1), ``top_bot_reasons`` (a
    Markdown table of the bot reasons with the most pages) and the per-site table."""
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
        "bot_share": dg.MetadataValue.float(
            round(bot_share(total["human_pageviews"], total["bot_pageviews"]), 4)
        ),
        "top_bot_reasons": dg.MetadataValue.md(
            bot_reasons_markdown(bot_reason_totals(manifest.counts))
        ),
        "attempt_id": attempt_id,
        "per_site_hour": dg.MetadataValue.md(counts_markdown(manifest.counts)),
    }


def accounting_check(manifest: HourManifest, store: ObjectStore) -> PartitionCheck:
    """The hour's accounting identity as a check result on its partition: expected (source
    lines the manifests announce) against actual (lines accounted for). On failure the
    description names, per problem, the site, the hour, the file and the command that fixes
    it (:func:`accounting_fixes`)."""
    counts = manifest.counts
    expected = sum(c.source_lines for c in counts)
    actual = sum(c.accounted for c in counts)
    fixes = accounting_fixes(manifest, store)
    shown = " ".join(fixes[:5]) + (f" And {len(fixes) - 5} more." if len(fixes) > 5 else "")
    return PartitionCheck(
        check_name=ACCOUNTING_CHECK,
        partition=hour_label(manifest.hour),
        passed=not fixes,
        description=(
            f"{len(counts)} site(s) balance: {expected} source lines accounted for"
            if not fixes
            else shown
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


def traffic_check(manifest: HourManifest) -> PartitionCheck:
    """The hour's pages by traffic class as a check result on its partition: expected (the
    pageviews) against actual (human plus bot pageviews); fails naming each site and hour where
    they differ and the command that builds the hour again."""
    counts = manifest.counts
    label = hour_label(manifest.hour)
    wrong = [c for c in counts if not c.classes_balanced]
    expected = sum(c.pageviews for c in counts)
    actual = sum(c.human_pageviews + c.bot_pageviews for c in counts)
    return PartitionCheck(
        check_name=TRAFFIC_CHECK,
        partition=label,
        passed=not wrong,
        description=(
            f"{len(counts)} site(s): {expected} pageviews, "
            f"{sum(c.human_pageviews for c in counts)} human, "
            f"{sum(c.bot_pageviews for c in counts)} bot"
            if not wrong
            else " ".join(
                f"{c.site} {label}: {c.pageviews} pageviews but {c.human_pageviews} human + "
                f"{c.bot_pageviews} bot. Fix: build the hour again: "
                f"{commands.run_hours(manifest.hour)}."
                for c in wrong
            )
        ),
        metadata={
            **comparison(expected, actual),
            "human_pageviews": sum(c.human_pageviews for c in counts),
            "bot_pageviews": sum(c.bot_pageviews for c in counts),
            "unbalanced_sites": dg.MetadataValue.json(sorted(c.site for c in wrong)),
        },
    )


def accounting_fixes(manifest: HourManifest, store: ObjectStore) -> list[str]:
    """One sentence per accounting problem of the hour, each starting with its site and hour,
    naming the file and what to run: a landed file without its manifest or disagreeing with
    it is landed again from its source (known from its manifest or the landing registry:
    :func:`~bq_platform.lib.landing.provenance.landed_sources`); an unbalanced site is built
    again. Empty when the hour balances."""
    label = hour_label(manifest.hour)
    fixes = [
        f"{c.site} {label}: {c.source_lines} source lines but {c.accounted} accounted for "
        f"(pageviews, non-page hits, rejected, duplicates, out of window). Fix: build the hour "
        f"again: {commands.run_hours(manifest.hour)}."
        for c in manifest.counts
        if not c.balanced
    ]
    mismatched = [str(m["data_key"]) for m in manifest.file_mismatches]
    if not mismatched and not manifest.orphan_files:
        return fixes
    sources = landed_sources(store, [*mismatched, *manifest.orphan_files])

    def where(key: str) -> tuple[str, str]:
        parsed = layout.parse_landed_key(key)
        site = parsed[0] if parsed else "?"
        return f"{site} {label}: landed file {store.uri(key)}", site

    for m in manifest.file_mismatches:
        key = str(m["data_key"])
        place, site = where(key)
        fixes.append(
            f"{place} has {m['lines_read']} lines, its manifest says {m['manifest_lines']}. "
            f"Fix: land its source again, {commands.land(site, sources.get(key, ''))}, then "
            f"{commands.CLI} run."
        )
    for key in manifest.orphan_files:
        place, site = where(key)
        fixes.append(
            f"{place} has no manifest (an incomplete delivery: its lines are not counted). "
            f"Fix: land its source again, {commands.land(site, sources.get(key, ''))}, then "
            f"{commands.CLI} run (or delete the file if it is not wanted, then run)."
        )
    return fixes


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
        more = f"; and {len(flagged) - 5} more sites" if len(flagged) > 5 else ""
        description = "; ".join(v.describe() for v in flagged[:5]) + more
        description += f". The rejected lines: {commands.deadletters(manifest.hour)}"
        if level == quality.LEVEL_ERROR:
            description += (
                f". Above {max_share:.1%}: the day is not published. Fix: look at the samples "
                "(a new LogFormat upstream?), fix the logs and land them again "
                "(bq-platform land), or publish anyway: "
                f"{commands.run_hours(manifest.hour, None, '--allow-rejected')} "
                "(config allow_rejected_share: true)"
            )
        description += "."
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
