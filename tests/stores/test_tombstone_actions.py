"""A purged COMPENSATION_FAILED saga is a tombstone: retry_compensation never reopens it (API.md §14)."""

from __future__ import annotations

from typing import Any

import pytest

from saga_runtime import (
    ReplayDivergenceError,
    SagaAdmin,
    SagaError,
    SagaExecutor,
    SagaStatus,
    SagaStore,
    StepContext,
    ToolRegistry,
)


def _tools(undo_fails: list[bool], undone: list[Any]) -> ToolRegistry:
    """Return a Charge whose refund fails while undo_fails[0], and a Fail step."""
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self, amount: int, ctx: StepContext) -> dict[str, Any]:
            return {"charge_id": f"ch-{amount}"}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            if undo_fails[0]:
                raise RuntimeError("refund API down")
            undone.append(result)

    @registry.tool
    class Fail:
        async def execute(self, ctx: StepContext) -> None:
            raise RuntimeError("declined")

    return registry


async def test_retry_compensation_leaves_a_purged_tombstone_alone(store: SagaStore) -> None:
    """retry_compensation refuses a tombstone, which stays COMPENSATION_FAILED and verifies (the refund is owed)."""
    undo_fails, undone = [True], []
    executor = SagaExecutor(_tools(undo_fails, undone), store)
    plan = [{"tool": "Charge", "args": {"amount": 5}, "id": "c"}, {"tool": "Fail", "args": {}, "id": "f"}]
    result = await executor.run(plan, saga_id="pay-purged")
    assert result.status is SagaStatus.COMPENSATION_FAILED  # the charge ch-5 is still out, an operator must act
    report = await store.purge(older_than=0, statuses=["COMPENSATION_FAILED"])
    assert report.saga_ids == ["pay-purged"]
    undo_fails[0] = False
    with pytest.raises(SagaError, match="purged"):
        await executor.retry_compensation("pay-purged")
    stored = await store.get_saga("pay-purged")
    assert stored is not None
    # The tombstone must stay what it was: the charge was never refunded, so it must not now read COMPENSATED.
    assert stored.status is SagaStatus.COMPENSATION_FAILED, (stored.status, undone)
    assert await store.verify_saga("pay-purged")


async def test_bulk_retry_passes_over_tombstones(store: SagaStore) -> None:
    """SagaAdmin.retry_compensations leaves a purged COMPENSATION_FAILED saga out: nothing to retry, no failure."""
    undo_fails: list[bool] = [True]
    executor = SagaExecutor(_tools(undo_fails, []), store)
    plan = [{"tool": "Charge", "args": {"amount": 7}, "id": "c"}, {"tool": "Fail", "args": {}, "id": "f"}]
    await executor.run(plan, saga_id="bulk-purged")
    await store.purge(older_than=0, statuses=["COMPENSATION_FAILED"])
    summary = await SagaAdmin(store).retry_compensations()
    assert (summary.results, summary.errors) == ({}, {})
    stored = await store.get_saga("bulk-purged")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATION_FAILED


async def test_a_purged_dynamic_saga_entered_again_names_the_purge(store: SagaStore) -> None:
    """Re-entering a purged dynamic saga calls nothing and says it was purged (not "call #1 was never recorded")."""
    undone: list[Any] = []
    executor = SagaExecutor(_tools([False], undone), store)
    async with executor.saga(saga_id="agent-purged") as saga:
        await saga.call("Charge", amount=3)
    assert (await store.purge(older_than=0)).saga_ids == ["agent-purged"]
    with pytest.raises(ReplayDivergenceError, match="purged at") as caught:
        async with executor.saga(saga_id="agent-purged") as saga:
            await saga.call("Charge", amount=3)
    assert "never recorded" not in str(caught.value)
    assert undone == []
