"""A stopped worker lets its running calls return, but no longer than `compensation_timeout`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from saga_runtime import MemoryStore, SagaExecutor, SagaStatus, StepContext, StepStatus, ToolRegistry


async def test_a_stop_cuts_a_call_short_after_compensation_timeout() -> None:
    """A call still running `compensation_timeout` after the stop is cancelled: unknown outcome, saga released."""
    started = asyncio.Event()
    registry = ToolRegistry()

    @registry.tool
    class Hang:
        async def execute(self, ctx: StepContext) -> dict[str, Any]:
            started.set()
            await asyncio.sleep(60)
            return {}

    store = MemoryStore()
    executor = SagaExecutor(registry, store, compensation_timeout=0.3, lease_timeout=60)
    await executor.submit([{"id": "hang", "tool": "Hang", "args": {}}], saga_id="long")
    task = asyncio.create_task(executor.serve(interval=0.02))
    await asyncio.wait_for(started.wait(), 10)
    began = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - began < 10  # bounded by the 0.3 s, not the call's 60 s
    stored = await store.load_saga("long")
    assert stored is not None
    saga, rows = stored
    assert (saga.status, saga.owner) == (SagaStatus.RUNNING, None)  # released for the next worker
    assert [row.status for row in rows] == [StepStatus.RUNNING]  # its outcome unknown: the next one settles it
