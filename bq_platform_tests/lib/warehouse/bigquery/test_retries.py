"""Which errors the BigQuery backend's retry policies retry: the real retry objects, run on
functions that fail once (backoff set to zero), with exceptions built as the client builds them."""

import io
import json

import pytest
import requests
import requests.adapters
import urllib3
from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry_module
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery

from bq_platform.lib.warehouse.bigquery import retries
from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse

CONFLICT = "Could not serialize access to table p:d.pageviews_audit due to concurrent update"


def _error(cls: type[api_exceptions.GoogleAPICallError], reason: str) -> Exception:
    return cls(
        f"{reason} happened", errors=[{"reason": reason, "message": "m", "domain": "global"}]
    )


def _from_http(status: int, reason: str, message: str | None = None) -> Exception:
    """An exception built the way the client builds it from a real BigQuery error response."""
    body = {
        "error": {
            "code": status,
            "message": message or f"{reason}!",
            "errors": [{"reason": reason}],
        }
    }
    raw = urllib3.HTTPResponse(
        body=io.BytesIO(json.dumps(body).encode()),
        status=status,
        headers={"Content-Type": "application/json"},
        preload_content=False,
    )
    request = requests.Request("POST", "https://bigquery.googleapis.com/x").prepare()
    response = requests.adapters.HTTPAdapter().build_response(request, raw)
    return api_exceptions.from_http_response(response)


def _calls(policy: api_retry_module.Retry, exc: Exception, failures: int = 1) -> int:
    """Calls ``policy`` makes of a function that raises ``exc`` ``failures`` times, then
    succeeds (no sleeping)."""
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise exc
        return "ok"

    try:
        policy.with_delay(initial=0.0, maximum=0.0)(flaky)()
    except Exception as raised:  # noqa: BLE001 - the error itself must come through
        assert raised is exc
    return len(calls)


def _retried(policy: api_retry_module.Retry, exc: Exception) -> bool:
    return _calls(policy, exc) == 2


@pytest.mark.parametrize(
    ("exc", "retry"),
    [
        (_error(api_exceptions.Forbidden, "rateLimitExceeded"), True),  # 403, short-term limit
        (_from_http(403, "rateLimitExceeded"), True),
        (_error(api_exceptions.InternalServerError, "backendError"), True),
        (_error(api_exceptions.ServiceUnavailable, "backendError"), True),
        (_error(api_exceptions.GatewayTimeout, "backendError"), True),
        (_error(api_exceptions.InternalServerError, "internalError"), True),
        (_error(api_exceptions.BadRequest, "backendError"), True),  # reason wins over status
        (_from_http(500, "backendError"), True),
        (api_exceptions.InternalServerError("no reason"), True),
        (api_exceptions.BadGateway("502"), True),
        (api_exceptions.ServiceUnavailable("503"), True),
        (api_exceptions.TooManyRequests("429"), True),
        (requests.exceptions.ConnectionError("reset"), True),
        (requests.exceptions.ReadTimeout("slow"), True),
        (ConnectionResetError("reset"), True),
        (auth_exceptions.TransportError("metadata server"), True),
        # fail fast
        (_error(api_exceptions.Forbidden, "quotaExceeded"), False),  # daily quota
        (_from_http(403, "quotaExceeded"), False),
        (_error(api_exceptions.InternalServerError, "quotaExceeded"), False),  # any status
        (_error(api_exceptions.BadRequest, "invalid"), False),
        (_error(api_exceptions.BadRequest, "invalidQuery"), False),
        (_error(api_exceptions.NotFound, "notFound"), False),
        (_error(api_exceptions.Forbidden, "accessDenied"), False),
        (_error(api_exceptions.Conflict, "duplicate"), False),
        (_from_http(409, "duplicate"), False),
        (api_exceptions.BadRequest("no reason"), False),
        (api_exceptions.Forbidden("no reason"), False),
        (api_exceptions.MethodNotImplemented("501"), False),
        # google-cloud-bigquery's choice: without a reason only 500, 502 and 503 are retried
        (api_exceptions.GatewayTimeout("504"), False),
        (requests.exceptions.SSLError("bad cert"), False),
        (ValueError("a bug"), False),
        (_from_http(400, "invalidQuery", CONFLICT), False),  # not an API-call fault
    ],
)
def test_api_retry(exc: Exception, retry: bool) -> None:
    assert _retried(retries.api_retry(), exc) is retry


@pytest.mark.parametrize(
    ("exc", "retry"),
    [
        (_error(api_exceptions.BadRequest, "jobBackendError"), True),
        (_error(api_exceptions.InternalServerError, "jobInternalError"), True),
        (_error(api_exceptions.Forbidden, "jobRateLimitExceeded"), True),
        (_error(api_exceptions.Forbidden, "rateLimitExceeded"), True),
        (
            api_exceptions.RetryError(
                "gave up", _error(api_exceptions.BadRequest, "jobInternalError")
            ),
            True,
        ),
        (_error(api_exceptions.Forbidden, "quotaExceeded"), False),
        (_error(api_exceptions.BadRequest, "invalidQuery"), False),
        (_from_http(400, "invalidQuery", CONFLICT), False),  # the warehouse re-runs it instead
    ],
)
def test_query_job_retry(exc: Exception, retry: bool) -> None:
    assert _retried(retries.query_job_retry(), exc) is retry


def test_only_the_concurrent_update_conflict_reruns_a_dml_statement() -> None:
    """BigQuery fails the loser of two concurrent mutating DML statements on one table with a
    400 ``invalidQuery`` (cloud.google.com/bigquery/docs/data-manipulation-language)."""
    warehouse = BigQueryWarehouse(
        bigquery.Client(project="bqp-emulator", credentials=AnonymousCredentials()),
        "bqp-emulator",
        "ds",
    )
    conflict = _from_http(400, "invalidQuery", CONFLICT)
    assert retries.is_concurrent_update_conflict(conflict)
    assert _retried(warehouse.conflict_retry, conflict)
    assert _calls(warehouse.conflict_retry, conflict, failures=3) == 4
    for other in (
        _error(api_exceptions.BadRequest, "invalidQuery"),  # a syntax error
        _error(api_exceptions.BadRequest, "jobBackendError"),  # the job retry's
        _error(api_exceptions.Forbidden, "quotaExceeded"),
        ValueError(CONFLICT),
    ):
        assert not retries.is_concurrent_update_conflict(other)
        assert not _retried(warehouse.conflict_retry, other)


def test_rate_limit_is_retried() -> None:
    exc = _error(api_exceptions.Forbidden, "rateLimitExceeded")
    assert _calls(retries.api_retry(), exc, failures=5) == 6


@pytest.mark.parametrize(
    ("reason", "cls"),
    [("quotaExceeded", api_exceptions.Forbidden), ("invalid", api_exceptions.BadRequest)],
)
def test_quota_exceeded_and_invalid_fail_after_one_call(
    reason: str, cls: type[api_exceptions.GoogleAPICallError]
) -> None:
    assert _calls(retries.api_retry(), _error(cls, reason), failures=100) == 1


def test_retry_is_bounded() -> None:
    """A fault that never clears stops once the budget is spent, as a ``RetryError``."""
    policy = retries.api_retry(timeout_s=0.2).with_delay(initial=0.01, maximum=0.02)
    calls = []

    def down() -> None:
        calls.append(1)
        raise api_exceptions.ServiceUnavailable("down")

    with pytest.raises(api_exceptions.RetryError) as raised:
        policy(down)()
    assert isinstance(raised.value.cause, api_exceptions.ServiceUnavailable)
    assert len(calls) > 1
    assert retries.api_retry().timeout == retries.API_RETRY_TIMEOUT_S == 300.0
    assert retries.query_job_retry().timeout == retries.QUERY_JOB_RETRY_TIMEOUT_S == 600.0
