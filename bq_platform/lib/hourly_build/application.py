"""The hourly build as a Spark application of its own: the parts of
:mod:`bq_platform.spark_apps.build_hours` that need no settings (that module reads the
environment and passes the values in).

Under Dagster Pipes the asset passes its partition range's start and end as the two hours: for
a run of several partitions Dagster sends the external process no partition at all
(``build_external_execution_context_data`` fills it only when ``context.has_partition_key``).
"""

import contextlib
import dataclasses
import datetime as dt
import json
import os
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from bq_platform.lib.core.accounting import category_totals
from bq_platform.lib.core.hours import hour_label, hours_between, parse_hour
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.core.partition_window import HourWindow
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.traffic.thresholds import ClassificationThresholds

#: Pipes' CLI arguments (``dagster_pipes.DAGSTER_PIPES_CONTEXT_CLI_ARGUMENT`` and the messages
#: one): accepted and left to ``dagster_pipes``, which reads them from ``sys.argv`` itself.
PIPES_ARGUMENTS = ("--dagster-pipes-context", "--dagster-pipes-messages")
#: Runtime SQL settings of :func:`bq_platform.lib.hourly_build.spark.spark_config` that a
#: ``spark-submit``
#: session gets unless its launch set them: UTC session time, few shuffle partitions, AQE.
RUNTIME_SQL = (
    "spark.sql.session.timeZone",
    "spark.sql.shuffle.partitions",
    "spark.sql.adaptive.enabled",
    "spark.sql.sources.partitionOverwriteMode",
)


def hour_range(first: str, last: str | None) -> list[dt.datetime]:
    """The UTC hours ``first`` .. ``last`` (both included; None: ``first`` alone); ValueError
    for a malformed hour or ``last`` before ``first``."""
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


def job_session(config: Mapping[str, str]) -> Any:
    """The build's SparkSession for ``config``. Under ``spark-submit`` (``PYSPARK_GATEWAY_PORT``
    set) the launch's master and settings win, and only the unset :data:`RUNTIME_SQL` come from
    ``config``; as plain Python, PySpark starts the JVM with all of ``config``."""
    from pyspark.sql import SparkSession

    from bq_platform.lib.hourly_build.spark import prepare_driver_env

    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        prepare_driver_env(str(config.get("spark.master", "")))
        builder = SparkSession.builder
        for key, value in config.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    session = SparkSession.builder.getOrCreate()
    launched = session.sparkContext.getConf()
    for key in RUNTIME_SQL:
        if not launched.contains(key):
            session.conf.set(key, config[key])
    return session


@contextlib.contextmanager
def own_session(config: Mapping[str, str]) -> Iterator[Callable[[], Any]]:
    """A function that returns the application's session (:func:`job_session` of ``config``),
    started on its first call; the session, if started, is stopped on leaving the block."""
    started: list[Any] = []

    def session() -> Any:
        if not started:
            started.append(job_session(config))
        return started[0]

    try:
        yield session
    finally:
        for spark in started:
            spark.stop()


def summary(manifests: Sequence[HourManifest], attempt_id: str, seconds: float) -> dict[str, Any]:
    """What the application prints or reports: ``attempt_id``, ``hours``, ``first_hour``,
    ``last_hour``, ``rows``, ``sample_rows``, the identity's line counts summed over sites,
    ``problems`` (:meth:`~bq_platform.lib.core.manifest.HourManifest.accounting_problems`) and
    ``duration_seconds`` (session start included)."""
    counts = category_totals(c for m in manifests for c in m.counts)
    return {
        "attempt_id": attempt_id,
        "hours": len(manifests),
        "first_hour": hour_label(manifests[0].hour) if manifests else None,
        "last_hour": hour_label(manifests[-1].hour) if manifests else None,
        "rows": sum(m.rows for m in manifests),
        "sample_rows": sum(m.sample_rows for m in manifests),
        "source_lines": sum(c.source_lines for m in manifests for c in m.counts),
        **{k: v for k, v in counts.items() if k != "pageviews"},
        "problems": [p for m in manifests for p in m.accounting_problems()],
        "duration_seconds": round(seconds, 2),
    }


@contextlib.contextmanager
def pipes_context(argv: Sequence[str], gcp_project: str | None = None) -> Iterator[Any]:
    """The ``dagster_pipes.PipesContext`` when Dagster launched this process, else None.
    Messages go to GCS (a client of ``gcp_project``) when the orchestrator's reader names a
    bucket, else through Pipes' default channel."""
    from_cli = PIPES_ARGUMENTS[0] in argv
    if not from_cli and "DAGSTER_PIPES_CONTEXT" not in os.environ:
        yield None
        return
    import dagster_pipes as pipes

    loader = pipes.PipesCliArgsParamsLoader() if from_cli else pipes.PipesEnvVarParamsLoader()
    writer: pipes.PipesMessageWriter = pipes.PipesDefaultMessageWriter()
    if "bucket" in loader.load_messages_params():
        from bq_platform.lib.storage.gcs import gcs_client

        writer = pipes.PipesGCSMessageWriter(client=gcs_client(gcp_project))
    with pipes.open_dagster_pipes(params_loader=loader, message_writer=writer) as context:
        yield context


@dataclasses.dataclass(frozen=True)
class BuildJob:
    """One run of the application: ``hours`` (UTC, in order), ``attempt_id``, the lake
    ``store``, the ``visitor_key``, the partitions' ``window``, ``lines_per_pass`` and the
    traffic classification's ``thresholds``."""

    hours: list[dt.datetime]
    attempt_id: str
    store: ObjectStore
    visitor_key: str
    window: HourWindow
    lines_per_pass: int
    thresholds: ClassificationThresholds = ClassificationThresholds()


def run_job(job: BuildJob, log: Any, session: Callable[[], Any]) -> list[HourManifest]:
    """Build ``job`` with :func:`~bq_platform.lib.hourly_build.build.build_hours`, logging to
    ``log``.
    ``session`` returns the caller's SparkSession; it is called once the landed files are
    verified, never when nothing landed. LandingError: a landed file is missing, disagrees with
    its manifest or is not gzip."""
    from bq_platform.lib.hourly_build.build import build_hours

    return build_hours(
        session,
        job.store,
        job.hours,
        attempt_id=job.attempt_id,
        visitor_key=job.visitor_key,
        window=job.window,
        log=log,
        lines_per_pass=job.lines_per_pass,
        thresholds=job.thresholds,
    )


def write_error(path: str, exc: BaseException) -> None:
    """Write ``{"error": <class name>, "message": str(exc)}`` to the local file ``path``: how
    the launcher learns that a landing fault, which Dagster must not retry, failed the build
    (Pipes' client raises on the exit status before reading the messages)."""
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
