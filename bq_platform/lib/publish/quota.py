"""Per-table job budgets, so a backfill cannot spend BigQuery's daily table quota.

BigQuery allows 1,500 table operations (load, copy, query-with-destination, DML) per table
per day (cloud.google.com/bigquery/quotas#standard_tables): a long backfill in one day would
exhaust ``pageviews``. :class:`JobBudget` refuses a job before submission when the table's count
for the UTC day would pass the limit (default: 90% of the quota, leaving headroom).
"""

import dataclasses
import datetime as dt

from bq_platform.lib.warehouse.base import Warehouse
from bq_platform.lib.warehouse.rules import split_destination

BIGQUERY_TABLE_OPERATIONS_PER_DAY = 1500


class QuotaBudgetExceededError(RuntimeError):
    """Submitting the job would exceed the per-table daily budget. Not retryable today."""


@dataclasses.dataclass(frozen=True)
class JobBudget:
    """Budget of jobs per destination table per UTC day (default 1,350 = 90% of 1,500)."""

    per_table_per_day: int = int(BIGQUERY_TABLE_OPERATIONS_PER_DAY * 0.9)

    def check(self, warehouse: Warehouse, destination: str, now: dt.datetime | None = None) -> int:
        """Return the jobs already submitted today for ``destination``'s table.

        Raises:
            QuotaBudgetExceededError: if one more job would exceed the budget; the message
                says how many were used. Jobs are counted per UTC day; BigQuery's quota day
                is Pacific time, which the 10% headroom of the default budget absorbs.
        """
        table, _ = split_destination(destination)
        today = (now or dt.datetime.now(dt.UTC)).date()
        used = warehouse.jobs_submitted(table, today)
        self.check_used(table, today, used)
        return used

    def check_used(self, table: str, day: dt.date, used: int) -> None:
        """Refuse one more job for ``table`` on UTC ``day`` when ``used`` jobs were already
        submitted there (``QuotaBudgetExceededError``, as :meth:`check`)."""
        if used + 1 > self.per_table_per_day:
            raise QuotaBudgetExceededError(
                f"job budget for table {table!r} is spent: {used} jobs on {day} (UTC), budget "
                f"{self.per_table_per_day}/day (BigQuery allows "
                f"{BIGQUERY_TABLE_OPERATIONS_PER_DAY} "
                "table operations per table per day). Wait for tomorrow (UTC) or raise "
                "BQ_PLATFORM_JOB_BUDGET if you have headroom; nothing was submitted."
            )
