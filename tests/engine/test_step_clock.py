"""A step's times are readings of the clock: one reading is handed on only where nothing paused since it."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta

from saga_runtime import SagaExecutor, SagaStatus, ToolRegistry

registry = ToolRegistry()


@registry.tool
class Quick:
    async def execute(self, n: int) -> int:
        return n

    async def compensate(self, result: int | None) -> None:
        return None


@registry.tool
class Slow:
    async def execute(self, n: int) -> int:
        await asyncio.sleep(0.05)
        return n

    async def compensate(self, result: int | None) -> None:
        return None


PAUSE = timedelta(seconds=0.04)  # a little less than Slow's sleep and the pause between calls below


async def test_a_sequential_plan_step_starts_at_the_reading_the_step_before_ended_with() -> None:
    """In a sequential plan, each step after the first starts when the one before ended; the saga ends with the last."""
    result = await SagaExecutor(registry).run([{"tool": "Quick", "args": {"n": n}} for n in range(4)])
    assert result.status is SagaStatus.SUCCESS
    steps = result.steps
    for before, step in itertools.pairwise(steps):
        assert step.started_at == before.finished_at
    assert result.finished_at == steps[-1].finished_at


async def test_a_step_after_a_slow_one_starts_after_it_ended() -> None:
    """A step's start is never earlier than the end of a step that paused before it."""
    result = await SagaExecutor(registry).run([{"tool": "Slow", "args": {"n": 0}}, {"tool": "Quick", "args": {"n": 1}}])
    first, second = result.steps
    assert first.started_at is not None
    assert first.finished_at is not None
    assert second.started_at is not None
    assert first.finished_at - first.started_at >= PAUSE
    assert second.started_at >= first.finished_at


async def test_a_parallel_group_reads_the_clock_afresh() -> None:
    """A step after a group of several reads the clock again: the group's tasks paused after their readings."""
    plan = [
        [{"tool": "Quick", "args": {"n": 0}}, {"tool": "Slow", "args": {"n": 1}}],
        {"tool": "Quick", "args": {"n": 2}},
    ]
    result = await SagaExecutor(registry).run(plan)
    assert result.status is SagaStatus.SUCCESS
    quick, slow, after = result.steps
    assert after.started_at is not None
    assert slow.finished_at is not None
    assert quick.finished_at is not None
    assert after.started_at >= slow.finished_at
    assert after.started_at - quick.finished_at >= PAUSE


async def test_a_dynamic_saga_call_after_a_pause_reads_the_clock_afresh() -> None:
    """A dynamic saga's call made after its code paused starts at a new reading, not at the last call's end."""
    executor = SagaExecutor(registry)
    async with executor.saga() as saga:
        await saga.call("Quick", n=0)
        await asyncio.sleep(0.05)
        await saga.call("Quick", n=1)
    stored = await executor.store.load_saga(saga.saga_id)
    assert stored is not None
    first, second = sorted(stored[1], key=lambda row: row.seq)
    assert first.finished_at is not None
    assert second.started_at is not None
    assert second.started_at - first.finished_at >= PAUSE
