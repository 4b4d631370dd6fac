"""Benchmark of the hourly Spark build on the bundled real logs, scaled up.

Lands the two real logs (81,744 lines) under ``--copies`` site names each (so 25 copies give
2.04 M lines, the size of DESIGN.md's reference measurement: 12.6 s for one regex + Parquet in
PySpark local[2]), then times :func:`bq_platform.lib.build.build_hours` day by day, as the
``lake/pageview_files`` asset runs it, and reports lines per second and the JVM's peak memory.

Usage: ``.venv/bin/python scripts/benchmark.py [--copies 25] [--master local[2]]``
(``make bench``). Prints one JSON document; docs/benchmarks.md records the figures.
"""

import argparse
import datetime as dt
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path

from bq_platform.lib.build import build_hours
from bq_platform.lib.hours import day_hours
from bq_platform.lib.landing import land_file
from bq_platform.lib.landing_index import scan_landing
from bq_platform.lib.objectstore.local import LocalObjectStore
from bq_platform.lib.spark import ensure_local_spark_env, spark_config

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOGS = REPO.parent / "shared" / "data" / "access_logs"


def peak_rss_mib(pid: int) -> float | None:
    """Peak resident memory (VmHWM) of a process in MiB, from /proc (Linux only)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=25)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--logs", type=Path, default=DEFAULT_LOGS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    ensure_local_spark_env()

    from pyspark.sql import SparkSession

    with tempfile.TemporaryDirectory(prefix="bqp-bench-") as tmp:
        store = LocalObjectStore(Path(tmp) / "lake")
        started = time.monotonic()
        for site_dir in sorted(p for p in args.logs.iterdir() if p.is_dir()):
            for path in sorted(site_dir.iterdir()):
                for copy in range(args.copies):
                    land_file(store, f"{site_dir.name}-{copy:03d}", path)
        landing_s = time.monotonic() - started
        index = scan_landing(store)
        lines = sum(h.source_lines for h in index.hours())

        started = time.monotonic()
        builder = SparkSession.builder
        for key, value in spark_config(args.master, shuffle_partitions=8).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        startup_s = time.monotonic() - started

        per_day = []
        build_started = time.monotonic()
        for day in index.days():
            t0 = time.monotonic()
            manifests = build_hours(
                spark,
                store,
                day_hours(day),
                attempt_id=f"bench-{day:%Y%m%d}",
                visitor_key="benchmark-key",
            )
            per_day.append(
                {
                    "day": day.isoformat(),
                    "lines": sum(c.source_lines for m in manifests for c in m.counts),
                    "pageviews": sum(m.rows for m in manifests),
                    "seconds": round(time.monotonic() - t0, 2),
                }
            )
        build_s = time.monotonic() - build_started
        gateway = getattr(spark.sparkContext, "_gateway", None)
        jvm_pid = getattr(getattr(gateway, "proc", None), "pid", None)
        result = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "master": args.master,
            "copies": args.copies,
            "sites": len({m.site for h in index.hours() for m in h.manifests}),
            "lines": lines,
            "landing_seconds": round(landing_s, 2),
            "spark_startup_seconds": round(startup_s, 2),
            "build_seconds": round(build_s, 2),
            "lines_per_second": round(lines / build_s),
            "per_day": per_day,
            "jvm_peak_rss_mib": peak_rss_mib(jvm_pid) if jvm_pid else None,
            "reference": "DESIGN.md: 2.04 M lines, one regex + Parquet, PySpark local[2]: 12.6 s",
        }
        spark.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
