"""The local Spark driver's class-data sharing (CDS) archive: Spark's classes, pre-parsed.

A JVM spends seconds of a cold build loading, parsing and verifying the classes of Spark's
jars (Spark, Hadoop, Parquet, Janino, ...). JDK 13+ can write every class a JVM loaded from its
class path into a *dynamic archive* when it exits (``-XX:ArchiveClassesAtExit=FILE``, JEP 350),
and a later JVM with the same JDK and class path maps that file instead
(``-XX:SharedArchiveFile=FILE``): docs.oracle.com/en/java/javase/17/vm/class-data-sharing.html.

- :func:`create_archive` writes the archive once per virtual environment (``make install``
  calls ``python -m bq_platform.lib.spark_cds``): it runs a small build (:func:`_train`: the
  landing, transform, cache, counts and Parquet writes of a few lines) in a child process whose
  driver JVM dumps its classes at exit, then moves the file into place atomically.
- :func:`archive_options` gives the driver options that use it; :func:`bq_platform.lib.spark.
  spark_config` adds them for local masters (the driver runs the tasks there). A missing
  archive adds nothing; one the JVM cannot use (another JDK build or class path) is ignored by
  the JVM, quietly (``-Xlog:cds*=off``: HotSpot would print a warning on stdout).

Measured (issue 9, docs/PERFORMANCE.md): with the archive, the session start-up took 2.4-2.5 s
against 3.9-4.1 s, and a cold build of the 1x bench's 72 hours (2.04 M lines, ``local[2]``)
31.8-32.8 s against 33.2-36.3 s (three JVMs each, alternating). The archive is ~190 MB.
"""

import datetime as dt
import gzip
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Environment override of the archive's path; an empty value turns the archive off.
ARCHIVE_ENV = "BQ_PLATFORM_SPARK_CDS_ARCHIVE"
#: HotSpot's CDS log tags, silenced: an archive it cannot map is then ignored without output.
QUIET_CDS = "-Xlog:cds*=off"
_TRAINING_HOUR = dt.datetime(1995, 8, 1, 12, tzinfo=dt.UTC)
_LOG = logging.getLogger(__name__)


def archive_path() -> Path | None:
    """Where the archive of this virtual environment lives (``$BQ_PLATFORM_SPARK_CDS_ARCHIVE``,
    default ``<sys.prefix>/share/bq_platform/spark-driver.jsa``); None when turned off."""
    configured = os.environ.get(ARCHIVE_ENV)
    if configured is not None:
        return Path(configured) if configured.strip() else None
    return Path(sys.prefix) / "share" / "bq_platform" / "spark-driver.jsa"


def archive_options(path: Path | None = None) -> list[str]:
    """JVM options that map the archive at ``path`` (default :func:`archive_path`), or ``[]``
    when there is no such file (or its path holds a quote or backslash). A path with blanks is
    quoted for Spark's option string (``spark.driver.extraJavaOptions``)."""
    path = path if path is not None else archive_path()
    if path is None or not path.is_file():
        return []
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


def create_archive(path: Path, *, timeout_s: float = 600.0) -> float:
    """Write the archive at ``path`` (replacing any) from a small training build.

    The training runs in a child Python process (its driver JVM writes the archive when it
    exits, after that process ends); the file appears at ``path`` only when complete.

    Returns:
        The seconds it took.

    Raises:
        RuntimeError: the training process failed or wrote no archive (its output is quoted).
    """
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    env = dict(os.environ, **{ARCHIVE_ENV: ""})  # the training must not map an old archive
    done = subprocess.run(
        [sys.executable, "-m", "bq_platform.lib.spark_cds", "--train", str(partial)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    # The driver JVM writes the archive as it exits, and it holds the captured pipes (PySpark
    # starts it with the child's stdout and stderr) until then: the file is complete here.
    if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(
            f"the Spark class archive was not written (training exit code {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-2000:]}"
        )
    os.replace(partial, path)
    return time.monotonic() - started


def _train(archive: Path) -> None:
    """Run a small build in a session whose driver writes ``archive`` at exit."""
    from dagster_pyspark.resources import spark_session_from_config

    from bq_platform.lib.build import build_hours
    from bq_platform.lib.landing import land_file
    from bq_platform.lib.objectstore.local import LocalObjectStore
    from bq_platform.lib.spark import ensure_local_spark_env, spark_config

    ensure_local_spark_env()
    config = spark_config("local[2]", shuffle_partitions=2)
    dump = _path_option("-XX:ArchiveClassesAtExit", archive)
    if dump is None:
        raise ValueError(f"the archive's path must hold no quote or backslash: {archive}")
    config["spark.driver.extraJavaOptions"] += f" {dump}"
    spark = spark_session_from_config(config)  # as the Dagster resource starts its session
    with tempfile.TemporaryDirectory() as work:
        log_file = Path(work) / "training.log.gz"
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
        store = LocalObjectStore(Path(work) / "lake")
        land_file(store, "training.example.com", log_file)
        build_hours(spark, store, [_TRAINING_HOUR], attempt_id="cds-training", visitor_key="k")
    spark.stop()


def main(argv: list[str]) -> int:
    """``python -m bq_platform.lib.spark_cds [PATH]``: create the archive (default
    :func:`archive_path`); logs one line and exits 0 even when it fails, since the archive only
    saves time. ``--train FILE`` is the child process of :func:`create_archive`."""
    if argv[:1] == ["--train"]:
        _train(Path(argv[1]))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = Path(argv[0]) if argv else archive_path()
    if path is None:
        _LOG.info("Spark class archive: off ($%s is empty)", ARCHIVE_ENV)
        return 0
    try:
        seconds = create_archive(path)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        _LOG.warning("Spark class archive not created, runs start ~1.5 s slower: %s", error)
        return 0
    _LOG.info("Spark class archive: %s (%d MiB, %.0f s)", path, path.stat().st_size >> 20, seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
