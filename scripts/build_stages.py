"""Where a cold build's time goes, Spark stage by stage (issue 9, docs/PERFORMANCE.md).

Runs ``build_hours`` once in a fresh driver JVM, with the session config of
``bq_platform.lib.build.spark`` and ``local[2]``, on the landed hours of a landing zone (outputs go to
a scratch folder), with Spark's event log on; then prints each stage from that log: when it was
submitted (seconds after the application started), its wall seconds, tasks, and the executor
run, CPU and GC seconds summed over its tasks. Run time above CPU time is time the task threads
waited for a core (the JIT compiler and GC threads share the 2 cores) or for the disk. Before
the JVM stops it also prints its live threads' CPU seconds by group (:func:`thread_cpu`: the
JIT compilers, the collector, the task threads, the rest): how much of a cold build the JIT
takes (docs/PERFORMANCE.md, "The JIT's share of a cold build").

Usage: ``.venv/bin/python scripts/build_stages.py LAKE [FIRST_HOUR HOURS]``, where LAKE holds a
``landing`` folder (e.g. ``DIR/home-1x/lake`` of ``scripts/benchmark.py --scales 1 --keep --work
DIR``); FIRST_HOUR (``YYYY-MM-DDTHH``, default ``1995-09-01T00``, the bench's first hour) and
HOURS (default 72). Extra Spark settings: ``BUILD_STAGES_CONF="key=value,key=value"``.
"""

import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from process_sampler import cpu_seconds, stat_fields

STAGE_COMPLETED = "SparkListenerStageCompleted"
APPLICATION_START = "SparkListenerApplicationStart"
#: Prefixes of HotSpot's thread names (``task/<tid>/comm``, cut to 15 characters) by group.
THREAD_GROUPS = (
    ("C1 CompilerThre", "JIT compilers"),
    ("C2 CompilerThre", "JIT compilers"),
    ("GC Thread", "garbage collector"),
    ("Executor task", "task threads"),
)


def stage_rows(events: Iterable[str]) -> list[dict]:
    """One row per completed stage, in completion order, from Spark event-log lines (JSON).

    Times in seconds: ``at`` (submission, from the application's start), ``wall``, and the sums
    over the stage's tasks ``run``, ``cpu`` and ``gc`` (Spark's ``executorRunTime`` ms,
    ``executorCpuTime`` ns, ``jvmGCTime`` ms accumulables). Raises ``ValueError`` when a stage
    completes before the application started (not an event log).
    """
    started: float | None = None
    rows = []
    for line in events:
        event = json.loads(line)
        if event["Event"] == APPLICATION_START:
            started = event["Timestamp"] / 1000
        elif event["Event"] == STAGE_COMPLETED:
            if started is None:
                raise ValueError("a stage completed before SparkListenerApplicationStart")
            info = event["Stage Info"]
            metrics = {a["Name"]: a.get("Value") or 0 for a in info.get("Accumulables", [])}
            rows.append(
                {
                    "stage": info["Stage ID"],
                    "at": info["Submission Time"] / 1000 - started,
                    "wall": (info["Completion Time"] - info["Submission Time"]) / 1000,
                    "tasks": info["Number of Tasks"],
                    "run": metrics.get("internal.metrics.executorRunTime", 0) / 1000,
                    "cpu": metrics.get("internal.metrics.executorCpuTime", 0) / 1e9,
                    "gc": metrics.get("internal.metrics.jvmGCTime", 0) / 1000,
                    "name": info["Stage Name"],
                }
            )
    return rows


def thread_cpu(threads: Iterable[tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per thread group (:data:`THREAD_GROUPS`, else ``other``), from ``(thread name,
    CPU seconds)`` pairs; ``all`` is their sum. Threads that ended before the sample are not in
    the pairs (Spark's task threads are pooled and live on), so ``all`` can be below the
    process's own CPU time."""
    groups: dict[str, float] = {"all": 0.0}
    for name, seconds in threads:
        group = next((g for prefix, g in THREAD_GROUPS if name.startswith(prefix)), "other")
        groups[group] = groups.get(group, 0.0) + seconds
        groups["all"] += seconds
    return groups


def _jvm_threads(pid: int) -> list[tuple[str, float]]:
    """``(name, CPU seconds)`` of each live thread of process ``pid`` (``task/<tid>/stat``, read
    by :mod:`process_sampler`'s helpers)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = stat_fields((task / "stat").read_text())
        except OSError:
            continue
        out.append((name, cpu_seconds(fields)))
    return out


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4):
        print(__doc__, file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    from bq_platform.lib.build.hourly import build_hours
    from bq_platform.lib.core.hours import parse_hour_label
    from bq_platform.lib.storage.local import LocalObjectStore
    from bq_platform.lib.build.spark import ensure_local_spark_env, spark_config

    ensure_local_spark_env()  # loopback, and the local driver's JDK (its archive's JDK)
    lake = Path(argv[1]).resolve()
    first = parse_hour_label(argv[2] if len(argv) == 4 else "1995-09-01T00")
    hours = [first + dt.timedelta(hours=i) for i in range(int(argv[3]) if len(argv) == 4 else 72)]
    with tempfile.TemporaryDirectory(prefix="build-stages-") as tmp:
        scratch, log_dir = Path(tmp) / "lake", Path(tmp) / "events"
        scratch.mkdir()
        log_dir.mkdir()
        (scratch / "landing").symlink_to(lake / "landing")
        builder = SparkSession.builder
        extra = [
            kv.split("=", 1) for kv in os.environ.get("BUILD_STAGES_CONF", "").split(",") if kv
        ]
        for key, value in [*spark_config("local[2]").items(), *extra]:
            builder = builder.config(key, value)
        builder = builder.config("spark.eventLog.enabled", "true")
        builder = builder.config("spark.eventLog.dir", log_dir.as_uri())
        builder = builder.config("spark.eventLog.compress", "false")
        spark = builder.getOrCreate()
        started = time.monotonic()
        manifests = build_hours(
            spark, LocalObjectStore(scratch), hours, attempt_id="stages", visitor_key="k"
        )
        seconds = time.monotonic() - started
        jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        cpu = thread_cpu(_jvm_threads(jvm))
        spark.stop()
        (event_log,) = [p for p in log_dir.rglob("*") if p.is_file() and "appstatus" not in p.name]
        rows = stage_rows(event_log.read_text().splitlines())
    print(f"build of {len(hours)} hours: {seconds:.1f} s, {sum(m.rows for m in manifests):,} rows")
    print(
        "JVM CPU by thread (live threads, session start included): "
        + ", ".join(f"{group} {value:.1f} s" for group, value in sorted(cpu.items()))
    )
    print(
        f"{'stage':>5} {'at s':>7} {'wall s':>7} {'tasks':>5} {'run s':>7} {'cpu s':>7} {'gc s':>6}"
    )
    for r in rows:
        print(
            f"{r['stage']:>5} {r['at']:>7.2f} {r['wall']:>7.2f} {r['tasks']:>5} {r['run']:>7.2f}"
            f" {r['cpu']:>7.2f} {r['gc']:>6.2f}  {r['name'][:60]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
