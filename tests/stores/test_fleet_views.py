"""How a saga ended and why it waits (API.md §19), through the public API on every store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from orphans import planned_orphan

from saga_runtime import (
    Budget,
    BudgetExceededError,
    SagaExecutor,
    SagaStatus,
    SagaStore,
    StepContext,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._storage._sql import Queries
from saga_runtime.metrics import PrometheusHook

from .conftest import Stores


def make_registry(*, ship: bool = True) -> ToolRegistry:
    """Return tools: Reserve (undone), Refund (no compensate: its effect stands), Fail, Pricey, Slow, Wire, Ship."""
    registry = ToolRegistry()

    @registry.tool
    class Reserve:
        async def execute(self, item: str) -> dict[str, Any]:
            return {"item": item}

        async def compensate(self, result: Any) -> None:
            return None

    @registry.tool
    class Refund:
        async def execute(self, cents: int) -> dict[str, Any]:
            return {"refunded": cents}

    @registry.tool
    class Fail:
        async def execute(self) -> None:
            raise RuntimeError("the card was declined")

    @registry.tool
    class Pricey:
        async def execute(self, ctx: StepContext) -> None:
            ctx.charge(cost=5.0)

    @registry.tool(timeout=0.05)
    class Slow:
        async def execute(self) -> None:
            await asyncio.sleep(30)

        async def compensate(self, result: Any) -> None:
            return None

    @registry.tool(approval=True)
    class Wire:
        async def execute(self, cents: int) -> dict[str, Any]:
            return {"wired": cents}

    if ship:

        @registry.tool
        class Ship:
            async def execute(self, to: str) -> dict[str, Any]:
                return {"to": to}

            async def compensate(self, result: Any) -> None:
                return None

    return registry


RESERVE = {"id": "reserve", "tool": "Reserve", "args": {"item": "lamp"}}
REFUND = {"id": "refund", "tool": "Refund", "args": {"cents": 500}}
FAIL = {"id": "fail", "tool": "Fail"}


@asynccontextmanager
async def serving(executor: SagaExecutor, **options: Any) -> AsyncIterator[None]:
    """Run `executor.serve()` for the block, then stop it."""
    task = asyncio.create_task(executor.serve(interval=0.02, **options))
    try:
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def until(check: Any, seconds: float = 20.0) -> None:
    """Wait until the async `check()` is true (a generous bound, never a timing)."""
    with anyio.fail_after(seconds):
        while not await check():  # noqa: ASYNC110 - polls the store; no event to wait on
            await asyncio.sleep(0.02)


async def test_a_failed_step_ends_failed_and_a_tool_without_compensate_stands(stores: Stores, kind: str) -> None:
    """A failed saga ends "failed"; its step of a tool without compensate stands; both survive a reopened store."""
    store = await stores.open(kind, wipe=True)
    result = await SagaExecutor(make_registry(), store=store).run([[RESERVE, REFUND], FAIL], saga_id="f")
    assert result.status is SagaStatus.COMPENSATED
    assert (result.end_reason, result.effects_standing, result.waiting_for) == ("failed", ["refund"], None)
    assert "ended: failed" in result.describe()
    assert "effects standing (not undone): refund" in result.describe()
    reopened = store if kind == "memory" else await stores.open(kind, stores.url(kind))  # a fresh store reads it
    stored = await reopened.get_saga("f")
    assert stored is not None
    assert (stored.end_reason, stored.effects_standing) == ("failed", ["refund"])
    assert await reopened.verify_saga("f")
    assert stored.to_dict()["end_reason"] == "failed"


async def test_a_saga_that_succeeds_has_no_end_reason(store: SagaStore) -> None:
    """A SUCCESS saga has no end reason, no standing effects listed and waits for nothing."""
    result = await SagaExecutor(make_registry(), store=store).run([RESERVE, REFUND], saga_id="ok")
    assert result.status is SagaStatus.SUCCESS
    assert (result.end_reason, result.effects_standing, result.waiting_for) == (None, [], None)
    stored = await store.get_saga("ok")
    assert stored is not None
    assert stored.end_reason is None


async def test_budget_timeout_and_rejection_are_told_apart(store: SagaStore) -> None:
    """A crossed budget ends "budget", a timed-out step "timeout", a refused approval "rejected"."""
    executor = SagaExecutor(make_registry(), store=store)
    budget = await executor.run([RESERVE, {"id": "p", "tool": "Pricey"}], saga_id="b", budget=Budget(max_cost=1.0))
    assert (budget.status, budget.end_reason) == (SagaStatus.COMPENSATED, "budget")
    slow = await executor.run([RESERVE, {"id": "s", "tool": "Slow"}], saga_id="t")
    assert (slow.status, slow.end_reason) == (SagaStatus.COMPENSATED, "timeout")
    waiting = await executor.run([RESERVE, {"id": "w", "tool": "Wire", "args": {"cents": 9}}], saga_id="r")
    assert waiting.status is SagaStatus.WAITING
    assert waiting.waiting_for is not None
    assert waiting.waiting_for["kind"] == "decision"
    assert "'w' (Wire" in waiting.waiting_for["detail"]
    stored = await store.get_saga("r")
    assert stored is not None
    assert stored.waiting_for == waiting.waiting_for
    (line,) = [s for s in await store.list_sagas(status=SagaStatus.WAITING) if s.saga_id == "r"]
    assert line.waiting_for is not None
    assert line.waiting_for["kind"] == "decision"
    rejected = await executor.reject("r", "w", by="alice", note="wrong account")
    assert (rejected.status, rejected.end_reason, rejected.waiting_for) == (SagaStatus.COMPENSATED, "rejected", None)
    for reason, saga_id in (("budget", "b"), ("timeout", "t"), ("rejected", "r")):
        assert [s.saga_id for s in await store.list_sagas(reason=reason)] == [saga_id]
        assert [s.end_reason for s in await store.list_sagas(reason=reason)] == [reason]
    assert await store.list_sagas(reason="cancelled") == []
    with pytest.raises(ValueError, match="reason must be one of"):
        await store.list_sagas(reason="bored")


async def test_list_by_reason_pages_through_the_matches_only(store: SagaStore) -> None:
    """list_sagas(reason=) pages through the sagas of that end reason alone, newest first (limit and offset count
    matches), with a status filter too; a SUCCESS saga has no reason to be listed by."""
    executor = SagaExecutor(make_registry(), store=store)
    for n in range(3):
        failed = await executor.run([RESERVE, {"id": "f", "tool": "Fail"}], saga_id=f"f{n}")
        assert failed.end_reason == "failed"
        over = await executor.run(
            [RESERVE, {"id": "p", "tool": "Pricey"}], saga_id=f"b{n}", budget=Budget(max_cost=1.0)
        )
        assert over.end_reason == "budget"
    await executor.run([RESERVE], saga_id="ok")
    assert [s.saga_id for s in await store.list_sagas(reason="budget")] == ["b2", "b1", "b0"]
    assert [s.saga_id for s in await store.list_sagas(reason="budget", limit=1, offset=1)] == ["b1"]
    assert [s.saga_id for s in await store.list_sagas(reason="failed", limit=2)] == ["f2", "f1"]
    by_status = await store.list_sagas(SagaStatus.COMPENSATED, reason="failed", offset=2)
    assert [s.saga_id for s in by_status] == ["f0"]
    assert await store.list_sagas(SagaStatus.SUCCESS, reason="failed") == []


async def test_list_by_reason_reads_the_end_reason_index(stores: Stores, sql_kind: str) -> None:
    """The list of one end reason is a query on the (end_reason, created_at, saga_id) index: no scan of the sagas
    table (EXPLAIN on each database, with 5,000 ended sagas of another reason stored)."""
    store: Any = await stores.open(sql_kind, wipe=True)
    stamp = "'2020-01-01 00:00:00'"
    values = ", ".join(f"('h{n}', 'plan', 'COMPENSATED', '{{}}', {stamp}, {stamp}, 'failed')" for n in range(5000))
    insert = "INSERT INTO sagas (saga_id, kind, status, metadata, created_at, updated_at, end_reason) VALUES "
    queries = Queries(store.dialect.flavour)
    explain = "EXPLAIN QUERY PLAN " if sql_kind == "sqlite" else "EXPLAIN "
    async with store._transaction(begin=True) as tx:
        await tx.execute(insert + values)
        plans = {
            by_status: [
                " ".join(str(value) for value in row)
                for row in await tx.fetch(
                    explain + queries.list_reason(by_status),
                    ("budget", *(["COMPENSATED"] if by_status else []), 100, 0),
                )
            ]
            for by_status in (False, True)
        }
    for plan in plans.values():
        text = " | ".join(plan)
        assert "sagas_end_reason" in text, text
        if sql_kind == "sqlite":
            assert "SCAN sagas" not in text, text
        elif sql_kind == "postgresql":
            assert "Seq Scan" not in text, text
        else:
            assert not any(" sagas ALL " in f" {line} " for line in plan), text


async def test_cancelled_sagas_end_cancelled(store: SagaStore) -> None:
    """A queued saga cancelled ends "cancelled", as does a dynamic saga whose block its caller cancelled."""
    executor = SagaExecutor(make_registry(), store=store)
    await executor.submit([RESERVE], saga_id="q")
    cancelled = await executor.cancel("q", reason="not needed")
    assert (cancelled.status, cancelled.end_reason) == (SagaStatus.COMPENSATED, "cancelled")
    stored = await store.get_saga("q")
    assert stored is not None
    assert stored.end_reason == "cancelled"

    async def block() -> None:
        async with executor.saga(saga_id="d") as saga:
            await saga.call("Reserve", item="lamp")
            await asyncio.sleep(30)

    task = asyncio.create_task(block())
    await until(lambda: _has_steps(store, "d"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    dynamic = await store.get_saga("d")
    assert dynamic is not None
    assert (dynamic.status, dynamic.end_reason) == (SagaStatus.COMPENSATED, "cancelled")


async def _has_steps(store: SagaStore, saga_id: str) -> bool:
    result = await store.get_saga(saga_id)
    return result is not None and any(step.status is StepStatus.SUCCESS for step in result.steps)


async def test_a_dynamic_block_over_budget_ends_budget(store: SagaStore) -> None:
    """A dynamic saga whose own charge crosses its budget ends "budget", not merely "failed"."""
    executor = SagaExecutor(make_registry(), store=store)

    async def block() -> None:
        async with executor.saga(saga_id="db", budget=Budget(max_cost=1.0)) as saga:
            await saga.call("Reserve", item="lamp")
            await saga.charge(cost=2.0)

    with pytest.raises(BudgetExceededError):
        await block()
    result = await store.get_saga("db")
    assert result is not None
    assert (result.status, result.end_reason) == (SagaStatus.COMPENSATED, "budget")


async def test_a_queued_saga_no_worker_can_run_says_which_tool_it_waits_for(
    store: SagaStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker lacking a queued saga's tool notes it on the saga; a worker that has it starts it, logged as a start."""
    submitter = SagaExecutor(make_registry(), store=store)
    handle = await submitter.submit([{"id": "s", "tool": "Ship", "args": {"to": "Seoul"}}], saga_id="ship", queue="eu")
    queued = await store.get_saga("ship")
    assert queued is not None
    assert queued.waiting_for is None  # nobody looked yet
    lacking = SagaExecutor(make_registry(ship=False), store=store, executor_id="w-old")

    async def noted() -> bool:
        stored = await store.get_saga("ship")
        return stored is not None and stored.waiting_for is not None

    async with serving(lacking, queues=["eu"]):
        await until(noted)
    stored = await store.get_saga("ship")
    assert stored is not None
    assert stored.status is SagaStatus.QUEUED
    assert stored.waiting_for is not None
    assert stored.waiting_for["kind"] == "tool"
    assert "Ship" in stored.waiting_for["detail"]
    assert "w-old" in stored.waiting_for["detail"]
    assert "waiting for: tool" in stored.describe()
    assert "waiting_for" not in (await store.export_saga("ship"))["saga"]  # a note, not part of the record
    (line,) = await store.list_sagas(status=SagaStatus.QUEUED)
    assert line.waiting_for == stored.waiting_for
    hook = PrometheusHook()
    able = SagaExecutor(make_registry(), store=store, executor_id="w-new", hooks=[hook])
    with caplog.at_level(logging.INFO, logger="saga_runtime"):
        async with serving(able, queues=["eu"]):
            done = await handle.result(timeout=20)
    assert (done.status, done.waiting_for, done.end_reason) == (SagaStatus.SUCCESS, None, None)
    messages = [r.getMessage() for r in caplog.records if "ship" in r.getMessage()]
    assert any("starting, from queue 'eu'" in m for m in messages)
    assert not any("recovering" in m for m in messages)
    assert hook.registry.get_sample_value("saga_runtime_sagas_started_total", {"queue": "eu"}) == 1
    assert hook.registry.get_sample_value("saga_runtime_attempts_total", {"tool": "Ship", "outcome": "success"}) == 1


async def test_a_parked_saga_says_why(store: SagaStore) -> None:
    """A PARKED saga waits for an operator: its waiting_for is "parked", with the reason it was parked."""
    registry = make_registry()
    saga = planned_orphan("parked", [RESERVE], registry, recovery_attempts=3)
    await store.create_saga(saga, [])
    executor = SagaExecutor(registry, store=store, max_recovery_attempts=3)
    await executor.recover()
    stored = await store.get_saga("parked")
    assert stored is not None
    assert stored.status is SagaStatus.PARKED
    assert stored.waiting_for is not None
    assert stored.waiting_for["kind"] == "parked"
    assert "recovery failed 3 times" in stored.waiting_for["detail"]
    (line,) = await store.list_sagas(status=SagaStatus.PARKED)
    assert line.waiting_for == stored.waiting_for
