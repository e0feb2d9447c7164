"""A cancellation that lands while compensation runs does not interrupt it: the undo finishes, then it propagates."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from saga_runtime import SagaExecutor, SagaStatus, StepStatus, ToolRegistry


def make_registry(undo_started: asyncio.Event, undo_release: asyncio.Event, undone: list[str]) -> ToolRegistry:
    """Return tools whose compensation waits for `undo_release`, so a test can cancel the caller meanwhile."""
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self, amount: int) -> dict[str, int]:
            return {"amount": amount}

        async def compensate(self, result: dict[str, int] | None) -> None:
            undo_started.set()
            await undo_release.wait()
            undone.append(f"refund {result}")

    @registry.tool
    class Fail:
        async def execute(self) -> None:
            raise RuntimeError("boom")

    @registry.tool
    class Slow:
        async def execute(self) -> None:
            await asyncio.sleep(30)

        async def compensate(self, result: None) -> None:
            undone.append("slow undone")

    return registry


PLAN = [{"id": "charge", "tool": "Charge", "args": {"amount": 5}}, {"id": "fail", "tool": "Fail"}]


async def test_caller_timeout_firing_mid_compensation_does_not_interrupt_it() -> None:
    """asyncio.timeout expiring while a failed saga compensates: the undo completes, then TimeoutError."""
    started, release, undone = asyncio.Event(), asyncio.Event(), []
    executor = SagaExecutor(make_registry(started, release, undone))

    async def release_later() -> None:
        await started.wait()
        await asyncio.sleep(0.1)  # well past the caller's deadline
        release.set()

    helper = asyncio.create_task(release_later())
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await executor.run(PLAN, saga_id="s1")
    await helper
    assert undone == ["refund {'amount': 5}"]
    stored = await executor.store.get_saga("s1")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED
    assert stored.step("charge").status is StepStatus.COMPENSATED


async def test_second_cancel_during_compensation_does_not_interrupt_it() -> None:
    """A task cancelled once mid-step and again mid-compensation still finishes every undo before it ends."""
    started, release, undone = asyncio.Event(), asyncio.Event(), []
    executor = SagaExecutor(make_registry(started, release, undone))
    plan = [{"id": "charge", "tool": "Charge", "args": {"amount": 7}}, {"id": "slow", "tool": "Slow"}]
    task = asyncio.create_task(executor.run(plan, saga_id="s2"))
    await asyncio.sleep(0.02)
    task.cancel()  # the caller leaves while "slow" runs: compensation starts
    await started.wait()
    task.cancel()  # ... and again while the refund is in flight
    await asyncio.sleep(0.02)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(undone) == ["refund {'amount': 7}", "slow undone"]
    stored = await executor.store.get_saga("s2")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED


async def test_anyio_scope_cancelling_mid_compensation_waits_for_it() -> None:
    """An anyio cancel scope around run() expiring mid-compensation does not cut the undo short."""
    started, release, undone = asyncio.Event(), asyncio.Event(), []
    executor = SagaExecutor(make_registry(started, release, undone))

    async def release_later() -> None:
        await started.wait()
        await asyncio.sleep(0.1)
        release.set()

    helper = asyncio.create_task(release_later())
    with anyio.move_on_after(0.05) as scope:
        await executor.run(PLAN, saga_id="s3")
    await helper
    assert scope.cancel_called  # the deadline passed mid-compensation; anyio delivers it at the next checkpoint
    assert undone == ["refund {'amount': 5}"]
    stored = await executor.store.get_saga("s3")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED
