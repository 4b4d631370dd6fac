"""Where the hourly build and the daily rollups run: the ``spark`` resource of the
``pageview_files`` asset and of the rollup assets (``build_rollups``).

``BQ_PLATFORM_BUILD`` chooses it (:func:`hourly_build`):

- ``in-process`` (default): :class:`SparkResource`; the run's process is the Spark driver;
- ``spark-submit``: :class:`SparkSubmitBuild`; the build is a Spark application of its own
  (:mod:`bq_platform.lib.hourly_build.application`), launched through Dagster Pipes on any master,
  and the run's process starts no JVM.

Both write the same Parquet files and hour manifests, so the asset reports the same metadata
and checks. Dataproc's ``PipesDataprocJobClient`` runs the same application (docs/production.md);
no resource here wraps it: the job's settings, the visitor key among them, must reach the
cluster's driver, which is the deployment's choice.
"""

import abc
import datetime as dt
import importlib.util
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from bq_platform import settings
from bq_platform.defs.partitions import FIRST_HOUR
from bq_platform.lib.core import layout
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.manifest import HourManifest, LandingError, read_hour_manifests
from bq_platform.lib.core.partition_window import HourWindow
from bq_platform.lib.daily_build import build as daily_build
from bq_platform.lib.daily_build.rollup_files import RollupFiles, RollupInputs, read_rollup_files
from bq_platform.lib.hourly_build.application import BuildJob, read_error, run_job
from bq_platform.lib.hourly_build.spark import prepare_driver_env
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.warehouse.schema import ROLLUP_TABLES

#: The application's main file in this installation (``spark_apps/build_hours.py``).
BUILD_APP = Path(str(importlib.util.find_spec("bq_platform.spark_apps.build_hours").origin))
#: The daily rollups' main file in this installation (``spark_apps/build_rollups.py``).
ROLLUPS_APP = Path(str(importlib.util.find_spec("bq_platform.spark_apps.build_rollups").origin))


class HourlyBuildResource(dg.ConfigurableResource, abc.ABC):
    """What builds the pageview files of a run's hours."""

    @abc.abstractmethod
    def build(
        self,
        context: dg.AssetExecutionContext,
        store: ObjectStore,
        hours: list[dt.datetime],
        *,
        attempt_id: str,
        pipeline_settings: Any,
    ) -> list[HourManifest]:
        """Build ``hours`` (UTC) as attempt ``attempt_id`` with the run's ``PipelineSettings``;
        the hour manifests written, in hour order.

        Raises:
            LandingError: a landed file is missing or disagrees with its manifest.
            dagster.Failure: out of process, the application would build another lake than
                the run's (not retried).
            DagsterPipesExecutionError: out of process, the application failed.
            RuntimeError: out of process, an hour manifest is missing or names another attempt.
        """

    @abc.abstractmethod
    def build_rollups(
        self, context: dg.AssetExecutionContext, store: ObjectStore, inputs: RollupInputs
    ) -> dict[str, RollupFiles]:
        """Build the daily rollups of ``inputs``
        (:func:`bq_platform.lib.daily_build.build.build_rollups`); each rollup table's
        manifest, built now or found.

        Raises:
            ManifestError: a rollup manifest of this content is unreadable.
            dagster.Failure: out of process, the application would use another lake than the
                run's (not retried).
            DagsterPipesExecutionError: out of process, the application failed.
            RuntimeError: out of process, a rollup manifest is missing afterwards.
        """


def launched_manifests(
    store: ObjectStore, hours: list[dt.datetime], attempt_id: str
) -> list[HourManifest]:
    """The hour manifests an out-of-process build of ``hours`` wrote, in order. RuntimeError
    names the hours whose manifest is missing or of another attempt (a concurrent build won);
    ManifestError if one is unreadable."""
    found = read_hour_manifests(store, hours)
    wrong = [
        f"{hour_label(h)} ({'no manifest' if m is None else f'attempt {m.attempt_id}'})"
        for h, m in found.items()
        if m is None or m.attempt_id != attempt_id
    ]
    if wrong:
        raise RuntimeError(
            f"the build application of attempt {attempt_id} succeeded, but these hours do not "
            f"have its manifest: {', '.join(wrong[:5])}; another build wrote them meanwhile. "
            "Run these partitions again."
        )
    return [m for m in found.values() if m is not None]


def _hours_arguments(hours: list[dt.datetime], attempt_id: str) -> list[str]:
    """First and last hour, and the attempt ID; ValueError unless ``hours`` are consecutive."""
    first, last = min(hours), max(hours)
    if len(set(hours)) != int((last - first).total_seconds() // 3600) + 1:
        raise ValueError(f"hours must be consecutive, got {len(hours)} from {hour_label(first)}")
    return [hour_label(first), hour_label(last), "--attempt-id", attempt_id]


class SparkSubmitBuild(HourlyBuildResource):
    """The build as ``spark-submit`` of :data:`BUILD_APP`, through Dagster Pipes.

    Attributes:
        spark_config: as in process (:func:`bq_platform.lib.hourly_build.spark.spark_config`);
            ``spark.master`` becomes ``--master``, the others ``--conf``.
        spark_submit: the program; empty: PySpark's beside this Python, else on ``PATH``.
    """

    spark_config: dict[str, str]
    spark_submit: str = ""

    def command(self, hours: list[dt.datetime], attempt_id: str) -> list[str]:
        """The command line for ``hours``. Raises FileNotFoundError without ``spark-submit``,
        ValueError unless ``hours`` are consecutive."""
        return [*self._submit(), str(BUILD_APP), *_hours_arguments(hours, attempt_id)]

    def rollups_command(self, inputs: RollupInputs) -> list[str]:
        """The command line of the rollups of ``inputs``. Raises FileNotFoundError without
        ``spark-submit``."""
        return [
            *self._submit(),
            str(ROLLUPS_APP),
            inputs.day.isoformat(),
            "--hours",
            ",".join(inputs.hours),
            "--fingerprint",
            inputs.fingerprint,
        ]

    def _submit(self) -> list[str]:
        """``spark-submit --master <master> --conf k=v ...``."""
        program = self.spark_submit or installed_spark_submit()
        config = dict(self.spark_config)
        args = [program, "--master", config.pop("spark.master", "local[*]")]
        return args + [arg for key, value in config.items() for arg in ("--conf", f"{key}={value}")]

    def build_rollups(self, context, store, inputs) -> dict[str, RollupFiles]:
        """The rollups application through Dagster Pipes, then the manifests it wrote."""
        command = self.rollups_command(inputs)
        _check_same_lake(store)
        prepare_driver_env(str(self.spark_config.get("spark.master", "local[*]")))
        context.log.info("launching the rollups of %s: %s", inputs.day, " ".join(command[:3]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)
            dg.PipesSubprocessClient().run(command=command, context=context)
        found = read_rollup_files(store, inputs, ROLLUP_TABLES)
        missing = [table for table, files in found.items() if files is None]
        if missing:
            raise RuntimeError(
                f"the rollups application of {inputs.day} succeeded, but {', '.join(missing)} "
                f"have no manifest for content {inputs.fingerprint[:12]}; run the day again"
            )
        return {table: files for table, files in found.items() if files is not None}

    def build(self, context, store, hours, *, attempt_id, pipeline_settings) -> list[HourManifest]:
        """A landing fault in the application is raised as the LandingError it was, read from
        its error file, so that ``fail_fast`` does not retry it."""
        command = self.command(hours, attempt_id)
        _check_same_lake(store)
        # The run's own settings, not the application's reading of the environment: the same
        # visitor IDs and sample whatever the resource was configured with.
        env = settings.application_environment(
            visitor_key=pipeline_settings.visitor_key,
            lines_per_pass=pipeline_settings.lines_per_pass,
            thresholds=pipeline_settings.traffic_thresholds(),
        )
        # the application's driver inherits it: a local one binds to loopback
        prepare_driver_env(str(self.spark_config.get("spark.master", "local[*]")))
        context.log.info("launching the build: %s", " ".join(command[:3] + command[-5:]))
        with tempfile.TemporaryDirectory(prefix="bq-platform-build-") as folder:
            error_file = os.path.join(folder, "error.json")
            try:
                with warnings.catch_warnings():  # Dagster's client calls a preview API of its
                    warnings.simplefilter("ignore", dg.PreviewWarning)  # own (writer count)
                    dg.PipesSubprocessClient().run(
                        command=[*command, "--error-file", error_file], context=context, env=env
                    )
            except Exception:  # the client's DagsterPipesExecutionError is not public API
                error = read_error(error_file)
                if error is not None and error["error"] == LandingError.__name__:
                    raise LandingError(error["message"]) from None
                raise
        return launched_manifests(store, hours, attempt_id)


def _check_same_lake(store: ObjectStore) -> None:
    """Raise dagster.Failure (not retried) if the application, which finds its lake from the
    environment, would build another lake than the run's ``object_store``; compared by the
    landing zone's URI, no request sent."""
    ours = store.uri(layout.LANDING_PREFIX)
    try:
        theirs = settings.object_store(settings.env_name()).uri(layout.LANDING_PREFIX)
    except ValueError as exc:
        theirs = f"none ({exc})"
    if theirs != ours:
        raise dg.Failure(
            description=(
                f"BQ_PLATFORM_BUILD=spark-submit: the build application reads the lake from the "
                f"environment ({theirs}), but this run's object_store resource is {ours}: "
                "configure the resource from the same variables (defs/resources.py)"
            ),
            allow_retries=False,
        )


def installed_spark_submit() -> str:
    """PySpark's ``spark-submit`` beside this Python, else on PATH; FileNotFoundError if neither."""
    beside = Path(sys.executable).with_name("spark-submit")
    found = str(beside) if beside.exists() else shutil.which("spark-submit")
    if not found:
        raise FileNotFoundError(
            "spark-submit not found beside this Python or on PATH: install PySpark, or set "
            "BQ_PLATFORM_SPARK_SUBMIT"
        )
    return found


class SparkResource(LazyPySparkResource, HourlyBuildResource):
    """The build in the run's process: dagster-pyspark's lazy session, started at its first use
    (after the landed files are checked), bound to loopback for a local master."""

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.prepare_environment()

    def build(self, context, store, hours, *, attempt_id, pipeline_settings) -> list[HourManifest]:
        job = BuildJob(
            hours=hours,
            attempt_id=attempt_id,
            store=store,
            visitor_key=pipeline_settings.visitor_key,
            window=HourWindow.until_now(FIRST_HOUR),
            lines_per_pass=pipeline_settings.lines_per_pass,
            thresholds=pipeline_settings.traffic_thresholds(),
        )
        return run_job(job, context.log, session=lambda: self.spark_session)

    def build_rollups(self, context, store, inputs) -> dict[str, RollupFiles]:
        """In the run's process; the session starts only if a rollup is not built yet."""
        return daily_build.build_rollups(lambda: self.spark_session, store, inputs, log=context.log)

    def prepare_environment(self) -> None:
        """:func:`~bq_platform.lib.hourly_build.spark.prepare_driver_env` of the configured
        master."""
        prepare_driver_env(str(self.spark_config.get("spark.master", "")))


def hourly_build(config: dict[str, str]) -> HourlyBuildResource:
    """The ``spark`` resource ``BQ_PLATFORM_BUILD`` names, with the Spark settings ``config``;
    ValueError for an unknown build."""
    if settings.hourly_build() == "spark-submit":
        return SparkSubmitBuild(spark_config=config, spark_submit=settings.spark_submit())
    return SparkResource(spark_config=config)
