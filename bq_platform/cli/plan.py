"""``bq-platform plan``: the BigQuery requests a production run would send, before it runs.

The publish protocol in plan mode (:mod:`bq_platform.lib.publish.plan`) against the production
adapter with a recording transport (:mod:`bq_platform.lib.warehouse.recording`). Online it
reads the bucket and BigQuery with Application Default Credentials and submits nothing;
``--offline`` reads the local lake of ``make run`` instead, with no credentials or network, and
renders ``gs://$BQ_PLATFORM_BUCKET/...`` URIs into an empty dataset.
"""

import datetime as dt
import sys

import click

from bq_platform import settings
from bq_platform.lib.core.hours import day_hours, hours_between, parse_hour_label


def _target() -> settings.BigQueryTarget:
    """The production warehouse, or a usage error outside a production deployment."""
    try:
        prod = settings.env_name() == "prod"
    except ValueError:
        prod = False
    missing = settings.unset_variables(settings.BIGQUERY_VARIABLES)
    if not prod or missing:
        raise click.UsageError(
            "plan renders the requests of a production run: set BQ_PLATFORM_ENV=prod and "
            + ", ".join(settings.BIGQUERY_VARIABLES)
            + (f" (missing: {', '.join(missing)})" if missing else "")
        )
    return settings.bigquery_target()


@click.command()
@click.option("--start", default=None, help="First UTC hour, YYYY-MM-DDTHH (inclusive).")
@click.option("--end", default=None, help="Last UTC hour, YYYY-MM-DDTHH (inclusive).")
@click.option("--json", "as_json", is_flag=True, help="One JSON request per line.")
@click.option("--offline", is_flag=True, help="No credentials or network: use the local lake.")
def plan(start: str | None, end: str | None, as_json: bool, offline: bool) -> None:
    """Print every table and job request a production run of these hours would send (the
    daily rollups' loads included: of ``part-*.parquet`` in their content folder while a run
    has not built them yet).

    Default hours: every landed hour (of the days from ``BQ_PLATFORM_LOOKBACK_DAYS`` days ago
    on, when it is set). Hours that `bq-platform run` holds for reclassification (unchanged
    input, another traffic classifier) are named first. Exit status 1 if a table would pass
    its daily budget.
    """
    import google.auth
    import google.auth.transport.requests

    from bq_platform.defs.resources import build_resources
    from bq_platform.lib.planning import reclassifications, reclassify_refusal, scan_window
    from bq_platform.lib.publish.plan import build_plan, describe
    from bq_platform.lib.storage.gcs import GCSObjectStore, storage_client
    from bq_platform.lib.storage.local import LocalObjectStore
    from bq_platform.lib.warehouse.bigquery.client import bigquery_client
    from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse
    from bq_platform.lib.warehouse.recording import RecordingSession

    target = _target()
    try:  # the deployment's own settings: job budget, lookback window (validated there)
        pipeline = build_resources("prod")["settings"]
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    project, dataset, location = target.project, target.dataset, target.location
    if offline:
        store = GsUriStore(LocalObjectStore(str(settings.local_lake())), target.bucket)
        session = RecordingSession(offline=True, location=location)
        credentials = google.auth.credentials.AnonymousCredentials()
    else:
        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )
        store = GCSObjectStore(target.bucket, storage_client(project))
        inner = google.auth.transport.requests.AuthorizedSession(credentials)
        session = RecordingSession(inner, offline=False, location=location)
    client = bigquery_client(project, location, credentials=credentials, http=session)
    warehouse = BigQueryWarehouse(
        client,
        project,
        dataset,
        location=location,
        job_id_prefix=target.job_id_prefix,
    )
    if start or end:
        if not (start and end):
            raise click.UsageError("--start and --end go together")
        hours = hours_between(
            parse_hour_label(start), parse_hour_label(end) + dt.timedelta(hours=1)
        )
    else:  # the days the automation would plan (BQ_PLATFORM_LOOKBACK_DAYS)
        hours = [h for d in scan_window(store, pipeline.lookback_days).days() for h in day_hours(d)]
    held = reclassifications(store, hours, pipeline.traffic_thresholds())
    if held:  # ``bq-platform run`` does not build them without --reclassify
        click.echo(f"held hours: {reclassify_refusal(held)}", err=as_json)
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
    """A read-only view of a local lake with the production store's URIs,
    ``gs://<bucket>/<key>`` (the keys are the same)."""

    def __init__(self, inner: object, bucket: str) -> None:
        self._inner = inner
        self.bucket = bucket

    def uri(self, key: str) -> str:
        return f"gs://{self.bucket}/{key}"

    def __getattr__(self, name: str) -> object:
        if name.startswith("write") or name.startswith("delete"):
            raise AttributeError(f"plan --offline never writes ({name})")
        return getattr(self._inner, name)
