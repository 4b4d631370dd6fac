"""Where the hourly build runs: the ``spark`` resource of the ``pageview_files`` asset.

``BQ_PLATFORM_BUILD`` chooses it (:func:`hourly_build`, which
:func:`bq_platform.defs.resources.build_resources` calls):

- ``in-process`` (the default): :class:`SparkResource`, the run's process is the Spark driver
  (``local[*]``, or client mode on a cluster);
- ``spark-submit``: :class:`SparkSubmitBuild`, the build as a Spark application of its own
  (:mod:`bq_platform.lib.build.application`), launched by ``spark-submit`` through Dagster Pipes
  (``PipesSubprocessClient``) on any master; the run's process starts no JVM, and a build's
  JVM lives and dies with its application.

The application writes what the in-process build writes (Parquet under the attempt's prefix,
then the hour manifests) and logs to the run through Pipes; the asset then reads back the hour
manifests it wrote (:func:`launched_manifests`) and reports the same metadata and checks.
Dataproc's ``PipesDataprocJobClient`` runs the same application (docs/production.md); no
resource here wraps it yet: it cannot be run offline, and the job's settings, the visitor key
among them, must reach the cluster's driver (an initialization action and a secret store),
which is the deployment's choice.
"""

import abc
import datetime as dt
import logging
import os
import shutil
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from dagster_pyspark.resources import spark_session_from_config

from bq_platform.defs.partitions import FIRST_HOUR
from bq_platform import settings as environment
from bq_platform.lib.core import layout
from bq_platform.lib.build.application import BuildJob, read_error, run_job
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.landing.producer.land import LandingError
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.core.manifest_reads import read_hour_manifests
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.core.partition_window import HourWindow
from bq_platform.lib.build.spark import prepare_driver_env

#: The application's main file in this installation (``spark_apps/build_hours.py``).
BUILD_APP = Path(__file__).resolve().parents[1] / "spark_apps" / "build_hours.py"


class HourlyBuildResource(dg.ConfigurableResource, abc.ABC):
    """What builds the pageview files of a run's hours (see the module docstring)."""

    @abc.abstractmethod
    def build(
        self,
        context: dg.AssetExecutionContext,
        store: ObjectStore,
        hours: list[dt.datetime],
        *,
        attempt_id: str,
        settings: Any,
    ) -> list[HourManifest]:
        """Build ``hours`` (UTC, on the hour) as attempt ``attempt_id``; return the hour
        manifests written, in hour order. ``settings`` is the run's ``PipelineSettings``.

        Raises:
            LandingError: a landed file is missing or disagrees with its manifest (out of
                process: as the application reported it).
            dagster.Failure: out of process, the application would build another lake than
                the run's object store (not retried).
            DagsterPipesExecutionError: out of process, the application failed (its error is
                in the run's log; ``dagster._core.errors``, raised by Dagster's Pipes clients).
            RuntimeError: out of process, an hour manifest is missing or names another attempt
                after the application succeeded.
        """


def launched_manifests(
    store: ObjectStore, hours: list[dt.datetime], attempt_id: str
) -> list[HourManifest]:
    """The hour manifests an out-of-process build of ``hours`` wrote, in hour order.

    Raises:
        RuntimeError: naming the hours whose manifest is missing or names another attempt (a
            concurrent build of the same hours won the race: run the partitions again).
        ManifestError: if a manifest is unreadable.
    """
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
    """The application's arguments: first and last hour, and the attempt ID.

    Raises:
        ValueError: if ``hours`` are not consecutive (a partition key range always is).
    """
    first, last = min(hours), max(hours)
    if len(set(hours)) != int((last - first).total_seconds() // 3600) + 1:
        raise ValueError(f"hours must be consecutive, got {len(hours)} from {hour_label(first)}")
    return [hour_label(first), hour_label(last), "--attempt-id", attempt_id]


class SparkSubmitBuild(HourlyBuildResource):
    """The build as ``spark-submit`` of :data:`BUILD_APP`, through Dagster Pipes.

    Attributes:
        spark_config: the application's Spark settings (``spark.master`` becomes ``--master``,
            every other one a ``--conf``): :func:`bq_platform.lib.build.spark.spark_config`, as the
            in-process session's, so the driver's JVM options apply too.
        spark_submit: the ``spark-submit`` to run; empty: the one installed with PySpark next
            to this Python, else the first on ``PATH``.
    """

    spark_config: dict[str, str]
    spark_submit: str = ""

    def command(self, hours: list[dt.datetime], attempt_id: str) -> list[str]:
        """The whole command line for ``hours``.

        Raises:
            FileNotFoundError: if no ``spark-submit`` is found.
            ValueError: if ``hours`` are not consecutive.
        """
        program = self.spark_submit or installed_spark_submit()
        config = dict(self.spark_config)
        args = [program, "--master", config.pop("spark.master", "local[*]")]
        args += [arg for key, value in config.items() for arg in ("--conf", f"{key}={value}")]
        return [*args, str(BUILD_APP), *_hours_arguments(hours, attempt_id)]

    def build(self, context, store, hours, *, attempt_id, settings) -> list[HourManifest]:
        """See :meth:`HourlyBuildResource.build`. A landing fault in the application is raised
        here as the :class:`~bq_platform.lib.landing.producer.land.LandingError` it was (so ``fail_fast``
        does not retry it, as in process), from the error file the application writes
        (:func:`~bq_platform.lib.build.application.write_error`)."""
        command = self.command(hours, attempt_id)
        _check_same_lake(store)
        # The run's own settings, not the application's reading of the environment: the same
        # visitor IDs and sample whatever the resource was configured with.
        env = {
            "BQ_PLATFORM_VISITOR_KEY": settings.visitor_key,
            "BQ_PLATFORM_LINES_PER_PASS": str(settings.lines_per_pass),
        }
        # the application's driver inherits it: a local one its JDK and loopback
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
    """Refuse to launch when the application would build another lake than the run's.

    The application finds its lake from ``BQ_PLATFORM_ENV`` and its variables
    (:func:`~bq_platform.settings.object_store`); the run's ``object_store`` resource
    may be configured otherwise (the launchpad, a test). Compared by the URI of the landing
    zone; no request is sent.

    Raises:
        dagster.Failure: not retried (``allow_retries=False``), naming both lakes.
    """
    ours = store.uri(layout.LANDING_PREFIX)
    try:
        theirs = environment.object_store(environment.env_name()).uri(layout.LANDING_PREFIX)
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
    """PySpark's ``spark-submit`` beside this Python (a virtualenv's ``bin``), else on PATH.

    Raises:
        FileNotFoundError: if there is neither.
    """
    beside = Path(sys.executable).with_name("spark-submit")
    found = str(beside) if beside.exists() else shutil.which("spark-submit")
    if not found:
        raise FileNotFoundError(
            "spark-submit not found beside this Python or on PATH: install PySpark, or set "
            "BQ_PLATFORM_SPARK_SUBMIT"
        )
    return found


class SparkResource(LazyPySparkResource, HourlyBuildResource):
    """The hourly build in the run's process (``BQ_PLATFORM_BUILD=in-process``, the default;
    :mod:`bq_platform.defs.pageviews.spark_build`): dagster-pyspark's lazy session resource (the session
    is made on the first use of ``spark_session``), started in the background when a run sets
    it up, bound to loopback when the master is local.

    So a run's resource set-up does not wait for the JVM: the build step lists and checks the
    landing zone while it starts, and waits for the session at its first use of
    ``spark_session`` (:func:`~bq_platform.lib.build.hourly.build_hours` takes ``lambda:
    spark.spark_session``; ``SparkSession.builder.getOrCreate`` waits for the start under way).
    A 1x ``bq-platform run`` on a slow 2-core machine waited 1.2-2.1 s in the set-up before
    the build step started (issue 9, docs/PERFORMANCE.md). A failed start is raised by
    ``spark_session``, in the step, once.
    """

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.start_in_background()

    def build(self, context, store, hours, *, attempt_id, settings) -> list[HourManifest]:
        job = BuildJob(
            hours=hours,
            attempt_id=attempt_id,
            store=store,
            visitor_key=settings.visitor_key,
            window=HourWindow.until_now(FIRST_HOUR),
            lines_per_pass=settings.lines_per_pass,
        )
        # the session starts beside the run, while the landing zone is checked
        return run_job(job, context.log, session=lambda: self.spark_session)

    def prepare_environment(self) -> None:
        """What this process needs before the session starts
        (:func:`~bq_platform.lib.build.spark.prepare_driver_env` of the configured master)."""
        prepare_driver_env(str(self.spark_config.get("spark.master", "")))

    def start_in_background(self) -> threading.Thread:
        """Start this resource's Spark session on a daemon thread, ahead of the run that uses it.

        The session of a process is one (``SparkSession.builder.getOrCreate``, which holds the
        builder's class lock while it creates it), so the run's first use of ``spark_session``
        then gets this same session, or waits for it if it is still starting. ``bq-platform
        run`` starts it once it knows a build is due, so the JVM's start (4-5 s local, issue 9)
        runs while Dagster creates the run and writes its planned events; a run's
        :meth:`setup_for_execution` starts it too (a run launched from the UI, a schedule or a
        sensor: a new process), and a second start of a started session only finds it. A
        failure here is only logged at DEBUG: the step's first use of ``spark_session`` fails
        the same way and reports it, once.

        Nothing else runs on the new JVM meanwhile: a planning warm-up on this thread (a tiny
        build pass planned once the session was up) made whole 1x runs slower once the build
        itself waits for the session, 63.6 against 61.4 s on average over seven pairs (issue
        9, docs/PERFORMANCE.md, "No planning warm-up beside the build").

        Returns:
            The started thread (it ends when the session is up or has failed).
        """
        self.prepare_environment()

        def start() -> None:
            try:
                spark_session_from_config(self.spark_config)
            except Exception:  # the run reports it (see above)
                logging.getLogger(__name__).debug("Spark pre-start failed", exc_info=True)

        thread = threading.Thread(target=start, name="spark-prestart", daemon=True)
        thread.start()
        threading.Thread(
            target=import_pyspark_converters, name="spark-prestart-imports", daemon=True
        ).start()
        return thread


#: How long :func:`stop_session_in_background` waits for the driver JVM to exit once told to
#: (it took 0.01-0.1 s); past it the JVM is left to exit with this process.
_JVM_EXIT_WAIT_S = 30


def stop_session_in_background() -> threading.Thread:
    """Stop this process's Spark session (``SparkSession.active()``: the one
    :meth:`SparkResource.start_in_background` or a run started) and its driver JVM, on a
    daemon thread, so that both shut down beside whatever this process does next; no session:
    nothing to do.

    ``bq-platform run`` calls it once its last build is done (:class:`bq_platform.cli.runner.
    PipelineRunner`, ``release_spark``): the publish runs need no Spark. Left to the process's
    exit, the JVM outlived the Python process by 0.36-0.40 s (4 starts of a ``local[2]``
    session, each timed from the Python process's exit to the JVM's; ``bq-platform run``:
    0.40-0.44 s), holding its memory (1.7 GiB at the 1x bench), because HotSpot's exit waits up
    to 0.3 s for threads still in native code, such as py4j's listener. Here the session is
    stopped, py4j's gateway shut down (PySpark keeps it in ``SparkContext._gateway``) and the
    JVM's standard input closed, on which PySpark's ``PythonGatewayServer`` exits the JVM at
    once; a session asked for later starts a new JVM (PySpark starts one when
    ``SparkContext._gateway`` is None). Issue 9, docs/PERFORMANCE.md. A failure is only
    logged at DEBUG: the JVM then stops when this process exits, as before.

    Returns:
        The started thread (it ends when the JVM has exited, or after
        :data:`_JVM_EXIT_WAIT_S`).
    """

    def stop() -> None:
        from pyspark import SparkContext
        from pyspark.errors import PySparkRuntimeError
        from pyspark.sql import SparkSession

        try:
            SparkSession.active().stop()
            gateway = SparkContext._gateway
            # PySpark's launch_gateway keeps the JVM it started; None: a JVM this process did
            # not start (spark-submit's, PYSPARK_GATEWAY_PORT), which ends with its launcher.
            jvm = getattr(gateway, "proc", None)
            if gateway is None or jvm is None or jvm.stdin is None:
                return
            with SparkContext._lock:
                SparkContext._gateway = SparkContext._jvm = None
            gateway.shutdown()  # py4j's server stops: no thread left in native code
            jvm.stdin.close()  # EOF: PythonGatewayServer exits the JVM
            jvm.wait(timeout=_JVM_EXIT_WAIT_S)
        except PySparkRuntimeError:  # no session in this process
            return
        except Exception:  # the process's exit stops the JVM anyway
            logging.getLogger(__name__).debug("Spark session stop failed", exc_info=True)

    thread = threading.Thread(target=stop, name="spark-stop", daemon=True)
    thread.start()
    return thread


def import_pyspark_converters() -> None:
    """Import what PySpark's py4j argument converters import on their first use.

    PySpark's ``NumpyArrayConverter.can_convert`` (``pyspark/sql/types.py``, registered with
    py4j) imports ``pyspark.testing.utils`` to learn whether NumPy is installed, and that
    module imports pandas, pyarrow and ``unittest``: 0.26-0.28 s on one core (PySpark 4.3).
    It runs on the first Python object py4j sends once the JVM is up (``SparkConf``), so the
    session waits for it. Imported while the JVM boots instead, on a thread of its own, it is
    usually done when py4j needs it; if not, py4j's thread waits for this import (Python's
    import lock) and does not import again. A failed import is left to that first use.
    """
    try:
        import pyspark.testing.utils  # noqa: F401
    except Exception:  # the converter's own import reports it where it matters
        logging.getLogger(__name__).debug(
            "pre-import of PySpark's converters failed", exc_info=True
        )


#: ``BQ_PLATFORM_BUILD``'s values: where the hourly build runs (see the module docstring).
BUILDS: tuple[str, ...] = ("in-process", "spark-submit")


def hourly_build(config: dict[str, str]) -> HourlyBuildResource:
    """The ``spark`` resource that ``BQ_PLATFORM_BUILD`` names (default ``in-process``), with
    the Spark settings ``config`` (:func:`~bq_platform.lib.build.spark.spark_config`);
    ``spark-submit`` runs ``BQ_PLATFORM_SPARK_SUBMIT`` when set.

    Raises:
        ValueError: for a value outside :data:`BUILDS`, naming it.
    """
    build = os.environ.get("BQ_PLATFORM_BUILD") or BUILDS[0]
    if build == "in-process":
        return SparkResource(spark_config=config)
    if build == "spark-submit":
        return SparkSubmitBuild(
            spark_config=config, spark_submit=os.environ.get("BQ_PLATFORM_SPARK_SUBMIT", "")
        )
    raise ValueError(f"BQ_PLATFORM_BUILD must be one of {', '.join(BUILDS)}, got {build!r}")
