"""A worker giving back a queued saga it lacks the tools for still starts the runnable ones behind it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga_runtime import SagaExecutor, SagaStatus, SagaStore, StepContext, ToolRegistry


def _registry(*names: str, calls: list[str]) -> ToolRegistry:
    """Return a registry with a tool of each name, noting its calls."""
    registry = ToolRegistry()
    for name in names:

        class Tool:
            async def execute(self, n: str, ctx: StepContext) -> dict[str, Any]:
                calls.append(n)
                return {"done": n}

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                pass

        Tool.__name__ = Tool.__qualname__ = name
        registry.tool(Tool)
    return registry


async def test_a_saga_given_back_does_not_block_the_runnable_sagas_behind_it(store: SagaStore) -> None:
    """Ship (lacked by the worker) is first in its queue; Charge behind it must start under concurrency=1."""
    calls: list[str] = []
    app = SagaExecutor(_registry("Charge", "Ship", calls=calls), store, executor_id="app")
    await app.submit([{"tool": "Ship", "args": {"n": "ship"}, "id": "s"}], saga_id="q-ship")
    await asyncio.sleep(0.01)  # submit order: q-ship first
    charge = await app.submit([{"tool": "Charge", "args": {"n": "charge"}, "id": "c"}], saga_id="q-charge")
    worker = SagaExecutor(_registry("Charge", calls=calls), store, executor_id="charge-only")
    serving = asyncio.create_task(worker.serve(concurrency=1, interval=0.02))
    try:
        result = await charge.result(timeout=5)  # TimeoutError: the worker claims q-ship, gives it back, again...
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
    assert result.status is SagaStatus.SUCCESS
    assert calls == ["charge"]


async def test_many_sagas_a_worker_cannot_run_ahead_of_one_it_can_are_passed_over(store: SagaStore) -> None:
    """Thirty Ship sagas (lacked) ahead of a Charge: the worker passes over all of them, unwritten, and runs it."""
    calls: list[str] = []
    app = SagaExecutor(_registry("Charge", "Ship", calls=calls), store, executor_id="app")
    ships = [f"q-ship-{n}" for n in range(30)]
    for saga_id in ships:
        await app.submit([{"tool": "Ship", "args": {"n": saga_id}, "id": "s"}], saga_id=saga_id)
    await asyncio.sleep(0.01)  # submit order: every ship first
    before = {saga_id: await store.load_saga(saga_id) for saga_id in ships}
    charge = await app.submit([{"tool": "Charge", "args": {"n": "charge"}, "id": "c"}], saga_id="q-charge")
    worker = SagaExecutor(_registry("Charge", calls=calls), store, executor_id="charge-only")
    serving = asyncio.create_task(worker.serve(concurrency=1, interval=0.02))
    try:
        result = await charge.result(timeout=10)
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
    assert result.status is SagaStatus.SUCCESS
    assert calls == ["charge"]
    assert {saga_id: await store.load_saga(saga_id) for saga_id in ships} == before  # none written
