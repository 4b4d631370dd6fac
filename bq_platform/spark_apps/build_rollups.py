"""The daily rollups' main file for ``spark-submit``, Dataproc PySpark jobs and Dagster Pipes.

It runs :func:`bq_platform.lib.daily_build.build.build_rollups` outside the Dagster process, on
the lake of the environment (:mod:`bq_platform.settings`)::

    spark-submit --master spark://host:7077 bq_platform/spark_apps/build_rollups.py \\
        1995-08-01 --hours 1995-08-01T00,1995-08-01T01,... --fingerprint <hex>

Arguments: the UTC day, ``--hours`` (the hours published into ``pageviews$YYYYMMDD``,
comma-separated ``YYYY-MM-DDTHH``), ``--fingerprint`` (the rollups' fingerprint the launcher
computed from those hours' manifests; the build refuses other content) and ``--error-file``
(for the launcher). Output: progress on stderr, then one JSON line on stdout (table -> rows);
under Dagster Pipes, progress goes to the run's log. Exit status: 0, built (or found built);
1, the build failed or the hours' content is not the fingerprint's; 2, bad arguments.
"""

import argparse
import datetime as dt
import json
import logging
import sys
from collections.abc import Sequence

import click

from bq_platform import settings
from bq_platform.lib.core.hours import parse_hour
from bq_platform.lib.core.manifest import read_hour_manifests
from bq_platform.lib.daily_build.build import build_rollups
from bq_platform.lib.daily_build.rollup_files import RollupInputs, rollup_inputs
from bq_platform.lib.daily_build.rollups import ROLLUP_VERSION
from bq_platform.lib.hourly_build.application import (
    PIPES_ARGUMENTS,
    own_session,
    pipes_context,
    write_error,
)
from bq_platform.lib.hourly_build.spark import spark_config
from bq_platform.lib.storage.base import ObjectStore

_LOG = logging.getLogger("bq_platform.spark_apps.build_rollups")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """``day``, ``hours``, ``fingerprint``, ``error_file``; SystemExit 2 for a bad option."""
    parser = argparse.ArgumentParser(
        prog="build_rollups", description="Build the daily rollups of one published UTC day."
    )
    parser.add_argument("day", help="UTC day, YYYY-MM-DD")
    parser.add_argument("--hours", required=True, help="comma-separated YYYY-MM-DDTHH")
    parser.add_argument("--fingerprint", required=True, help="the rollups' content fingerprint")
    parser.add_argument("--error-file", help="on failure, write {error, message} here as JSON")
    for name in PIPES_ARGUMENTS:  # read by dagster_pipes itself
        parser.add_argument(name, help=argparse.SUPPRESS)
    return parser.parse_args(list(argv))


def resolve_inputs(store: ObjectStore, day: str, hours: str, fingerprint: str) -> RollupInputs:
    """The rollups' inputs from the named hours' manifests.

    Raises:
        ValueError: a malformed day or hour, an hour never built, or content whose fingerprint
            is not ``fingerprint`` (an hour was built again since the launch was decided).
    """
    the_day = dt.date.fromisoformat(day)
    wanted = [parse_hour(label) for label in hours.split(",") if label]
    found = read_hour_manifests(store, wanted)
    missing = [h for h, m in found.items() if m is None]
    if missing:
        raise ValueError(f"hours without a manifest: {', '.join(map(str, missing))}")
    inputs = rollup_inputs(the_day, {h: m for h, m in found.items() if m}, ROLLUP_VERSION)
    if inputs.fingerprint != fingerprint:
        raise ValueError(
            f"the hours of {day} give rollup content {inputs.fingerprint[:12]}, not "
            f"{fingerprint[:12]}: an hour was built again; publish the day again"
        )
    return inputs


def main(argv: Sequence[str] | None = None) -> int:
    """Build the rollups; the exit status (module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    with pipes_context(argv, settings.gcp_project()) as pipes:
        log = pipes.log if pipes is not None else _LOG
        try:
            store = settings.object_store(settings.env_name())
            inputs = resolve_inputs(store, args.day, args.hours, args.fingerprint)
        except ValueError as exc:
            log.error("build_rollups: %s", exc)
            if args.error_file:
                write_error(args.error_file, exc)
            return 2
        config = spark_config(
            settings.spark_master(),
            verbose=settings.spark_verbose(),
            driver_memory=settings.spark_driver_memory(),
        )
        try:
            with own_session(config) as session:
                built = build_rollups(session, store, inputs, log=log)
        except Exception as exc:  # noqa: BLE001 - printed once, with its traceback
            log.exception("rollups of %s failed", args.day)
            if args.error_file:
                write_error(args.error_file, exc)
            return 1
        result = {table: files.rows for table, files in built.items()}
        if pipes is None:
            click.echo(json.dumps(result))
        else:
            log.info("rollups of %s: %s", args.day, result)
        return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("bq_platform").setLevel(logging.INFO)
    sys.exit(main())
