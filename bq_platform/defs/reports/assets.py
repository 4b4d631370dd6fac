"""The daily completeness report: is every hour of the day there, and what does it hold?"""

import datetime as dt
import hashlib
import time

import dagster as dg

from bq_platform.defs.check_events import PartitionCheck, comparison
from bq_platform.defs.daily import DayReport, report_days
from bq_platform.defs.metadata import OWNERS
from bq_platform.defs.partitions import daily_partitions
from bq_platform.defs.resources import ObjectStoreResource, PipelineSettings, WarehouseResource
from bq_platform.defs.warehouse.assets import pageviews_audit
from bq_platform.lib.core import commands
from bq_platform.lib.core.hours import day_hours, hour_label
from bq_platform.lib.core.manifest import read_hour_manifests
from bq_platform.lib.core.reporting import bot_share, traffic_sums
from bq_platform.lib.quality.completeness import (
    hour_status,
    markdown_report,
    render_png,
    unbalanced_sites,
)

COMPLETENESS_CHECK = "all_hours_complete"
REPORT_PREFIX = "reports/completeness"


def report_key(day: str) -> str:
    """Object-store key of a day's completeness picture (``reports/completeness/day=D.png``)."""
    return f"{REPORT_PREFIX}/day={day}.png"


def picture_url(reports_url: str, key: str, png: bytes) -> str:
    """Browser URL of the picture at ``key`` under ``reports_url`` (the ``reports/`` folder),
    with a content hash as query so a browser never shows a replaced picture from its cache."""
    relative = key.removeprefix("reports/")
    return f"{reports_url.rstrip('/')}/{relative}?v={hashlib.sha256(png).hexdigest()[:12]}"


@dg.asset(
    key=["reports", "pageviews_completeness"],
    deps=[pageviews_audit],
    partitions_def=daily_partitions,
    group_name="reports",
    owners=OWNERS,
    kinds={"python", "matplotlib"},
    check_specs=[
        dg.AssetCheckSpec(
            COMPLETENESS_CHECK,
            asset=["reports", "pageviews_completeness"],
            partitions_def=daily_partitions,
            description="All 24 hours of the day are built from the current landed content, "
            "audited, and balanced for every site. Fails naming the hours that are not.",
        )
    ],
)
def pageviews_completeness(
    context: dg.AssetExecutionContext,
    object_store: ObjectStoreResource,
    warehouse: WarehouseResource,
    settings: PipelineSettings,
):  # no return annotation (Dagster types outputs from it); returns Iterator[CheckedEvent]
    """Per UTC day: source lines, pageviews (human and bot apart) and rejected lines per site
    and hour, as a table and a PNG heat map of sites x hours, so a gap (an hour without data,
    not built, or unbalanced) is seen at a glance. The picture is shown when
    BQ_PLATFORM_REPORTS_URL says where a browser reads it. Read from the audit table and the
    hour manifests."""
    store, wh = object_store.get_store(), warehouse.get_warehouse()

    def one_day(day: dt.date) -> DayReport:
        started = time.monotonic()
        hours = day_hours(day)
        rows = wh.audit_rows(hours[0], hours[-1] + dt.timedelta(hours=1))
        fingerprints = {}
        for hour, manifest in read_hour_manifests(store, hours).items():
            if manifest is not None:
                fingerprints[hour_label(hour)] = manifest.fingerprint
        status = hour_status(day, rows, fingerprints)
        key = report_key(day.isoformat())
        png = render_png(day, rows, status)
        store.write_bytes(key, png)
        text = markdown_report(day, rows, status)
        links = {}
        if settings.reports_url:
            url = picture_url(settings.reports_url, key, png)
            text = f"![completeness of {day}]({url})\n\n{text}"
            links = {"picture_url": dg.MetadataValue.url(url)}
        problems = [f"{h}: not built or not audited" for h in status.missing] + [
            f"{h}: accounting does not balance for {', '.join(unbalanced_sites(rows, h))}"
            for h in status.unbalanced
        ]
        human, bot, _ = traffic_sums(rows)
        metadata = {
            "report": dg.MetadataValue.md(text),
            "picture": dg.MetadataValue.path(store.uri(key)),
            **links,
            "complete_hours": status.complete_hours,
            "empty_hours": len(status.empty),
            "sites": len({r["site"] for r in rows}),
            "source_lines": sum(r["source_lines"] for r in rows),
            "pageviews": sum(r["pageviews"] for r in rows),
            "human_pageviews": human,
            "bot_pageviews": bot,
            "bot_share": dg.MetadataValue.float(round(bot_share(human, bot), 4)),
            "rejected": sum(r["rejected"] for r in rows),
            "duration_seconds": round(time.monotonic() - started, 2),
        }
        check = PartitionCheck(
            check_name=COMPLETENESS_CHECK,
            partition=day.isoformat(),
            passed=status.complete,
            description=f"{day}: {status.complete_hours}/24 hours complete"
            + (": " + "; ".join(problems[:6]) if problems else "")
            + (f"; and {len(problems) - 6} more hours" if len(problems) > 6 else "")
            + (
                f". Fix: build the day again: {commands.run_day(day)} (a landed file that "
                "disagrees with its manifest is named by the accounting check of its hour)"
                if problems
                else ""
            ),
            metadata={
                **comparison(24, status.complete_hours),
                "hours": dg.MetadataValue.json(problems),
                "picture": dg.MetadataValue.path(store.uri(key)),
            },
            severity=dg.AssetCheckSeverity.WARN,
        )
        return metadata, [check]

    return report_days(context, one_day)
