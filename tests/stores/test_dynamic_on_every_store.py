"""Dynamic sagas on every store: compensation in reverse, replay divergence, budgets that survive re-entry."""

from __future__ import annotations

from typing import Any

import pytest

from saga_runtime import Budget, ReplayDivergenceError, SagaExecutor, SagaStatus, StepContext, ToolRegistry
from saga_runtime._storage import SagaStore

from .conftest import Stores


def make_registry(log: list[tuple[str, str]]) -> ToolRegistry:
    """Return a tool that logs what it does and undoes."""
    registry = ToolRegistry()

    @registry.tool
    class Book:
        async def execute(self, item: str, ctx: StepContext) -> dict[str, str]:
            log.append(("book", item))
            return {"item": item}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            log.append(("cancel", ctx.args["item"]))

    return registry


async def test_a_dynamic_saga_that_raises_compensates_in_reverse(store: SagaStore) -> None:
    """An exception leaving the block undoes every call, last first, and is re-raised; the record says so."""
    log: list[tuple[str, str]] = []
    executor = SagaExecutor(make_registry(log), store=store)

    async def agent() -> None:
        async with executor.saga(saga_id="trip") as saga:
            await saga.call("Book", item="hotel")
            await saga.group([("Book", {"item": "flight"}), ("Book", {"item": "car"})])
            await saga.call("Book", item="museum")
            raise RuntimeError("changed my mind")

    with pytest.raises(RuntimeError, match="changed my mind"):
        await agent()
    undone = [item for kind, item in log if kind == "cancel"]
    assert undone[0] == "museum"
    assert sorted(undone[1:3]) == ["car", "flight"]
    assert undone[3] == "hotel"
    stored = await store.get_saga("trip")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED
    assert "changed my mind" in (stored.error or "")
    assert await store.verify_saga("trip")


async def test_replay_divergence_is_detected_and_writes_nothing(store: SagaStore) -> None:
    """Replaying a stored saga with another call raises ReplayDivergenceError and leaves the record as it was."""
    log: list[tuple[str, str]] = []
    executor = SagaExecutor(make_registry(log), store=store)
    async with executor.saga(saga_id="trip") as saga:
        await saga.call("Book", item="hotel")
        await saga.call("Book", item="flight")
    before = await store.export_saga("trip")
    calls = len(log)

    async def replay_with_another_second_call() -> None:
        async with executor.saga(saga_id="trip", replay=True) as again:
            await again.call("Book", item="hotel")
            await again.call("Book", item="boat")

    with pytest.raises(ReplayDivergenceError, match="call #2"):
        await replay_with_another_second_call()
    assert len(log) == calls
    assert await store.export_saga("trip") == before


async def test_budgets_survive_re_execution(stores: Stores, kind: str) -> None:
    """A saga re-entered after its executor died keeps the cost it recorded and counts no charge twice."""
    log: list[tuple[str, str]] = []
    store = await stores.open(kind, wipe=True)
    first = SagaExecutor(make_registry(log), store=store, executor_id="host")
    dying = first.saga(saga_id="agent", budget=Budget(max_cost=1.0))
    await dying.__aenter__()
    await dying.charge(cost=0.4)
    await dying.call("Book", item="hotel")
    await dying.charge(cost=0.4)
    await dying._keeper.stop()  # the process dies here: no heartbeat, no exit

    heir = SagaExecutor(make_registry(log), store=store, executor_id="host")
    async with heir.saga(saga_id="agent", budget=Budget(max_cost=1.0)) as saga:
        await saga.charge(cost=0.4)  # recorded already: not counted again
        await saga.call("Book", item="hotel")  # served from the record
        await saga.charge(cost=0.4)
        assert saga.cost == pytest.approx(0.8)
        await saga.call("Book", item="flight")
    assert log == [("book", "hotel"), ("book", "flight")]
    stored = await store.get_saga("agent")
    assert stored is not None
    assert stored.cost == pytest.approx(0.8)
