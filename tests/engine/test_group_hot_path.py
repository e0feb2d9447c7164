"""The parallel group's hot path: what it reads and keeps a step, pinned to what it stands for."""

from __future__ import annotations

import asyncio
from typing import Any

from saga_runtime._engine import _cancellation


async def test_siblings_read_the_task_running_now_as_asyncio_does() -> None:
    """The siblings' reader of the current task returns what `asyncio.current_task()` does, per task."""

    async def seen() -> tuple[Any, Any]:
        return _cancellation._current_task(), asyncio.current_task()

    mine, asyncio_s = await seen()
    assert mine is asyncio_s
    assert mine is not None
    other, other_asyncio_s = await asyncio.create_task(seen())
    assert other is other_asyncio_s
    assert other is not mine
