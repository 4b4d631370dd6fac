"""The local Spark driver's class archive: Spark's classes pre-parsed, and on JDK 25 pre-linked
with the JIT's profiles.

A JVM spends seconds of a cold build loading, parsing and verifying the classes of Spark's
jars (Spark, Hadoop, Parquet, Janino, ...), then compiling what runs hot. A training run can
write what it loaded into an archive that later JVMs with the same JDK and class path map:

- on the bundled JDK 25 (:mod:`bq_platform.lib.spark_jdk`, the default), an *AOT cache*
  (``-XX:AOTCacheOutput=FILE`` at training, ``-XX:AOTCache=FILE`` after): the classes loaded
  and linked (JEP 483) and the training's method profiles, so the JIT compiles the hot code
  sooner (JEP 515); openjdk.org/jeps/514 for the one-step creation;
- on another JDK (``BQ_PLATFORM_JAVA_HOME``), a *dynamic CDS archive* (JDK 13+,
  ``-XX:ArchiveClassesAtExit=FILE``, JEP 350; ``-XX:SharedArchiveFile=FILE`` after):
  docs.oracle.com/en/java/javase/17/vm/class-data-sharing.html.

- :func:`create_archive` writes the archive once per virtual environment (``make install``
  calls ``python -m bq_platform.lib.spark_cds --logs DIR``): it runs a build (:func:`_train`:
  the landing, transform, cache, counts and Parquet writes of the bundled real logs, or of a
  few synthetic lines, :data:`TRAINING_ROUNDS` times) in a child process whose driver JVM
  writes the archive as it exits, then moves the file into place atomically.
- :func:`archive_options` gives the driver options that use it; :func:`bq_platform.lib.build.spark.
  spark_config` adds them for local masters (the driver runs the tasks there). A missing
  archive adds nothing; one the JVM cannot use (another JDK build or class path) is ignored by
  the JVM, quietly (``-Xlog:cds*=off``, ``-Xlog:aot*=off``: HotSpot would print warnings).

Measured (issue 9, docs/PERFORMANCE.md): with the CDS archive on JDK 17, the session start-up
took 2.4-2.5 s against 3.9-4.1 s, and a cold build of the 1x bench's 72 hours (2.04 M lines,
``local[2]``) 31.8-32.8 s against 33.2-36.3 s (three JVMs each, alternating); the archive is
~190 MB. With the AOT cache on JDK 25 (trained on the bundled logs), a whole 1x
``bq-platform run`` took 26.2-26.6 s against 30.0-30.7 s on JDK 17 with the CDS archive.
"""

import argparse
import datetime as dt
import gzip
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bq_platform.lib.spark_jdk import uses_bundled_jdk

if TYPE_CHECKING:
    from py4j.java_gateway import JavaGateway

    from bq_platform.lib.storage.base import ObjectStore

#: Environment override of the archive's path; an empty value turns the archive off.
ARCHIVE_ENV = "BQ_PLATFORM_SPARK_CDS_ARCHIVE"
#: HotSpot's CDS log tags, silenced: an archive it cannot map is then ignored without output.
QUIET_CDS = "-Xlog:cds*=off"
#: The same for JDK 25's AOT cache (its warnings are tagged ``aot``).
QUIET_AOT = "-Xlog:aot*=off"
#: With the AOT cache: HotSpot queues a method the training compiled for compilation as soon as
#: the classes it depends on are initialized (``AOTCompileEagerly``, "Compile methods as soon as
#: possible", an experimental flag of JDK 25's ``cds_globals.hpp``; JDK-8359436 tests that it is
#: accepted), instead of waiting for its invocation counters to reach the thresholds again. A
#: cold build of the 1x bench's 72 hours (``scripts/build_stages.py``, five JVMs each,
#: alternating): 18.7-19.4 s (mean 19.0) against 19.3-20.1 s (mean 19.8); the JIT's CPU the same,
#: the driver's ~0.5 s less (issue 9, docs/PERFORMANCE.md).
EAGER_AOT_COMPILATION = ("-XX:+UnlockExperimentalVMOptions", "-XX:+AOTCompileEagerly")
#: Builds of the training input in the training's JVM: the later ones run compiled code, so the
#: JIT's profiles in a JDK 25 AOT cache are those of a warm build. A 1x ``run`` with a cache of
#: 3 builds of the bundled logs: 27.3, 27.3, 27.9, 27.4 s; of 1 build: 27.8, 28.0, 27.8, 28.4 s
#: (alternating; issue 9, docs/PERFORMANCE.md). Costs ~6 s more at install.
TRAINING_ROUNDS = 3
_TRAINING_HOUR = dt.datetime(1995, 8, 1, 12, tzinfo=dt.UTC)
_LOG = logging.getLogger(__name__)


def archive_path() -> Path | None:
    """Where the archive of this virtual environment lives (``$BQ_PLATFORM_SPARK_CDS_ARCHIVE``,
    default ``<sys.prefix>/share/bq_platform/spark-driver.aot`` on the bundled JDK, else
    ``spark-driver.jsa``); None when turned off."""
    configured = os.environ.get(ARCHIVE_ENV)
    if configured is not None:
        return Path(configured) if configured.strip() else None
    name = "spark-driver.aot" if uses_bundled_jdk() else "spark-driver.jsa"
    return Path(sys.prefix) / "share" / "bq_platform" / name


def archive_options(path: Path | None = None) -> list[str]:
    """JVM options that map the archive at ``path`` (default :func:`archive_path`): an AOT
    cache on the bundled JDK (with :data:`EAGER_AOT_COMPILATION`), else a CDS archive; ``[]``
    when there is no such file (or its path holds a quote or backslash). A path with blanks is
    quoted for Spark's option string (``spark.driver.extraJavaOptions``)."""
    path = path if path is not None else archive_path()
    if path is None or not path.is_file():
        return []
    if uses_bundled_jdk():
        option = _path_option("-XX:AOTCache", path)
        return [option, QUIET_AOT, QUIET_CDS, *EAGER_AOT_COMPILATION] if option else []
    option = _path_option("-XX:SharedArchiveFile", path)
    return [option, QUIET_CDS] if option else []


def _path_option(flag: str, path: Path) -> str | None:
    """``flag=path`` as one item of ``spark.driver.extraJavaOptions``, which Spark's launcher
    splits at blanks unless quoted (``CommandBuilderUtils.parseOptionString``; unquoted, the JVM
    would not start); None for a path with a quote or backslash (they would need escaping)."""
    if any(c in str(path) for c in "\"'\\"):
        return None
    option = f"{flag}={path}"
    return f'"{option}"' if any(c.isspace() for c in option) else option


def create_archive(path: Path, *, logs: Path | None = None, timeout_s: float = 600.0) -> float:
    """Write the archive at ``path`` (replacing any) from a training build.

    The training runs in a child Python process whose driver JVM writes the archive as it
    exits (the child waits for that); the file appears at ``path`` only when complete.

    Args:
        path: the archive's file.
        logs: a landing tree (``DIR/<site>/<log files>``, e.g. the bundled real logs) for the
            training to land and build; None builds ~200 synthetic lines of one hour. Real logs
            give the JIT's profiles of real lines (a 1x ``run`` ~1 s faster on JDK 25 than with
            the synthetic lines, issue 9).
        timeout_s: the training's limit, seconds.

    Returns:
        The seconds it took.

    Raises:
        RuntimeError: the training process failed or wrote no archive (its output is quoted).
    """
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    env = dict(os.environ, **{ARCHIVE_ENV: ""})  # the training must not map an old archive
    args = [sys.executable, "-m", "bq_platform.lib.spark_cds", "--train", str(partial)]
    done = subprocess.run(
        [*args, *(["--logs", str(logs)] if logs is not None else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(
            f"the Spark class archive was not written (training exit code {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-2000:]}"
        )
    os.replace(partial, path)
    return time.monotonic() - started


def _train(archive: Path, logs: Path | None) -> None:
    """Run a build in a session whose driver writes ``archive`` as it exits, then make it
    exit and wait for it: left to end with this process, a JDK 25 driver was seen to stop
    before it had written its AOT cache."""
    from dagster_pyspark.resources import spark_session_from_config

    from bq_platform.lib.build.hourly import build_hours
    from bq_platform.lib.storage.local import LocalObjectStore
    from bq_platform.lib.build.spark import ensure_local_spark_env, spark_config

    ensure_local_spark_env()
    config = spark_config("local[2]", shuffle_partitions=2)
    flag = "-XX:AOTCacheOutput" if uses_bundled_jdk() else "-XX:ArchiveClassesAtExit"
    dump = _path_option(flag, archive)
    if dump is None:
        raise ValueError(f"the archive's path must hold no quote or backslash: {archive}")
    config["spark.driver.extraJavaOptions"] += f" {dump}"
    spark = spark_session_from_config(config)  # as the Dagster resource starts its session
    with tempfile.TemporaryDirectory() as work:
        store = LocalObjectStore(Path(work) / "lake")
        hours = _land_training_logs(store, Path(work), logs)
        for round_ in range(TRAINING_ROUNDS):
            build_hours(spark, store, hours, attempt_id=f"cds-training-{round_}", visitor_key="k")
    gateway = spark.sparkContext._gateway
    spark.stop()
    _exit_jvm(gateway)


def _land_training_logs(store: "ObjectStore", work: Path, logs: Path | None) -> list[dt.datetime]:
    """Land the training's input into ``store``; returns its UTC hours, in order."""
    from bq_platform.lib.landing.producer.land import land_file
    from bq_platform.lib.landing.producer.tree import land_site, site_folders

    if logs is not None:  # as `bq-platform land-tree DIR` lands it
        landed = [land_site(lambda: store, f, None).landed for f in site_folders(logs)]
        return sorted({file.manifest.hour for site in landed for file in site})
    log_file = work / "training.log.gz"
    stamp = _TRAINING_HOUR.strftime("%d/%b/%Y:%H:%M:%S +0000")
    lines = [
        f'host{i}.example.com - - [{stamp}] "GET /page{i % 7}.html HTTP/1.0" 200 {i}'
        for i in range(200)
    ]
    lines += [
        f'h.example.com - - [{stamp}] "GET /a.gif HTTP/1.0" 200 10 "http://r/" "agent"',
        "a line that is not a log line",
    ]
    log_file.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    land_file(store, "training.example.com", log_file)
    return [_TRAINING_HOUR]


def _exit_jvm(gateway: "JavaGateway") -> None:
    """``System.exit(0)`` in the driver JVM (its exit hooks write the archive), then wait for
    the process. The call cannot return (the JVM is gone), so it runs on a thread whose error
    is dropped."""
    import threading

    def exit_() -> None:
        try:
            gateway.jvm.java.lang.System.exit(0)
        except Exception:  # noqa: BLE001 - the connection dies with the JVM, as intended
            pass

    threading.Thread(target=exit_, daemon=True).start()
    gateway.proc.wait(timeout=600)


def main(argv: list[str]) -> int:
    """``python -m bq_platform.lib.spark_cds [PATH] [--logs DIR]``: create the archive
    (default :func:`archive_path`), trained on the landing tree ``DIR`` when it exists; logs
    one line and exits 0 even when it fails, since the archive only saves time. ``--train FILE
    [--logs DIR]`` is the child process of :func:`create_archive`."""
    parser = argparse.ArgumentParser(prog="python -m bq_platform.lib.spark_cds")
    parser.add_argument("path", nargs="?", type=Path, help="the archive (default: this venv's)")
    parser.add_argument("--logs", type=Path, help="a landing tree DIR/<site>/<files> to train on")
    parser.add_argument("--train", type=Path, help=argparse.SUPPRESS)  # create_archive's child
    args = parser.parse_args(argv)
    logs = args.logs
    if args.train is not None:
        _train(args.train, logs)
        sys.stdout.flush()
        os._exit(0)  # not PySpark's exit handlers: the JVM they would stop is gone
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = args.path if args.path is not None else archive_path()
    if path is None:
        _LOG.info("Spark class archive: off ($%s is empty)", ARCHIVE_ENV)
        return 0
    if logs is not None and not logs.is_dir():
        _LOG.info("Spark class archive: no %s, trained on synthetic lines", logs)
        logs = None
    try:
        seconds = create_archive(path, logs=logs)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        _LOG.warning("Spark class archive not created, runs start ~1.5 s slower: %s", error)
        return 0
    _LOG.info("Spark class archive: %s (%d MiB, %.0f s)", path, path.stat().st_size >> 20, seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
