"""Which step failures Dagster retries: transient faults yes, bad input and verdicts no.

The assets carry a ``RetryPolicy`` (DESIGN.md, "Retries in layers") for transient faults: a
network error, an HTTP 5xx that outlived the API retry layer, a lock timeout. Dagster applies
it to *every* exception (``dagster/_core/execution/plan/utils.py``, ``op_execution_error_boundary``)
except a ``dg.Failure`` with ``allow_retries=False``. Before this module a corrupt landed file, a
schema mismatch or an incomplete day was retried twice with backoff and printed six times with
tracebacks, about 60 s of noise per bad day (issue 7).

:func:`fail_fast` wraps an asset's body and turns each non-retryable error into one
``dg.Failure(allow_retries=False)`` carrying the original message (which names the file, table
or hour and what to do):

- :data:`NON_RETRYABLE_ERRORS`: the project's bad-input and verdict classes;
- a ``dg.Failure`` the asset raises itself (an incomplete day, a missing hour manifest): our code
  raises ``dg.Failure`` only for conditions a retry cannot change. Raise ``dg.RetryRequested``
  for a condition that can pass by itself.

Everything else keeps the asset's retry policy.
"""

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import dagster as dg

from bq_platform.lib.landing.producer.land import LandingError
from bq_platform.lib.core.manifest import ManifestError
from bq_platform.lib.publish.quota import QuotaBudgetExceededError
from bq_platform.lib.warehouse.base import SchemaMismatchError

#: Errors a retry cannot fix: the input or the table must change first.
#: ``QuotaBudgetExceededError``: the per-table daily job budget is spent (DESIGN.md,
#: "``quotaExceeded`` is not retried in a tight loop").
NON_RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    LandingError,
    ManifestError,
    SchemaMismatchError,
    QuotaBudgetExceededError,
)

F = TypeVar("F", bound=Callable[..., Any])


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
    return None


def fail_fast(fn: F) -> F:
    """Decorate an asset function (below ``@dg.asset``): non-retryable errors fail the step at
    once, with one message and no retry; other errors keep the asset's retry policy."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            failure = non_retryable(exc)
            if failure is None or failure is exc:
                raise
            raise failure from exc

    return wrapper  # type: ignore[return-value]
