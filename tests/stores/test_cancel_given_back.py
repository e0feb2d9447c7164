"""A worker lacking a queued saga's tools passes it over in the store: no write, so nothing for a cancel to race.

It used to start the saga and give it back (two writes a round), so a cancel could find it RUNNING under a worker
that would never run it. Now the saga stays QUEUED and unwritten while that worker serves, and a cancel ends it at
once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga_runtime import SagaExecutor, SagaStatus, SagaStore, StepContext, ToolRegistry


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


async def test_a_worker_lacking_the_tools_writes_nothing_and_a_cancel_ends_the_saga_at_once(store: SagaStore) -> None:
    """Rounds of a worker lacking the tools leave the queued saga's row as it was; a cancel then ends it, no charge."""
    calls: list[str] = []
    app = SagaExecutor(_charges(calls), store, executor_id="app", lease_timeout=30)
    handle = await app.submit([{"tool": "Charge", "args": {"amount": 5}, "id": "c"}], saga_id="pay-cancel")
    before = await store.load_saga("pay-cancel")
    lacking = SagaExecutor(ToolRegistry(), store, executor_id="no-tools")
    serving = asyncio.create_task(lacking.serve(interval=0.02))
    try:
        await asyncio.sleep(0.3)  # many rounds
        after = await store.load_saga("pay-cancel")
        assert after is not None
        assert before is not None
        assert after[0] == before[0]  # not one write: not started, not given back
        cancelled = await app.cancel("pay-cancel", reason="customer asked")
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
    assert cancelled.status is SagaStatus.COMPENSATED
    assert (await handle.result(timeout=1)).status is SagaStatus.COMPENSATED
    assert calls == []
