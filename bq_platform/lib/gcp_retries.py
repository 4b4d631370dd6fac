"""Retry policy for Google Cloud API calls: which errors are transient, and how long to back off.

This is the middle of the three retry layers in DESIGN.md ("Retries in layers"): Spark retries
tasks, this module retries single HTTP/API requests, and Dagster retry policies retry whole
steps. Each layer is bounded, so a persistent fault surfaces as a failed step within minutes
instead of a process that waits forever.

What is retried (BigQuery error reasons, ``ErrorProto.reason`` in the response body; the table
is cloud.google.com/bigquery/docs/error-messages):

- :data:`RETRYABLE_REASONS` -- ``backendError`` (HTTP 500/503: "retry with exponential
  backoff"), ``internalError`` (HTTP 500), ``rateLimitExceeded`` (HTTP 403: a *short-term*
  rate limit, e.g. more than 5 table metadata updates per 10 s per table,
  cloud.google.com/bigquery/quotas#standard_tables), ``badGateway`` (HTTP 502);
- errors without a reason: HTTP 5xx except 501, HTTP 429, connection resets, timeouts and
  transport errors (the same types google-cloud-bigquery's own ``DEFAULT_RETRY`` retries).

What fails fast:

- :data:`QUOTA_REASONS` -- ``quotaExceeded`` (HTTP 403) means a *daily* or long-window quota,
  e.g. 1,500 table operations per table per day; retrying in a loop cannot succeed before the
  quota refills and only burns API calls. The caller sees the error at once (the job budget in
  :mod:`bq_platform.lib.publish.quota` exists so that this rarely happens).
- :data:`TERMINAL_REASONS` -- ``invalid``, ``invalidQuery``, ``notFound``, ``accessDenied``,
  ``duplicate`` (409; the job state machine adopts the existing job instead), and the other
  4xx reasons: the request itself is wrong, so repeating it gives the same answer.
- any other HTTP 4xx, and TLS errors (a misconfiguration, not a transient fault).

Backoff (:data:`API_RETRY`): truncated exponential backoff with *full jitter* -- the n-th sleep is
drawn uniformly from ``[0, min(INITIAL_DELAY_S * MULTIPLIER**n, MAXIMUM_DELAY_S)]``
(``google.api_core.retry.exponential_sleep_generator``), so parallel Dagster runs that hit the
same rate limit do not retry in lockstep. The numbers follow BigQuery's SLA back-off
requirements (cloud.google.com/bigquery/sla: "a minimum back-off interval of 1 second and for
each consecutive error, the back-off interval increases exponentially up to 32 seconds"). The
whole retry is bounded by :data:`API_RETRY_TIMEOUT_S` (5 minutes, half the client's default 10
minutes): long enough to outlast a 10-s rate-limit window many times over, short enough that the
Dagster step fails and its own retry policy takes over.
"""

import http.client
import logging

import requests.exceptions
import urllib3.exceptions
from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry_module
from google.auth import exceptions as auth_exceptions

log = logging.getLogger(__name__)

#: Error reasons that mean "try again later" (cloud.google.com/bigquery/docs/error-messages).
RETRYABLE_REASONS: frozenset[str] = frozenset(
    {"backendError", "internalError", "rateLimitExceeded", "badGateway"}
)

#: Error reasons that mean a long-window quota is spent: never retried in a loop.
QUOTA_REASONS: frozenset[str] = frozenset({"quotaExceeded"})

#: Error reasons that a retry cannot fix: the request must change first.
TERMINAL_REASONS: frozenset[str] = frozenset(
    {
        "invalid",
        "invalidQuery",
        "notFound",
        "accessDenied",
        "duplicate",
        "billingNotEnabled",
        "billingTierLimitExceeded",
        "blocked",
        "notImplemented",
        "policyViolation",
        "resourceInUse",
        "resourcesExceeded",
        "responseTooLarge",
        "stopped",
        "tableUnavailable",
        "invalidUser",
    }
)

#: Job-level reasons (a job's ``status.errorResult``) that google-cloud-bigquery treats as
#: retryable by resubmitting a query job with a new ID; used by :data:`QUERY_JOB_RETRY`.
RETRYABLE_JOB_REASONS: frozenset[str] = (
    frozenset({"jobBackendError", "jobInternalError", "jobRateLimitExceeded"}) | RETRYABLE_REASONS
)

#: First backoff ceiling, seconds (BigQuery SLA: minimum back-off interval of 1 s).
INITIAL_DELAY_S = 1.0
#: Largest backoff ceiling, seconds (BigQuery SLA: back-off grows exponentially up to 32 s).
MAXIMUM_DELAY_S = 32.0
#: Growth of the backoff ceiling per attempt.
MULTIPLIER = 2.0
#: Total time one API call may spend retrying, seconds.
API_RETRY_TIMEOUT_S = 300.0
#: Total time a query job (ledger/audit DML, metadata queries) may spend being resubmitted.
QUERY_JOB_RETRY_TIMEOUT_S = 600.0

_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    api_exceptions.TooManyRequests,  # 429
    api_exceptions.InternalServerError,  # 500
    api_exceptions.BadGateway,  # 502
    api_exceptions.ServiceUnavailable,  # 503
    api_exceptions.GatewayTimeout,  # 504 (DeadlineExceeded too)
    ConnectionError,  # builtin: resets, refused, aborted
    TimeoutError,
    requests.exceptions.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.Timeout,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.TimeoutError,
    http.client.IncompleteRead,
    http.client.BadStatusLine,
    auth_exceptions.TransportError,
)

_NEVER_RETRIED_TYPES: tuple[type[BaseException], ...] = (
    requests.exceptions.SSLError,  # a subclass of ConnectionError, but a configuration fault
    api_exceptions.MethodNotImplemented,  # 501 is a ServerError, but permanent
)


def error_reasons(exc: BaseException) -> tuple[str, ...]:
    """The BigQuery error reasons carried by ``exc`` (``exc.errors[*]["reason"]``), maybe empty.

    ``google.api_core`` exceptions built from an HTTP response keep the response's
    ``error.errors`` list; other exceptions have none.
    """
    errors = getattr(exc, "errors", None)
    if not isinstance(errors, list | tuple):
        return ()
    reasons = []
    for error in errors:
        if isinstance(error, dict) and isinstance(error.get("reason"), str):
            reasons.append(error["reason"])
    return tuple(reasons)


def is_retryable(exc: BaseException) -> bool:
    """The retry predicate: True if ``exc`` is a transient fault worth retrying.

    Rules, in order:

    1. TLS errors and HTTP 501 are never retried.
    2. If any reason is in :data:`QUOTA_REASONS` (``quotaExceeded``): False, whatever the HTTP
       status -- a daily quota does not refill within a retry window.
    3. If the first reason is in :data:`RETRYABLE_REASONS`: True (``rateLimitExceeded`` arrives
       as HTTP 403 and must still be retried).
    4. If the first reason is in :data:`TERMINAL_REASONS`: False.
    5. Otherwise (no reason, or an unknown one): True for the transient exception types (5xx,
       429, connection errors, timeouts), False for everything else (other 4xx).

    Args:
        exc: the exception raised by an API call.

    Returns:
        Whether the call should be repeated after a backoff.
    """
    if isinstance(exc, _NEVER_RETRIED_TYPES):
        return False
    reasons = error_reasons(exc)
    if any(reason in QUOTA_REASONS for reason in reasons):
        return False
    if reasons:
        if reasons[0] in RETRYABLE_REASONS:
            return True
        if reasons[0] in TERMINAL_REASONS:
            return False
    if isinstance(exc, auth_exceptions.TransportError) and exc.args:
        # google-auth wraps the underlying transport error; judge that one.
        inner = exc.args[0]
        if isinstance(inner, BaseException) and isinstance(inner, _NEVER_RETRIED_TYPES):
            return False
    return isinstance(exc, _TRANSIENT_TYPES)


#: BigQuery serializes mutating DML (UPDATE, DELETE, MERGE) per table and fails the loser of a
#: concurrent pair with this text and reason ``invalidQuery`` (wepay/kafka-connect-bigquery
#: issue 279; cloud.google.com/bigquery/docs/data-manipulation-language#concurrent_jobs).
#: Re-running the same idempotent statement is the documented remedy, so this one
#: ``invalidQuery`` is retried; every other ``invalidQuery`` stays terminal.
SERIALIZATION_CONFLICT = "Could not serialize access to table"


def is_serialization_conflict(exc: BaseException) -> bool:
    """True if ``exc`` is BigQuery's concurrent-DML conflict (:data:`SERIALIZATION_CONFLICT`)."""
    return SERIALIZATION_CONFLICT in str(exc)


def is_retryable_job_error(exc: BaseException) -> bool:
    """Predicate for resubmitting a failed *query job* (``job_retry`` of ``Client.query``).

    True for :data:`RETRYABLE_JOB_REASONS`, for the concurrent-DML conflict
    (:func:`is_serialization_conflict`) and for everything :func:`is_retryable` accepts;
    ``quotaExceeded`` and other terminal reasons stay False. Only used for our idempotent
    statements (reads, the ledger INSERT, the audit ``MERGE``), bounded by
    :data:`QUERY_JOB_RETRY_TIMEOUT_S`.
    """
    if isinstance(exc, api_exceptions.RetryError) and exc.cause is not None:
        exc = exc.cause
    reasons = error_reasons(exc)
    if any(reason in QUOTA_REASONS for reason in reasons):
        return False
    if is_serialization_conflict(exc):
        return True
    if reasons and reasons[0] in RETRYABLE_JOB_REASONS:
        return True
    return is_retryable(exc)


def _log_retry(exc: Exception) -> None:
    log.warning("transient Google API error, retrying with backoff: %s", exc)


def api_retry(timeout_s: float = API_RETRY_TIMEOUT_S) -> api_retry_module.Retry:
    """A :class:`google.api_core.retry.Retry` with this module's predicate and backoff.

    Args:
        timeout_s: total retry budget in seconds (attempts stop once it is spent; the last
            error is raised wrapped in :class:`google.api_core.exceptions.RetryError`).
            Tests against the emulators pass a few seconds.

    Returns:
        The retry object, for the ``retry=`` argument of google-cloud-bigquery calls.
    """
    return api_retry_module.Retry(
        predicate=is_retryable,
        initial=INITIAL_DELAY_S,
        maximum=MAXIMUM_DELAY_S,
        multiplier=MULTIPLIER,
        timeout=timeout_s,
        on_error=_log_retry,
    )


def query_job_retry(timeout_s: float = QUERY_JOB_RETRY_TIMEOUT_S) -> api_retry_module.Retry:
    """Retry for resubmitting failed query jobs (``Client.query(job_retry=...)``).

    Args:
        timeout_s: total budget in seconds across resubmissions.
    """
    return api_retry_module.Retry(
        predicate=is_retryable_job_error,
        initial=INITIAL_DELAY_S,
        maximum=MAXIMUM_DELAY_S,
        multiplier=MULTIPLIER,
        timeout=timeout_s,
        on_error=_log_retry,
    )


#: The default policy for every BigQuery API call made by :mod:`bq_platform.lib.warehouse.bigquery.warehouse`.
API_RETRY: api_retry_module.Retry = api_retry()

#: The default policy for resubmitting our idempotent query jobs.
QUERY_JOB_RETRY: api_retry_module.Retry = query_job_retry()
