"""Free slots go to the first runnable queued sagas, however many sagas of a key at its limit come before them.

The idea of DBOS's "partitions are not starved" test, on our API: a key (DBOS's partition) whose running saga
blocks holds back only its own sagas, on every store.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from saga_runtime import Queue, SagaExecutor, SagaStatus, SagaStore, StepContext, ToolRegistry

PLAN_OF = "Work"


def blocking_registry(gate: asyncio.Event, started: list[str]) -> ToolRegistry:
    """Return tools whose step notes its saga, and waits for `gate` when its saga's key is "A"."""
    registry = ToolRegistry()

    @registry.tool
    class Work:
        async def execute(self, key: str, ctx: StepContext) -> str:
            started.append(ctx.saga_id)
            if key == "A":
                await gate.wait()
            return ctx.saga_id

        async def compensate(self, result: Any) -> None:
            return None

    return registry


def plan(key: str) -> list[dict[str, Any]]:
    """Return a one-step plan of `key`."""
    return [{"id": "work", "tool": PLAN_OF, "args": {"key": key}}]


async def test_a_free_key_starts_behind_sixty_sagas_of_a_blocked_key(store: SagaStore) -> None:
    """Queue(concurrency=5, key_concurrency=1): 60 sagas of key A then one of B; B runs while A's first blocks."""
    gate, started = asyncio.Event(), []
    executor = SagaExecutor(blocking_registry(gate, started), store, lease_timeout=30.0)
    for n in range(60):
        await executor.submit(plan("A"), saga_id=f"a-{n:02d}", queue="fair", key="A")
    await executor.submit(plan("B"), saga_id="b-00", queue="fair", key="B")
    fair = Queue("fair", concurrency=5, key_concurrency=1)
    worker = asyncio.create_task(executor.serve(queues=[fair], interval=0.05))
    try:
        result = await executor.handle("b-00").result(timeout=10)
        assert result.status is SagaStatus.SUCCESS
        assert sorted(started) == ["a-00", "b-00"]  # started together; A's others wait for their key, not B
    finally:
        gate.set()
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)


async def test_blocked_keys_leave_free_slots_to_later_keys_in_submit_order(store: SagaStore) -> None:
    """Keys at their limit are passed over in one claim: the free slots go to the next keys, in submit order."""
    gate, started = asyncio.Event(), []
    executor = SagaExecutor(blocking_registry(gate, started), store, lease_timeout=30.0)
    for n in range(30):
        await executor.submit(plan("A"), saga_id=f"a-{n:02d}", queue="fair", key="A")
    for key in ("B", "C", "D"):
        for n in range(2):
            await executor.submit(plan(key), saga_id=f"{key.lower()}-{n}", queue="fair", key=key)
    fair = Queue("fair", concurrency=3, key_concurrency=1)
    lease = datetime.now(UTC) + timedelta(seconds=30)
    claimed = await store.claim_queued("one-claim", lease, datetime.now(UTC), fair, 3)
    assert [saga.saga_id for saga, _ in claimed] == ["a-00", "b-0", "c-0"]
    gate.set()
