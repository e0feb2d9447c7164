"""A store that declares no capability (the example store of your own): waits stay in the process, and what it
cannot keep is refused before any effect."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga_runtime import DynamicSaga, SagaExecutor, SagaStatus, StepContext, StoreError, ToolRegistry
from saga_runtime.examples.dict_store import DictStore


def registry_of(calls: list[str]) -> ToolRegistry:
    """Return a registry of a charge (refunded on compensation), a shipment, and two saga functions that wait."""
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self, n: int) -> int:
            calls.append(f"charge {n}")
            return n

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            calls.append(f"refund {ctx.args['n']}")

    @registry.tool
    class Ship:
        async def execute(self, n: int) -> int:
            calls.append(f"ship {n}")
            return n

    @registry.saga
    async def pay_later(saga: DynamicSaga) -> str:
        await saga.call("Charge", n=1)
        await saga.sleep(0.3)
        await saga.call("Charge", n=2)
        return "done"

    @registry.saga
    async def pay_on_reply(saga: DynamicSaga) -> Any:
        await saga.call("Charge", n=1)
        return await saga.recv("go", timeout=5)

    return registry


async def test_a_long_sleep_stays_in_the_process_on_a_store_that_keeps_no_waits() -> None:
    """A saga function's sleep past wait_threshold on a store without "waits" is not released (nothing would wake
    it): it sleeps in the process and finishes."""
    calls: list[str] = []
    store = DictStore()
    executor = SagaExecutor(registry_of(calls), store, wait_threshold=0.1)

    result = await executor.run("pay_later", saga_id="later")

    assert (result.status, result.output, calls) == (SagaStatus.SUCCESS, "done", ["charge 1", "charge 2"])


async def test_recv_on_a_store_that_keeps_no_messages_fails_and_compensates() -> None:
    """recv on a store without "messages" (send to it is refused) raises StoreError in the code: the saga fails and
    its charge is refunded, instead of waiting for a message that cannot come."""
    calls: list[str] = []
    executor = SagaExecutor(registry_of(calls), DictStore())

    result = await asyncio.wait_for(executor.run("pay_on_reply", saga_id="reply"), 10)

    assert result.status is SagaStatus.COMPENSATED
    assert "messages" in (result.error or "")
    assert calls == ["charge 1", "refund 1"]


async def test_a_plan_needing_approval_is_refused_before_anything_runs_on_a_store_that_keeps_no_waits() -> None:
    """A plan with a step needing approval on a store without "waits": StoreError before the saga is stored, no
    tool called."""
    calls: list[str] = []
    store = DictStore()
    executor = SagaExecutor(registry_of(calls), store)
    plan = [{"tool": "Charge", "args": {"n": 1}}, {"tool": "Ship", "args": {"n": 1}, "approval": True}]

    with pytest.raises(StoreError, match="waits"):
        await executor.run(plan, saga_id="gated")

    assert calls == []
    assert await store.load_saga("gated") is None
