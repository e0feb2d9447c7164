"""Regressions found by the review of the engine rebuild, each pinned as it was reproduced."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from orphans import orphan_saga

from saga_runtime import (
    ApprovalPendingError,
    ApprovalRejectedError,
    MemoryStore,
    SagaExecutor,
    SagaInProgressError,
    SagaStatus,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._records import StepRow, idempotency_key, now, seal_all


def _orphan(store: MemoryStore, saga_id: str, plan: list[Any], rows: list[StepRow]) -> None:
    """Put a saga left by a dead executor (lease expired) straight into a memory store."""
    saga = orphan_saga(saga_id, plan)
    started = saga.created_at
    for row in rows:
        row.started_at = started
    seal_all(rows, None)
    store._sagas[saga_id] = saga
    store._steps[saga_id] = {row.step_id: row for row in rows}


async def test_a_stopped_recovery_releases_its_saga_before_another_path_may_take_it() -> None:
    """run() of a saga whose recovery is being stopped is refused until the recovery's release is written: a late
    release must never overwrite what run() recorded."""
    calls: list[str] = []
    charging = asyncio.Event()
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self, n: int) -> dict[str, int]:
            calls.append(f"charge {n}")
            charging.set()
            if len(calls) == 1:
                await asyncio.sleep(3600)  # the recovering worker is stopped while this runs
            return {"n": n}

        async def compensate(self, result: Any) -> None:
            calls.append("refund")

    class SlowRelease(MemoryStore):
        async def save(
            self, saga: Any, steps: Any, *, owner: str | None = None, reseal: bool = True, lease: bool = True
        ) -> None:
            if saga is not None and saga.owner is None and not steps:
                await asyncio.sleep(0.2)  # a release write on a real database takes a round trip
            await super().save(saga, steps, owner=owner, reseal=reseal, lease=lease)

    store = SlowRelease()
    plan = [[{"id": "s0", "tool": "Charge", "args": {"n": 1}}]]
    row = StepRow("X", 0, "s0", 0, "Charge", {"n": 1}, idempotency_key("X", "s0"), status=StepStatus.RUNNING)
    row.attempts = 1
    _orphan(store, "X", plan, [row])
    executor = SagaExecutor(registry, store=store)
    worker = asyncio.create_task(executor.recover())
    await charging.wait()
    worker.cancel()  # shutdown: the recovery stops and releases X, slowly
    await asyncio.sleep(0.05)
    with pytest.raises(SagaInProgressError):
        await executor.run(plan, saga_id="X")
    with pytest.raises(asyncio.CancelledError):
        await worker
    stored = await store.load_saga("X")
    assert stored is not None
    assert stored[0].status is SagaStatus.RUNNING
    assert stored[0].owner is None  # released, for the next worker
    assert calls == ["charge 1"]


async def test_a_step_of_unknown_outcome_that_cannot_start_again_is_compensated_not_failed() -> None:
    """Recovery of a timed-out step whose arguments no longer validate neither raises nor calls it FAILED (which
    is never compensated): the step keeps its unknown outcome and the saga compensates."""
    registry = ToolRegistry()
    undone: list[Any] = []

    @registry.tool
    class Lookup:
        async def execute(self, q: str) -> dict[str, str]:
            return {"v": "abc"}

        async def compensate(self, result: Any) -> None:
            undone.append(("lookup", result))

    @registry.tool(retry_scope="step")
    class Notify:  # now takes an int; the recorded step resolved its $ref to a str
        async def execute(self, x: int) -> str:
            return "sent"

        async def compensate(self, result: Any) -> None:
            undone.append(("notify", result))

    store = MemoryStore()
    plan = [
        [{"id": "s0", "tool": "Lookup", "args": {"q": "a"}}],
        [{"id": "s1", "tool": "Notify", "args": {"x": {"$ref": "s0.v"}}}],
    ]
    s0 = StepRow("p", 0, "s0", 0, "Lookup", {"q": "a"}, idempotency_key("p", "s0"), status=StepStatus.SUCCESS)
    s0.attempts, s0.result, s0.finished_at = 1, {"v": "abc"}, now()
    s1 = StepRow("p", 1, "s1", 1, "Notify", {"x": "abc"}, idempotency_key("p", "s1"), status=StepStatus.CANCELLED)
    s1.attempts, s1.error, s1.error_type = 1, "Notify did not finish within its timeout of 1s", "TimeoutError"
    _orphan(store, "p", plan, [s0, s1])
    (result,) = await SagaExecutor(registry, store=store, max_recovery_attempts=1).recover()
    assert result.status is SagaStatus.COMPENSATED
    assert [step.status for step in result.steps] == [StepStatus.COMPENSATED, StepStatus.COMPENSATED]
    assert undone == [("notify", None), ("lookup", {"v": "abc"})]


async def test_a_group_refused_by_a_rejection_caught_by_the_code_lets_the_saga_end() -> None:
    """A dynamic group whose gated call is rejected: its other calls are recorded as not run, and a block that
    catches ApprovalRejectedError and goes on ends SUCCESS."""
    registry = ToolRegistry()
    booked: list[str] = []

    @registry.tool
    class Book:
        async def execute(self, what: str) -> dict[str, str]:
            booked.append(what)
            return {"booked": what}

        async def compensate(self, result: Any) -> None:
            return None

    @registry.tool(approval=True)
    class Refund:
        async def execute(self, amount: int) -> dict[str, int]:
            return {"refunded": amount}

        async def compensate(self, result: Any) -> None:
            return None

    async def agent(executor: SagaExecutor) -> Any:
        async with executor.saga(saga_id="chat") as saga:
            await saga.call("Book", what="hotel")
            with contextlib.suppress(ApprovalRejectedError):  # documented: the code may catch it and go on
                await saga.group([("Refund", {"amount": 9000}), ("Book", {"what": "taxi"})])
        return saga.result

    executor = SagaExecutor(registry, store=MemoryStore())
    with pytest.raises(ApprovalPendingError):
        await agent(executor)
    await executor.reject("chat", "Refund-1", by="bob")
    result = await agent(executor)
    assert result.status is SagaStatus.SUCCESS
    assert [step.status for step in result.steps] == [StepStatus.SUCCESS, StepStatus.REJECTED, StepStatus.FAILED]
    assert booked == ["hotel"]


async def test_the_memory_store_never_seals_a_row_it_did_not_see_written_unsealed() -> None:
    """An imported row whose seal was removed (its content altered) stays reported after the saga is written
    again: the store seals only the rows the engine wrote unsealed."""
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self, n: int) -> dict[str, int]:
            return {"n": n}

        async def compensate(self, result: Any) -> None:
            return None

    source = MemoryStore()
    plan = [[{"id": "s0", "tool": "Charge", "args": {"n": 1}}], [{"id": "s1", "tool": "Charge", "args": {"n": 2}}]]
    s0 = StepRow("p", 0, "s0", 0, "Charge", {"n": 1}, idempotency_key("p", "s0"), status=StepStatus.SUCCESS)
    s0.attempts, s0.result, s0.finished_at = 1, {"n": 1}, now()
    s1 = StepRow("p", 1, "s1", 1, "Charge", {"n": 2}, idempotency_key("p", "s1"), status=StepStatus.RUNNING)
    s1.attempts = 1
    _orphan(source, "p", plan, [s0, s1])
    document = await source.export_saga("p")
    for step in document["steps"]:
        if step["step_id"] == "s0":
            step["result"], step["hash"] = {"n": 1000}, None  # the amount changed, the seal removed
    store = MemoryStore()
    await store.import_saga(document)
    assert not await store.verify_saga("p")
    (result,) = await SagaExecutor(registry, store=store).recover()
    assert result.status is SagaStatus.SUCCESS
    assert not await store.verify_saga("p")
