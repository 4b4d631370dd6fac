"""Non-retryable errors fail a step at once; transient ones keep the retry policy."""

import dagster as dg
import pytest

from bq_platform.defs.errors import fail_fast, non_retryable
from bq_platform.lib.core.manifest import LandingError, ManifestError
from bq_platform.lib.publish.quota import QuotaBudgetExceededError
from bq_platform.lib.warehouse.base import SchemaMismatchError

RETRY = dg.RetryPolicy(max_retries=2, delay=0)


def attempts_of(error: Exception) -> tuple[int, dg.ExecuteInProcessResult]:
    calls = []

    @dg.asset(retry_policy=RETRY)
    @fail_fast
    def flaky(context: dg.AssetExecutionContext) -> None:
        calls.append(context.retry_number)
        raise error

    result = dg.materialize([flaky], raise_on_error=False)
    assert not result.success
    return len(calls), result


@pytest.mark.parametrize(
    "error",
    [
        LandingError("landing/x.log.gz: sha256 differs from its manifest"),
        SchemaMismatchError("pageviews: column status is STRING, spec says INT64"),
        ManifestError("staging/x/_MANIFEST.json: not valid JSON"),
        QuotaBudgetExceededError("pageviews: 1350 jobs today"),
        dg.Failure("1995-08-01: 3 of 24 hours are not complete"),
    ],
)
def test_bad_input_and_verdicts_fail_once_with_their_message(error):
    attempts, result = attempts_of(error)

    assert attempts == 1
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert str(error.description if isinstance(error, dg.Failure) else error) in message


@pytest.mark.parametrize(
    "error", [ConnectionError("reset by peer"), TimeoutError("lock timeout"), OSError("EIO")]
)
def test_transient_errors_keep_the_retry_policy(error):
    attempts, _ = attempts_of(error)

    assert attempts == RETRY.max_retries + 1


def test_non_retryable_keeps_an_explicit_failure_and_ignores_others():
    explicit = dg.Failure("done", allow_retries=False)
    assert non_retryable(explicit) is explicit
    assert non_retryable(RuntimeError("transient?")) is None
    converted = non_retryable(LandingError("bad file"))
    assert converted is not None and not converted.allow_retries
    assert converted.description == "LandingError: bad file"


def test_every_asset_with_a_retry_policy_fails_fast():
    from bq_platform.definitions import defs

    graph = defs().resolve_asset_graph()
    retried = [
        graph.get(key).assets_def
        for key in graph.get_all_asset_keys()
        if graph.get(key).is_materializable and graph.get(key).assets_def.op.retry_policy
    ]
    assert len(retried) >= 6  # the Spark build, stage, audit and published tables
    for assets_def in retried:
        key = assets_def.op.name
        fn = assets_def.op.compute_fn.decorated_fn
        assert getattr(fn, "__wrapped__", None) is not None, f"{key} is not @fail_fast"
