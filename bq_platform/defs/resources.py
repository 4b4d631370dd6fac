"""Resources, and the one place where local or production implementations are chosen.

Every environment binds the same keys:

- ``object_store``: landing zone, staging Parquet, dead letters (:class:`ObjectStoreResource`);
- ``warehouse``: stage, published and audit tables, the job ledger (:class:`WarehouseResource`);
- ``spark``: the Spark session (:class:`SparkResource`);
- ``settings``: pseudonymization key, job budgets and the rejected-share limit
  (:class:`PipelineSettings`).

``BQ_PLATFORM_ENV`` picks the implementations when the definitions load: ``local`` (default:
a directory, DuckDB, ``local[*]``, everything under ``BQ_PLATFORM_HOME``, default
``./.bq_platform``) or ``prod`` (GCS, BigQuery, a Spark cluster). The README lists every
variable; values enter through ``dg.EnvVar`` so they are read when a run starts (code that
uses a resource outside a run resolves them with :func:`resolved`). The commands that need
no Dagster (``bq-platform land``, ``land-tree``, ``deadletters``) get the same lake from
:func:`bq_platform.lib.environment.object_store`; ``test_environment.py`` holds the two to
the same folder or bucket.
"""

import abc
import logging
import os
import threading
from typing import Any, TypeVar

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from dagster_pyspark.resources import spark_session_from_config
from pydantic import PrivateAttr

from bq_platform.lib import environment
from bq_platform.lib.build_read import DEFAULT_LINES_PER_PASS
from bq_platform.lib.objectstore.base import ObjectStore
from bq_platform.lib.quality import DEFAULT_MAX_REJECTED_SHARE
from bq_platform.lib.quota import JobBudget
from bq_platform.lib.spark import ensure_local_spark_env, spark_config
from bq_platform.lib.warehouse.base import Warehouse

R = TypeVar("R", bound=dg.ConfigurableResource)

#: Dagster pool (concurrency key) of every step that runs warehouse jobs: ``dagster.yaml`` or
#: the deployment limits how many such steps run at once.
WAREHOUSE_POOL = "warehouse"


class ObjectStoreResource(dg.ConfigurableResource, abc.ABC):
    """Base of the object-store resources; ``get_store()`` returns the plain adapter."""

    @abc.abstractmethod
    def get_store(self) -> ObjectStore:
        """The :class:`~bq_platform.lib.objectstore.base.ObjectStore` to use."""


class LocalObjectStoreResource(ObjectStoreResource):
    """A directory on disk standing in for the bucket (local default)."""

    root: str

    def get_store(self) -> ObjectStore:
        from bq_platform.lib.objectstore.local import LocalObjectStore

        return LocalObjectStore(self.root)


class GCSObjectStoreResource(ObjectStoreResource):
    """A Google Cloud Storage bucket (production). Credentials: Application Default Credentials."""

    project: str
    bucket: str
    prefix: str = ""

    def get_store(self) -> ObjectStore:
        from bq_platform.lib.objectstore.gcs import GCSObjectStore, storage_client

        return GCSObjectStore(self.bucket, storage_client(self.project), prefix=self.prefix)


class WarehouseResource(dg.ConfigurableResource, abc.ABC):
    """Base of the warehouse resources; one adapter per run, so the ensure-table cache holds."""

    require_partition_filter: bool = True
    """Create published tables with require_partition_filter (BigQuery enforces it)."""

    _warehouse: Warehouse | None = PrivateAttr(default=None)

    def get_warehouse(self) -> Warehouse:
        """The run's :class:`~bq_platform.lib.warehouse.base.Warehouse` (created on first use)."""
        if self._warehouse is None:
            self._warehouse = self._build()
        return self._warehouse

    def new_warehouse(self) -> Warehouse:
        """A new adapter, not shared: for a sensor tick, whose answer must not come from an
        earlier tick's caches (table metadata, the publish ledger). The caller closes it."""
        return self._build()

    @abc.abstractmethod
    def _build(self) -> Warehouse: ...

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._warehouse is not None:
            self._warehouse.close()
            self._warehouse = None


class DuckDBWarehouseResource(WarehouseResource):
    """The embedded local warehouse: one DuckDB file with BigQuery's table names and job rules."""

    path: str
    require_partition_filter: bool = False  # DuckDB cannot enforce it; recorded only
    concurrent_jobs: int = 2
    """Jobs run side by side, each on one core (``DuckDBWarehouse(concurrent_jobs=...)``):
    a step's stage loads overlap as BigQuery's do (issue 9)."""

    def _build(self) -> Warehouse:
        from bq_platform.lib.warehouse.duckdb import DuckDBWarehouse

        return DuckDBWarehouse(self.path, concurrent_jobs=self.concurrent_jobs)


class BigQueryWarehouseResource(WarehouseResource):
    """BigQuery (production). ``api_endpoint`` points the client at an emulator in tests."""

    project: str
    dataset: str
    location: str = "US"
    job_id_prefix: str = ""
    """Prepended to job IDs sent to BigQuery: keeps environments sharing a project apart
    (job IDs are unique per project, not per dataset)."""
    api_endpoint: str | None = None

    def _build(self) -> Warehouse:
        from bq_platform.lib.warehouse.bigquery import BigQueryWarehouse
        from bq_platform.lib.warehouse.bigquery_client import bigquery_client

        client = bigquery_client(self.project, self.location, api_endpoint=self.api_endpoint)
        return BigQueryWarehouse(
            client,
            self.project,
            self.dataset,
            location=self.location,
            job_id_prefix=self.job_id_prefix,
        )


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy session resource (the session is made on the first use of
    ``spark_session``), started in the background when a run sets it up, bound to loopback
    when the master is local.

    So a run's resource set-up does not wait for the JVM: the build step lists and checks the
    landing zone while it starts, and waits for the session at its first use of
    ``spark_session`` (:func:`~bq_platform.lib.build.build_hours` takes ``lambda:
    spark.spark_session``; ``SparkSession.builder.getOrCreate`` waits for the start under way).
    A 1x ``bq-platform run`` on a slow 2-core machine waited 1.2-2.1 s in the set-up before
    the build step started (issue 9, docs/PERFORMANCE.md). A failed start is raised by
    ``spark_session``, in the step, once.
    """

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.start_in_background()

    @property
    def is_local(self) -> bool:
        """True if the master runs the driver and the tasks in this process's JVM."""
        return str(self.spark_config.get("spark.master", "")).startswith("local")

    def prepare_environment(self) -> None:
        """What this process needs before the session starts: a local master binds to loopback
        (:func:`~bq_platform.lib.spark.ensure_local_spark_env`); other masters need nothing."""
        if self.is_local:
            ensure_local_spark_env()

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


class PipelineSettings(dg.ConfigurableResource):
    """Settings of the pageview pipeline itself.

    Attributes:
        visitor_key: secret key of the visitor_id HMAC (``BQ_PLATFORM_VISITOR_KEY``). Changing
            it changes every visitor_id and the sample; treat it like a password.
        job_budget_per_table_per_day: jobs allowed per table per UTC day (BigQuery: 1,500 table
            operations per table per day; default 90% of that).
        max_rejected_share: share of rejected lines (0..1) above which a site-hour fails the
            ``rejected_share`` check with ERROR and holds its day's publish
            (``BQ_PLATFORM_MAX_REJECTED_SHARE``; see :mod:`bq_platform.lib.quality`).
        reports_url: base URL at which the operator's browser reads the object store's
            ``reports/`` folder (``BQ_PLATFORM_REPORTS_URL``); when set, the completeness
            report shows its picture in the Dagster UI (Dagster's Markdown shows ``http(s)``
            images only). Local default
            :data:`~bq_platform.lib.environment.LOCAL_REPORTS_URL`, where ``make dev`` serves the
            folder; on GCS use the authenticated browser URL
            ``https://storage.cloud.google.com/<bucket>/reports``, which asks the browser's user
            to sign in and needs ``storage.objects.get`` (cloud.google.com/storage/docs/
            request-endpoints, "authenticated browser downloads").
        lines_per_pass: the most source lines one Spark pass of the hourly build reads
            (``BQ_PLATFORM_LINES_PER_PASS``; default
            :data:`~bq_platform.lib.build_read.DEFAULT_LINES_PER_PASS`, sized for a 2g local
            driver). Raise it with the executors' memory on a cluster.
        lookback_days: the automation sensor and ``bq-platform run`` plan the UTC days from
            this many days before today on (``BQ_PLATFORM_LOOKBACK_DAYS``); 0, the default:
            every landed day. Set it in production, where the landing zone holds years
            (:func:`~bq_platform.lib.planning.lookback_start`).
    """

    visitor_key: str
    job_budget_per_table_per_day: int = JobBudget().per_table_per_day
    max_rejected_share: float = DEFAULT_MAX_REJECTED_SHARE
    reports_url: str = ""
    lines_per_pass: int = DEFAULT_LINES_PER_PASS
    lookback_days: int = 0

    def budget(self) -> JobBudget:
        return JobBudget(per_table_per_day=self.job_budget_per_table_per_day)


def build_resources(env: str) -> dict[str, Any]:
    """The resources of environment ``env`` (``local`` or ``prod``).

    Raises:
        ValueError: for any other ``env``.
    """
    if env == "local":
        home = environment.local_home()
        if not os.environ.get("BQ_PLATFORM_VISITOR_KEY"):
            logging.getLogger(__name__).info(
                "BQ_PLATFORM_VISITOR_KEY is not set: using the local development key"
            )
        return {
            "object_store": LocalObjectStoreResource(root=str(environment.local_lake())),
            "warehouse": DuckDBWarehouseResource(path=str(home / "warehouse.duckdb")),
            "spark": SparkResource(
                spark_config=spark_config(os.environ.get("BQ_PLATFORM_SPARK_MASTER", "local[*]"))
            ),
            "settings": PipelineSettings(
                visitor_key=environment.visitor_key("local"),
                **environment.pipeline_settings("local"),
            ),
        }
    if env == "prod":
        return {
            "object_store": GCSObjectStoreResource(
                project=dg.EnvVar("BQ_PLATFORM_GCP_PROJECT"),
                bucket=dg.EnvVar("BQ_PLATFORM_BUCKET"),
            ),
            "warehouse": BigQueryWarehouseResource(
                project=dg.EnvVar("BQ_PLATFORM_GCP_PROJECT"),
                dataset=dg.EnvVar("BQ_PLATFORM_BQ_DATASET"),
                location=os.environ.get("BQ_PLATFORM_BQ_LOCATION", "US"),
                job_id_prefix=os.environ.get("BQ_PLATFORM_BQ_JOB_PREFIX", ""),
            ),
            "spark": SparkResource(
                spark_config=spark_config(
                    os.environ.get("BQ_PLATFORM_SPARK_MASTER", "yarn"),
                    shuffle_partitions=int(os.environ.get("BQ_PLATFORM_SHUFFLE_PARTITIONS", "64")),
                )
            ),
            "settings": PipelineSettings(
                visitor_key=dg.EnvVar("BQ_PLATFORM_VISITOR_KEY"),
                **environment.pipeline_settings("prod"),
            ),
        }
    raise environment.unknown_environment(env)


def resolved(resource: R) -> R:
    """``resource`` with each ``dg.EnvVar`` field replaced by the variable's value, read now.

    For code that uses a resource outside a Dagster run (``bq-platform run``'s planner and
    summary, :meth:`bq_platform.runner.PipelineRunner.from_environment`). Dagster resolves an
    ``EnvVar`` only when a run initializes the resource; read directly, the field is the
    variable's *name* (``build_resources("prod")["settings"].visitor_key`` is the string
    ``"BQ_PLATFORM_VISITOR_KEY"``), so the planner would have keyed visitors with the name and
    sent BigQuery a project called ``BQ_PLATFORM_GCP_PROJECT``. A resource without such fields
    is returned as is.

    Raises:
        ValueError: naming every variable that is unset or empty (a run fails on an unset
            one too; an empty bucket, project or key is never meant).
    """
    env_fields = {
        name: value
        for name in type(resource).model_fields
        if isinstance(value := getattr(resource, name), dg.EnvVar)
    }
    if not env_fields:
        return resource
    values = {name: var.get_value() for name, var in env_fields.items()}
    missing = sorted(env_fields[name].env_var_name for name, value in values.items() if not value)
    if missing:
        raise ValueError(
            f"{type(resource).__name__}: set {', '.join(missing)} (README, 'Running on Google "
            "Cloud')"
        )
    current = {name: getattr(resource, name) for name in type(resource).model_fields}
    return type(resource)(**{**current, **values})


@dg.definitions
def resources() -> dg.Definitions:
    """Binds the resources of ``BQ_PLATFORM_ENV`` (default ``local``) when the code loads."""
    return dg.Definitions(
        resources=build_resources(environment.env_name()),
        executor=dg.in_process_executor,
    )
