"""What every asset carries in the UI: owners, each partition's own numbers (metadata returned
with ``MaterializeResult`` would be copied onto every hour of a range), and links from job IDs
to the BigQuery console (``?project=P&j=bq:LOCATION:JOB_ID&page=queryresults``).
"""

import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg

from bq_platform.defs.resources import BigQueryWarehouseResource, WarehouseResource
from bq_platform.lib.core.reporting import STEP_TOTALS

OWNERS = ["team:data-platform"]
"""Owners of every asset of the pipeline (Dagster accepts an email or ``team:<name>``)."""

CONSOLE_URL = "https://console.cloud.google.com/bigquery"


def partition_results(
    context: dg.AssetExecutionContext,
    by_partition: Mapping[str, Mapping[str, Any]],
    step_totals: Mapping[str, Any],
    asset_key: dg.AssetKey | None = None,
) -> dg.MaterializeResult:
    """The step's ``MaterializeResult`` of ``asset_key`` (default: the step's only asset):
    each partition of the run gets its metadata from ``by_partition``, then the step's totals
    under :data:`STEP_TOTALS`.

    Raises:
        dagster.DagsterInvariantViolationError: if a key is not a partition of this run, or
            ``asset_key`` is None in a step of several assets.
    """
    totals = dg.MetadataValue.json(dict(step_totals))
    for partition in {*context.partition_keys, *by_partition}:
        metadata = {**by_partition.get(partition, {}), STEP_TOTALS: totals}
        context.add_asset_metadata(metadata, asset_key=asset_key, partition_key=partition)
    return dg.MaterializeResult(asset_key=asset_key)


def bigquery_job_url(project: str, location: str, job_id: str) -> str:
    """BigQuery console URL of one job (``job_id`` as sent to BigQuery, prefix included)."""
    query = urllib.parse.urlencode(
        {"project": project, "j": f"bq:{location}:{job_id}", "page": "queryresults"}, safe=":"
    )
    return f"{CONSOLE_URL}?{query}"


def _console(warehouse: WarehouseResource, job_id: str) -> tuple[str, str | None]:
    """The job ID as sent (prefix included) and its console URL (None locally)."""
    if isinstance(warehouse, BigQueryWarehouseResource):
        sent = f"{warehouse.job_id_prefix}{job_id}"
        return sent, bigquery_job_url(warehouse.project, warehouse.location, sent)
    return job_id, None


def job_link(warehouse: WarehouseResource, job_id: str) -> dg.MetadataValue:
    """One job ID: a link to the BigQuery console in production, plain text locally."""
    _, url = _console(warehouse, job_id)
    return dg.MetadataValue.url(url) if url else dg.MetadataValue.text(job_id)


def job_links_markdown(
    warehouse: WarehouseResource, jobs: Iterable[tuple[str, str, str]], limit: int = 48
) -> dg.MetadataValue:
    """A Markdown list of ``(table, job_id, action)``; IDs link to the console in production."""
    jobs = list(jobs)
    lines = []
    for table, job_id, action in jobs[:limit]:
        sent, url = _console(warehouse, job_id)
        shown = f"[{sent}]({url})" if url else f"`{sent}`"
        lines.append(f"- `{table}`: {shown} ({action})")
    if len(jobs) > limit:
        lines.append(f"- ... and {len(jobs) - limit} more")
    return dg.MetadataValue.md("\n".join(lines) or "(no jobs)")
