"""The deployment's settings that plain code needs, read from the environment without Dagster.

One answer each, used by the Dagster definitions (``defs/partitions.py``, ``defs/resources.py``)
and by the commands that need no Dagster at all (``bq-platform land`` / ``land-tree`` /
``deadletters``):

- :func:`env_name`: ``BQ_PLATFORM_ENV``, ``local`` (default) or ``prod``;
- :func:`local_home`: ``BQ_PLATFORM_HOME``, the local data folder (default ``./.bq_platform``);
- :func:`first_hour`: ``BQ_PLATFORM_FIRST_HOUR``, the first hourly partition;
- :func:`object_store`: the lake of an environment (a folder under the local home, or the GCS
  bucket ``BQ_PLATFORM_BUCKET`` of project ``BQ_PLATFORM_GCP_PROJECT``);
- :func:`pipeline_settings`: the pipeline's whole numbers, rejected-share limit and reports URL,
  validated (the fields of ``defs/resources.PipelineSettings``);
- :func:`visitor_key`: ``BQ_PLATFORM_VISITOR_KEY``, the visitor-ID key (a fixed development key
  when unset locally; required in production).

Why not through the Dagster resources: ``land-tree`` imported ``dagster`` in its process for
the partitions' first hour (0.97 s, ``python -X importtime``) and ``defs/resources.py`` in each
landing worker for the store (0.44-0.57 s, mostly ``dagster_pyspark``); without them a 1x
``land-tree`` took 7.8-9.3 s against 9.5-11.9 s on a slow disk, 5.0-5.7 against 6.8-8.4 s of
user CPU (issue 9, docs/PERFORMANCE.md). And a production resource's ``dg.EnvVar`` field
is resolved only inside a Dagster run: read outside one, it is the variable's *name*, so the
CLI would have landed into a bucket called ``BQ_PLATFORM_BUCKET``.
"""

import datetime as dt
import os
from pathlib import Path
from typing import Any

from bq_platform.lib.core.hours import parse_hour
from bq_platform.lib.storage.base import ObjectStore

ENVIRONMENTS: tuple[str, ...] = ("local", "prod")
#: The first hourly partition of the bundled logs (the default of ``BQ_PLATFORM_FIRST_HOUR``).
DEFAULT_FIRST_HOUR = "1995-08-01T00"
#: The visitor-ID key of the local environment when ``BQ_PLATFORM_VISITOR_KEY`` is unset; never
#: used when ``BQ_PLATFORM_ENV=prod`` (:func:`visitor_key`).
LOCAL_VISITOR_KEY = "bq-platform-local-development-key"
#: The production lake's variables: GCP project, then bucket (``defs/resources.py`` names the
#: same two in its ``dg.EnvVar`` fields; ``test_environment.py`` compares the stores).
_GCS_VARIABLES: tuple[str, str] = ("BQ_PLATFORM_GCP_PROJECT", "BQ_PLATFORM_BUCKET")


def unknown_environment(env: str) -> ValueError:
    """The one error for a ``BQ_PLATFORM_ENV`` outside :data:`ENVIRONMENTS`, naming it."""
    return ValueError(f"BQ_PLATFORM_ENV must be 'local' or 'prod', got {env!r}")


def _unset_in_production(names: list[str]) -> ValueError:
    """The one error for production variables that are unset or empty, naming them."""
    return ValueError(
        f"BQ_PLATFORM_ENV=prod: set {', '.join(names)} (README, 'Running on Google Cloud')"
    )


def env_name() -> str:
    """``BQ_PLATFORM_ENV``: ``local`` (the default when unset or empty) or ``prod``.

    Raises:
        ValueError: for any other value, naming it.
    """
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
    """The first hourly partition, UTC: ``BQ_PLATFORM_FIRST_HOUR`` (``YYYY-MM-DDTHH``; the
    pre-issue-8 spelling ``YYYY-MM-DD-HH:00`` too), default :data:`DEFAULT_FIRST_HOUR`.

    Raises:
        ValueError: if the variable is set to something else
            (:func:`~bq_platform.lib.core.hours.parse_hour`).
    """
    return parse_hour(os.environ.get("BQ_PLATFORM_FIRST_HOUR") or DEFAULT_FIRST_HOUR)


def object_store(env: str) -> ObjectStore:
    """The lake of ``env``: what ``defs/resources.build_resources(env)``'s object store gives
    inside a run (``test_environment.py`` compares them).

    ``local``: a :class:`~bq_platform.lib.storage.local.LocalObjectStore` on
    :func:`local_lake`. ``prod``: a :class:`~bq_platform.lib.storage.gcs.GCSObjectStore` on
    the bucket ``BQ_PLATFORM_BUCKET``, with a client of project ``BQ_PLATFORM_GCP_PROJECT``
    (Application Default Credentials). Build one per process: a GCS client must not cross a
    ``fork`` (:mod:`bq_platform.lib.landing.producer.tree`).

    Raises:
        ValueError: if ``env`` is neither, or a production variable is unset or empty (named).
    """
    if env == "local":
        from bq_platform.lib.storage.local import LocalObjectStore

        return LocalObjectStore(str(local_lake()))
    if env == "prod":
        missing = [name for name in _GCS_VARIABLES if not os.environ.get(name)]
        if missing:
            raise _unset_in_production(missing)
        from bq_platform.lib.storage.gcs import GCSObjectStore, storage_client

        project, bucket = (os.environ[name] for name in _GCS_VARIABLES)
        return GCSObjectStore(bucket, storage_client(project))
    raise unknown_environment(env)


def visitor_key(env: str) -> str:
    """The key of the visitor-ID HMAC (:mod:`bq_platform.lib.core.pseudonymize`):
    ``BQ_PLATFORM_VISITOR_KEY``, or locally :data:`LOCAL_VISITOR_KEY` when it is unset or empty.

    Raises:
        ValueError: if ``env`` is ``prod`` and the variable is unset or empty (a production
            build must never key visitors with the development key), or ``env`` is unknown.
    """
    key = os.environ.get("BQ_PLATFORM_VISITOR_KEY")
    if env == "local":
        return key or LOCAL_VISITOR_KEY
    if env == "prod":
        if not key:
            raise _unset_in_production(["BQ_PLATFORM_VISITOR_KEY"])
        return key
    raise unknown_environment(env)


def pipeline_settings(env: str) -> dict[str, Any]:
    """The fields of ``defs/resources.PipelineSettings`` that the environment sets, besides the
    visitor key: ``BQ_PLATFORM_JOB_BUDGET``, ``BQ_PLATFORM_LINES_PER_PASS``,
    ``BQ_PLATFORM_LOOKBACK_DAYS``, ``BQ_PLATFORM_MAX_REJECTED_SHARE`` and
    ``BQ_PLATFORM_REPORTS_URL`` (``local`` default :data:`LOCAL_REPORTS_URL`); an unset one is
    left to the field's default.

    Raises:
        ValueError: naming the variable, if one is malformed.
    """
    return {
        **_whole_numbers(),
        **_quality(),
        **_reports(LOCAL_REPORTS_URL if env == "local" else ""),
    }


def _whole_numbers() -> dict[str, int]:
    """``BQ_PLATFORM_JOB_BUDGET`` (jobs per table per UTC day),
    ``BQ_PLATFORM_LINES_PER_PASS`` (lines per Spark pass) and ``BQ_PLATFORM_LOOKBACK_DAYS``
    (days planned), when set.

    Raises:
        ValueError: naming the variable, if one is not a positive whole number.
    """
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


#: Where ``make dev`` serves the local ``lake/reports`` folder (``REPORTS_PORT`` in the Makefile).
LOCAL_REPORTS_URL = "http://127.0.0.1:3001"


def _reports(default: str = "") -> dict[str, str]:
    """``BQ_PLATFORM_REPORTS_URL`` (see ``defs/resources.PipelineSettings``; set but empty: no
    picture in the UI), else ``default``."""
    value = os.environ.get("BQ_PLATFORM_REPORTS_URL")
    value = default if value is None else value.strip()
    return {"reports_url": value} if value else {}


def _quality() -> dict[str, float]:
    """``BQ_PLATFORM_MAX_REJECTED_SHARE`` (a share 0..1, e.g. ``0.05``), when set.

    Raises:
        ValueError: naming the variable, if it is not a number between 0 and 1.
    """
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
