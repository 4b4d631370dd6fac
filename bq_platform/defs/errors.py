"""Which step failures Dagster retries: transient faults yes; bad input, verdicts, a dead
Spark driver and a stop request no.

The assets carry a ``RetryPolicy`` for transient faults (DESIGN.md, "Retries in layers"), and
Dagster applies it to every exception except a ``dg.Failure`` with ``allow_retries=False``.
:func:`fail_fast` turns each non-retryable error into one such failure with the original
message: :data:`NON_RETRYABLE_ERRORS`, a dead Spark driver (:func:`dead_spark_driver`), and
any ``dg.Failure`` the asset raises itself (our code raises it only for conditions a retry
cannot change; use ``dg.RetryRequested`` for one that can pass by itself). A spent BigQuery
quota (``QuotaExceededError``) asks for a retry after BigQuery's advised wait
(:func:`quota_retry`). Everything else keeps the asset's retry policy.

A signal interrupts a step as ``KeyboardInterrupt`` or ``dg.DagsterExecutionInterruptedError``
(Dagster's handler during a run turns SIGINT and SIGTERM into the latter), which Dagster
retries under the step's policy too. :func:`fail_fast` fails such a step at once instead and
marks its run canceling, so that Dagster ends the run canceled; a step of a canceling run
fails before it starts.
"""

import functools
import logging
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import dagster as dg
from py4j.protocol import Py4JNetworkError

from bq_platform.lib.core.manifest import LandingError, ManifestError
from bq_platform.lib.publish.quota import QuotaBudgetExceededError
from bq_platform.lib.warehouse.base import QuotaExceededError, SchemaMismatchError
from bq_platform.lib.warehouse.rules import QUOTA_EXCEEDED_RETRIES, QUOTA_EXCEEDED_WAIT_S

#: Errors a retry cannot fix: the input, the table or the day's job budget must change first.
NON_RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    LandingError,
    ManifestError,
    SchemaMismatchError,
    QuotaBudgetExceededError,
)

#: What a signal raises in a step (see the module's docstring).
INTERRUPTS: tuple[type[BaseException], ...] = (
    KeyboardInterrupt,
    dg.DagsterExecutionInterruptedError,
)

F = TypeVar("F", bound=Callable[..., Any])
_LOG = logging.getLogger(__name__)


def non_retryable(exc: BaseException) -> dg.Failure | None:
    """The ``dg.Failure(allow_retries=False)`` for ``exc``, or None if ``exc`` may be retried."""
    if isinstance(exc, dg.Failure):
        if not exc.allow_retries:
            return exc
        return dg.Failure(description=exc.description, metadata=exc.metadata, allow_retries=False)
    if isinstance(exc, NON_RETRYABLE_ERRORS):
        return dg.Failure(
            description=f"{type(exc).__name__}: {exc}",
            metadata={"error": type(exc).__name__},
            allow_retries=False,
        )
    if dead_spark_driver(exc):
        return dg.Failure(
            description=(
                f"the Spark driver of this process is gone ({type(exc).__name__}: {exc}); "
                "its session cannot be used again in this process, so the step is not "
                "retried: run it again (a new process starts a new driver)"
            ),
            metadata={"error": type(exc).__name__},
            allow_retries=False,
        )
    return None


def quota_retry(exc: QuotaExceededError, retry_number: int) -> dg.RetryRequested | dg.Failure:
    """For a step that met a spent BigQuery quota on its try ``retry_number`` (0 first): run
    it again after BigQuery's advised wait (10 minutes,
    :data:`~bq_platform.lib.warehouse.rules.QUOTA_EXCEEDED_WAIT_S`), up to
    :data:`~bq_platform.lib.warehouse.rules.QUOTA_EXCEEDED_RETRIES` times; after them, a
    failure with ``exc``'s message. A re-run adopts or skips the jobs that did finish."""
    if retry_number >= QUOTA_EXCEEDED_RETRIES:
        return dg.Failure(
            description=(
                f"QuotaExceededError: {exc} (still so after {retry_number} retries "
                f"{QUOTA_EXCEEDED_WAIT_S} s apart): see the project's BigQuery quotas, then "
                "re-run"
            ),
            metadata={"error": "QuotaExceededError"},
            allow_retries=False,
        )
    _LOG.warning("%s; running the step again in %d s", exc, QUOTA_EXCEEDED_WAIT_S)
    return dg.RetryRequested(
        max_retries=QUOTA_EXCEEDED_RETRIES, seconds_to_wait=QUOTA_EXCEEDED_WAIT_S
    )


def dead_spark_driver(exc: BaseException) -> bool:
    """True if ``exc``, or an exception it was raised from or while handling, says that the
    in-process Spark driver is gone: py4j, PySpark's gateway to the driver's JVM, lost its
    connection (``Py4JNetworkError``) or is refused one (``ConnectionRefusedError`` raised in
    py4j's code). PySpark keeps handing out the dead session, so no retry in the process
    can pass."""
    return any(
        isinstance(e, Py4JNetworkError)
        or (isinstance(e, ConnectionRefusedError) and _raised_in(e, "py4j"))
        for e in _chain(exc)
    )


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then the exceptions it was raised from or while handling, innermost last."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _raised_in(exc: BaseException, package: str) -> bool:
    """True if a frame of ``exc``'s traceback runs code of ``package``."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module == package or module.startswith(package + "."):
            return True
        tb = tb.tb_next
    return False


def fail_fast(fn: F) -> F:
    """Decorate an asset function (below ``@dg.asset``): non-retryable errors fail the step at
    once, with one message and no retry; other errors keep the asset's retry policy. An
    interrupt fails the step without a retry and marks the run canceling; in a canceling run
    the step fails before it starts. The run is found from the function's execution context
    argument (without one, only the errors are classified)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        context = _execution_context(args, kwargs)
        try:
            if context is not None and _run_status(context) == dg.DagsterRunStatus.CANCELING:
                raise dg.Failure(
                    description="not started: the run is being canceled", allow_retries=False
                )
            try:
                return fn(*args, **kwargs)
            except QuotaExceededError as exc:
                raise quota_retry(exc, 0 if context is None else context.retry_number) from exc
            except Exception as exc:
                # Clean-up code (a ``finally``) can replace an interrupt with its own error.
                interrupt = next((e for e in _chain(exc) if isinstance(e, INTERRUPTS)), None)
                if interrupt is None:
                    failure = non_retryable(exc)
                    if failure is None or failure is exc:
                        raise
                    raise failure from exc
        except INTERRUPTS as exc:  # also one raised while an error above was handled
            interrupt = exc
        if context is not None:
            _cancel(context)
        raise dg.Failure(
            description="interrupted: the process was asked to stop; not retried",
            metadata={"error": type(interrupt).__name__},
            allow_retries=False,
        ) from interrupt

    return wrapper  # type: ignore[return-value]


def _execution_context(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dg.AssetExecutionContext | dg.OpExecutionContext | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, dg.AssetExecutionContext | dg.OpExecutionContext):
            return value
    return None


def _run_status(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> Any:
    run = context.instance.get_run_by_id(context.run_id)
    return None if run is None else run.status


def _cancel(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> None:
    """Mark the step's run canceling (Dagster then ends it canceled), unless it is ending."""
    run = context.instance.get_run_by_id(context.run_id)
    if run is not None and run.status == dg.DagsterRunStatus.STARTED:
        context.instance.report_run_canceling(
            run, "a step was interrupted (the process was asked to stop): canceling the run"
        )
