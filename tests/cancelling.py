"""The caller leaving: run something in a task, cancel it once it is under way, and check the cancel went on."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import anyio
import pytest

# A handshake that never completes would hang a broken engine; this bound turns the hang into a failure.
HANDSHAKE = 5.0


async def cancel_once(work: Coroutine[Any, Any, Any], started: anyio.Event) -> None:
    """Run `work` in a task, cancel the task once `started` is set, and check CancelledError came out of it."""
    task = asyncio.create_task(work)
    with anyio.fail_after(HANDSHAKE):
        await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
