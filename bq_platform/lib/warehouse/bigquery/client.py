"""The BigQuery client, and checks of the configured identifiers that end up in URLs and in
backquoted SQL (the ``*_RE`` patterns, with their sources).
"""

import re
from typing import Any

from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import bigquery

#: GCP project IDs, optionally domain-scoped (cloud.google.com/resource-manager/docs/
#: creating-managing-projects). New projects need 6-30 characters; shorter IDs are accepted
#: for placeholders such as ``p`` in ``bq-platform plan --offline`` examples.
PROJECT_RE = re.compile(r"^(?:[a-z0-9.\-]+:)?[a-z][a-z0-9\-]{0,29}$")
#: Dataset names: letters, digits, underscores, up to 1,024 characters
#: (cloud.google.com/bigquery/docs/datasets#dataset-naming).
DATASET_RE = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
#: Job ID prefixes: the prefix plus our IDs must stay within the job-ID rule.
JOB_ID_PREFIX_RE = re.compile(r"^[A-Za-z0-9_\-]{0,100}$")
#: Locations: ``US``, ``EU``, ``europe-west1``...
LOCATION_RE = re.compile(r"^[A-Za-z0-9\-]{2,64}$")


def check_identifier(value: str, pattern: re.Pattern[str], what: str) -> str:
    """``value`` if it matches ``pattern``, else ValueError naming ``what`` and the pattern."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"invalid BigQuery {what}: {value!r} (must match {pattern.pattern})")
    return value


def bigquery_client(
    project: str,
    location: str,
    api_endpoint: str | None = None,
    credentials: Credentials | None = None,
    http: Any = None,
) -> bigquery.Client:
    """A ``google.cloud.bigquery.Client`` with Application Default Credentials (unless
    ``credentials`` is given), or with anonymous ones for an emulator at ``api_endpoint`` (e.g.
    ``http://127.0.0.1:9050``; ``dagster_gcp.BigQueryResource`` has no endpoint option).
    ``http`` replaces the transport (a ``requests.Session``; ``bq-platform plan`` records)."""
    check_identifier(project, PROJECT_RE, "project ID")
    check_identifier(location, LOCATION_RE, "location")
    options = {"api_endpoint": api_endpoint} if api_endpoint else None
    if api_endpoint and credentials is None:
        credentials = AnonymousCredentials()
    return bigquery.Client(
        project=project,
        location=location,
        credentials=credentials,
        client_options=options,
        _http=http,
    )
