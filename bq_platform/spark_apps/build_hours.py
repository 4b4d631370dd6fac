"""The hourly build's main file for ``spark-submit``, Dataproc PySpark jobs and Dagster Pipes.

It runs :func:`bq_platform.lib.hourly_build.build.build_hours` outside the Dagster process with the
settings a Dagster run of the environment would use (:mod:`bq_platform.settings`; the visitor
key is required in ``prod``)::

    spark-submit --master spark://host:7077 \\
        --conf spark.driver.extraJavaOptions=-XX:-DontCompileHugeMethods \\
        --conf spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods \\
        [--py-files bq_platform-<version>-py3-none-any.whl] \\
        bq_platform/spark_apps/build_hours.py 1995-08-01T00 1995-08-01T23

    python -m bq_platform.spark_apps.build_hours 1995-08-01T00   # PySpark starts the JVM

Arguments: the first and last UTC hour (``YYYY-MM-DDTHH``, both included; the last defaults to
the first), ``--attempt-id`` (default ``submit-<UTC time>-<random>``; a re-run is a new attempt
that replaces the hours whole) and ``--error-file`` (for the launcher, ``SparkSubmitBuild``).

Output: progress on stderr, then, as the last line, one JSON summary on stdout
(:func:`~bq_platform.lib.hourly_build.application.summary`). Exit status: 0, built (an hour that
does
not balance too: each problem is logged as an ERROR, and the publish holds the hour); 1, the
build raised (a LandingError names the landed file; no hour manifest is written); 2, bad
arguments or settings. Under Dagster Pipes, progress goes to the run's log and the summary is
a materialization's metadata.
"""

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

import click

from bq_platform import settings
from bq_platform.lib.core.layout import attempt_prefix
from bq_platform.lib.core.manifest import LandingError
from bq_platform.lib.core.partition_window import HourWindow
from bq_platform.lib.hourly_build.application import (
    PIPES_ARGUMENTS,
    BuildJob,
    default_attempt_id,
    hour_range,
    own_session,
    pipes_context,
    run_job,
    summary,
    write_error,
)
from bq_platform.lib.hourly_build.read import DEFAULT_LINES_PER_PASS
from bq_platform.lib.hourly_build.spark import spark_config

_LOG = logging.getLogger("bq_platform.spark_apps.build_hours")  # also when run as __main__


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """``first``, ``last``, ``attempt_id``, ``error_file``; SystemExit 2 for an unknown option."""
    parser = argparse.ArgumentParser(
        prog="build_hours", description="Build the pageview files of a range of UTC hours."
    )
    parser.add_argument("first", nargs="?", help="first UTC hour, YYYY-MM-DDTHH")
    parser.add_argument("last", nargs="?", help="last UTC hour (included); default: first")
    parser.add_argument("--attempt-id", help="[A-Za-z0-9_-]+; default submit-<UTC time>-<hex>")
    parser.add_argument(
        "--error-file",
        help="on a failed build, write {error, message} here as JSON for the launcher (a landing "
        "fault is then not logged: the launcher raises it)",
    )
    for name in PIPES_ARGUMENTS:  # read by dagster_pipes itself
        parser.add_argument(name, help=argparse.SUPPRESS)
    return parser.parse_args(list(argv))


def resolve_job(
    first: str | None, last: str | None, attempt_id: str | None, pipes: Any = None
) -> BuildJob:
    """The job the arguments ask for, with a Dagster run's lake, visitor key, first hour,
    lines per pass and traffic classification. Without hours or attempt ID: the Pipes run's
    partition range and ``<run ID>-<retry number>``, else :func:`default_attempt_id`.

    Raises:
        ValueError: naming what is wrong (a missing or malformed hour or attempt ID, a bad
            variable); the visitor key is checked before any storage client is built.
    """
    if first is None and pipes is not None and pipes.is_partition_step:
        first, last = pipes.partition_key_range.start, pipes.partition_key_range.end
    if first is None:
        raise ValueError("give the first UTC hour (YYYY-MM-DDTHH)")
    hours = hour_range(first, last)
    if attempt_id is None and pipes is not None:
        attempt_id = f"{pipes.run_id}-{pipes.retry_number}"
    attempt_id = attempt_id or default_attempt_id()
    attempt_prefix(attempt_id)  # validates
    env = settings.env_name()
    key = settings.visitor_key(env)
    store = settings.object_store(env)
    pipeline = settings.pipeline_settings(env)
    return BuildJob(
        hours=hours,
        attempt_id=attempt_id,
        store=store,
        visitor_key=key,
        window=HourWindow.until_now(settings.first_hour()),
        lines_per_pass=pipeline.get("lines_per_pass", DEFAULT_LINES_PER_PASS),
        thresholds=settings.classification_thresholds(),
    )


def session_config() -> dict[str, Any]:
    """The Spark settings of the application's own session (``BQ_PLATFORM_SPARK_MASTER``,
    default ``local[*]``); under ``spark-submit`` only the runtime SQL settings apply."""
    return spark_config(
        settings.spark_master(),
        verbose=settings.spark_verbose(),
        driver_memory=settings.spark_driver_memory(),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the build; the exit status (module docstring), or SystemExit 2 for an unknown option."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    with pipes_context(argv, settings.gcp_project()) as pipes:
        log = pipes.log if pipes is not None else _LOG
        try:
            job = resolve_job(args.first, args.last, args.attempt_id, pipes)
        except ValueError as exc:  # names the argument or variable: no traceback
            log.error("build_hours: %s", exc)
            return 2
        started = time.monotonic()
        try:
            with own_session(session_config()) as session:
                manifests = run_job(job, log, session)
        except LandingError as exc:  # names the file and what to do: no traceback
            if args.error_file:  # the launcher raises it: printed once, there
                write_error(args.error_file, exc)
            else:
                log.error("build %s failed: %s", job.attempt_id, exc)
            return 1
        except Exception as exc:  # noqa: BLE001 - printed once, with its traceback
            log.exception("build %s failed", job.attempt_id)
            if args.error_file:
                write_error(args.error_file, exc)
            return 1
        result = summary(manifests, job.attempt_id, time.monotonic() - started)
        for problem in result["problems"]:
            log.error("accounting does not balance: %s", problem)
        if pipes is None:  # the program's result, on stdout; under Pipes it is the metadata
            click.echo(json.dumps(result))
        else:
            pipes.report_asset_materialization(
                metadata={k: v for k, v in result.items() if k != "problems"}
                | {"problems": {"raw_value": result["problems"], "type": "json"}}
            )
        return 0


def configure_logging() -> None:
    """This package's INFO lines and everyone's warnings, on stderr; only when run as a
    program, so :func:`main` leaves a calling process's logging alone."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("bq_platform").setLevel(logging.INFO)


if __name__ == "__main__":
    configure_logging()
    sys.exit(main())
