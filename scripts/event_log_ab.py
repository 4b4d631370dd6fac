"""A/B of the local event log: ``bq-platform run`` with the batched log against Dagster's own.

For each round and variant it copies a landing zone into a fresh ``BQ_PLATFORM_HOME``, writes
the instance's ``dagster.yaml`` (variant ``batched``: the one ``bq-platform`` writes, naming
:class:`bq_platform.event_log.BatchedSqliteEventLogStorage`; variant ``plain``: the same files
with Dagster's ``SqliteEventLogStorage``), runs ``bq-platform run`` as a subprocess, and prints
from the instance the hourly run's planned events (its first event to ``RUN_START``), each
step's seconds, the daily overhead as ``make bench`` counts it (median day), and the wall
time. Variants alternate, so a machine that slows down hits both.

Usage: ``.venv/bin/python scripts/event_log_ab.py LANDING_ZONE [ROUNDS]``, where
LANDING_ZONE is the ``lake/landing`` folder of a home, e.g. the one ``scripts/benchmark.py
--scales 1 --keep --work DIR`` leaves in ``DIR/home-1x/lake/landing``. The figures are in
docs/PERFORMANCE.md, "Dagster's asset events in batches".
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # bq_platform_tests is not installed; it lives in the repo
    sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402
from benchmark import dagster_days  # noqa: E402

from bq_platform.cli.instance import ensure_dagster_yaml  # noqa: E402
from bq_platform_tests.test_event_log import PLAIN_EVENT_LOG  # noqa: E402


def run_once(landing: Path, variant: str) -> str:
    """One ``bq-platform run`` of ``variant`` on a copy of ``landing``; its line of figures."""
    with tempfile.TemporaryDirectory(prefix="event-log-ab-") as tmp:
        home = Path(tmp)
        shutil.copytree(landing, home / "lake" / "landing")
        dagster_home = home / "dagster_home"
        dagster_home.mkdir()
        if variant == "plain":  # written first: ensure_dagster_yaml keeps an existing block
            (dagster_home / "dagster.yaml").write_text(
                PLAIN_EVENT_LOG.format(base_dir=dagster_home / "history" / "runs")
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
    """Planned events, steps and the daily overhead (``make bench``'s ``dagster_days``, median
    day) from the instance in ``dagster_home``."""
    steps: dict[str, float] = {}
    days = dagster_days(dagster_home, steps)
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        (hourly,) = [r for r in instance.get_runs() if r.job_name.endswith("hourly_job")]
        logs = instance.all_logs(hourly.run_id)
    run_start = next(e for e in logs if e.dagster_event_type == dg.DagsterEventType.RUN_START)
    overhead = statistics.median(d["overhead_s"] for d in days)
    per_step = ", ".join(f"{k} {v:.2f}" for k, v in sorted(steps.items()))
    return (
        f"planned events {run_start.timestamp - logs[0].timestamp:.2f} s; daily overhead "
        f"{overhead:.2f} s/day; steps (s): {per_step}"
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
