"""Run :func:`bq_platform.lib.build.build_hours` in its own process against a given master.

Used by ``test_build_cluster.py``: a process has one SparkContext, and the test session's local
one is busy, so the local and the cluster build each run here, with the same arguments. Prints
the hour manifests as one JSON list on stdout.

Usage: ``python -m bq_platform_tests.lib.cluster_build MASTER LAKE ATTEMPT KEY HOUR...``
(hours as ``YYYY-MM-DDTHH``).
"""

import json
import sys

from pyspark.sql import SparkSession

from bq_platform.lib.build import build_hours
from bq_platform.lib.layout import parse_hour_label
from bq_platform.lib.objectstore.local import LocalObjectStore
from bq_platform.lib.spark import ensure_local_spark_env, spark_config

#: Executor settings that fit two small workers (1 core, 1 GiB each) on a shared machine.
CLUSTER_CONF = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def main(argv: list[str]) -> None:
    master, lake, attempt, key, *hours = argv
    ensure_local_spark_env()
    builder = SparkSession.builder
    conf = {**spark_config(master, shuffle_partitions=2)}
    if master.startswith("spark://"):
        conf.update(CLUSTER_CONF)
    for name, value in conf.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    try:
        manifests = build_hours(
            spark,
            LocalObjectStore(lake),
            [parse_hour_label(h) for h in hours],
            attempt_id=attempt,
            visitor_key=key,
        )
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()  # noqa: SLF001
    finally:
        spark.stop()
    json.dump({"executors": executors, "manifests": [m.to_json() for m in manifests]}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
