"""What every asset carries in the UI: owners, each partition's own numbers, and links from job
IDs to the BigQuery console.

A run of an hourly asset covers a range of hours (24 per run in a backfill, more when
``bq-platform run`` batches days), and Dagster records one materialization per hour. Metadata
returned with ``MaterializeResult`` would be copied onto every hour, so an hour of
``pageviews_stage`` showed the rows and job IDs of the whole range (and each event carried
9-20 KB; issue 9). :func:`partition_results` gives each hour its own numbers
(``context.add_asset_metadata(..., partition_key=...)``) and the step's totals under one key,
:data:`STEP_TOTALS`, which the CLI's one line per asset reads.

``OWNERS`` is set on every asset (with ``group_name`` and ``kinds``, see
``bq_platform_tests/defs/test_definitions.py``). Job links: in production each warehouse job
ID in a materialization's metadata links to the job in the BigQuery console, the form the
console itself uses for a job (``?project=P&j=bq:LOCATION:JOB_ID&page=queryresults``); the
local DuckDB warehouse has no console, so its IDs stay plain text.
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
    each partition of the run gets its metadata from ``by_partition`` (none if missing), then
    the step's totals under :data:`STEP_TOTALS` (last, so the UI shows the hour's own numbers
    first).

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
    """The job ID as sent (prefix included) and its console URL; no URL for the local
    warehouse, which has no console."""
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
    """A Markdown list of ``(table, job_id, action)``; IDs link to the console in production.

    ``action`` is what the idempotent job runner did (submitted, adopted, skipped, ...).
    """
    jobs = list(jobs)
    lines = []
    for table, job_id, action in jobs[:limit]:
        sent, url = _console(warehouse, job_id)
        shown = f"[{sent}]({url})" if url else f"`{sent}`"
        lines.append(f"- `{table}`: {shown} ({action})")
    if len(jobs) > limit:
        lines.append(f"- ... and {len(jobs) - limit} more")
    return dg.MetadataValue.md("\n".join(lines) or "(no jobs)")
