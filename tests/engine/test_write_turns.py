"""A saga's writes to a store whose write pauses go one at a time, in order, also while its steps are cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from saga_runtime import RetryPolicy, SagaExecutor, SagaStatus, StepStatus, ToolRegistry, open_store
from saga_runtime._records import SagaRow, StepRow


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    class Nap:
        async def execute(self, n: int) -> int:
            await asyncio.sleep(0)
            return n

        async def compensate(self, result: Any) -> None:
            await asyncio.sleep(0)

    tries: dict[int, int] = {}

    @registry.tool(retry=RetryPolicy(max_attempts=2, initial_interval=0))
    class Flaky:
        async def execute(self, n: int) -> int:
            await asyncio.sleep(0)
            tries[n] = tries.get(n, 0) + 1
            if tries[n] == 1:
                raise RuntimeError("once")
            return n

    @registry.tool
    class Boom:
        async def execute(self) -> None:
            await asyncio.sleep(0)
            raise RuntimeError("boom")

    return registry


async def _watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: list[Any]) -> tuple[Any, int, int]:
    """Run `plan` on SQLite, each save held a moment; return the result, the most saves at once and their count."""
    async with open_store(f"sqlite:///{tmp_path / 'sagas.db'}") as store:
        save = store.save
        under_way = most = count = 0

        async def held(saga: SagaRow | None, steps: Sequence[StepRow], **options: Any) -> None:
            nonlocal under_way, most, count
            under_way += 1
            count += 1
            most = max(most, under_way)
            try:
                await asyncio.sleep(0.005)  # the group's other steps end meanwhile, and flush
                await save(saga, steps, **options)
            finally:
                under_way -= 1

        monkeypatch.setattr(store, "save", held)
        result = await SagaExecutor(_registry(), store=store).run(plan)
        assert await store.verify_saga(result.saga_id)
        return result, most, count


async def test_steps_of_a_group_retried_at_once_write_one_save_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps of one group whose retries are written ahead while another write of their saga is under way wait."""
    plan = [[{"id": f"s{n}", "tool": "Flaky", "args": {"n": n}} for n in range(4)]]
    result, most, count = await _watched(tmp_path, monkeypatch, plan)
    assert result.status is SagaStatus.SUCCESS
    assert [step.attempts for step in result.steps] == [2, 2, 2, 2]
    assert most == 1
    assert count >= 3


async def test_a_failed_group_still_writes_its_undo_one_save_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Siblings cancelled while waiting for their saga's write hand the turn on: the saga is compensated, verified."""
    plan = [
        {"id": "first", "tool": "Nap", "args": {"n": 9}},
        [*({"id": f"s{n}", "tool": "Flaky", "args": {"n": n}} for n in range(3)), {"id": "b", "tool": "Boom"}],
    ]
    result, most, _ = await _watched(tmp_path, monkeypatch, plan)
    assert result.status is SagaStatus.COMPENSATED
    assert most == 1
    assert result.steps[0].status is StepStatus.COMPENSATED
    undone = {StepStatus.COMPENSATED, StepStatus.FAILED, StepStatus.CANCELLED}
    assert {step.status for step in result.steps[1:]} <= undone


async def test_a_flush_cancelled_as_it_waits_or_as_its_turn_comes_hands_the_turn_on() -> None:
    """A waiting flush cancelled before its turn is passed over, one cancelled as its turn came passes it on."""
    from collections import deque

    from saga_runtime._engine._journal import Journal

    journal = Journal.__new__(Journal)  # (the turns alone: no saga, no store)
    journal._writing, journal._turns = True, deque()
    first, second, third = (asyncio.create_task(journal._wait_turn()) for _ in range(3))
    await asyncio.sleep(0)
    first.cancel()  # before its turn
    await asyncio.sleep(0)
    journal._hand_on()  # the write under way ends: the second's turn
    second.cancel()  # as its turn came, before it ran
    await asyncio.wait_for(third, 1.0)  # the turn reached the third
    assert first.cancelled()
    assert second.cancelled()
    assert journal._writing
    journal._hand_on()  # the third's write ends: nobody is writing
    assert not journal._writing
    assert not journal._turns
