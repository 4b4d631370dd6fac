"""The Spark settings of the build's sessions (bq_platform.lib.hourly_build.spark)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bq_platform.lib.hourly_build.spark import (
    DATAFRAME_DEBUGGING,
    JIT_HUGE_METHODS,
    LOCAL_GC,
    QUIET_LOG4J2,
    spark_config,
)


def test_a_local_driver_uses_the_throughput_collector_and_clusters_keep_theirs() -> None:
    for master in ("local[2]", "local[*]", "local"):
        options = spark_config(master)["spark.driver.extraJavaOptions"].split()
        assert {LOCAL_GC, JIT_HUGE_METHODS} <= set(options)
    for master in ("spark://host:7077", "yarn", "k8s://https://host:443"):
        config = spark_config(master)
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            assert LOCAL_GC not in config[key].split()


def test_a_local_driver_logs_errors_only_unless_verbose() -> None:
    quiet = f"-Dlog4j2.configurationFile={QUIET_LOG4J2.as_uri()}"
    assert quiet in spark_config("local[2]")["spark.driver.extraJavaOptions"].split()
    assert quiet not in spark_config("local[2]", verbose=True)["spark.driver.extraJavaOptions"]
    assert quiet not in spark_config("yarn")["spark.driver.extraJavaOptions"]
    assert QUIET_LOG4J2.is_file()
    assert spark_config()["spark.driver.memory"] == "2g"
    assert spark_config(driver_memory="6g")["spark.driver.memory"] == "6g"


def _driver_jvm_flags() -> str:
    """``jcmd <pid> VM.flags`` of this process's driver JVM: the child process PySpark
    started (``java``), read through the JDK's own diagnostic command."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        pytest.skip("no jcmd on the PATH")
    children = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (proc / "cmdline").read_bytes().split(b"\0")[0]
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and command.endswith(b"java"):
            children.append(proc.name)
    assert len(children) == 1, children
    done = subprocess.run(
        [jcmd, children[0], "VM.flags"], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def test_the_local_driver_runs_with_its_jvm_options(spark) -> None:
    """The options reach the JVM (a typo in a -XX flag would stop it from starting; a value
    HotSpot ignores would show here)."""
    flags = _driver_jvm_flags().split()
    assert LOCAL_GC in flags and JIT_HUGE_METHODS in flags


def test_the_session_runs_without_dataframe_debugging(spark) -> None:
    """A static SQL setting: it holds only if given when the session started."""
    assert spark.conf.get(DATAFRAME_DEBUGGING[0]) == DATAFRAME_DEBUGGING[1]
