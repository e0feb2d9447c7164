"""Review: a purged COMPENSATION_FAILED saga is a tombstone; retry_compensation must not reopen it (API.md §14)."""

from __future__ import annotations

from typing import Any

from saga_runtime import SagaExecutor, SagaStatus, SagaStore, StepContext, ToolRegistry


def _tools(undo_fails: list[bool], undone: list[Any]) -> ToolRegistry:
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
    undo_fails, undone = [True], []
    executor = SagaExecutor(_tools(undo_fails, undone), store)
    plan = [{"tool": "Charge", "args": {"amount": 5}, "id": "c"}, {"tool": "Fail", "args": {}, "id": "f"}]
    result = await executor.run(plan, saga_id="pay-purged")
    assert result.status is SagaStatus.COMPENSATION_FAILED  # the charge ch-5 is still out, an operator must act
    report = await store.purge(older_than=0, statuses=["COMPENSATION_FAILED"])
    assert report.saga_ids == ["pay-purged"]
    undo_fails[0] = False
    try:
        retried = await executor.retry_compensation("pay-purged")
    except Exception:  # refused: a tombstone never runs again (what the contract asks)
        retried = None
    stored = await store.get_saga("pay-purged")
    assert stored is not None
    # The tombstone must stay what it was: the charge was never refunded, so it must not now read COMPENSATED.
    assert stored.status is SagaStatus.COMPENSATION_FAILED, (stored.status, retried and retried.status, undone)
    assert await store.verify_saga("pay-purged")
