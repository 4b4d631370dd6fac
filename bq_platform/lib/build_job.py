"""The hourly build as a Spark application of its own: ``spark-submit``, a Dataproc PySpark job,
or Dagster Pipes (issue 9, "A real cluster"; docs/production.md, "The build on a Spark cluster").

The same :func:`bq_platform.lib.build.build_hours` as the ``pageview_files`` asset, with the
same settings, run outside the Dagster process::

    spark-submit --master spark://host:7077 \\
        --conf spark.driver.extraJavaOptions=-XX:-DontCompileHugeMethods \\
        --conf spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods \\
        [--py-files bq_platform-<version>-py3-none-any.whl] \\
        bq_platform/spark_apps/build_hours.py 1995-08-01T00 1995-08-01T23

    python -m bq_platform.lib.build_job 1995-08-01T00 1995-08-01T23   # PySpark starts the JVM

Arguments: the first and the last UTC hour (``YYYY-MM-DDTHH``, both included; the last defaults
to the first) and ``--attempt-id`` (``[A-Za-z0-9_-]+``; default ``submit-<UTC time>-<random>``):
the outputs go under that attempt's prefix and the hour manifests name them, so a re-run is a
new attempt that replaces the hours whole, as a Dagster retry does.

Settings come from the environment, as for ``bq-platform`` (:mod:`bq_platform.lib.environment`):
``BQ_PLATFORM_ENV`` and its lake (``BQ_PLATFORM_HOME``, or ``BQ_PLATFORM_GCP_PROJECT`` and
``BQ_PLATFORM_BUCKET``), ``BQ_PLATFORM_VISITOR_KEY`` (required in ``prod``: the visitor IDs and the
sample must be the Dagster runs' own), ``BQ_PLATFORM_FIRST_HOUR`` and
``BQ_PLATFORM_LINES_PER_PASS``. Under ``spark-submit`` the session is the one it configured
(:func:`job_session`).

Output: progress on stderr (Python logging, INFO), then one JSON line on stdout
(:func:`summary`; not under Pipes, where it is the materialization's metadata), the last line
this process writes (``spark-submit`` merges a Python application's stderr into its stdout;
Spark's own log4j lines go to its stderr). Exit status:

- 0: the hours are built. An hour that does not balance is built too (its manifest says so,
  as the asset's does): each problem is logged as an ERROR and listed in the summary's
  ``problems``, and the accounting check and the daily publish hold it, as for a build in the
  Dagster process;
- 1: the build raised (a :class:`~bq_platform.lib.landing.LandingError` names the landed file
  and what to do; no hour manifest is written then);
- 2: bad arguments or settings, named.

Under Dagster Pipes (launched by ``PipesDataprocJobClient``, which adds
``--dagster-pipes-context`` / ``--dagster-pipes-messages`` to the job's arguments, or by
``PipesSubprocessClient``, which sets ``DAGSTER_PIPES_CONTEXT``):

- the attempt ID is the asset's own, ``<run ID>-<retry number>``;
- progress goes to the Dagster run's log, and the summary is reported as a materialization's
  metadata (an asset that returns the client's ``get_results()`` materializes each partition of
  its run with it; the shipped ``pageview_files`` reads the hour manifests instead:
  :mod:`bq_platform.defs.hourly_build`);
- messages go back through GCS when the orchestrator's reader is ``PipesGCSMessageReader`` (its
  parameters name a bucket), else through Pipes' default file channel;
- the asset passes ``context.partition_key_range``'s start and end as the two hours. Without
  them the job takes the run's partition, but for a run of several partitions (a backfill's
  day) Dagster 1.13 sends the external process no partition at all
  (``build_external_execution_context_data`` in ``dagster/_core/pipes/context.py`` fills the
  range only when ``context.has_partition_key``).
"""

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from bq_platform.lib import environment
from bq_platform.lib.accounting import accounting_problems
from bq_platform.lib.hour_manifests import sum_counts
from bq_platform.lib.hours import hour_label, hours_between, parse_hour
from bq_platform.lib.layout import attempt_prefix
from bq_platform.lib.manifest import HourManifest
from bq_platform.lib.objectstore.base import ObjectStore
from bq_platform.lib.partition_window import HourWindow

_LOG = logging.getLogger("bq_platform.lib.build_job")  # also when run as __main__
#: Pipes' CLI arguments (``dagster_pipes.DAGSTER_PIPES_CONTEXT_CLI_ARGUMENT`` and the messages
#: one): accepted and left to ``dagster_pipes``, which reads them from ``sys.argv`` itself.
PIPES_ARGUMENTS = ("--dagster-pipes-context", "--dagster-pipes-messages")
#: Runtime SQL settings of :func:`bq_platform.lib.spark.spark_config` that a ``spark-submit``
#: session gets unless its launch set them: UTC session time, few shuffle partitions, AQE.
_RUNTIME_SQL = (
    "spark.sql.session.timeZone",
    "spark.sql.shuffle.partitions",
    "spark.sql.adaptive.enabled",
    "spark.sql.sources.partitionOverwriteMode",
)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The job's arguments: ``first``/``last`` (hour strings or None) and ``attempt_id``.

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
    for name in PIPES_ARGUMENTS:
        parser.add_argument(name, help=argparse.SUPPRESS)
    return parser.parse_args(list(argv))


def hour_range(first: str, last: str | None) -> list[dt.datetime]:
    """The UTC hours ``first`` .. ``last`` (both included; ``last`` None: ``first`` alone).

    Raises:
        ValueError: if a bound is not an hour (:func:`~bq_platform.lib.hours.parse_hour`), or
            ``last`` is before ``first``.
    """
    start = parse_hour(first)
    end = parse_hour(last) if last else start
    if end < start:
        raise ValueError(f"the last hour {hour_label(end)} is before the first {hour_label(start)}")
    return hours_between(start, end + dt.timedelta(hours=1))


def default_attempt_id(now: dt.datetime | None = None) -> str:
    """``submit-<YYYYMMDDTHHMMSS>Z-<8 hex>``: unique per submission (time in UTC, 32 random
    bits), valid for :func:`~bq_platform.lib.layout.attempt_prefix`."""
    now = now or dt.datetime.now(dt.UTC)
    return f"submit-{now.astimezone(dt.UTC):%Y%m%dT%H%M%S}Z-{secrets.token_hex(4)}"


def job_session() -> Any:
    """The build's SparkSession (``pyspark.sql.SparkSession``).

    Under ``spark-submit`` (PySpark then finds ``PYSPARK_GATEWAY_PORT``, the JVM spark-submit
    started: ``pyspark/java_gateway.py``), the session takes the launch's master and settings;
    the runtime SQL settings of :func:`~bq_platform.lib.spark.spark_config` it did not set are
    set after. Started as plain Python, PySpark starts the JVM with the whole
    :func:`~bq_platform.lib.spark.spark_config` of ``BQ_PLATFORM_SPARK_MASTER`` (default
    ``local[*]``), as the Dagster resource does.
    """
    from pyspark.sql import SparkSession

    from bq_platform.lib.spark import ensure_local_spark_env, spark_config

    master = os.environ.get("BQ_PLATFORM_SPARK_MASTER", "local[*]")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        if master.startswith("local"):
            ensure_local_spark_env()
        builder = SparkSession.builder
        for key, value in spark_config(master).items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    session = SparkSession.builder.getOrCreate()
    launched = session.sparkContext.getConf()
    ours = spark_config(launched.get("spark.master", master))
    for key in _RUNTIME_SQL:
        if not launched.contains(key):
            session.conf.set(key, ours[key])
    return session


def summary(manifests: Sequence[HourManifest], attempt_id: str, seconds: float) -> dict[str, Any]:
    """What the job prints and reports: ``attempt_id``, ``hours``, ``first_hour``/``last_hour``
    (``YYYY-MM-DDTHH``), ``rows`` (pageviews), ``sample_rows``, the identity's counts summed
    over the hours' sites (``source_lines``, ``non_page_hits``, ``rejected``, ``duplicates``,
    ``out_of_window``: lines), ``problems`` (one string per problem of any hour:
    :func:`~bq_platform.lib.accounting.accounting_problems`) and ``duration_seconds`` (the
    session's start included). The hour manifests themselves are in the object store
    (:func:`~bq_platform.lib.layout.hour_manifest_key`)."""
    counts = sum_counts([c for m in manifests for c in m.counts])
    return {
        "attempt_id": attempt_id,
        "hours": len(manifests),
        "first_hour": hour_label(manifests[0].hour) if manifests else None,
        "last_hour": hour_label(manifests[-1].hour) if manifests else None,
        "rows": sum(m.rows for m in manifests),
        "sample_rows": sum(m.sample_rows for m in manifests),
        "source_lines": sum(c.source_lines for m in manifests for c in m.counts),
        **{k: v for k, v in counts.items() if k != "pageviews"},
        "problems": [p for m in manifests for p in accounting_problems(m)],
        "duration_seconds": round(seconds, 2),
    }


@contextlib.contextmanager
def pipes_context(argv: Sequence[str]) -> Iterator[Any]:
    """The ``dagster_pipes.PipesContext`` when Dagster launched this process, else None.

    Parameters come from ``--dagster-pipes-context`` in ``argv`` (``PipesDataprocJobClient``)
    or the ``DAGSTER_PIPES_CONTEXT`` variable (``PipesSubprocessClient``); messages go to GCS
    (``PipesGCSMessageWriter``, with a client of ``BQ_PLATFORM_GCP_PROJECT``, or of the
    ``STORAGE_EMULATOR_HOST`` emulator: :func:`~bq_platform.lib.objectstore.gcs.gcs_client`)
    when the orchestrator's message reader names a bucket, else through Pipes' default channel.
    """
    from_cli = PIPES_ARGUMENTS[0] in argv
    if not from_cli and "DAGSTER_PIPES_CONTEXT" not in os.environ:
        yield None
        return
    import dagster_pipes as pipes

    loader = pipes.PipesCliArgsParamsLoader() if from_cli else pipes.PipesEnvVarParamsLoader()
    writer: pipes.PipesMessageWriter = pipes.PipesDefaultMessageWriter()
    if "bucket" in loader.load_messages_params():
        from bq_platform.lib.objectstore.gcs import gcs_client

        client = gcs_client(os.environ.get("BQ_PLATFORM_GCP_PROJECT") or None)
        writer = pipes.PipesGCSMessageWriter(client=client)
    with pipes.open_dagster_pipes(params_loader=loader, message_writer=writer) as context:
        yield context


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job (see the module docstring); returns the exit status.

    Raises:
        SystemExit: status 2 for bad arguments or settings.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("bq_platform").setLevel(logging.INFO)  # py4j's INFO lines stay out
    with pipes_context(argv) as pipes:
        try:
            first, last = args.first, args.last
            if first is None and pipes is not None and pipes.is_partition_step:
                first, last = pipes.partition_key_range.start, pipes.partition_key_range.end
            if first is None:
                raise ValueError("give the first UTC hour (YYYY-MM-DDTHH)")
            hours = hour_range(first, last)
            attempt_id = args.attempt_id or (
                f"{pipes.run_id}-{pipes.retry_number}" if pipes is not None else None
            )
            attempt_id = attempt_id or default_attempt_id()
            attempt_prefix(attempt_id)  # validates
            env = environment.env_name()
            key = environment.visitor_key(env)  # first: no storage client without a key
            store = environment.object_store(env)
            settings = environment.pipeline_settings(env)
            window = HourWindow.until_now(environment.first_hour())
        except ValueError as exc:
            print(f"build_hours: error: {exc}", file=sys.stderr)
            if pipes is not None:  # the Dagster run's log says why, too
                pipes.log.error(f"build_hours: {exc}")
            return 2
        log = pipes.log if pipes is not None else _LOG
        return _build(log, pipes, store, hours, attempt_id, key, window, settings, args.error_file)


def _build(
    log: Any,
    pipes: Any,
    store: ObjectStore,
    hours: list[dt.datetime],
    attempt_id: str,
    key: str,
    window: HourWindow,
    settings: dict[str, Any],
    error_file: str | None,
) -> int:
    """Start the session, build, print the summary and report it under Pipes; on a failure,
    write ``error_file`` (:func:`write_error`) when given."""
    from bq_platform.lib.build import build_hours
    from bq_platform.lib.build_read import DEFAULT_LINES_PER_PASS
    from bq_platform.lib.landing import LandingError

    started = time.monotonic()
    sessions: list[Any] = []

    def session() -> Any:  # started once the landed files are verified; none if none landed
        if not sessions:
            sessions.append(job_session())
        return sessions[0]

    try:
        manifests = build_hours(
            session,
            store,
            hours,
            attempt_id=attempt_id,
            visitor_key=key,
            window=window,
            log=log,
            lines_per_pass=settings.get("lines_per_pass", DEFAULT_LINES_PER_PASS),
        )
    except LandingError as exc:  # names the file and what to do: no traceback
        if error_file:  # the launcher raises it: printed once, there
            write_error(error_file, exc)
        else:
            log.error("build %s failed: %s", attempt_id, exc)
        return 1
    except Exception as exc:  # noqa: BLE001 - printed once, with its traceback
        log.exception("build %s failed", attempt_id)
        if error_file:
            write_error(error_file, exc)
        return 1
    finally:
        for spark in sessions:
            spark.stop()
    result = summary(manifests, attempt_id, time.monotonic() - started)
    for problem in result["problems"]:
        log.error("accounting does not balance: %s", problem)
    if pipes is None:  # under Pipes the summary is the materialization's metadata instead
        print(json.dumps(result), flush=True)
    else:
        pipes.report_asset_materialization(
            metadata={k: v for k, v in result.items() if k != "problems"}
            | {"problems": {"raw_value": result["problems"], "type": "json"}}
        )
    return 0


def write_error(path: str, exc: BaseException) -> None:
    """Write ``{"error": <exception class name>, "message": str(exc)}`` to the local file
    ``path``: how the launcher on the same machine (``defs/hourly_build.SparkSubmitBuild``)
    learns that a landing fault failed the build, which Dagster must not retry; Pipes' client
    raises on the exit status before its messages can be read."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"error": type(exc).__name__, "message": str(exc)}, handle)


def read_error(path: str) -> dict[str, str] | None:
    """What :func:`write_error` wrote to ``path``, or None (no such file, or not its JSON)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not {"error", "message"} <= data.keys():
        return None
    return {"error": str(data["error"]), "message": str(data["message"])}


if __name__ == "__main__":
    sys.exit(main())
