"""Spark settings shared by the Dagster resource, the CLI and the tests.

Local runs use ``local[*]``; production sets ``BQ_PLATFORM_SPARK_MASTER`` (``spark://``,
``yarn``, ``k8s://``) or runs on Dataproc (see README, "Running on Google Cloud").
"""

import os
from typing import Any


def spark_config(master: str = "local[*]", shuffle_partitions: int = 8) -> dict[str, Any]:
    """Spark configuration for the pageview build.

    Args:
        master: Spark master URL.
        shuffle_partitions: ``spark.sql.shuffle.partitions``; the default 200 wastes seconds on
            tiny hourly inputs, 8 suits 2-8 local cores; clusters should raise it.

    Returns:
        A dict for ``SparkSession.builder.config`` / ``dagster_pyspark.PySparkResource``.
    """
    return {
        "spark.master": master,
        "spark.app.name": "bq_platform",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.sources.partitionOverwriteMode": "static",
        "spark.task.maxFailures": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": os.environ.get("BQ_PLATFORM_SPARK_DRIVER_MEMORY", "2g"),
        "spark.sql.adaptive.enabled": "true",
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.hadoop.parquet.enable.summary-metadata": "false",
    }


def ensure_local_spark_env() -> None:
    """Bind local Spark to loopback (no network here; avoids hostname lookups)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
