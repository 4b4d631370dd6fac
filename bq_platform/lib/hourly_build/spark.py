"""Spark settings of the build's sessions: the Dagster resource's, the Spark application's and
the tests'. The driver runs on the JDK PySpark finds (``JAVA_HOME``, else ``java`` on ``PATH``).
"""

import os
from pathlib import Path
from typing import Any

#: log4j2 configuration that keeps Spark's console to errors (local masters, unless verbose).
QUIET_LOG4J2 = Path(__file__).with_name("log4j2-quiet.properties")
#: Driver and executors: HotSpot JIT-compiles no method over 8,000 bytecode bytes, and the
#: build's fused transform is one; Spark documents the limit at
#: ``spark.sql.codegen.hugeMethodLimit`` (spark.apache.org/docs/latest/configuration.html).
JIT_HUGE_METHODS = "-XX:-DontCompileHugeMethods"
#: A local driver, which also runs the tasks: the throughput collector, not G1, whose
#: concurrent marking threads compete with the task threads on a small machine.
LOCAL_GC = "-XX:+UseParallelGC"
#: Off: on, each Column operation sends its Python call site to the JVM, "a non-trivial
#: performance overhead" (``StaticSQLConf``, SPARK-51242). The transform never raises
#: (``try_*`` functions), so error messages lose nothing.
DATAFRAME_DEBUGGING = ("spark.python.sql.dataFrameDebugging.enabled", "false")
#: ``file://`` paths without the ``.crc`` file the default ``LocalFileSystem`` writes beside
#: each file (hadoop.apache.org/docs/stable/api/org/apache/hadoop/fs/LocalFileSystem.html):
#: nothing reads them, landed files are checked against their manifests.
RAW_LOCAL_FILESYSTEM = ("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")


def spark_config(
    master: str = "local[*]",
    shuffle_partitions: int = 8,
    *,
    verbose: bool = False,
    driver_memory: str = "2g",
) -> dict[str, Any]:
    """Spark configuration of the build, for ``SparkSession.builder`` or ``dagster_pyspark``.

    ``shuffle_partitions``: Spark's default 200 is far too many for hourly inputs; 8 suits a
    few local cores, raise it on a cluster. ``verbose``: a local master's console log in full,
    not errors only (:data:`QUIET_LOG4J2`). A ``spark-submit`` outside this config must pass
    :data:`JIT_HUGE_METHODS` too.
    """
    local = is_local_master(master)
    driver_options = [JIT_HUGE_METHODS]
    if local:
        driver_options.append(LOCAL_GC)
    if local and not verbose:
        driver_options.append(f"-Dlog4j2.configurationFile={QUIET_LOG4J2.as_uri()}")
    return {
        "spark.driver.extraJavaOptions": " ".join(driver_options),
        "spark.executor.extraJavaOptions": JIT_HUGE_METHODS,
        "spark.master": master,
        "spark.app.name": "bq_platform",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.sources.partitionOverwriteMode": "static",
        "spark.task.maxFailures": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": driver_memory,
        "spark.sql.adaptive.enabled": "true",
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.hadoop.parquet.enable.summary-metadata": "false",
        DATAFRAME_DEBUGGING[0]: DATAFRAME_DEBUGGING[1],
        RAW_LOCAL_FILESYSTEM[0]: RAW_LOCAL_FILESYSTEM[1],
    }


def is_local_master(master: str) -> bool:
    """Whether ``master`` (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``) runs the tasks
    in the driver's own JVM (spark.apache.org/docs/latest/submitting-applications.html, "Master
    URLs")."""
    return master.startswith("local")


def prepare_driver_env(master: str) -> None:
    """Before a driver JVM of ``master`` starts (here, or in a child that inherits the
    environment): :func:`ensure_local_spark_env` for a local master."""
    if is_local_master(master):
        ensure_local_spark_env()


def ensure_local_spark_env() -> None:
    """Bind a local driver to loopback (``SPARK_LOCAL_IP``, unless set): no network is needed,
    and no hostname is looked up. Call it before the session starts."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
