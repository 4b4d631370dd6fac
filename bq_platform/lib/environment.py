"""The deployment's settings that plain code needs, read from the environment without Dagster.

One answer each, used by the Dagster definitions (``defs/partitions.py``, ``defs/resources.py``)
and by the commands that need no Dagster at all (``bq-platform land`` / ``land-tree`` /
``deadletters``):

- :func:`env_name`: ``BQ_PLATFORM_ENV``, ``local`` (default) or ``prod``;
- :func:`local_home`: ``BQ_PLATFORM_HOME``, the local data folder (default ``./.bq_platform``);
- :func:`first_hour`: ``BQ_PLATFORM_FIRST_HOUR``, the first hourly partition;
- :func:`object_store`: the lake of an environment (a folder under the local home, or the GCS
  bucket ``BQ_PLATFORM_BUCKET`` of project ``BQ_PLATFORM_GCP_PROJECT``).

Why not through the Dagster resources: importing Dagster and the Spark resource costs ~1 s of
CPU per process (``python -X importtime``: ``dagster`` 0.97 s, ``dagster_pyspark`` 0.3-0.6 s
more), and ``land-tree`` paid it in its main process and again in each landing worker, the
first for the partitions' first hour, the others for the store: 1.6-2.0 s of a 1x ``land``'s
7.6-10 s wall (issue 9, docs/PERFORMANCE.md). And a production resource's ``dg.EnvVar`` field
is resolved only inside a Dagster run: read outside one, it is the variable's *name*, so the
CLI would have landed into a bucket called ``BQ_PLATFORM_BUCKET``.
"""

import datetime as dt
import os
from pathlib import Path

from bq_platform.lib.hours import parse_hour
from bq_platform.lib.objectstore.base import ObjectStore

ENVIRONMENTS: tuple[str, ...] = ("local", "prod")
#: The first hourly partition of the bundled logs (the default of ``BQ_PLATFORM_FIRST_HOUR``).
DEFAULT_FIRST_HOUR = "1995-08-01T00"
#: The production lake's variables: GCP project, then bucket.
GCS_VARIABLES: tuple[str, str] = ("BQ_PLATFORM_GCP_PROJECT", "BQ_PLATFORM_BUCKET")


def env_name() -> str:
    """``BQ_PLATFORM_ENV``: ``local`` (the default when unset or empty) or ``prod``.

    Raises:
        ValueError: for any other value, naming it.
    """
    env = os.environ.get("BQ_PLATFORM_ENV") or "local"
    if env not in ENVIRONMENTS:
        raise ValueError(f"BQ_PLATFORM_ENV must be 'local' or 'prod', got {env!r}")
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
            (:func:`~bq_platform.lib.hours.parse_hour`).
    """
    return parse_hour(os.environ.get("BQ_PLATFORM_FIRST_HOUR") or DEFAULT_FIRST_HOUR)


def object_store(env: str) -> ObjectStore:
    """The lake of ``env``: what ``defs/resources.build_resources(env)``'s object store gives
    inside a run (``test_environment.py`` compares them).

    ``local``: a :class:`~bq_platform.lib.objectstore.local.LocalObjectStore` on
    :func:`local_lake`. ``prod``: a :class:`~bq_platform.lib.objectstore.gcs.GCSObjectStore` on
    the bucket ``BQ_PLATFORM_BUCKET``, with a client of project ``BQ_PLATFORM_GCP_PROJECT``
    (Application Default Credentials). Build one per process: a GCS client must not cross a
    ``fork`` (:mod:`bq_platform.lib.landing_tree`).

    Raises:
        ValueError: if ``env`` is neither, or a production variable is unset or empty (named).
    """
    if env == "local":
        from bq_platform.lib.objectstore.local import LocalObjectStore

        return LocalObjectStore(str(local_lake()))
    if env == "prod":
        missing = [name for name in GCS_VARIABLES if not os.environ.get(name)]
        if missing:
            raise ValueError(
                f"BQ_PLATFORM_ENV=prod: set {', '.join(missing)} (README, 'Running on Google "
                "Cloud')"
            )
        from bq_platform.lib.objectstore.gcs import GCSObjectStore, storage_client

        project, bucket = (os.environ[name] for name in GCS_VARIABLES)
        return GCSObjectStore(bucket, storage_client(project))
    raise ValueError(f"BQ_PLATFORM_ENV must be 'local' or 'prod', got {env!r}")
