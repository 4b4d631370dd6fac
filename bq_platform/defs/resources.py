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
:func:`bq_platform.settings.object_store`; ``test_environment.py`` holds the two to
the same folder or bucket.
"""

import abc
import logging
import os
from typing import Any, TypeVar

import dagster as dg
from pydantic import PrivateAttr

from bq_platform.defs.pageviews.spark_build import hourly_build
from bq_platform import settings as environment
from bq_platform.lib.build.read import DEFAULT_LINES_PER_PASS
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.quality.rejected_share import DEFAULT_MAX_REJECTED_SHARE
from bq_platform.lib.publish.quota import JobBudget
from bq_platform.lib.build.spark import spark_config
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
    """Jobs run side by side, each on one core (``DuckDBWarehouse(concurrent_jobs=...)``):
    a step's stage loads overlap as BigQuery's do (issue 9)."""

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
        from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse
        from bq_platform.lib.warehouse.bigquery.client import bigquery_client

        client = bigquery_client(self.project, self.location, api_endpoint=self.api_endpoint)
        return BigQueryWarehouse(
            client,
            self.project,
            self.dataset,
            location=self.location,
            job_id_prefix=self.job_id_prefix,
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
            (``BQ_PLATFORM_MAX_REJECTED_SHARE``; see :mod:`bq_platform.lib.quality.rejected_share`).
        reports_url: base URL at which the operator's browser reads the object store's
            ``reports/`` folder (``BQ_PLATFORM_REPORTS_URL``); when set, the completeness
            report shows its picture in the Dagster UI (Dagster's Markdown shows ``http(s)``
            images only). Local default
            :data:`~bq_platform.settings.LOCAL_REPORTS_URL`, where ``make dev`` serves the
            folder; on GCS use the authenticated browser URL
            ``https://storage.cloud.google.com/<bucket>/reports``, which asks the browser's user
            to sign in and needs ``storage.objects.get`` (cloud.google.com/storage/docs/
            request-endpoints, "authenticated browser downloads").
        lines_per_pass: the most source lines one Spark pass of the hourly build reads
            (``BQ_PLATFORM_LINES_PER_PASS``; default
            :data:`~bq_platform.lib.build.read.DEFAULT_LINES_PER_PASS`, sized for a 2g local
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
            "spark": hourly_build(
                spark_config(os.environ.get("BQ_PLATFORM_SPARK_MASTER", "local[*]"))
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
            "spark": hourly_build(
                spark_config(
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
    summary, :meth:`bq_platform.cli.runner.PipelineRunner.from_environment`). Dagster resolves an
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
