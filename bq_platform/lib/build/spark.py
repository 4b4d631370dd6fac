"""Spark settings shared by the Dagster resource, the CLI and the tests.

Local runs use ``local[*]``; production sets ``BQ_PLATFORM_SPARK_MASTER`` (``spark://``,
``yarn``, ``k8s://``) or runs on Dataproc (see README, "Running on Google Cloud").
"""

import os
from pathlib import Path
from typing import Any

from bq_platform.lib.spark_cds import archive_options
from bq_platform.lib.spark_jdk import launcher_home, local_java_home

#: log4j2 configuration that keeps Spark's console to errors (local masters, unless verbose).
QUIET_LOG4J2 = Path(__file__).with_name("log4j2-quiet.properties")
#: JVM option of the driver and the executors: HotSpot JIT-compiles no method over 8,000 bytes
#: of bytecode by default (``DontCompileHugeMethods``), and the build's fused transform is one
#: such method (8,396 bytes with the fast path, :mod:`bq_platform.lib.build.transform`): without this
#: option it runs interpreted, at about 1.7x the CPU (issue 9). Spark documents the same limit
#: for ``spark.sql.codegen.hugeMethodLimit`` (spark.apache.org/docs/latest/configuration.html).
JIT_HUGE_METHODS = "-XX:-DontCompileHugeMethods"
#: JVM option of a local driver, which also runs the tasks: the throughput collector instead of
#: JDK 17's default G1, whose concurrent marking threads and write barriers compete with the two
#: task threads of a 2-core machine. A cold build of the 1x bench's 72 hours (2.04 M lines,
#: ``local[2]``, issue 9, docs/PERFORMANCE.md) took 31.0 s (mean of 9 JVMs, 29.3-32.3; three of
#: them also with ``-Xms2g``, which changed nothing beyond the noise) against 33.8 s (6 JVMs,
#: 29.8-36.6) with G1. Cluster masters keep their JVMs' default (their executors have their
#: own cores).
LOCAL_GC = "-XX:+UseParallelGC"
#: JVM option of a local driver: HotSpot's compile thresholds x4 (``CompileThresholdScaling``,
#: "Java HotSpot VM Options", docs.oracle.com/en/java/javase/17/docs/specs/man/java.html). A
#: local driver lives for one ``bq-platform run``; its JIT compilers took 16-18 s of the 43-48 s
#: CPU of a cold 1x build on 2 cores, and with higher thresholds they compile only what stays
#: hot: 12-13 s, the build 0.5-1.5 s faster (issue 9, docs/PERFORMANCE.md).
LOCAL_JIT_THRESHOLDS = "-XX:CompileThresholdScaling=4"
#: PySpark's DataFrame debugging off (a static SQL setting, so it is given when the session
#: starts). On, each ``pyspark.sql.functions`` call and Column operator sends its Python call
#: site to the JVM for error messages' "DataFrame query context": about ten more py4j round
#: trips per call (the active session, ``spark.sql.stackTracesInDataFrameContext``,
#: ``PySparkCurrentOrigin.set`` and ``clear``) and an ``import IPython`` attempt. Spark's own
#: description (``StaticSQLConf``, PySpark 4.3): "enabled by default, but has a non-trivial
#: performance overhead because of the stack trace collection"; SPARK-51242 measured Column
#: operations 2.5x faster without it. The build's frames (transform, slim rows, per-file
#: counts) took 5,112 / 5,420 / 4,911 round trips with it and 2,297 / 2,168 / 2,244 without,
#: on the driver's critical path of every pass (issue 9, docs/PERFORMANCE.md). The transform
#: never raises (``try_*`` functions), so the context it would add to errors is not missed.
DATAFRAME_DEBUGGING = ("spark.python.sql.dataFrameDebugging.enabled", "false")
#: Hadoop's file system for ``file://`` paths (the local lake, a standalone cluster's shared
#: disk): ``RawLocalFileSystem`` instead of the default ``LocalFileSystem``, a
#: ``ChecksumFileSystem`` that writes a ``.<name>.crc`` file beside every file Spark writes and
#: looks for one beside every file it opens (hadoop.apache.org/docs/stable/api/org/apache/
#: hadoop/fs/LocalFileSystem.html, ".../ChecksumFileSystem.html"; Hadoop's
#: ``FileSystem.getFileSystemClass`` takes ``fs.<scheme>.impl`` first). Nothing reads those
#: checksums here: the landed files have none (``bq-platform land`` writes them, with SHA-256
#: and CRC32C in their manifests, checked before Spark reads them), and the Parquet files are
#: read by the load jobs, not by Hadoop. A cold build of the 1x bench's 72 hours
#: (``scripts/build_stages.py``, 5 JVMs each, alternating): 18.3-18.6 s against 18.6-19.0 s,
#: the main stage starting 0.1-0.2 s sooner and the ``full`` write 2.60-2.71 s against
#: 2.72-2.83 s (issue 9, docs/PERFORMANCE.md). ``gs://`` paths (production) are not affected.
RAW_LOCAL_FILESYSTEM = ("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")


def spark_config(master: str = "local[*]", shuffle_partitions: int = 8) -> dict[str, Any]:
    """Spark configuration for the pageview build.

    Args:
        master: Spark master URL.
        shuffle_partitions: ``spark.sql.shuffle.partitions``; the default 200 wastes seconds on
            tiny hourly inputs, 8 suits 2-8 local cores; clusters should raise it.

    Local masters log errors only (:data:`QUIET_LOG4J2`, passed to the driver JVM as
    ``-Dlog4j2.configurationFile``; PySpark starts that JVM with this config), unless
    ``BQ_PLATFORM_SPARK_VERBOSE`` is set (``bq-platform -v``). The driver and the executors get
    :data:`JIT_HUGE_METHODS`; a ``spark-submit`` outside this config must pass it too. A local
    driver also gets :data:`LOCAL_GC`, :data:`LOCAL_JIT_THRESHOLDS` and, once ``make install``
    wrote it, the class archive of :mod:`bq_platform.lib.spark_cds` (an AOT cache on the bundled
    JDK 25 that :func:`ensure_local_spark_env` selects). Every session runs without
    PySpark's DataFrame debugging (:data:`DATAFRAME_DEBUGGING`) and reads and writes ``file://``
    paths without Hadoop's ``.crc`` side files (:data:`RAW_LOCAL_FILESYSTEM`).

    Returns:
        A dict for ``SparkSession.builder.config`` / ``dagster_pyspark.PySparkResource``.
    """
    local = is_local_master(master)
    quiet = local and not os.environ.get("BQ_PLATFORM_SPARK_VERBOSE")
    driver_options = [JIT_HUGE_METHODS]
    if local:
        driver_options += [LOCAL_GC, LOCAL_JIT_THRESHOLDS, *archive_options()]
    if quiet:
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
        "spark.driver.memory": os.environ.get("BQ_PLATFORM_SPARK_DRIVER_MEMORY", "2g"),
        "spark.sql.adaptive.enabled": "true",
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.hadoop.parquet.enable.summary-metadata": "false",
        DATAFRAME_DEBUGGING[0]: DATAFRAME_DEBUGGING[1],
        RAW_LOCAL_FILESYSTEM[0]: RAW_LOCAL_FILESYSTEM[1],
    }


def is_local_master(master: str) -> bool:
    """Whether ``master`` (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``) runs the tasks
    in the driver's own JVM, the case that gets the local driver's JDK, options and archive
    (spark.apache.org/docs/latest/submitting-applications.html, "Master URLs")."""
    return master.startswith("local")


def prepare_driver_env(master: str) -> None:
    """Prepare this process's environment for a driver of ``master`` before its JVM starts
    (in this process, or in a ``spark-submit`` child, which inherits it): for a local master
    :func:`ensure_local_spark_env`; other masters need nothing (their drivers and executors keep
    their machines' JDK)."""
    if is_local_master(master):
        ensure_local_spark_env()


def ensure_local_spark_env() -> None:
    """Prepare this process's environment for a local driver, before its session starts: bind
    Spark to loopback (no network here; avoids hostname lookups), and set ``JAVA_HOME`` to the
    local driver's JDK (:func:`bq_platform.lib.spark_jdk.local_java_home`: the bundled JDK 25
    by default; ``BQ_PLATFORM_JAVA_HOME=system`` leaves ``JAVA_HOME`` as it is, unless it is the
    bundled JDK's, set here before: then the JDK on the PATH). PySpark starts the driver JVM
    with this process's environment; one process has one driver JVM."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_home = local_java_home()
    if java_home is not None:
        os.environ["JAVA_HOME"] = str(java_home)
    elif os.environ.get("JAVA_HOME") == str(launcher_home()):  # this process's own, earlier
        del os.environ["JAVA_HOME"]  # the machine's JDK: the one on the PATH
