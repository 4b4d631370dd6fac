"""``bq-platform plan``: the BigQuery requests a production run would send, before it runs.

Reads the production settings from the environment (``BQ_PLATFORM_GCP_PROJECT``,
``BQ_PLATFORM_BQ_DATASET``, ``BQ_PLATFORM_BUCKET``, optional ``BQ_PLATFORM_BQ_LOCATION``,
``BQ_PLATFORM_BQ_JOB_PREFIX``, ``BQ_PLATFORM_JOB_BUDGET``, ``BQ_PLATFORM_LOOKBACK_DAYS``),
builds the production adapter with a recording transport
(:mod:`bq_platform.lib.warehouse.recording`) and runs the publish protocol in plan mode
(:mod:`bq_platform.lib.publish.plan`).

- Online (default, ``BQ_PLATFORM_ENV=prod``): lists the bucket and reads BigQuery's tables and
  jobs with Application Default Credentials; submits nothing, runs no query.
- ``--offline``: no credentials, no network. Reads the built hours of the local lake of
  ``make run`` (``$BQ_PLATFORM_HOME/lake``) and renders the requests into an empty dataset,
  with ``gs://$BQ_PLATFORM_BUCKET/...`` URIs.
"""

import datetime as dt
import os
import sys

import click

from bq_platform.lib.core.hours import day_hours, hours_between, parse_hour_label

_REQUIRED = ("BQ_PLATFORM_GCP_PROJECT", "BQ_PLATFORM_BQ_DATASET", "BQ_PLATFORM_BUCKET")


def _settings() -> dict[str, str]:
    missing = [name for name in _REQUIRED if not os.environ.get(name)]
    if os.environ.get("BQ_PLATFORM_ENV", "local") != "prod" or missing:
        raise click.UsageError(
            "plan renders the requests of a production run: set BQ_PLATFORM_ENV=prod and "
            + ", ".join(_REQUIRED)
            + (f" (missing: {', '.join(missing)})" if missing else "")
        )
    return {name: os.environ[name] for name in _REQUIRED}


@click.command()
@click.option("--start", default=None, help="First UTC hour, YYYY-MM-DDTHH (inclusive).")
@click.option("--end", default=None, help="Last UTC hour, YYYY-MM-DDTHH (inclusive).")
@click.option("--json", "as_json", is_flag=True, help="One JSON request per line.")
@click.option("--offline", is_flag=True, help="No credentials or network: use the local lake.")
def plan(start: str | None, end: str | None, as_json: bool, offline: bool) -> None:
    """Print every table and job request a production run of these hours would send.

    Default hours: every landed hour (of the days from ``BQ_PLATFORM_LOOKBACK_DAYS`` days ago
    on, when it is set). Exit status 1 if a table would pass its daily budget.
    """
    import google.auth
    import google.auth.transport.requests

    from bq_platform.defs.resources import build_resources
    from bq_platform.settings import local_lake
    from bq_platform.lib.storage.gcs import GCSObjectStore, storage_client
    from bq_platform.lib.storage.local import LocalObjectStore
    from bq_platform.lib.planning import scan_window
    from bq_platform.lib.publish.plan import build_plan, describe
    from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse
    from bq_platform.lib.warehouse.bigquery.client import bigquery_client
    from bq_platform.lib.warehouse.recording import RecordingSession

    settings = _settings()
    try:  # the deployment's own settings: job budget, lookback window (validated there)
        pipeline = build_resources("prod")["settings"]
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    project, dataset = settings["BQ_PLATFORM_GCP_PROJECT"], settings["BQ_PLATFORM_BQ_DATASET"]
    bucket = settings["BQ_PLATFORM_BUCKET"]
    location = os.environ.get("BQ_PLATFORM_BQ_LOCATION", "US")
    if offline:
        store = GsUriStore(LocalObjectStore(str(local_lake())), bucket)
        session = RecordingSession(offline=True, location=location)
        credentials = google.auth.credentials.AnonymousCredentials()
    else:
        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )
        store = GCSObjectStore(bucket, storage_client(project))
        inner = google.auth.transport.requests.AuthorizedSession(credentials)
        session = RecordingSession(inner, offline=False, location=location)
    client = bigquery_client(project, location, credentials=credentials, http=session)
    warehouse = BigQueryWarehouse(
        client,
        project,
        dataset,
        location=location,
        job_id_prefix=os.environ.get("BQ_PLATFORM_BQ_JOB_PREFIX", ""),
    )
    if start or end:
        if not (start and end):
            raise click.UsageError("--start and --end go together")
        hours = hours_between(
            parse_hour_label(start), parse_hour_label(end) + dt.timedelta(hours=1)
        )
    else:  # the days the automation would plan (BQ_PLATFORM_LOOKBACK_DAYS)
        hours = [h for d in scan_window(store, pipeline.lookback_days).days() for h in day_hours(d)]
    result = build_plan(
        warehouse,
        store,
        hours,
        require_partition_filter=True,
        budget=pipeline.budget(),
    )
    if as_json:
        for request in session.requests:
            click.echo(request.to_json())
    else:
        for line in describe(result):
            click.echo(line)
    over = result.over_budget()
    if over:
        click.echo(f"over the daily job budget: {', '.join(over)}", err=True)
        sys.exit(1)


class GsUriStore:
    """A read-only view of a local lake whose URIs are rendered as ``gs://<bucket>/<key>``.

    ``plan --offline`` reads the local lake of ``make run`` but must print the URIs a
    production run would send (the production store's keys are the same).
    """

    def __init__(self, inner: object, bucket: str) -> None:
        self._inner = inner
        self.bucket = bucket

    def uri(self, key: str) -> str:
        return f"gs://{self.bucket}/{key}"

    def __getattr__(self, name: str) -> object:
        if name.startswith("write") or name.startswith("delete"):
            raise AttributeError(f"plan --offline never writes ({name})")
        return getattr(self._inner, name)
