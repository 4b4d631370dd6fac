"""Resources, and the one place where local or production implementations are chosen.

Every environment binds ``object_store``, ``warehouse``, ``spark``
(:mod:`bq_platform.defs.pageviews.spark_build`) and ``settings``. ``BQ_PLATFORM_ENV`` picks the
implementations when the definitions load: ``local`` (a directory, DuckDB, ``local[*]``, all
under ``BQ_PLATFORM_HOME``) or ``prod`` (GCS, BigQuery, a Spark cluster). Production names and
secrets enter through ``dg.EnvVar``, read when a run starts; code that uses a resource outside
a run resolves them with :func:`resolved`.
"""

import abc
import logging
from typing import Any, TypeVar

import dagster as dg
from pydantic import PrivateAttr

from bq_platform import settings
from bq_platform.defs.pageviews.spark_build import hourly_build
from bq_platform.lib.hourly_build.read import DEFAULT_LINES_PER_PASS
from bq_platform.lib.hourly_build.spark import spark_config
from bq_platform.lib.publish.quota import JobBudget
from bq_platform.lib.quality.rejected_share import DEFAULT_MAX_REJECTED_SHARE
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.traffic.thresholds import (
    DEFAULT_MAX_PAGES_PER_VISITOR_HOUR,
    ClassificationThresholds,
)
from bq_platform.lib.warehouse.base import Warehouse

R = TypeVar("R", bound=dg.ConfigurableResource)

#: Dagster pool (concurrency key) of every step that runs warehouse jobs: ``dagster.yaml`` or
#: the deployment limits how many such steps run at once.
WAREHOUSE_POOL = "warehouse"


class ObjectStoreResource(dg.ConfigurableResource, abc.ABC):
    """Base of the object-store resources; ``get_store()`` returns the plain adapter."""

    @abc.abstractmethod
    def get_store(self) -> ObjectStore:
        """The :class:`~bq_platform.lib.storage.base.ObjectStore` to use."""


class LocalObjectStoreResource(ObjectStoreResource):
    """A directory on disk standing in for the bucket (local default)."""

    root: str

    def get_store(self) -> ObjectStore:
        from bq_platform.lib.storage.local import LocalObjectStore

        return LocalObjectStore(self.root)


class GCSObjectStoreResource(ObjectStoreResource):
    """A Google Cloud Storage bucket (production). Credentials: Application Default Credentials."""

    project: str
    bucket: str
    prefix: str = ""

    def get_store(self) -> ObjectStore:
        from bq_platform.lib.storage.gcs import GCSObjectStore, storage_client

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
    """Jobs run side by side, one core each: a step's stage loads overlap as in BigQuery."""

    def _build(self) -> Warehouse:
        from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse

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
        from bq_platform.lib.warehouse.bigquery.client import bigquery_client
        from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse

        client = bigquery_client(self.project, self.location, api_endpoint=self.api_endpoint)
        return BigQueryWarehouse(
            client,
            self.project,
            self.dataset,
            location=self.location,
            job_id_prefix=self.job_id_prefix,
        )


class PipelineSettings(dg.ConfigurableResource):
    """Settings of the pageview pipeline (their variables: :mod:`bq_platform.settings`).

    Attributes:
        visitor_key: secret key of the visitor_id HMAC; changing it changes every visitor_id
            and the sample. Treat it like a password.
        job_budget_per_table_per_day: jobs per table per UTC day (BigQuery allows 1,500 table
            operations per table per day; default 90% of that).
        max_rejected_share: share of rejected lines (0..1) above which a site-hour fails the
            ``rejected_share`` check and holds its day's publish.
        reports_url: where a browser reads the object store's ``reports/`` folder; when set,
            the completeness report shows its picture (Dagster's Markdown shows ``http(s)``
            images only). On GCS: ``https://storage.cloud.google.com/<bucket>/reports``, which
            needs ``storage.objects.get`` (cloud.google.com/storage/docs/request-endpoints).
        lines_per_pass: the most source lines one Spark pass reads (the default suits a 2g
            local driver); raise it with the executors' memory.
        lookback_days: plan the UTC days from this many days before today on; 0: every landed
            day. Set it in production, where the landing zone holds years.
        max_pages_per_visitor_hour: a visitor with more pages than this in one UTC hour is
            ``suspected_bot`` (:mod:`bq_platform.lib.traffic.thresholds`); None: the page-rate
            heuristic is off.
        bot_robots_txt: a visitor that fetched ``/robots.txt`` in the hour is
            ``suspected_bot``.
        bot_empty_user_agent: a line whose format has a user-agent field, empty or ``-``, is
            ``suspected_bot``.

    The three are part of every hour's fingerprint (the classifier's version): changing one
    makes the hours due again.
    """

    visitor_key: str
    job_budget_per_table_per_day: int = JobBudget().per_table_per_day
    max_rejected_share: float = DEFAULT_MAX_REJECTED_SHARE
    reports_url: str = ""
    lines_per_pass: int = DEFAULT_LINES_PER_PASS
    lookback_days: int = 0
    max_pages_per_visitor_hour: int | None = DEFAULT_MAX_PAGES_PER_VISITOR_HOUR
    bot_robots_txt: bool = True
    bot_empty_user_agent: bool = True

    def budget(self) -> JobBudget:
        return JobBudget(per_table_per_day=self.job_budget_per_table_per_day)

    def traffic_thresholds(self) -> ClassificationThresholds:
        """The traffic classification's configuration (ValueError if a value is invalid)."""
        return ClassificationThresholds(
            max_pages_per_visitor_hour=self.max_pages_per_visitor_hour,
            robots_txt_marks_visitor=self.bot_robots_txt,
            empty_user_agent_marks_line=self.bot_empty_user_agent,
        )


def build_resources(env: str) -> dict[str, Any]:
    """The resources of ``env`` (``local`` or ``prod``); ValueError for another."""
    if env == "local":
        home = settings.local_home()
        key = settings.visitor_key("local")
        if key == settings.LOCAL_VISITOR_KEY:
            logging.getLogger(__name__).info(
                "BQ_PLATFORM_VISITOR_KEY is not set: using the local development key"
            )
        return {
            "object_store": LocalObjectStoreResource(root=str(settings.local_lake())),
            "warehouse": DuckDBWarehouseResource(path=str(home / "warehouse.duckdb")),
            "spark": hourly_build(_spark_config(settings.spark_master("local[*]"))),
            "settings": PipelineSettings(visitor_key=key, **settings.pipeline_settings("local")),
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
                location=settings.bigquery_location(),
                job_id_prefix=settings.bigquery_job_prefix(),
            ),
            "spark": hourly_build(
                _spark_config(
                    settings.spark_master("yarn"),
                    shuffle_partitions=settings.shuffle_partitions(64),
                )
            ),
            "settings": PipelineSettings(
                visitor_key=dg.EnvVar("BQ_PLATFORM_VISITOR_KEY"),
                **settings.pipeline_settings("prod"),
            ),
        }
    raise settings.unknown_environment(env)


def _spark_config(master: str, shuffle_partitions: int = 8) -> dict[str, Any]:
    """:func:`~bq_platform.lib.hourly_build.spark.spark_config` with the environment's driver memory
    and verbosity."""
    return spark_config(
        master,
        shuffle_partitions,
        verbose=settings.spark_verbose(),
        driver_memory=settings.spark_driver_memory(),
    )


def resolved(resource: R) -> R:
    """``resource`` with each ``dg.EnvVar`` field replaced by the variable's value, read now.

    For code outside a Dagster run (``bq-platform run``'s planner and summary): Dagster resolves
    an ``EnvVar`` only when a run initializes the resource; read directly, the field is the
    variable's name. Raises ValueError naming every variable that is unset or empty.
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
        resources=build_resources(settings.env_name()),
        executor=dg.in_process_executor,
    )
