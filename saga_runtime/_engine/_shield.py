"""shielded(): finish a coroutine whatever happens to the caller, then let the caller's cancellation go on."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import anyio

__all__ = ["shielded"]

T = TypeVar("T")


async def shielded(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end even if the calling task is cancelled meanwhile; then re-raise that cancellation.

    An anyio shielded scope alone is not enough on asyncio: it holds off anyio's cancel scopes, but a native
    `task.cancel()` (a caller's `asyncio.timeout`, `wait_for`, or a second cancel) still lands inside it. So
    the work runs in its own task, always awaited here (never left behind), and each native cancellation of
    the caller is caught, remembered, and raised once the work is done. Bound the work itself with a timeout.
    """
    task = asyncio.ensure_future(coro)
    caught: BaseException | None = None
    with anyio.CancelScope(shield=True):
        while True:
            try:
                result = await asyncio.shield(task)
                break
            except asyncio.CancelledError as exc:
                if task.cancelled():  # the work itself was cancelled (the loop is closing): nothing to wait for
                    raise
                caught = exc
    if caught is not None:
        raise caught
    return result
