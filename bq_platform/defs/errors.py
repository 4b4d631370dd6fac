"""Which step failures Dagster retries: transient faults yes, bad input and verdicts no.

The assets carry a ``RetryPolicy`` for transient faults (DESIGN.md, "Retries in layers"), and
Dagster applies it to every exception except a ``dg.Failure`` with ``allow_retries=False``.
:func:`fail_fast` turns each non-retryable error into one such failure with the original
message: :data:`NON_RETRYABLE_ERRORS`, and any ``dg.Failure`` the asset raises itself (our
code raises it only for conditions a retry cannot change; use ``dg.RetryRequested`` for one
that can pass by itself). Everything else keeps the asset's retry policy.
"""

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import dagster as dg

from bq_platform.lib.core.manifest import LandingError, ManifestError
from bq_platform.lib.publish.quota import QuotaBudgetExceededError
from bq_platform.lib.warehouse.base import SchemaMismatchError

#: Errors a retry cannot fix: the input, the table or the day's job budget must change first.
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
