"""SagaAdmin: an operator's actions on a store, without tools (left for a worker) or with them (run here)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from orphans import planned_orphan
from stores import conftest as contract
from stores.conftest import Stores

from saga_runtime import (
    ApprovalError,
    ReplayDivergenceError,
    SagaAdmin,
    SagaExecutor,
    SagaInProgressError,
    SagaStatus,
    StepContext,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._records import StepRow, idempotency_key, seal_all
from saga_runtime._storage import MemoryStore, SagaStore

CALLS: Counter[str] = Counter()
registry = ToolRegistry()


@registry.tool
class Reserve:
    async def execute(self, item: str) -> dict[str, str]:
        CALLS[f"reserve {item}"] += 1
        return {"item": item}

    async def compensate(self, result: dict[str, str] | None, ctx: StepContext) -> None:
        CALLS[f"release {None if result is None else result['item']}"] += 1


@registry.tool(approval=True)
class Wire:
    async def execute(self, amount: int) -> dict[str, int]:
        CALLS[f"wire {amount}"] += 1
        return {"amount": amount}

    async def compensate(self, result: dict[str, int] | None, ctx: StepContext) -> None:
        CALLS["wire back"] += 1


FLAKY: dict[str, bool] = {"refuse": True}


@registry.tool
class Refundable:
    async def execute(self) -> str:
        return "paid"

    async def compensate(self, result: str | None, ctx: StepContext) -> None:
        if FLAKY["refuse"]:
            raise RuntimeError("the refund service is down")
        CALLS["refunded"] += 1


@registry.tool
class Fail:
    async def execute(self) -> None:
        raise RuntimeError("no")

    async def compensate(self, result: None, ctx: StepContext) -> None:
        return None


GATED = [
    {"id": "hold", "tool": "Reserve", "args": {"item": "seat"}},
    {"id": "pay", "tool": "Wire", "args": {"amount": 7}},
]


# The store contract's fixtures: each kind of store in turn, and its factory of stores.
kind = contract.kind
stores = contract.stores


@pytest.fixture
async def store(stores: Stores, kind: str) -> SagaStore:
    """Return an empty store of each kind in turn."""
    CALLS.clear()
    FLAKY["refuse"] = True
    return await stores.open(kind, wipe=True)


@pytest.fixture(params=["memory", "sqlite"])
async def local_store(stores: Stores, request: pytest.FixtureRequest) -> SagaStore:
    """Return an empty memory store, then an empty SQLite one."""
    CALLS.clear()
    FLAKY["refuse"] = True
    return await stores.open(request.param, wipe=True)


async def waiting(store: SagaStore, saga_id: str = "pay-1") -> None:
    """Run the gated plan up to its wait for a decision."""
    result = await SagaExecutor(registry, store=store).run(GATED, saga_id=saga_id)
    assert result.status is SagaStatus.WAITING


async def park(store: SagaStore, saga_id: str) -> None:
    """Store a saga whose recoveries kept failing (one step done, one unknown); recover() parks it."""
    plan = [
        {"id": "a", "tool": "Reserve", "args": {"item": "a"}},
        {"id": "b", "tool": "Reserve", "args": {"item": "b"}},
    ]
    saga = planned_orphan(saga_id, plan, registry, recovery_attempts=5)
    started = saga.created_at
    done = StepRow(saga_id, 0, "a", 0, "Reserve", {"item": "a"}, idempotency_key(saga_id, "a"))
    done.status, done.attempts, done.started_at, done.finished_at = StepStatus.SUCCESS, 1, started, started
    done.result = {"item": "a"}
    unknown = StepRow(saga_id, 1, "b", 1, "Reserve", {"item": "b"}, idempotency_key(saga_id, "b"))
    unknown.status, unknown.attempts, unknown.started_at = StepStatus.RUNNING, 6, started
    seal_all([done, unknown], None)
    assert await store.create_saga(saga, [done, unknown]) is None
    (parked,) = await SagaExecutor(registry, store=store).recover()
    assert parked.status is SagaStatus.PARKED


async def compensation_failed(store: SagaStore, saga_id: str = "refund-1") -> None:
    """Run a saga whose only compensation fails: it ends COMPENSATION_FAILED."""
    plan = [{"id": "pay", "tool": "Refundable"}, {"id": "boom", "tool": "Fail"}]
    result = await SagaExecutor(registry, store=store).run(plan, saga_id=saga_id)
    assert result.status is SagaStatus.COMPENSATION_FAILED


# -- approvals decided without the tools, on every store ---------------------------------------------------------


async def test_an_approval_decided_without_tools_is_recorded_and_a_worker_goes_on(store: SagaStore) -> None:
    """Without a registry, approve records the decision, runs nothing, and a worker's recover() runs the step."""
    await waiting(store)
    admin = SagaAdmin(store)
    (request,) = await admin.pending_approvals()
    assert (request.saga_id, request.step_id) == ("pay-1", "pay")
    result = await admin.approve("pay-1", "pay", by="alice", note="ok", args_digest=request.args_digest)
    assert result.status is SagaStatus.WAITING
    assert [a.decision for a in result.approvals] == ["approved"]
    assert CALLS == {"reserve seat": 1}
    assert await admin.pending_approvals() == []
    (done,) = await SagaExecutor(registry, store=store).recover()
    assert done.status is SagaStatus.SUCCESS
    assert CALLS == {"reserve seat": 1, "wire 7": 1}
    assert await admin.verify_saga("pay-1")


async def test_a_rejection_without_tools_is_recorded_and_a_worker_compensates(store: SagaStore) -> None:
    """Without a registry, reject records the decision; the next recover() with the tools undoes what was done."""
    await waiting(store)
    result = await SagaAdmin(store).reject("pay-1", "pay", by="bob", note="wrong account")
    assert result.status is SagaStatus.WAITING
    (done,) = await SagaExecutor(registry, store=store).recover()
    assert done.status is SagaStatus.COMPENSATED
    assert done.step("pay").status is StepStatus.REJECTED
    assert CALLS == {"reserve seat": 1, "release seat": 1}


async def test_a_request_is_decided_once_through_admin_as_through_the_executor(store: SagaStore) -> None:
    """A second decision raises ApprovalError from SagaAdmin and from SagaExecutor alike, and changes nothing."""
    await waiting(store)
    await SagaAdmin(store).approve("pay-1", "pay", by="alice")
    with pytest.raises(ApprovalError, match="already"):
        await SagaAdmin(store).reject("pay-1", "pay", by="bob")
    with pytest.raises(ApprovalError, match="already"):
        await SagaExecutor(registry, store=store).reject("pay-1", "pay", by="bob")


# -- unpark, on every store --------------------------------------------------------------------------------------


async def test_unpark_without_tools_makes_the_saga_live_for_a_worker(store: SagaStore) -> None:
    """unpark() returns None, the saga is live again, and recover() with the tools finishes it forward."""
    await park(store, "stuck")
    assert await SagaAdmin(store).unpark("stuck") is None
    stored = await store.get_saga("stuck")
    assert stored is not None
    assert stored.status is SagaStatus.RUNNING
    (done,) = await SagaExecutor(registry, store=store).recover()
    assert done.status is SagaStatus.SUCCESS
    assert CALLS == {"reserve b": 1}


async def test_unpark_with_compensate_without_tools_leaves_the_undoing_to_a_worker(store: SagaStore) -> None:
    """unpark(compensate=True) without a registry makes the saga COMPENSATING; recover() with the tools undoes it."""
    await park(store, "stuck")
    admin = SagaAdmin(store)
    assert await admin.unpark("stuck", compensate=True) is None
    stored = await admin.get_saga("stuck")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATING
    with pytest.raises(SagaInProgressError, match="not PARKED"):
        await admin.unpark("stuck")
    (done,) = await SagaExecutor(registry, store=store).recover()
    assert done.status is SagaStatus.COMPENSATED
    assert CALLS == {"release a": 1, "release None": 1}


async def test_unpark_with_compensate_and_a_registry_undoes_the_saga_here(store: SagaStore) -> None:
    """With a registry, unpark(compensate=True) compensates at once and returns the result, as the executor does."""
    await park(store, "stuck")
    result = await SagaAdmin(store, registry=registry).unpark("stuck", compensate=True)
    assert result is not None
    assert result.status is SagaStatus.COMPENSATED
    assert CALLS == {"release a": 1, "release None": 1}


# -- the rest, on memory and SQLite ------------------------------------------------------------------------------


async def test_reading_actions_answer_as_the_store_and_the_executor_do(local_store: SagaStore) -> None:
    """get_saga, list_sagas, verify_saga, export_saga and replay give what the store and SagaExecutor give."""
    await waiting(local_store)
    admin = SagaAdmin(local_store)
    assert await admin.get_saga("pay-1") == await local_store.get_saga("pay-1")
    assert await admin.get_saga("nope") is None
    assert [s.saga_id for s in await admin.list_sagas(SagaStatus.WAITING)] == ["pay-1"]
    assert await admin.list_sagas("SUCCESS") == []
    assert await admin.verify_saga("pay-1")
    assert await admin.export_saga("pay-1") == await local_store.export_saga("pay-1")
    assert await admin.replay("pay-1") == await SagaExecutor(registry, store=local_store).replay("pay-1")
    with pytest.raises(ReplayDivergenceError):
        await admin.replay("nope")
    with pytest.raises(KeyError):
        await admin.export_saga("nope")


async def test_an_approval_with_a_registry_goes_on_here(local_store: SagaStore) -> None:
    """With a registry, approve goes on with the saga at once, as SagaExecutor.approve does."""
    await waiting(local_store)
    result = await SagaAdmin(local_store, registry=registry).approve("pay-1", "pay", by="alice")
    assert result.status is SagaStatus.SUCCESS
    assert CALLS == {"reserve seat": 1, "wire 7": 1}


async def test_an_approval_with_resume_false_is_only_recorded_even_with_a_registry(local_store: SagaStore) -> None:
    """resume=False records the decision only, with or without a registry."""
    await waiting(local_store)
    result = await SagaAdmin(local_store, registry=registry).approve("pay-1", "pay", by="alice", resume=False)
    assert result.status is SagaStatus.WAITING
    assert CALLS == {"reserve seat": 1}


async def test_retry_compensation_without_tools_reopens_it_for_a_worker(local_store: SagaStore) -> None:
    """Without a registry, retry_compensation leaves the saga COMPENSATING, unowned; recover() with tools ends it."""
    await compensation_failed(local_store)
    FLAKY["refuse"] = False
    result = await SagaAdmin(local_store).retry_compensation("refund-1")
    assert result.status is SagaStatus.COMPENSATING
    assert CALLS == {}
    with pytest.raises(SagaInProgressError, match="COMPENSATING"):
        await SagaAdmin(local_store).retry_compensation("refund-1")
    (done,) = await SagaExecutor(registry, store=local_store).recover()
    assert done.status is SagaStatus.COMPENSATED
    assert CALLS == {"refunded": 1}
    assert await local_store.verify_saga("refund-1")


async def test_retry_compensation_with_a_registry_runs_it_here(local_store: SagaStore) -> None:
    """With a registry, retry_compensation compensates at once, as SagaExecutor.retry_compensation does."""
    await compensation_failed(local_store)
    FLAKY["refuse"] = False
    result = await SagaAdmin(local_store, registry=registry).retry_compensation("refund-1")
    assert result.status is SagaStatus.COMPENSATED
    assert CALLS == {"refunded": 1}


async def test_an_unknown_saga_raises_as_it_does_from_the_executor(local_store: SagaStore) -> None:
    """unpark and retry_compensation of an unknown id raise KeyError; deciding on it raises ApprovalError."""
    admin = SagaAdmin(local_store)
    with pytest.raises(KeyError):
        await admin.unpark("nope")
    with pytest.raises(KeyError):
        await admin.retry_compensation("nope")
    with pytest.raises(ApprovalError):
        await admin.approve("nope", "pay", by="alice")


def test_a_registry_must_be_a_tool_registry() -> None:
    """SagaAdmin refuses a registry that is not a ToolRegistry."""
    bad: Any = {"Reserve": Reserve}
    with pytest.raises(TypeError, match="ToolRegistry"):
        SagaAdmin(Any, registry=bad)  # type: ignore[arg-type]  # the store is never reached


async def test_admin_with_a_registry_enters_its_lifespan_before_a_tool_runs_and_leaves_it_on_close() -> None:
    """With a registry, retry_compensation enters the lifespan before the tools run (ctx.state); aclose() leaves it."""
    events: list[str] = []
    down = {"refunds": True}
    lived = ToolRegistry()

    @lived.lifespan
    async def resources() -> AsyncIterator[dict[str, Any]]:
        events.append("enter")
        yield {"pool": "the pool"}
        events.append("exit")

    @lived.tool
    class Pay:
        async def execute(self) -> str:
            return "paid"

        async def compensate(self, result: str | None, ctx: StepContext) -> None:
            if down["refunds"]:
                raise RuntimeError("the refund service is down")
            events.append(f"refund with {ctx.state['pool']}")

    lived.register(Fail())
    store = MemoryStore()
    async with SagaExecutor(lived, store=store) as executor:
        result = await executor.run([{"id": "pay", "tool": "Pay"}, {"id": "boom", "tool": "Fail"}], saga_id="p")
        assert result.status is SagaStatus.COMPENSATION_FAILED
    events.clear()
    down["refunds"] = False
    admin = SagaAdmin(store, registry=lived)
    assert (await admin.retry_compensation("p")).status is SagaStatus.COMPENSATED
    assert events == ["enter", "refund with the pool"]
    await admin.aclose()
    assert events[-1] == "exit"
