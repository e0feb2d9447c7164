"""An operator's cancel of a saga a worker started, then gave back to its queue (it lacked the tools), is honoured.

The cancel finds the saga RUNNING (started by the lacking worker), so it is stored as a request for its owner; the
worker then puts the saga back QUEUED. The worker with the tools starts it from the queue: it reads the stored
request before running anything, so a short saga cannot end before its first lease renewal would notice it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest

from saga_runtime import MemoryStore, SagaExecutor, SagaStatus, StepContext, ToolRegistry


def _charges(calls: list[str]) -> ToolRegistry:
    """Return a Charge that notes its charges and refunds in `calls`."""
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self, amount: int, ctx: StepContext) -> dict[str, Any]:
            calls.append("charge")
            return {"charge_id": f"ch-{amount}"}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            calls.append("refund")

    return registry


async def test_a_cancel_made_while_a_lacking_worker_held_the_saga_is_honoured() -> None:
    """A cancel stored while a worker lacking the tools held the saga stops it before any charge (memory)."""
    calls: list[str] = []
    operator: list[SagaExecutor] = []

    class Store(MemoryStore):
        async def requeue(self, saga_id: str, owner: str, now: datetime) -> bool:
            # The operator cancels in the window between the lacking worker's start and its give-back.
            await operator[0].cancel(saga_id, reason="customer asked")
            return await super().requeue(saga_id, owner, now)

    store = Store()
    app = SagaExecutor(_charges(calls), store, executor_id="app", lease_timeout=30)
    operator.append(app)
    handle = await app.submit([{"tool": "Charge", "args": {"amount": 5}, "id": "c"}], saga_id="pay-cancel")
    lacking = SagaExecutor(ToolRegistry(), store, executor_id="no-tools")
    serving = asyncio.create_task(lacking.serve(interval=0.02))
    try:
        for _ in range(500):
            if (await store.cancel_request("pay-cancel")) is not None:
                break
            await asyncio.sleep(0.01)
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
    assert await store.cancel_request("pay-cancel") is not None  # the operator's cancel was recorded
    worker = SagaExecutor(_charges(calls), store, executor_id="worker", lease_timeout=30)
    serving = asyncio.create_task(worker.serve(interval=0.02))
    try:
        result = await handle.result(timeout=10)
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
    # The cancel was accepted before any tool ran: the saga must not end SUCCESS with the customer charged.
    assert result.status is not SagaStatus.SUCCESS, (result.status, calls)
    assert calls in ([], ["charge", "refund"])
