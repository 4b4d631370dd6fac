"""The BigQuery client and the identifiers our configuration puts into requests.

:func:`bigquery_client` builds the official ``google.cloud.bigquery.Client`` for production
(Application Default Credentials) or for an emulator (an endpoint, anonymous credentials).
Project IDs, dataset names, locations and job-ID prefixes come from configuration and end up
in URLs and in backquoted SQL identifiers, so :func:`check_identifier` validates each against
BigQuery's rules (the ``*_RE`` patterns, with their sources) before they are used.
"""

import re
from typing import Any

from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import bigquery

#: GCP project IDs: lowercase letters, digits, hyphens, starting with a letter; optionally
#: domain-scoped (cloud.google.com/resource-manager/docs/creating-managing-projects). New
#: projects need 6-30 characters; shorter IDs are accepted so that placeholders such as the
#: ``p`` of ``bq-platform plan --offline`` examples work.
PROJECT_RE = re.compile(r"^(?:[a-z0-9.\-]+:)?[a-z][a-z0-9\-]{0,29}$")
#: Dataset names: letters, digits, underscores, up to 1,024 characters
#: (cloud.google.com/bigquery/docs/datasets#dataset-naming).
DATASET_RE = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
#: Job ID prefixes: the prefix plus our IDs must stay within the job-ID rule.
JOB_ID_PREFIX_RE = re.compile(r"^[A-Za-z0-9_\-]{0,100}$")
#: Locations: ``US``, ``EU``, ``europe-west1``...
LOCATION_RE = re.compile(r"^[A-Za-z0-9\-]{2,64}$")


def check_identifier(value: str, pattern: re.Pattern[str], what: str) -> str:
    """``value`` if it matches ``pattern`` (one of the rules above).

    Raises:
        ValueError: naming ``what`` (e.g. "dataset name"), the value and the pattern.
    """
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"invalid BigQuery {what}: {value!r} (must match {pattern.pattern})")
    return value


def bigquery_client(
    project: str,
    location: str,
    api_endpoint: str | None = None,
    credentials: Credentials | None = None,
    http: Any = None,
) -> bigquery.Client:
    """Build a ``google.cloud.bigquery.Client``.

    Production (``api_endpoint`` None): Application Default Credentials unless ``credentials``
    is given. Emulator: ``client_options={"api_endpoint": ...}`` and anonymous credentials
    (``dagster_gcp.BigQueryResource`` has no endpoint option). ``http`` replaces the transport
    (a ``requests.Session``; ``bq-platform plan`` passes a recording one).

    Args:
        project: project that runs the jobs.
        location: default job location.
        api_endpoint: base URL of a BigQuery emulator, e.g. ``http://127.0.0.1:9050``.
        credentials: explicit credentials.
        http: the HTTP session to send requests through.

    Returns:
        The client.
    """
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
