"""Retry policies of the BigQuery backend: google-cloud-bigquery's own, bounded, plus one case.

- API calls: ``google.cloud.bigquery.retry.DEFAULT_RETRY`` retries transient errors; others fail
  at once, ``quotaExceeded`` too: no retry outlasts a daily quota
  (cloud.google.com/bigquery/docs/error-messages).
- Query jobs: ``DEFAULT_JOB_RETRY`` resubmits a failed query job under a new job ID.
- What they lack: a DML statement that conflicts with a concurrent one on its table fails with
  HTTP 400 "Could not serialize access to table ... due to concurrent update"
  (cloud.google.com/bigquery/docs/data-manipulation-language, "DML statement conflicts"). It
  changed nothing, so our idempotent statements run again (:func:`is_concurrent_update_conflict`).
"""

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry_module
from google.cloud.bigquery.retry import DEFAULT_JOB_RETRY, DEFAULT_RETRY

#: Total time one API call may spend retrying, seconds.
API_RETRY_TIMEOUT_S = 300.0
#: Total time a query job may spend being resubmitted, seconds.
QUERY_JOB_RETRY_TIMEOUT_S = 600.0
#: The start of BigQuery's message for a DML statement that lost a concurrent update.
CONCURRENT_UPDATE_CONFLICT = "Could not serialize access to table"


def api_retry(timeout_s: float = API_RETRY_TIMEOUT_S) -> api_retry_module.Retry:
    """``DEFAULT_RETRY`` bounded to ``timeout_s`` s, then ``RetryError`` wraps the last error."""
    return DEFAULT_RETRY.with_timeout(timeout_s)


def query_job_retry(timeout_s: float = QUERY_JOB_RETRY_TIMEOUT_S) -> api_retry_module.Retry:
    """``DEFAULT_JOB_RETRY`` bounded to ``timeout_s`` seconds, for ``Client.query(job_retry=)``."""
    return DEFAULT_JOB_RETRY.with_timeout(timeout_s)


def is_concurrent_update_conflict(exc: BaseException) -> bool:
    """True if ``exc`` is the 400 of a DML statement that lost a concurrent update."""
    return isinstance(exc, api_exceptions.BadRequest) and CONCURRENT_UPDATE_CONFLICT in str(exc)
