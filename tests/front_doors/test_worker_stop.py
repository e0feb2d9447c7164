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


async def test_a_serve_started_while_another_stops_is_not_stopped_with_it() -> None:
    """A second serve() of one executor, started while a stopped one still finishes its call, runs its sagas."""
    started = asyncio.Event()
    release = asyncio.Event()
    calls: list[str] = []
    registry = ToolRegistry()

    @registry.tool
    class Step:
        async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
            calls.append(name)
            if name == "slow":
                started.set()
                await release.wait()
            return {"name": name}

    store = MemoryStore()
    executor = SagaExecutor(registry, store, compensation_timeout=60, lease_timeout=60)
    await executor.submit([{"id": "s", "tool": "Step", "args": {"name": "slow"}}], saga_id="slow")
    first = asyncio.create_task(executor.serve(interval=0.02))
    await asyncio.wait_for(started.wait(), 10)
    first.cancel()  # a stop: its running call goes on until it returns
    await asyncio.sleep(0.05)
    second = asyncio.create_task(executor.serve(interval=0.02))
    try:
        plan = [{"id": n, "tool": "Step", "args": {"name": n}} for n in ("a", "b")]
        handle = await executor.submit(plan, saga_id="fresh")
        result = await handle.result(timeout=10)  # while the first serve still waits for its call
        assert result.status is SagaStatus.SUCCESS
        assert result.takeovers == []  # never stopped and released by the other serve's stop
        assert not first.done()
    finally:
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await first
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
    assert calls == ["slow", "a", "b"]
    slow = await store.get_saga("slow")
    assert slow is not None
    assert slow.status is SagaStatus.SUCCESS  # its call returned and was recorded, cut short by nothing
