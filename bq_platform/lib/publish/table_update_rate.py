"""Table metadata updates paced as BigQuery counts them: at most 5 per table every 10 seconds.

BigQuery's quota "Maximum rate of table metadata update operations per table" is 5 operations
every 10 seconds, and it counts the load, copy and query jobs that write the table, a partition
of it included (cloud.google.com/bigquery/quotas#standard_tables); over it, jobs fail with
``rateLimitExceeded``. A batch of days copies into ``pageviews$YYYYMMDD`` and loads into the
daily tables' partitions of one table each, so a step's jobs into one table are paced by
:class:`TableUpdatePacer`. The pace is per step (one process); steps that run side by side
into one table share the quota, and a job failing with ``rateLimitExceeded`` is retried
(:data:`~bq_platform.lib.publish.idempotent_jobs.RETRYABLE_JOB_REASONS`).
"""

import collections
import time
from collections.abc import Callable

from bq_platform.lib.warehouse.rules import TABLE_UPDATE_WINDOW_S, TABLE_UPDATES_PER_WINDOW


class TableUpdatePacer:
    """A sliding window per table of the updates this step submitted.

    Args:
        per_window: updates allowed per table within ``window_s`` seconds.
        window_s: the window, seconds.
        clock: monotonic seconds; sleep: waits that many seconds (tests pass fakes).
    """

    def __init__(
        self,
        per_window: int = TABLE_UPDATES_PER_WINDOW,
        window_s: float = TABLE_UPDATE_WINDOW_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if per_window < 1 or window_s <= 0:
            raise ValueError(
                f"a pace needs per_window >= 1 and window_s > 0, got {per_window}, {window_s}"
            )
        self.per_window = per_window
        self.window_s = window_s
        self._clock = clock
        self._sleep = sleep
        self._sent: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)

    def wait(self, table: str) -> float:
        """Wait until one more update of ``table`` keeps it within the pace, and count it;
        returns the seconds waited (0.0 when within the pace)."""
        sent = self._sent[table]
        now = self._clock()
        while sent and sent[0] <= now - self.window_s:
            sent.popleft()
        waited = 0.0
        if len(sent) >= self.per_window:
            waited = sent[0] + self.window_s - now
            self._sleep(waited)
            now += waited
            sent.popleft()
        sent.append(now)
        return waited
