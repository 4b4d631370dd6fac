"""The local DuckDB warehouse's file shared with other processes
(:mod:`bq_platform.lib.warehouse.duckdb.open`): a file another process holds is retried until
released or refused with a clear error after the lock timeout, and what another process reads
is in UTC whatever its time zone.
"""

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bq_platform.lib.warehouse.base import (
    CopyJob,
    WarehouseError,
)
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.schema import (
    pageviews_spec,
)
from bq_platform_tests.lib.warehouse.duckdb_rows import (
    UTC,
    pageviews,
    stage,
)

# ----------------------------------------------------------------------- other processes

_HOLD_LOCK = textwrap.dedent(
    """
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
    """
)


def _hold_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_locked_file_times_out_with_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    DuckDBWarehouse(path).ensure_table(pageviews_spec())
    proc = _hold_lock(path, 30)
    try:
        started = time.monotonic()
        with pytest.raises(WarehouseError, match="another process") as err:
            DuckDBWarehouse(path, lock_timeout_s=0.5).table_rows("pageviews")
        assert time.monotonic() - started < 5
        assert "dagster dev" in str(err.value) and str(path) in str(err.value)
    finally:
        proc.kill()
        proc.wait()


def test_locked_file_is_retried_until_released(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    DuckDBWarehouse(path).ensure_table(pageviews_spec())
    proc = _hold_lock(path, 1.0)
    try:
        assert DuckDBWarehouse(path, lock_timeout_s=30).table_rows("pageviews") == 0
    finally:
        proc.wait(timeout=30)


_OTHER_ZONE = textwrap.dedent(
    """
    import datetime as dt, json, sys
    from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
    wh = DuckDBWarehouse(sys.argv[1])
    row = wh.query("SELECT min(event_ts) AS ts, CAST(min(event_ts) AS DATE) AS d FROM "
                   + sys.argv[2])[0]
    n = wh.partition_rows("pageviews", dt.date(1995, 8, 1))
    print(json.dumps({"ts": row["ts"].isoformat(), "d": row["d"].isoformat(), "n": n}))
    """
)


def test_results_are_utc_whatever_the_machine_time_zone(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    # 00:30 UTC on Aug 1 is still Jul 31 in New York: a session in local time would say so.
    midnight = dt.datetime(1995, 8, 1, 0, tzinfo=UTC)
    wh.ensure_table(pageviews_spec())
    table = stage(wh, tmp_path, midnight, pageviews(midnight + dt.timedelta(minutes=30), 2), "s1")
    assert wh.submit_job(CopyJob("c1", (table,), "pageviews$19950801")).succeeded
    wh.close()  # release the file: the reader below is another process
    env = os.environ | {"TZ": "America/New_York", "PYTHONPATH": str(Path(__file__).parents[3])}
    out = subprocess.run(
        [sys.executable, "-c", _OTHER_ZONE, str(wh.path), table],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == {"ts": "1995-08-01T00:30:00+00:00", "d": "1995-08-01", "n": 2}
