"""A data folder for real ``bq-platform`` subprocesses: land a slice of the real logs, run, kill.

Used by the tests that need a real process (two concurrent runs, kill -9). Each folder has its
own lake, DuckDB file and Dagster instance; nothing touches the repository's ``.bq_platform``.
"""

import dataclasses
import gzip
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import duckdb

BQ_PLATFORM = str(Path(sys.executable).with_name("bq-platform"))
NASA = "ksc.nasa.gov"
#: First lines of the NASA log: 1995-08-01T04 and 05 UTC (the file is in -0400).
SLICE_LINES = 2_000
COUNTS = "source_lines, pageviews, non_page_hits, rejected, duplicates, out_of_window"


@dataclasses.dataclass
class CliHome:
    """One ``BQ_PLATFORM_HOME`` with its ``DAGSTER_HOME`` inside."""

    root: Path

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("BQ_PLATFORM_") and k != "DAGSTER_HOME"
        }
        env.update(
            BQ_PLATFORM_HOME=str(self.root),
            DAGSTER_HOME=str(self.dagster_home),
            BQ_PLATFORM_SPARK_MASTER="local[2]",
            SPARK_LOCAL_IP="127.0.0.1",
            PYSPARK_PYTHON=sys.executable,
        )
        return env

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ``bq-platform ARGS`` to the end; stdout and stderr together in ``stdout``."""
        return subprocess.run(
            [BQ_PLATFORM, *args],
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str) -> "RunningCli":
        """Start ``bq-platform ARGS``; its output lines are collected as they come."""
        proc = subprocess.Popen(
            [BQ_PLATFORM, *args],
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return RunningCli(proc)

    def land_slice(self, access_logs: Path, tmp: Path) -> int:
        """Land the first :data:`SLICE_LINES` lines of the NASA log; return the lines landed."""
        (source,) = (access_logs / NASA).glob("*.gz")
        with gzip.open(source, "rb") as handle:
            lines = [next(handle) for _ in range(SLICE_LINES)]
        path = tmp / "nasa-slice.log"
        path.write_bytes(b"".join(lines))
        result = self.cli("land", "--site", NASA, str(path))
        assert result.returncode == 0, result.stdout
        return len(lines)

    def query(self, sql: str) -> list[tuple]:
        with duckdb.connect(str(self.root / "warehouse.duckdb"), read_only=True) as con:
            return con.execute(sql).fetchall()

    def audit(self) -> list[tuple]:
        return self.query(f"SELECT site, hour, {COUNTS} FROM pageviews_audit ORDER BY hour, site")

    def pageviews(self) -> tuple[int, int]:
        """(rows, distinct event_id) of the published table: equal when nothing is doubled."""
        ((rows, distinct),) = self.query("SELECT count(*), count(DISTINCT event_id) FROM pageviews")
        return rows, distinct

    def runs(self) -> list[dg.DagsterRun]:
        with dg.DagsterInstance.from_config(str(self.dagster_home)) as instance:
            return list(instance.get_runs())


class RunningCli:
    """A ``bq-platform`` subprocess whose output is read by a thread into ``lines``."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait(self, timeout: float = 300) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def kill_when(self, marker: Callable[[], bool], timeout: float = 180) -> None:
        """``kill -9`` the process as soon as ``marker()`` is true.

        Raises:
            AssertionError: if the process ends, or ``timeout`` passes, before the marker.
        """
        deadline = time.monotonic() + timeout
        while not marker():
            assert self.proc.poll() is None, f"ended before the marker:\n{self.output}"
            assert time.monotonic() < deadline, f"no marker after {timeout} s:\n{self.output}"
            time.sleep(0.05)
        os.kill(self.proc.pid, signal.SIGKILL)
        self.wait()
