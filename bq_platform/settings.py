"""The deployment's settings: the one reader of the ``BQ_PLATFORM_*`` environment variables
(README, "Configuration").

Plain functions, importable without Dagster, that read the environment when called, never at
import; ``lib/`` gets the values as arguments. A resource's ``dg.EnvVar`` field is resolved only
inside a Dagster run (outside one it is the variable's name), so code outside a run reads here.
"""

import dataclasses
import datetime as dt
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bq_platform.lib.core.hours import parse_hour
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.traffic.thresholds import ClassificationThresholds

ENVIRONMENTS: tuple[str, ...] = ("local", "prod")
#: The first hourly partition of the bundled logs (the default of ``BQ_PLATFORM_FIRST_HOUR``).
DEFAULT_FIRST_HOUR = "1995-08-01T00"
#: The local visitor-ID key when ``BQ_PLATFORM_VISITOR_KEY`` is unset; never used in ``prod``.
LOCAL_VISITOR_KEY = "bq-platform-local-development-key"
#: Where ``make dev`` serves the local ``lake/reports`` folder (``REPORTS_PORT`` in the Makefile).
LOCAL_REPORTS_URL = "http://127.0.0.1:3001"
#: The production lake's variables, project then bucket (also ``defs/resources.py``'s).
GCS_VARIABLES: tuple[str, str] = ("BQ_PLATFORM_GCP_PROJECT", "BQ_PLATFORM_BUCKET")
#: What a production warehouse needs besides its defaults: project, dataset, bucket.
BIGQUERY_VARIABLES: tuple[str, ...] = (
    "BQ_PLATFORM_GCP_PROJECT",
    "BQ_PLATFORM_BQ_DATASET",
    "BQ_PLATFORM_BUCKET",
)
#: ``BQ_PLATFORM_BUILD``'s values, the default first (``defs/pageviews/spark_build.py``).
BUILDS: tuple[str, ...] = ("in-process", "spark-submit")
#: Set (to any non-empty value) by ``bq-platform -v``: Spark's console log in full.
SPARK_VERBOSE = "BQ_PLATFORM_SPARK_VERBOSE"
#: The page-rate threshold's variable: a positive whole number, or :data:`OFF`.
MAX_PAGES_VARIABLE = "BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR"
#: The switches of the traffic heuristics: variable -> ``PipelineSettings`` field, each
#: :data:`ON` or :data:`OFF` (unset or empty: on).
HEURISTIC_SWITCHES: tuple[tuple[str, str], ...] = (
    ("BQ_PLATFORM_BOT_ROBOTS_TXT", "bot_robots_txt"),
    ("BQ_PLATFORM_BOT_EMPTY_USER_AGENT", "bot_empty_user_agent"),
)
ON, OFF = "on", "off"


def unknown_environment(env: str) -> ValueError:
    """The one error for a ``BQ_PLATFORM_ENV`` outside :data:`ENVIRONMENTS`, naming it."""
    return ValueError(f"BQ_PLATFORM_ENV must be 'local' or 'prod', got {env!r}")


def _unset_in_production(names: Sequence[str]) -> ValueError:
    """The one error for production variables that are unset or empty, naming them."""
    return ValueError(
        f"BQ_PLATFORM_ENV=prod: set {', '.join(names)} (README, 'Running on Google Cloud')"
    )


def unset_variables(names: Sequence[str]) -> list[str]:
    """Those of ``names`` that are unset or empty, in order."""
    return [name for name in names if not os.environ.get(name)]


def env_name() -> str:
    """``BQ_PLATFORM_ENV``: ``local`` (default, also when empty) or ``prod``; else ValueError."""
    env = os.environ.get("BQ_PLATFORM_ENV") or "local"
    if env not in ENVIRONMENTS:
        raise unknown_environment(env)
    return env


def local_home() -> Path:
    """Folder of the local data (``BQ_PLATFORM_HOME``, default ``./.bq_platform``), absolute."""
    return Path(os.environ.get("BQ_PLATFORM_HOME", ".bq_platform")).resolve()


def local_lake() -> Path:
    """The local environment's lake (landing zone, Parquet, manifests): ``<home>/lake``."""
    return local_home() / "lake"


def first_hour() -> dt.datetime:
    """The first hourly partition, UTC: ``BQ_PLATFORM_FIRST_HOUR`` (``YYYY-MM-DDTHH`` or
    ``YYYY-MM-DD-HH:00``), default :data:`DEFAULT_FIRST_HOUR`; ValueError if malformed."""
    return parse_hour(os.environ.get("BQ_PLATFORM_FIRST_HOUR") or DEFAULT_FIRST_HOUR)


def gcp_project() -> str | None:
    """``BQ_PLATFORM_GCP_PROJECT``, or None when unset or empty."""
    return os.environ.get("BQ_PLATFORM_GCP_PROJECT") or None


def object_store(env: str) -> ObjectStore:
    """The lake of ``env``, as the ``object_store`` resource gives it in a run: ``local``,
    :func:`local_lake`; ``prod``, the bucket of :data:`GCS_VARIABLES`. Build one per process: a
    GCS client must not cross a ``fork``. ValueError for another ``env`` or an unset variable."""
    if env == "local":
        from bq_platform.lib.storage.local import LocalObjectStore

        return LocalObjectStore(str(local_lake()))
    if env == "prod":
        missing = unset_variables(GCS_VARIABLES)
        if missing:
            raise _unset_in_production(missing)
        from bq_platform.lib.storage.gcs import GCSObjectStore, storage_client

        project, bucket = (os.environ[name] for name in GCS_VARIABLES)
        return GCSObjectStore(bucket, storage_client(project))
    raise unknown_environment(env)


@dataclasses.dataclass(frozen=True)
class BigQueryTarget:
    """Where production publishes: the ``project`` that runs the jobs, the ``dataset``, the
    lake's ``bucket``, the dataset's ``location`` and the ``job_id_prefix`` of every job ID."""

    project: str
    dataset: str
    bucket: str
    location: str
    job_id_prefix: str


def bigquery_location() -> str:
    """``BQ_PLATFORM_BQ_LOCATION``: the dataset's location, default ``US``."""
    return os.environ.get("BQ_PLATFORM_BQ_LOCATION", "US")


def bigquery_job_prefix() -> str:
    """``BQ_PLATFORM_BQ_JOB_PREFIX``: prepended to every BigQuery job ID, default empty."""
    return os.environ.get("BQ_PLATFORM_BQ_JOB_PREFIX", "")


def bigquery_target() -> BigQueryTarget:
    """The production warehouse; ValueError naming the unset :data:`BIGQUERY_VARIABLES`."""
    missing = unset_variables(BIGQUERY_VARIABLES)
    if missing:
        raise _unset_in_production(missing)
    project, dataset, bucket = (os.environ[name] for name in BIGQUERY_VARIABLES)
    return BigQueryTarget(
        project=project,
        dataset=dataset,
        bucket=bucket,
        location=bigquery_location(),
        job_id_prefix=bigquery_job_prefix(),
    )


def visitor_key(env: str) -> str:
    """The visitor-ID HMAC key: ``BQ_PLATFORM_VISITOR_KEY``, locally :data:`LOCAL_VISITOR_KEY`
    when unset. ValueError if it is unset in ``prod`` (production must never use the
    development key) or ``env`` is unknown."""
    key = os.environ.get("BQ_PLATFORM_VISITOR_KEY")
    if env == "local":
        return key or LOCAL_VISITOR_KEY
    if env == "prod":
        if not key:
            raise _unset_in_production(["BQ_PLATFORM_VISITOR_KEY"])
        return key
    raise unknown_environment(env)


def pipeline_settings(env: str) -> dict[str, Any]:
    """The ``PipelineSettings`` fields the environment sets besides the visitor key (unset:
    the field's default; ``local`` reports URL: :data:`LOCAL_REPORTS_URL`). ValueError names a
    malformed variable."""
    return {
        **_whole_numbers(),
        **_traffic(),
        **_quality(),
        **_reports(LOCAL_REPORTS_URL if env == "local" else ""),
    }


def _whole_numbers() -> dict[str, int]:
    """``BQ_PLATFORM_JOB_BUDGET`` (jobs per table per UTC day), ``..._LINES_PER_PASS`` and
    ``..._LOOKBACK_DAYS`` (days), when set; ValueError unless positive whole numbers."""
    out = {}
    for variable, field in (
        ("BQ_PLATFORM_JOB_BUDGET", "job_budget_per_table_per_day"),
        ("BQ_PLATFORM_LINES_PER_PASS", "lines_per_pass"),
        ("BQ_PLATFORM_LOOKBACK_DAYS", "lookback_days"),
    ):
        value = os.environ.get(variable)
        if not value:
            continue
        if not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"{variable} must be a positive whole number, got {value!r}")
        out[field] = int(value)
    return out


def _traffic() -> dict[str, Any]:
    """The traffic heuristics' settings that are set: ``max_pages_per_visitor_hour``
    (:data:`MAX_PAGES_VARIABLE`: a positive whole number, or ``off``: None) and each switch of
    :data:`HEURISTIC_SWITCHES` (``on``: True, ``off``: False; any case). ValueError names the
    variable and the values it allows."""
    out: dict[str, Any] = {}
    value = (os.environ.get(MAX_PAGES_VARIABLE) or "").strip()
    if value.lower() == OFF:
        out["max_pages_per_visitor_hour"] = None
    elif value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(
                f"{MAX_PAGES_VARIABLE} must be a positive whole number (pages per visitor and "
                f"UTC hour) or '{OFF}', got {value!r}"
            )
        out["max_pages_per_visitor_hour"] = int(value)
    for variable, field in HEURISTIC_SWITCHES:
        value = (os.environ.get(variable) or "").strip()
        if not value:
            continue
        if value.lower() not in (ON, OFF):
            raise ValueError(f"{variable} must be '{ON}' or '{OFF}', got {value!r}")
        out[field] = value.lower() == ON
    return out


def classification_thresholds() -> ClassificationThresholds:
    """The traffic classification's configuration the environment sets (unset: the
    defaults of :class:`~bq_platform.lib.traffic.thresholds.ClassificationThresholds`);
    ValueError names a malformed variable."""
    fields = _traffic()
    defaults = ClassificationThresholds()
    return ClassificationThresholds(
        max_pages_per_visitor_hour=fields.get(
            "max_pages_per_visitor_hour", defaults.max_pages_per_visitor_hour
        ),
        robots_txt_marks_visitor=fields.get("bot_robots_txt", defaults.robots_txt_marks_visitor),
        empty_user_agent_marks_line=fields.get(
            "bot_empty_user_agent", defaults.empty_user_agent_marks_line
        ),
    )


def _reports(default: str = "") -> dict[str, str]:
    """``BQ_PLATFORM_REPORTS_URL`` (set but empty: no picture in the UI), else ``default``."""
    value = os.environ.get("BQ_PLATFORM_REPORTS_URL")
    value = default if value is None else value.strip()
    return {"reports_url": value} if value else {}


def _quality() -> dict[str, float]:
    """``BQ_PLATFORM_MAX_REJECTED_SHARE`` (0..1, e.g. ``0.05``) when set; else ValueError."""
    value = os.environ.get("BQ_PLATFORM_MAX_REJECTED_SHARE")
    if not value:
        return {}
    try:
        share = float(value)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise ValueError(
            f"BQ_PLATFORM_MAX_REJECTED_SHARE must be a share between 0 and 1 (0.05 = 5%), "
            f"got {value!r}"
        )
    return {"max_rejected_share": share}


def application_environment(
    *, visitor_key: str, lines_per_pass: int, thresholds: ClassificationThresholds
) -> dict[str, str]:
    """The variables that hand these settings to a child process (the Spark application of
    :mod:`bq_platform.spark_apps.build_hours`, which reads them back here, the traffic
    ``thresholds`` with :func:`classification_thresholds`)."""
    rate = thresholds.max_pages_per_visitor_hour
    switches = (thresholds.robots_txt_marks_visitor, thresholds.empty_user_agent_marks_line)
    return {
        "BQ_PLATFORM_VISITOR_KEY": visitor_key,
        "BQ_PLATFORM_LINES_PER_PASS": str(lines_per_pass),
        MAX_PAGES_VARIABLE: OFF if rate is None else str(rate),
        **{
            variable: ON if on else OFF
            for (variable, _), on in zip(HEURISTIC_SWITCHES, switches, strict=True)
        },
    }


def spark_master(default: str = "local[*]") -> str:
    """``BQ_PLATFORM_SPARK_MASTER`` (``local[N]``, ``spark://``, ``yarn``...), else ``default``."""
    return os.environ.get("BQ_PLATFORM_SPARK_MASTER", default)


def shuffle_partitions(default: int) -> int:
    """``BQ_PLATFORM_SHUFFLE_PARTITIONS`` else ``default``; ValueError if not a whole number."""
    return int(os.environ.get("BQ_PLATFORM_SHUFFLE_PARTITIONS", str(default)))


def spark_driver_memory() -> str:
    """``BQ_PLATFORM_SPARK_DRIVER_MEMORY``: ``spark.driver.memory``, default ``2g``."""
    return os.environ.get("BQ_PLATFORM_SPARK_DRIVER_MEMORY", "2g")


def spark_verbose() -> bool:
    """Whether :data:`SPARK_VERBOSE` is set: Spark's console log in full, not errors only."""
    return bool(os.environ.get(SPARK_VERBOSE))


def hourly_build() -> str:
    """``BQ_PLATFORM_BUILD``: one of :data:`BUILDS`, the first if unset/empty; else ValueError."""
    build = os.environ.get("BQ_PLATFORM_BUILD") or BUILDS[0]
    if build not in BUILDS:
        raise ValueError(f"BQ_PLATFORM_BUILD must be one of {', '.join(BUILDS)}, got {build!r}")
    return build


def spark_submit() -> str:
    """``BQ_PLATFORM_SPARK_SUBMIT``: the ``spark-submit`` program to run; empty (the default):
    the one installed with PySpark."""
    return os.environ.get("BQ_PLATFORM_SPARK_SUBMIT", "")
