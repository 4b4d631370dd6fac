"""Opening the local warehouse file while another process may hold its write lock (DuckDB
allows one writing process per file: duckdb.org/docs/stable/connect/concurrency).
"""

import logging
import random
import time
from pathlib import Path

import duckdb

from bq_platform.lib.warehouse.base import WarehouseError

log = logging.getLogger(__name__)

#: The words of DuckDB's lock errors (``IOException``), as DuckDB 1.x prints them.
LOCK_MARKERS = ("Could not set lock", "Conflicting lock")


def is_lock_error(exc: BaseException) -> bool:
    """True if ``exc`` is DuckDB's error for a file another process holds."""
    return isinstance(exc, duckdb.IOException) and any(m in str(exc) for m in LOCK_MARKERS)


def open_with_retry(path: Path, lock_timeout_s: float) -> duckdb.DuckDBPyConnection:
    """Open ``path``, retrying for up to ``lock_timeout_s`` seconds while it is locked (waits
    doubling from 50 ms to 5 s, half of each random). Raises WarehouseError if it stays locked
    (naming what may hold it) or cannot be opened."""
    deadline = time.monotonic() + lock_timeout_s
    delay_s = 0.05
    waited = False
    while True:
        try:
            return duckdb.connect(str(path))
        except duckdb.Error as exc:
            if not is_lock_error(exc):
                raise WarehouseError(f"cannot open the DuckDB warehouse {path}: {exc}") from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WarehouseError(
                    f"the DuckDB warehouse {path} is locked by another process (for example "
                    "`dagster dev` materializing assets, or another bq-platform run) and stayed "
                    f"locked for {lock_timeout_s:.0f} s. DuckDB allows one writing process per "
                    f"file: wait for that run to finish or stop it, then retry. DuckDB said: {exc}"
                ) from exc
            if not waited:
                log.info("DuckDB warehouse %s is locked by another process; waiting", path)
                waited = True
            time.sleep(min(remaining, delay_s / 2 + random.uniform(0, delay_s / 2)))
            delay_s = min(delay_s * 2, 5.0)
