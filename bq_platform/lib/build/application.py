"""The hourly build as a Spark application of its own: what ``spark_apps/build_hours.py`` (the
main file for ``spark-submit``, a Dataproc PySpark job or Dagster Pipes) runs, as plain functions
(issue 9, "A real cluster"; docs/production.md, "Dataproc, Pipes or ``spark-submit``").

- :func:`resolve_job`: the hours, the attempt ID and the settings a Dagster run would use, from
  the arguments and the environment (:mod:`bq_platform.settings`): ``BQ_PLATFORM_ENV``
  and its lake, ``BQ_PLATFORM_VISITOR_KEY`` (required in ``prod``: the visitor IDs and the
  sample must be the Dagster runs' own), ``BQ_PLATFORM_FIRST_HOUR``,
  ``BQ_PLATFORM_LINES_PER_PASS``;
- :func:`run_job`: the same :func:`bq_platform.lib.build.hourly.build_hours` as the ``pageview_files``
  asset, in the session :func:`job_session` gives (``spark-submit``'s own under it);
- :func:`summary`: what the application prints or reports;
- :func:`pipes_context`: the Dagster Pipes context when Dagster launched the process;
- :func:`write_error` / :func:`read_error`: how a landing fault reaches the launcher.

Under Dagster Pipes the attempt ID is the asset's own, ``<run ID>-<retry number>``. The asset
passes ``context.partition_key_range``'s start and end as the two hours: for a run of several
partitions (a backfill's day) Dagster 1.13 sends the external process no partition at all
(``build_external_execution_context_data`` in ``dagster/_core/pipes/context.py`` fills the range
only when ``context.has_partition_key``), so the run's partition is only a fallback.
"""

import contextlib
import dataclasses
import datetime as dt
import json
import os
import secrets
from collections.abc import Iterator, Sequence
from typing import Any

from bq_platform import settings as environment
from bq_platform.lib.core.accounting import accounting_problems
from bq_platform.lib.build.read import DEFAULT_LINES_PER_PASS
from bq_platform.lib.build.hour_manifests import sum_counts
from bq_platform.lib.core.hours import hour_label, hours_between, parse_hour
from bq_platform.lib.core.layout import attempt_prefix
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.core.partition_window import HourWindow

#: Pipes' CLI arguments (``dagster_pipes.DAGSTER_PIPES_CONTEXT_CLI_ARGUMENT`` and the messages
#: one): accepted and left to ``dagster_pipes``, which reads them from ``sys.argv`` itself.
PIPES_ARGUMENTS = ("--dagster-pipes-context", "--dagster-pipes-messages")
#: Runtime SQL settings of :func:`bq_platform.lib.build.spark.spark_config` that a ``spark-submit``
#: session gets unless its launch set them: UTC session time, few shuffle partitions, AQE.
_RUNTIME_SQL = (
    "spark.sql.session.timeZone",
    "spark.sql.shuffle.partitions",
    "spark.sql.adaptive.enabled",
    "spark.sql.sources.partitionOverwriteMode",
)


def hour_range(first: str, last: str | None) -> list[dt.datetime]:
    """The UTC hours ``first`` .. ``last`` (both included; ``last`` None: ``first`` alone).

    Raises:
        ValueError: if a bound is not an hour (:func:`~bq_platform.lib.core.hours.parse_hour`), or
            ``last`` is before ``first``.
    """
    start = parse_hour(first)
    end = parse_hour(last) if last else start
    if end < start:
        raise ValueError(f"the last hour {hour_label(end)} is before the first {hour_label(start)}")
    return hours_between(start, end + dt.timedelta(hours=1))


def default_attempt_id(now: dt.datetime | None = None) -> str:
    """``submit-<YYYYMMDDTHHMMSS>Z-<8 hex>``: unique per submission (time in UTC, 32 random
    bits), valid for :func:`~bq_platform.lib.core.layout.attempt_prefix`."""
    now = now or dt.datetime.now(dt.UTC)
    return f"submit-{now.astimezone(dt.UTC):%Y%m%dT%H%M%S}Z-{secrets.token_hex(4)}"


def job_session() -> Any:
    """The build's SparkSession (``pyspark.sql.SparkSession``).

    Under ``spark-submit`` (PySpark then finds ``PYSPARK_GATEWAY_PORT``, the JVM spark-submit
    started: ``pyspark/java_gateway.py``), the session takes the launch's master and settings;
    the runtime SQL settings of :func:`~bq_platform.lib.build.spark.spark_config` it did not set are
    set after. Started as plain Python, PySpark starts the JVM with the whole
    :func:`~bq_platform.lib.build.spark.spark_config` of ``BQ_PLATFORM_SPARK_MASTER`` (default
    ``local[*]``), as the Dagster resource does.
    """
    from pyspark.sql import SparkSession

    from bq_platform.lib.build.spark import prepare_driver_env, spark_config

    master = os.environ.get("BQ_PLATFORM_SPARK_MASTER", "local[*]")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        prepare_driver_env(master)
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
    :func:`~bq_platform.lib.core.accounting.accounting_problems`) and ``duration_seconds`` (the
    session's start included). The hour manifests themselves are in the object store
    (:func:`~bq_platform.lib.core.layout.hour_manifest_key`)."""
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
    ``STORAGE_EMULATOR_HOST`` emulator: :func:`~bq_platform.lib.storage.gcs.gcs_client`)
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
        from bq_platform.lib.storage.gcs import gcs_client

        client = gcs_client(os.environ.get("BQ_PLATFORM_GCP_PROJECT") or None)
        writer = pipes.PipesGCSMessageWriter(client=client)
    with pipes.open_dagster_pipes(params_loader=loader, message_writer=writer) as context:
        yield context


@dataclasses.dataclass(frozen=True)
class BuildJob:
    """One run of the application: ``hours`` (UTC, in order), ``attempt_id``, the lake
    ``store``, the ``visitor_key``, the partitions' ``window`` and ``lines_per_pass``."""

    hours: list[dt.datetime]
    attempt_id: str
    store: ObjectStore
    visitor_key: str
    window: HourWindow
    lines_per_pass: int


def resolve_job(
    first: str | None, last: str | None, attempt_id: str | None, pipes: Any = None
) -> BuildJob:
    """The job the arguments and the environment ask for.

    ``first``/``last``: hour strings (:func:`hour_range`); None: the Pipes run's partition
    range, when there is one. ``attempt_id``: None gives the Pipes run's ``<run ID>-<retry
    number>``, else :func:`default_attempt_id`. ``pipes``: the :func:`pipes_context`, or None.

    Raises:
        ValueError: naming what is wrong: no first hour, a malformed hour or attempt ID, an
            unknown ``BQ_PLATFORM_ENV``, a production variable unset (the visitor key is checked
            before any storage client is built), a malformed whole number.
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
    env = environment.env_name()
    key = environment.visitor_key(env)
    store = environment.object_store(env)
    settings = environment.pipeline_settings(env)
    return BuildJob(
        hours=hours,
        attempt_id=attempt_id,
        store=store,
        visitor_key=key,
        window=HourWindow.until_now(environment.first_hour()),
        lines_per_pass=settings.get("lines_per_pass", DEFAULT_LINES_PER_PASS),
    )


def run_job(job: BuildJob, log: Any, session: Any = None) -> list[HourManifest]:
    """Build ``job`` with :func:`~bq_platform.lib.build.hourly.build_hours`, logging to ``log``.

    ``session``: a function returning the SparkSession (the Dagster resource's, started
    beside the run), called once the landed files are verified; the caller owns it. None: this
    application's own (:func:`job_session`), started then (never when nothing landed) and
    stopped before this returns or raises.

    Raises:
        LandingError: a landed file is missing, disagrees with its manifest or is not gzip.
        Exception: whatever else the build raises.
    """
    from bq_platform.lib.build.hourly import build_hours

    started: list[Any] = []

    def own_session() -> Any:
        if not started:
            started.append(job_session())
        return started[0]

    try:
        return build_hours(
            session or own_session,
            job.store,
            job.hours,
            attempt_id=job.attempt_id,
            visitor_key=job.visitor_key,
            window=job.window,
            log=log,
            lines_per_pass=job.lines_per_pass,
        )
    finally:
        for spark in started:
            spark.stop()


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
