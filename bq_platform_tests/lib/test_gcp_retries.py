"""The BigQuery retry predicate and backoff, with constructed google.api_core exceptions."""

import json

import pytest
import requests
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

from bq_platform.lib import gcp_retries as retries
def _error(cls: type[api_exceptions.GoogleAPICallError], reason: str) -> Exception:
    return cls(
        f"{reason} happened", errors=[{"reason": reason, "message": "m", "domain": "global"}]
    )


def _from_http(status: int, reason: str) -> Exception:
    """An exception built the way the client builds it from a real BigQuery error response."""
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps(
        {"error": {"code": status, "message": f"{reason}!", "errors": [{"reason": reason}]}}
    ).encode()
    response.request = requests.Request("POST", "https://bigquery.googleapis.com/x").prepare()
    return api_exceptions.from_http_response(response)


@pytest.mark.parametrize(
    ("exc", "retry"),
    [
        (_error(api_exceptions.Forbidden, "rateLimitExceeded"), True),  # 403, short-term limit
        (_from_http(403, "rateLimitExceeded"), True),
        (_error(api_exceptions.InternalServerError, "backendError"), True),
        (_error(api_exceptions.ServiceUnavailable, "backendError"), True),
        (_error(api_exceptions.InternalServerError, "internalError"), True),
        (_error(api_exceptions.BadRequest, "backendError"), True),  # reason wins over status
        (_from_http(500, "backendError"), True),
        (api_exceptions.InternalServerError("no reason"), True),
        (api_exceptions.BadGateway("502"), True),
        (api_exceptions.ServiceUnavailable("503"), True),
        (api_exceptions.GatewayTimeout("504"), True),
        (api_exceptions.TooManyRequests("429"), True),
        (requests.exceptions.ConnectionError("reset"), True),
        (requests.exceptions.ReadTimeout("slow"), True),
        (ConnectionResetError("reset"), True),
        (TimeoutError("timeout"), True),
        (auth_exceptions.TransportError("metadata server"), True),
        # fail fast
        (_error(api_exceptions.Forbidden, "quotaExceeded"), False),  # daily quota
        (_from_http(403, "quotaExceeded"), False),
        (_error(api_exceptions.InternalServerError, "quotaExceeded"), False),  # never, any status
        (_error(api_exceptions.BadRequest, "invalid"), False),
        (_error(api_exceptions.BadRequest, "invalidQuery"), False),
        (_error(api_exceptions.NotFound, "notFound"), False),
        (_error(api_exceptions.Forbidden, "accessDenied"), False),
        (_error(api_exceptions.Conflict, "duplicate"), False),
        (_from_http(409, "duplicate"), False),
        (api_exceptions.BadRequest("no reason"), False),
        (api_exceptions.Forbidden("no reason"), False),
        (api_exceptions.MethodNotImplemented("501"), False),
        (requests.exceptions.SSLError("bad cert"), False),
        (ValueError("a bug"), False),
    ],
)
def test_predicate(exc: Exception, retry: bool) -> None:
    assert retries.is_retryable(exc) is retry


def test_reason_constants_are_disjoint() -> None:
    assert not retries.RETRYABLE_REASONS & retries.TERMINAL_REASONS
    assert not retries.RETRYABLE_REASONS & retries.QUOTA_REASONS
    assert "quotaExceeded" not in retries.RETRYABLE_JOB_REASONS


def test_job_predicate_resubmits_job_level_errors_only() -> None:
    assert retries.is_retryable_job_error(_error(api_exceptions.BadRequest, "jobBackendError"))
    assert retries.is_retryable_job_error(_error(api_exceptions.Forbidden, "rateLimitExceeded"))
    assert not retries.is_retryable_job_error(_error(api_exceptions.Forbidden, "quotaExceeded"))
    assert not retries.is_retryable_job_error(_error(api_exceptions.BadRequest, "invalidQuery"))
    wrapped = api_exceptions.RetryError(
        "gave up", _error(api_exceptions.BadRequest, "jobInternalError")
    )
    assert retries.is_retryable_job_error(wrapped)


def test_concurrent_dml_conflict_is_the_only_retried_invalid_query() -> None:
    # BigQuery fails the loser of two concurrent MERGE/UPDATE/DELETE statements on one table
    # with reason invalidQuery (wepay/kafka-connect-bigquery issue 279).
    conflict = api_exceptions.BadRequest(
        "Could not serialize access to table p:d._bq_platform_published due to concurrent update",
        errors=[{"reason": "invalidQuery", "message": "Could not serialize access to table"}],
    )
    syntax = _error(api_exceptions.BadRequest, "invalidQuery")
    assert retries.is_retryable_job_error(conflict)
    assert retries.is_retryable_job_error(api_exceptions.RetryError("gave up", conflict))
    assert not retries.is_retryable_job_error(syntax)
    assert not retries.is_retryable(conflict)  # API calls are not resubmitted for it
    quota = api_exceptions.Forbidden(
        "Could not serialize access to table t",
        errors=[{"reason": "invalidQuery"}, {"reason": "quotaExceeded"}],
    )
    assert not retries.is_retryable_job_error(quota)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the backoff sleeps of google.api_core's retry loop instead of sleeping."""
    recorded: list[float] = []
    monkeypatch.setattr("google.api_core.retry.retry_unary.time.sleep", recorded.append)
    return recorded


def test_rate_limit_is_retried_with_jittered_exponential_backoff(sleeps: list[float]) -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) <= 5:
            raise _error(api_exceptions.Forbidden, "rateLimitExceeded")
        return "ok"

    assert retries.api_retry()(flaky)() == "ok"
    assert len(calls) == 6
    ceilings = [1.0, 2.0, 4.0, 8.0, 16.0]  # INITIAL_DELAY_S * MULTIPLIER ** n, capped at 32 s
    assert len(sleeps) == 5
    assert all(0.0 <= s <= c for s, c in zip(sleeps, ceilings, strict=True))


@pytest.mark.parametrize(
    ("reason", "cls"),
    [("quotaExceeded", api_exceptions.Forbidden), ("invalid", api_exceptions.BadRequest)],
)
def test_quota_exceeded_and_invalid_fail_after_one_call(
    sleeps: list[float], reason: str, cls: type[api_exceptions.GoogleAPICallError]
) -> None:
    calls = []

    def failing() -> None:
        calls.append(1)
        raise _error(cls, reason)

    with pytest.raises(cls):
        retries.api_retry()(failing)()
    assert len(calls) == 1
    assert sleeps == []


def test_retry_is_bounded(sleeps: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault that never clears stops once the next sleep would pass the deadline."""
    clock = [0.0]
    monkeypatch.setattr("google.api_core.retry.retry_unary.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("google.api_core.retry.retry_base.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("google.api_core.retry.retry_base.random.uniform", lambda lo, hi: hi)

    def advance(seconds: float) -> None:
        sleeps.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr("google.api_core.retry.retry_unary.time.sleep", advance)

    def down() -> None:
        raise api_exceptions.ServiceUnavailable("down")

    with pytest.raises(api_exceptions.RetryError):
        retries.api_retry()(down)()
    assert clock[0] <= retries.API_RETRY_TIMEOUT_S
    assert max(sleeps) == retries.MAXIMUM_DELAY_S
    assert sleeps[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]


def test_documented_numbers() -> None:
    assert (retries.INITIAL_DELAY_S, retries.MAXIMUM_DELAY_S, retries.MULTIPLIER) == (
        1.0,
        32.0,
        2.0,
    )
    policy = retries.API_RETRY
    assert policy.timeout == retries.API_RETRY_TIMEOUT_S == 300.0
