"""What every asset carries in the UI: owners, and links from job IDs to the BigQuery console.

``OWNERS`` is set on every asset (with ``group_name`` and ``kinds``, see
``bq_platform_tests/defs/test_definitions.py``). Job links: in production each warehouse job
ID in a materialization's metadata links to the job in the BigQuery console, the form the
console itself uses for a job (``?project=P&j=bq:LOCATION:JOB_ID&page=queryresults``); the
local DuckDB warehouse has no console, so its IDs stay plain text.
"""

import urllib.parse
from collections.abc import Iterable

import dagster as dg

from bq_platform.defs.resources import BigQueryWarehouseResource, WarehouseResource

OWNERS = ["team:data-platform"]
"""Owners of every asset of the pipeline (Dagster accepts an email or ``team:<name>``)."""

CONSOLE_URL = "https://console.cloud.google.com/bigquery"


def bigquery_job_url(project: str, location: str, job_id: str) -> str:
    """BigQuery console URL of one job (``job_id`` as sent to BigQuery, prefix included)."""
    query = urllib.parse.urlencode(
        {"project": project, "j": f"bq:{location}:{job_id}", "page": "queryresults"}, safe=":"
    )
    return f"{CONSOLE_URL}?{query}"


def job_links_markdown(
    warehouse: WarehouseResource, jobs: Iterable[tuple[str, str, str]], limit: int = 48
) -> dg.MetadataValue:
    """A Markdown list of ``(table, job_id, action)``; IDs link to the console in production.

    ``action`` is what the idempotent job runner did (submitted, adopted, skipped, ...).
    """
    jobs = list(jobs)
    lines = []
    for table, job_id, action in jobs[:limit]:
        if isinstance(warehouse, BigQueryWarehouseResource):
            sent = f"{warehouse.job_id_prefix}{job_id}"
            url = bigquery_job_url(warehouse.project, warehouse.location, sent)
            lines.append(f"- `{table}`: [{sent}]({url}) ({action})")
        else:
            lines.append(f"- `{table}`: `{job_id}` ({action})")
    if len(jobs) > limit:
        lines.append(f"- ... and {len(jobs) - limit} more")
    return dg.MetadataValue.md("\n".join(lines) or "(no jobs)")
