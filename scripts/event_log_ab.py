"""A/B of the local event log: ``bq-platform run`` with the batched log against Dagster's own.

For each round and variant it copies a landing zone into a fresh ``BQ_PLATFORM_HOME``, writes
the instance's ``dagster.yaml`` (variant ``batched``: the one ``bq-platform`` writes, naming
:class:`bq_platform.event_log.BatchedSqliteEventLogStorage`; variant ``plain``: the same files
with Dagster's ``SqliteEventLogStorage``), runs ``bq-platform run`` as a subprocess, and prints
from the instance the hourly run's planned events (its first event to ``RUN_START``), each
step's seconds, the daily overhead as ``make bench`` counts it (the mean of the days, where
the bench prints their median), and the wall time. Variants
alternate, so a machine that slows down hits both.

Usage: ``.venv/bin/python scripts/event_log_ab.py LANDING_ZONE [ROUNDS]``, where
LANDING_ZONE is the ``lake/landing`` folder of a home, e.g. the one ``scripts/benchmark.py
--scales 1 --keep --work DIR`` leaves in ``DIR/home-1x/lake/landing``. The figures are in
docs/PERFORMANCE.md, "Dagster's asset events in batches".
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

from bq_platform.instance import ensure_dagster_yaml

REPO = Path(__file__).resolve().parents[1]
BUILD_STEP = "pageview_files"
PLAIN = """\
event_log_storage:
  module: dagster._core.storage.event_log
  class: SqliteEventLogStorage
  config:
    base_dir: "{base_dir}"
"""


def run_once(landing: Path, variant: str) -> str:
    """One ``bq-platform run`` of ``variant`` on a copy of ``landing``; its line of figures."""
    with tempfile.TemporaryDirectory(prefix="event-log-ab-") as tmp:
        home = Path(tmp)
        shutil.copytree(landing, home / "lake" / "landing")
        dagster_home = home / "dagster_home"
        dagster_home.mkdir()
        if variant == "plain":  # written first: ensure_dagster_yaml keeps an existing block
            (dagster_home / "dagster.yaml").write_text(
                PLAIN.format(base_dir=dagster_home / "history" / "runs")
            )
        ensure_dagster_yaml(dagster_home)
        env = {
            **{k: v for k, v in os.environ.items() if k != "DAGSTER_EVENT_BATCH_SIZE"},
            "BQ_PLATFORM_HOME": str(home),
            "DAGSTER_HOME": str(dagster_home),
            "BQ_PLATFORM_SPARK_MASTER": "local[2]",
        }
        started = time.monotonic()
        done = subprocess.run(
            [str(REPO / ".venv" / "bin" / "bq-platform"), "run"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - started
        if done.returncode != 0:
            return f"{variant}: FAILED (exit {done.returncode}):\n{done.stdout}{done.stderr}"
        return f"{variant}: wall {wall:.1f} s; " + figures(dagster_home)


def figures(dagster_home: Path) -> str:
    """Planned events, steps and the daily overhead from the instance in ``dagster_home``."""
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        steps: dict[str, float] = {}
        overhead = planned = 0.0
        days = 0
        for run in instance.get_runs():
            stats = instance.get_run_stats(run.run_id)
            build = 0.0
            for step in instance.get_run_step_stats(run.run_id):
                seconds = (step.end_time or 0) - (step.start_time or 0)
                steps[step.step_key] = steps.get(step.step_key, 0.0) + seconds
                build += seconds if BUILD_STEP in step.step_key else 0.0
            overhead += (stats.end_time or 0) - (stats.start_time or 0) - build
            if run.job_name.endswith("daily_job"):
                days += 1
            else:
                logs = instance.all_logs(run.run_id)
                start = next(
                    e for e in logs if e.dagster_event_type == dg.DagsterEventType.RUN_START
                )
                planned = start.timestamp - logs[0].timestamp
        per_step = ", ".join(f"{k} {v:.2f}" for k, v in sorted(steps.items()))
        return (
            f"planned events {planned:.2f} s; daily overhead (mean) {overhead / max(days, 1):.2f} "
            f"s/day; steps (s): {per_step}"
        )


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    landing = Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for _ in range(rounds):
        for variant in ("batched", "plain"):
            print(run_once(landing, variant), flush=True)


if __name__ == "__main__":
    main()
