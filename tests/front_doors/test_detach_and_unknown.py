"""Two seams for integrations: a dynamic saga left unfinished for recovery, and a tool that lost sight of its effect."""

from __future__ import annotations

from typing import Any

import pytest

from saga_runtime import (
    OutcomeUnknownError,
    SagaExecutor,
    SagaStatus,
    StepFailedError,
    StepStatus,
    ToolRegistry,
    open_store,
)


def _registry(undone: list[Any]) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    class Book:
        async def execute(self, n: int) -> dict[str, int]:
            return {"n": n}

        async def compensate(self, result: Any) -> None:
            undone.append(("Book", result))

    @registry.tool
    class Lost:
        async def execute(self, n: int) -> dict[str, int]:
            raise OutcomeUnknownError("the service went away mid-call")

        async def compensate(self, result: Any) -> None:
            undone.append(("Lost", result))

    return registry


async def test_a_detached_saga_is_left_running_and_recovery_compensates_it(tmp_path: Any) -> None:
    """detach(): leaving the block ends and undoes nothing, and recover() takes the saga over at once."""
    undone: list[Any] = []
    async with open_store(f"sqlite:///{tmp_path / 'sagas.db'}") as store:
        executor = SagaExecutor(_registry(undone), store)
        async with executor.saga(saga_id="left") as saga:
            await saga.call("Book", n=1)
            await saga.detach()
        stored = await store.get_saga("left")
        assert stored is not None
        assert stored.status is SagaStatus.RUNNING
        assert undone == []
        [result] = await executor.recover()
        assert result.status is SagaStatus.COMPENSATED
        assert undone == [("Book", {"n": 1})]


async def test_outcome_unknown_error_leaves_the_step_unknown_and_compensated() -> None:
    """A tool raising OutcomeUnknownError is not FAILED (no effect) but of unknown outcome: undone at once with None."""
    undone: list[Any] = []
    executor = SagaExecutor(_registry(undone))
    async with executor.saga(saga_id="lost") as saga:
        await saga.call("Book", n=1)
        with pytest.raises(StepFailedError) as caught:
            await saga.call("Lost", n=2)
        await saga.call("Book", n=3)
    assert caught.value.error_type == "OutcomeUnknownError"
    stored = await executor.store.get_saga("lost")
    assert stored is not None
    assert stored.status is SagaStatus.SUCCESS
    assert [step.status for step in stored.steps] == [StepStatus.SUCCESS, StepStatus.COMPENSATED, StepStatus.SUCCESS]
    assert undone == [("Lost", None)]
