"""The dead-letter table: each day's rejected and out-of-window lines, for operators."""

import datetime as dt
import time

import dagster as dg

from bq_platform.defs.check_events import PartitionCheck, comparison
from bq_platform.defs.daily import DayReport, report_days
from bq_platform.defs.errors import fail_fast
from bq_platform.defs.metadata import OWNERS, job_links_markdown
from bq_platform.defs.pageviews.assets import pageview_files
from bq_platform.defs.partitions import daily_partitions
from bq_platform.defs.resources import (
    WAREHOUSE_POOL,
    ObjectStoreResource,
    PipelineSettings,
    WarehouseResource,
)
from bq_platform.defs.warehouse.assets import DAILY_RETRY
from bq_platform.lib.core import commands
from bq_platform.lib.publish.deadletter_table import load_day_deadletters
from bq_platform.lib.warehouse.schema import DEADLETTERS_TABLE

DEADLETTER_CHECK = "deadletters_match_manifests"
KEY = ["warehouse", DEADLETTERS_TABLE]


@dg.asset(
    key=KEY,
    deps=[pageview_files],
    partitions_def=daily_partitions,
    group_name="warehouse",
    owners=OWNERS,
    kinds={"bigquery", "table"},
    pool=WAREHOUSE_POOL,
    retry_policy=DAILY_RETRY,
    check_specs=[
        dg.AssetCheckSpec(
            DEADLETTER_CHECK,
            asset=KEY,
            partitions_def=daily_partitions,
            description="The day partition holds exactly the rejected and out-of-window lines "
            "its hour manifests count.",
        )
    ],
)
@fail_fast
def pageview_deadletters(
    context: dg.AssetExecutionContext,
    object_store: ObjectStoreResource,
    warehouse: WarehouseResource,
    settings: PipelineSettings,
):  # no return annotation (Dagster types outputs from it); returns Iterator[CheckedEvent]
    """Rejected and out-of-window lines (site, delivery hour, file, line, reason, raw text), in
    day partitions on delivery_date (UTC), clustered by site and reason. Holds the current
    build attempts of every built hour, also when the completeness gate holds the day back.
    On the command line: ``bq-platform deadletters``."""
    store, wh = object_store.get_store(), warehouse.get_warehouse()

    def one_day(day: dt.date) -> DayReport:
        started = time.monotonic()
        try:
            result = load_day_deadletters(
                wh,
                store,
                day,
                asset=DEADLETTERS_TABLE,
                run_id=context.run_id,
                budget=settings.budget(),
                log=context.log,
            )
        except ValueError as exc:
            raise dg.Failure(
                description=f"{exc}. Fix: build the day's hours first: {commands.run_day(day)}"
            ) from exc
        context.log.info(
            "%s: %s by %s, %d rows",
            result.destination,
            result.outcome.action,
            result.outcome.job_id,
            result.partition_rows,
        )
        reasons = {**result.rejected_by_reason, "out of window": result.out_of_window}
        top = ", ".join(f"{reason} {lines}" for reason, lines in reasons.items() if lines)
        check = PartitionCheck(
            check_name=DEADLETTER_CHECK,
            partition=day.isoformat(),
            passed=result.matches,
            description=f"{day}: {result.destination} has {result.partition_rows} rows; the "
            f"manifests of its {result.hours} built hours count {result.expected_rows} dead "
            "letters"
            + ("" if result.matches else f". Fix: load the day again: {commands.run_day(day)}"),
            metadata=comparison(
                result.expected_rows,
                result.partition_rows,
                table=result.destination,
                job_id=result.outcome.job_id,
            ),
        )
        metadata = {
            "destination": result.destination,
            "rows": result.partition_rows,
            "hours": result.hours,
            "files": result.files,
            "dead_letters_by_reason": top or "none",
            "duration_seconds": round(time.monotonic() - started, 2),
            "job_id": job_links_markdown(
                warehouse, [(result.destination, result.outcome.job_id, result.outcome.action)]
            ),
            "job_action": result.outcome.action,
        }
        return metadata, [check]

    return report_days(context, one_day)
