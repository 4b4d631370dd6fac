"""The JVM options of the build's Spark sessions (bq_platform.lib.build.spark)."""

import shutil
import subprocess
import sys

import pytest

from bq_platform.lib.build.spark import (
    JIT_HUGE_METHODS,
    LOCAL_GC,
    LOCAL_JIT_THRESHOLDS,
    spark_config,
)
from bq_platform.lib.spark_cds import (
    ARCHIVE_ENV,
    EAGER_AOT_COMPILATION,
    QUIET_AOT,
    QUIET_CDS,
    archive_options,
    archive_path,
    create_archive,
)
from bq_platform.lib.spark_jdk import JAVA_HOME_ENV, SYSTEM


def test_a_local_driver_uses_the_throughput_collector_and_clusters_keep_theirs() -> None:
    for master in ("local[2]", "local[*]", "local"):
        options = spark_config(master)["spark.driver.extraJavaOptions"].split()
        assert {LOCAL_GC, LOCAL_JIT_THRESHOLDS, JIT_HUGE_METHODS} <= set(options)
    for master in ("spark://host:7077", "yarn", "k8s://https://host:443"):
        config = spark_config(master)
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            assert not {LOCAL_GC, LOCAL_JIT_THRESHOLDS} & set(config[key].split())


def test_the_local_session_runs_with_the_parallel_collector(spark) -> None:
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    collectors = {bean.getName() for bean in management.getGarbageCollectorMXBeans()}
    # HotSpot's names for -XX:+UseParallelGC; G1 would be "G1 Young Generation", ...
    assert collectors == {"PS Scavenge", "PS MarkSweep"}, collectors


def test_the_local_session_compiles_with_scaled_thresholds(spark) -> None:
    """The option reaches the JVM (a typo in a -XX flag would stop it from starting; a value
    HotSpot ignores would show here)."""
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    hotspot = management.getPlatformMXBean(
        spark.sparkContext._jvm.com.sun.management.HotSpotDiagnosticMXBean._java_lang_class
    )
    expected = LOCAL_JIT_THRESHOLDS.split("=", 1)[1]
    assert float(hotspot.getVMOption("CompileThresholdScaling").getValue()) == float(expected)


def test_a_column_is_built_without_sending_its_call_site_to_the_jvm(spark, monkeypatch) -> None:
    """DataFrame debugging off: a Column operator is one py4j round trip, not a dozen that
    record its Python call site (``PySparkCurrentOrigin``) for error messages."""
    import py4j.clientserver
    from pyspark.sql import functions as F

    sent: list[str] = []
    send = py4j.clientserver.ClientServerConnection.send_command

    def counting(self, command: str) -> str:
        sent.append(command)
        return send(self, command)

    column = F.col("status")
    monkeypatch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counting)
    built = (column >= 200) & (column < 300)
    monkeypatch.undo()

    assert "status" in str(built)
    assert not [c for c in sent if "PySparkCurrentOrigin" in c], sent
    assert len(sent) <= 3, sent  # the two comparisons and the `&`


@pytest.mark.parametrize(
    ("java_home", "flag", "quiet"),
    [
        ("", "-XX:AOTCache", [QUIET_AOT, QUIET_CDS, *EAGER_AOT_COMPILATION]),  # the bundled JDK 25
        (SYSTEM, "-XX:SharedArchiveFile", [QUIET_CDS]),  # the machine's JDK
    ],
)
def test_the_class_archive_is_used_only_where_it_exists(
    tmp_path, monkeypatch, java_home: str, flag: str, quiet: list[str]
) -> None:
    monkeypatch.setenv(JAVA_HOME_ENV, java_home)
    archive = tmp_path / "spark-driver.archive"
    monkeypatch.setenv(ARCHIVE_ENV, str(archive))
    assert archive_options() == []
    assert not any(flag in o for o in _driver_options("local[2]"))
    archive.write_bytes(b"not an archive")
    assert archive_options() == [f"{flag}={archive}", *quiet]
    assert f"{flag}={archive}" in _driver_options("local[2]")
    assert not any(flag in o for o in _driver_options("spark://host:7077"))
    blank = tmp_path / "a folder" / "spark-driver.archive"
    blank.parent.mkdir()
    blank.write_bytes(b"not an archive")
    assert archive_options(blank)[0] == f'"{flag}={blank}"'  # one option
    quote = tmp_path / "it's.archive"
    quote.write_bytes(b"not an archive")
    assert archive_options(quote) == []
    monkeypatch.delenv(ARCHIVE_ENV)
    suffix = ".aot" if flag == "-XX:AOTCache" else ".jsa"
    assert archive_path() is not None and archive_path().suffix == suffix
    monkeypatch.setenv(ARCHIVE_ENV, "")
    assert archive_path() is None and archive_options() == []


def _driver_options(master: str) -> list[str]:
    return spark_config(master)["spark.driver.extraJavaOptions"].split()


def _start_session(options: str) -> subprocess.CompletedProcess:
    """A local session in a child process, started as the Dagster resource starts it, with the
    driver options of spark_config plus ``options``."""
    code = (
        "from dagster_pyspark.resources import spark_session_from_config\n"
        "from bq_platform.lib.build.spark import ensure_local_spark_env, spark_config\n"
        "ensure_local_spark_env()\n"
        "config = spark_config('local[1]')\n"
        f"config['spark.driver.extraJavaOptions'] += ' {options}'\n"
        "spark = spark_session_from_config(config)\n"
        "assert spark.range(3).count() == 3\n"
        "spark.stop()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize(
    ("java_home", "strict"),
    [("", "-XX:AOTMode=on"), (SYSTEM, "-Xshare:on")],  # the bundled JDK 25; the machine's
)
def test_the_driver_maps_the_class_archive(
    tmp_path, monkeypatch, java_home: str, strict: str
) -> None:
    """The archive (make install's, else one written here) is one a driver JVM can map: the
    strict option makes HotSpot refuse to start otherwise; a broken file is refused. The copy
    sits in a folder with a blank, which Spark's option string must keep in one option."""
    monkeypatch.setenv(JAVA_HOME_ENV, java_home)
    archive = tmp_path / "with blank" / "spark-driver.archive"
    archive.parent.mkdir()
    installed = archive_path()
    if installed is not None and installed.is_file():
        shutil.copyfile(installed, archive)
    else:
        create_archive(archive)
    monkeypatch.setenv(ARCHIVE_ENV, str(archive))
    started = _start_session(strict)
    assert started.returncode == 0, started.stderr[-2000:]

    broken = tmp_path / "broken.archive"
    broken.write_bytes(b"\0" * 4096)
    monkeypatch.setenv(ARCHIVE_ENV, str(broken))
    assert _start_session(strict).returncode != 0  # the check above can fail
    quiet = _start_session("")  # without the strict option: ignored, and nothing is printed
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    printed = (quiet.stdout + quiet.stderr).lower()
    assert "shared archive" not in printed and "aot" not in printed, printed[-2000:]
