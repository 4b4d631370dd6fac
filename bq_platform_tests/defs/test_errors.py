"""Non-retryable errors fail a step at once; transient ones keep the retry policy."""

import socket

import dagster as dg
import pytest
from py4j.clientserver import ClientServer, JavaParameters, PythonParameters
from py4j.java_gateway import GatewayParameters, JavaGateway

from bq_platform.defs import errors as errors_module
from bq_platform.defs.errors import fail_fast, non_retryable, quota_retry
from bq_platform.lib.core.manifest import LandingError, ManifestError
from bq_platform.lib.publish.quota import QuotaBudgetExceededError
from bq_platform.lib.warehouse.base import QuotaExceededError, SchemaMismatchError

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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def gateway_refused() -> None:
    """What PySpark's gateway raises once the driver's JVM is gone: py4j is refused."""
    server = ClientServer(
        java_parameters=JavaParameters(port=free_port()),
        python_parameters=PythonParameters(port=0),
    )
    try:
        server.jvm.System.currentTimeMillis()
    finally:
        server.shutdown()


def gateway_lost() -> None:
    """The same through py4j's classic gateway: a Py4JNetworkError."""
    JavaGateway(gateway_parameters=GatewayParameters(port=free_port())).jvm.System.nanoTime()


def attempts_of_call(body) -> tuple[list[int], dg.ExecuteInProcessResult]:
    calls = []

    @dg.asset(retry_policy=RETRY)
    @fail_fast
    def step(context: dg.AssetExecutionContext) -> None:
        calls.append(context.retry_number)
        body()

    return calls, dg.materialize([step], raise_on_error=False)


@pytest.mark.parametrize("gateway", [gateway_refused, gateway_lost])
def test_a_dead_spark_driver_fails_at_once_saying_so(gateway):
    calls, result = attempts_of_call(gateway)

    assert calls == [0]
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "the Spark driver of this process is gone" in failure.step_failure_data.error.message


def test_a_refused_connection_elsewhere_keeps_the_retry_policy():
    def refused() -> None:
        with socket.create_connection(("127.0.0.1", free_port()), timeout=5):
            pass

    calls, _ = attempts_of_call(refused)

    assert len(calls) == RETRY.max_retries + 1


def interrupt() -> None:
    raise KeyboardInterrupt


def interrupt_then_fail_cleaning_up() -> None:
    try:
        raise KeyboardInterrupt
    finally:
        raise RuntimeError("py4j does not exist in the JVM")  # noqa: B012 - what clean-up does


@pytest.mark.parametrize("body", [interrupt, interrupt_then_fail_cleaning_up])
def test_an_interrupted_step_is_not_retried_and_its_run_ends_canceled(body):
    """The interrupted step fails once; the next step of the run fails before it starts."""
    calls = []

    @dg.asset(retry_policy=RETRY)
    @fail_fast
    def a_interrupted(context: dg.AssetExecutionContext) -> None:
        calls.append("a_interrupted")
        body()

    @dg.asset(retry_policy=RETRY)
    @fail_fast
    def b_later(context: dg.AssetExecutionContext) -> None:  # independent: not skipped
        calls.append("b_later")

    with dg.instance_for_test() as instance:
        result = dg.materialize([a_interrupted, b_later], instance=instance, raise_on_error=False)

        assert calls == ["a_interrupted"]
        assert instance.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.CANCELED
    failures = {e.step_key: e for e in result.all_events if e.is_step_failure}
    assert set(failures) == {"a_interrupted", "b_later"}
    assert "interrupted" in failures["a_interrupted"].step_failure_data.error.message


def test_a_spent_bigquery_quota_runs_the_step_again_after_the_advised_wait(monkeypatch):
    """BigQuery says to retry ``quotaExceeded`` after 10 minutes or more: the step asks Dagster
    for a retry after that wait, a bounded number of times, then fails."""
    error = QuotaExceededError("job j -> pageviews$19950801 failed with quotaExceeded")
    retry = quota_retry(error, 0)
    assert isinstance(retry, dg.RetryRequested)
    assert (retry.max_retries, retry.seconds_to_wait) == (2, 600)
    monkeypatch.setattr(errors_module, "QUOTA_EXCEEDED_WAIT_S", 0)  # our constant, not Dagster

    attempts, result = attempts_of(error)

    assert attempts == 3  # the first run and QUOTA_EXCEEDED_RETRIES more
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message
    assert "failed with quotaExceeded (still so after 2 retries 0 s apart)" in message
