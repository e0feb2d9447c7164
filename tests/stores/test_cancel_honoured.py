"""A cancel is never dropped (issue 35): the owner starts nothing once it is stored; the record says what came of it.

Every owner write is refused while a cancel request it has not taken in is stored, so the owner learns of a cancel
at its next write, before any tool starts; a lease renewal tells it too while a long call runs. Run on every store.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from orphans import planned_orphan

from saga_runtime import (
    RetryPolicy,
    SagaExecutor,
    SagaStatus,
    SagaStore,
    StepContext,
    StepFailedError,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._records import StepRow, idempotency_key, now


def slow_tools(calls: list[str], pause: float) -> ToolRegistry:
    """Return a tool that notes each call and undo, each call taking `pause` seconds."""
    registry = ToolRegistry()

    @registry.tool
    class Slow:
        async def execute(self, name: str) -> dict[str, str]:
            calls.append(f"do {name}")
            await asyncio.sleep(pause)
            return {"name": name}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            calls.append(f"undo {ctx.args['name']}")

    return registry


async def test_a_cancel_stops_the_saga_before_its_next_group(store: SagaStore) -> None:
    """A 4-group saga cancelled while group 1 runs starts no later group, compensates, and records the cancel."""
    calls: list[str] = []
    # The default lease (30 s): the owner is not told by a renewal, only by its next write.
    executor = SagaExecutor(slow_tools(calls, 0.4), store)
    plan = [{"tool": "Slow", "args": {"name": f"g{i}"}, "id": f"g{i}"} for i in range(4)]
    running = asyncio.create_task(executor.run(plan, saga_id="four"))
    await asyncio.sleep(0.15)
    asked = await executor.cancel("four", reason="customer called", by="ops")
    assert asked.status is SagaStatus.RUNNING
    result = await asyncio.wait_for(running, 30)
    assert calls == ["do g0", "undo g0"]
    assert result.status is SagaStatus.COMPENSATED
    assert result.cancel is not None
    assert (result.cancel.by, result.cancel.reason, result.cancel.outcome) == ("ops", "customer called", "cancelled")
    assert [row.status for row in result.steps] == [StepStatus.COMPENSATED, *[StepStatus.PENDING] * 3]
    stored = await store.get_saga("four")
    assert stored is not None
    assert stored.cancel == result.cancel
    assert (await store.verify_saga("four")).ok


async def test_a_cancel_stops_a_retry_before_its_next_attempt(store: SagaStore) -> None:
    """A step waiting to retry when a cancel is stored never makes its next attempt: it ends FAILED after one."""
    attempts: list[int] = []
    registry = ToolRegistry()

    @registry.tool(retry=RetryPolicy(max_attempts=5, initial_interval=0.3, jitter=False))
    class Flaky:
        async def execute(self, ctx: StepContext) -> None:
            attempts.append(ctx.attempt)
            raise RuntimeError("down")

    executor = SagaExecutor(registry, store)
    running = asyncio.create_task(executor.run([{"tool": "Flaky", "id": "flaky"}], saga_id="retry"))
    await asyncio.sleep(0.1)
    await executor.cancel("retry", reason="give up")
    result = await asyncio.wait_for(running, 30)
    assert attempts == [1]
    assert result.status is SagaStatus.COMPENSATED
    assert (result.steps[0].status, result.steps[0].attempts) == (StepStatus.FAILED, 1)
    assert result.cancel is not None
    assert result.cancel.outcome == "cancelled"


async def test_a_cancel_racing_the_end_is_recorded_as_ignored_or_honoured(store: SagaStore) -> None:
    """Cancels racing the sagas' finishes: every cancel accepted is in the record, honoured or ignored, never lost."""
    calls: list[str] = []
    executor = SagaExecutor(slow_tools(calls, 0.2), store)
    plan = [{"tool": "Slow", "args": {"name": n}, "id": n} for n in ("a", "b")]
    rng = random.Random(35)

    async def one(i: int) -> tuple[SagaStatus, Any]:
        running = asyncio.create_task(executor.run(plan, saga_id=f"race-{i}"))
        await asyncio.sleep(rng.uniform(0.0, 0.5))  # before, during or after its two 0.2 s steps
        try:
            asked = await executor.cancel(f"race-{i}", reason="race")
        except KeyError:  # not stored yet
            await running
            return SagaStatus.SUCCESS, None
        return asked.status, await running

    outcomes = await asyncio.gather(*(one(i) for i in range(24)))
    accepted = 0
    for asked, result in outcomes:
        if result is None or asked.is_terminal:
            continue  # ended before the cancel was asked: returned unchanged
        accepted += 1
        assert result.cancel is not None, result.saga_id
        expected = {"cancelled": SagaStatus.COMPENSATED, "ignored": SagaStatus.SUCCESS}
        assert expected[result.cancel.outcome] is result.status, result
        stored = await store.get_saga(result.saga_id)
        assert stored is not None
        assert stored.cancel == result.cancel
    assert accepted > 0


async def test_a_cancel_racing_queue_claims_is_never_lost(store: SagaStore) -> None:
    """Queued sagas cancelled while a worker claims and runs them: each accepted cancel is in its record."""
    calls: list[str] = []
    executor = SagaExecutor(slow_tools(calls, 0.03), store)
    plan = [{"tool": "Slow", "args": {"name": n}, "id": n} for n in ("a", "b", "c")]
    handles = [await executor.submit(plan, saga_id=f"q-{i}") for i in range(20)]
    serving = asyncio.create_task(executor.serve(interval=0.02, concurrency=4))
    rng = random.Random(7)
    asked: dict[str, SagaStatus] = {}
    try:
        for handle in handles:
            await asyncio.sleep(rng.uniform(0.0, 0.04))
            asked[handle.saga_id] = (await executor.cancel(handle.saga_id, reason="race")).status
        results = [await handle.result(timeout=60) for handle in handles]
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
    for result in results:
        if asked[result.saga_id] is SagaStatus.SUCCESS:
            continue  # ended before the cancel was asked: returned unchanged
        assert result.cancel is not None, result.saga_id
        assert result.cancel.outcome in ("cancelled", "ignored")
        assert result.status is (SagaStatus.COMPENSATED if result.cancel.outcome == "cancelled" else SagaStatus.SUCCESS)


async def test_a_cancel_of_a_compensating_saga_is_recorded(store: SagaStore) -> None:
    """A cancel stored while a failed saga compensates is in its record ("compensating"), however soon it ends."""
    started = asyncio.Event()
    release = asyncio.Event()
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self) -> int:
            return 1

        async def compensate(self, result: Any) -> None:
            started.set()
            await release.wait()

    @registry.tool
    class Fail:
        async def execute(self) -> None:
            raise RuntimeError("boom")

    executor = SagaExecutor(registry, store)
    plan = [{"tool": "Charge", "id": "charge"}, {"tool": "Fail", "id": "fail"}]
    running = asyncio.create_task(executor.run(plan, saga_id="undoing"))
    await asyncio.wait_for(started.wait(), 10)
    asked = await executor.cancel("undoing", reason="too late", by="ops")
    assert asked.status is SagaStatus.COMPENSATING
    release.set()
    result = await asyncio.wait_for(running, 30)
    assert result.status is SagaStatus.COMPENSATED
    assert "boom" in (result.error or "")
    assert result.cancel is not None
    assert (result.cancel.by, result.cancel.outcome) == ("ops", "compensating")
    assert (await store.verify_saga("undoing")).ok


async def test_a_cancel_of_a_waiting_saga_ends_its_gated_step_rejected(store: SagaStore) -> None:
    """A WAITING saga cancelled: its request is rejected by "cancel", and the gated step ends REJECTED (§9)."""
    registry = ToolRegistry()

    @registry.tool
    class Reserve:
        async def execute(self) -> int:
            return 1

        async def compensate(self, result: Any) -> None:
            return None

    @registry.tool(approval=True)
    class Pay:
        async def execute(self, amount: int) -> dict[str, int]:
            return {"paid": amount}

    executor = SagaExecutor(registry, store)
    plan = [{"tool": "Reserve", "id": "reserve"}, {"tool": "Pay", "args": {"amount": 5}, "id": "pay"}]
    waiting = await executor.run(plan, saga_id="gated")
    assert waiting.status is SagaStatus.WAITING
    result = await executor.cancel("gated", reason="fraud")
    assert result.status is SagaStatus.COMPENSATED
    assert [(r.step_id, r.decision, r.decided_by) for r in result.approvals] == [("pay", "rejected", "cancel")]
    assert [row.status for row in result.steps] == [StepStatus.COMPENSATED, StepStatus.REJECTED]
    assert result.cancel is not None
    assert result.cancel.outcome == "cancelled"
    assert (await store.verify_saga("gated")).ok


async def test_a_cancel_cuts_a_hung_reconcile(store: SagaStore) -> None:
    """A recovered step's reconcile that hangs (no timeout) is cut by a cancel: the saga ends, the cancel recorded."""
    asked = asyncio.Event()
    registry = ToolRegistry()

    @registry.tool
    class Hang:
        async def execute(self, n: int) -> int:
            return n

        async def reconcile(self, n: int) -> int:
            asked.set()
            await asyncio.Event().wait()
            return n

        async def compensate(self, result: Any) -> None:
            return None

    plan = [{"tool": "Hang", "args": {"n": 1}, "id": "hang"}]
    row = StepRow("orphan", 0, "hang", 0, "Hang", {"n": 1}, idempotency_key("orphan", "hang"))
    row.status, row.attempts, row.started_at = StepStatus.RUNNING, 1, now()  # its owner died while it ran
    assert await store.create_saga(planned_orphan("orphan", plan, registry), [row]) is None
    executor = SagaExecutor(registry, store, lease_timeout=0.6, compensation_timeout=0.5)
    recovering = asyncio.create_task(executor.recover())
    await asyncio.wait_for(asked.wait(), 10)
    await executor.cancel("orphan", reason="hung", by="ops")
    [result] = await asyncio.wait_for(recovering, 30)
    # Its outcome stays unknown: the undo asks reconcile again, bounded by compensation_timeout.
    assert result.status in (SagaStatus.COMPENSATED, SagaStatus.COMPENSATION_FAILED)
    assert result.cancel is not None
    assert (result.cancel.by, result.cancel.outcome) == ("ops", "cancelled")
    assert (await store.verify_saga("orphan")).ok


async def test_a_cancel_stored_as_the_saga_begins_to_wait_rejects_its_requests(store: SagaStore) -> None:
    """A cancel stored just before a saga records its wait: its requests are rejected, and recovery compensates it."""
    registry = ToolRegistry()
    executor = SagaExecutor(registry, store)

    @registry.tool
    class Reserve:
        async def execute(self, ctx: StepContext) -> int:
            asked = await executor.cancel(ctx.saga_id, reason="changed my mind", by="ops")  # while it runs
            assert asked.status is SagaStatus.RUNNING
            return 1

        async def compensate(self, result: Any) -> None:
            return None

    @registry.tool(approval=True)
    class Pay:
        async def execute(self, amount: int) -> dict[str, int]:
            return {"paid": amount}

    plan = [{"tool": "Reserve", "id": "reserve"}, {"tool": "Pay", "args": {"amount": 5}, "id": "pay"}]
    await executor.run(plan, saga_id="late-wait")
    [result] = await executor.recover()  # a worker goes on with a waiting saga whose requests are decided
    assert result.status is SagaStatus.COMPENSATED
    assert [(r.decision, r.decided_by) for r in result.approvals] == [("rejected", "cancel")]
    assert [row.status for row in result.steps] == [StepStatus.COMPENSATED, StepStatus.REJECTED]
    assert result.cancel is not None
    assert (result.cancel.by, result.cancel.outcome) == ("ops", "cancelled")
    assert (await store.verify_saga("late-wait")).ok


async def test_a_cancel_stops_a_dynamic_saga_before_its_next_call(store: SagaStore) -> None:
    """A dynamic saga cancelled mid-call: its next call runs nothing and raises, saying it was cancelled."""
    calls: list[str] = []
    executor = SagaExecutor(slow_tools(calls, 0.3), store)

    async def agent() -> None:
        async with executor.saga(saga_id="agent") as saga:
            for name in ("a", "b", "c"):
                await saga.call("Slow", name=name)

    running = asyncio.create_task(agent())
    await asyncio.sleep(0.1)
    await executor.cancel("agent", reason="stop", by="ops")
    with pytest.raises(StepFailedError, match="not run: cancelled: stop"):
        await asyncio.wait_for(running, 30)
    assert calls == ["do a", "undo a"]
    result = await store.get_saga("agent")
    assert result is not None
    assert result.status is SagaStatus.COMPENSATED
    assert result.cancel is not None
    assert result.cancel.outcome == "cancelled"
