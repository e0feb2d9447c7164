"""Model calls retried on transient errors (rate limits, overload, timeouts, lost connections)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from saga_runtime._tools import RetryPolicy

__all__ = ["DEFAULT_MODEL_RETRY", "call_with_retry", "is_transient"]

logger = logging.getLogger("saga_runtime")
T = TypeVar("T")

DEFAULT_MODEL_RETRY = RetryPolicy(max_attempts=4, initial_interval=1.0, backoff_coefficient=2.0, max_interval=20.0)
# As the SDKs retry them; and 5xx.
_TRANSIENT_STATUSES = frozenset({408, 409, 429})
# By name, so no SDK is imported.
_TRANSIENT_NAMES = frozenset({"APIConnectionError", "APITimeoutError"})


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    return None


def is_transient(exc: BaseException) -> bool:
    """Tell whether a failed model call may succeed again."""
    status = _status(exc)
    if status is not None:
        return status in _TRANSIENT_STATUSES or status >= 500
    if any(kind.__name__ in _TRANSIENT_NAMES for kind in type(exc).__mro__):
        return True
    return isinstance(exc, TimeoutError | ConnectionError)


def _retry_after(exc: BaseException) -> float | None:
    """Return the error's `Retry-After` seconds, if any."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


async def call_with_retry(policy: RetryPolicy, call: Callable[[], Awaitable[T]], what: str) -> T:
    """Return `call()`, retrying transient errors per `policy`."""
    attempt = 1
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_transient(exc) or not policy.should_retry(exc, attempt):
                raise
            delay = policy.delay(attempt)
            asked = _retry_after(exc)
            if asked is not None:
                delay = max(delay, min(asked, policy.max_interval))
            logger.warning(
                "%s failed (attempt %d of %d), trying again in %.2f s: %s",
                what,
                attempt,
                policy.max_attempts,
                delay,
                _describe(exc),
            )
            await anyio.sleep(delay)
            attempt += 1


def _describe(exc: Any) -> str:
    return f"{type(exc).__name__}: {exc}"
