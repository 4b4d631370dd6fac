"""The hourly build's main file for ``spark-submit``, Dataproc PySpark jobs and Dagster Pipes.

The same :func:`bq_platform.lib.build.hourly.build_hours` as the ``pageview_files`` asset, with the
same settings (:mod:`bq_platform.lib.build.application`), run outside the Dagster process::

    spark-submit --master spark://host:7077 \\
        --conf spark.driver.extraJavaOptions=-XX:-DontCompileHugeMethods \\
        --conf spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods \\
        [--py-files bq_platform-<version>-py3-none-any.whl] \\
        bq_platform/spark_apps/build_hours.py 1995-08-01T00 1995-08-01T23

    python -m bq_platform.spark_apps.build_hours 1995-08-01T00   # PySpark starts the JVM

Its path: ``python -c 'import bq_platform.spark_apps.build_hours as m; print(m.__file__)'``.

Arguments: the first and the last UTC hour (``YYYY-MM-DDTHH``, both included; the last defaults
to the first), ``--attempt-id`` (``[A-Za-z0-9_-]+``; default ``submit-<UTC time>-<random>``:
the outputs go under that attempt's prefix and the hour manifests name them, so a re-run is a
new attempt that replaces the hours whole, as a Dagster retry does) and ``--error-file`` (for
the launcher, :class:`bq_platform.defs.pageviews.spark_build.SparkSubmitBuild`).

Output: progress on stderr (Python logging, INFO), then one JSON line on stdout
(:func:`~bq_platform.lib.build.application.summary`; not under Pipes, where it is a materialization's
metadata), the last line this process writes (``spark-submit`` merges a Python application's
stderr into its stdout; Spark's own log4j lines go to its stderr). Exit status:

- 0: the hours are built. An hour that does not balance is built too (its manifest says so, as
  the asset's does): each problem is logged as an ERROR and listed in the summary's
  ``problems``, and the accounting check and the daily publish hold it, as for a build in the
  Dagster process;
- 1: the build raised (a :class:`~bq_platform.lib.landing.producer.land.LandingError` names the landed file
  and what to do; no hour manifest is written then);
- 2: bad arguments or settings, named (argparse's usage error, or one ERROR line).

Under Dagster Pipes (launched by ``PipesDataprocJobClient``, which adds
``--dagster-pipes-context`` / ``--dagster-pipes-messages`` to the job's arguments, or by
``PipesSubprocessClient``, which sets ``DAGSTER_PIPES_CONTEXT``): progress goes to the Dagster
run's log and the summary is reported as a materialization's metadata (an asset that returns the
client's ``get_results()`` materializes each partition of its run with it; the shipped
``pageview_files`` reads the hour manifests instead: :mod:`bq_platform.defs.pageviews.spark_build`).
"""

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence

import click

from bq_platform.lib.build.application import (
    PIPES_ARGUMENTS,
    pipes_context,
    resolve_job,
    run_job,
    summary,
    write_error,
)
from bq_platform.lib.landing.producer.land import LandingError

_LOG = logging.getLogger("bq_platform.spark_apps.build_hours")  # also when run as __main__


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The arguments: ``first``/``last`` (hour strings or None), ``attempt_id`` and
    ``error_file`` (None when not given).

    Raises:
        SystemExit: status 2, with argparse's usage message, for an unknown option.
    """
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the build (see the module docstring); returns the exit status.

    Raises:
        SystemExit: status 2 for unknown options (argparse).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    with pipes_context(argv) as pipes:
        log = pipes.log if pipes is not None else _LOG
        try:
            job = resolve_job(args.first, args.last, args.attempt_id, pipes)
        except ValueError as exc:  # names the argument or variable: no traceback
            log.error("build_hours: %s", exc)
            return 2
        started = time.monotonic()
        try:
            manifests = run_job(job, log)
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
            click.echo(json.dumps(result))  # as bq-platform writes its output (cli/main.py)
        else:
            pipes.report_asset_materialization(
                metadata={k: v for k, v in result.items() if k != "problems"}
                | {"problems": {"raw_value": result["problems"], "type": "json"}}
            )
        return 0


def configure_logging() -> None:
    """The program's logging: this package's INFO lines and everyone's warnings, on stderr
    (py4j's INFO lines stay out). Only when run as a program: :func:`main` called in a process
    that has its own logging leaves it alone."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("bq_platform").setLevel(logging.INFO)


if __name__ == "__main__":
    configure_logging()
    sys.exit(main())
