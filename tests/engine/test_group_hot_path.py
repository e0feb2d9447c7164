"""The parallel group's hot path: what it reads and keeps a step, pinned to what it stands for."""

from __future__ import annotations

import asyncio
from typing import Any

from saga_runtime import SagaExecutor, SagaStatus, StepStatus, ToolRegistry
from saga_runtime._engine import _cancellation


async def test_siblings_read_the_task_running_now_as_asyncio_does() -> None:
    """The siblings' readers of the current task (by the running loop, and in a loop given) return what
    `asyncio.current_task()` does, per task."""

    async def seen() -> tuple[Any, Any]:
        assert _cancellation._task_in(asyncio.get_running_loop()) is asyncio.current_task()
        return _cancellation._current_task(), asyncio.current_task()

    mine, asyncio_s = await seen()
    assert mine is asyncio_s
    assert mine is not None
    other, other_asyncio_s = await asyncio.create_task(seen())
    assert other is other_asyncio_s
    assert other is not mine


async def test_a_parallel_group_s_step_runs_as_its_task_s_own_coroutine() -> None:
    """Each step of a parallel group is its task's coroutine, the step runner's, with no coroutine around it; the
    group still folds every step's end (the saga succeeds, each step recorded SUCCESS)."""
    registry = ToolRegistry()
    seen: list[str] = []

    @registry.tool
    class Look:
        """Note the coroutine its task runs."""

        async def execute(self, n: int) -> int:
            task = asyncio.current_task()
            assert task is not None
            seen.append(task.get_coro().__qualname__)
            await asyncio.sleep(0)
            return n

        async def compensate(self, result: int | None) -> None:
            return None

    result = await SagaExecutor(registry).run([[{"tool": "Look", "args": {"n": n}} for n in range(3)]])
    assert result.status is SagaStatus.SUCCESS
    assert [step.status for step in result.steps] == [StepStatus.SUCCESS] * 3
    assert seen == ["StepRunner.run"] * 3


async def test_a_parallel_group_s_steps_go_through_the_loop_s_task_factory_when_it_has_one() -> None:
    """A loop with a task factory makes every step's task of a parallel group (tasks are built directly only on
    asyncio's own loop without one)."""
    registry = ToolRegistry()

    @registry.tool
    class Nap:
        """Yield once."""

        async def execute(self, n: int) -> int:
            await asyncio.sleep(0)
            return n

        async def compensate(self, result: int | None) -> None:
            return None

    loop = asyncio.get_running_loop()
    made: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(coro.__qualname__)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    try:
        result = await SagaExecutor(registry).run([[{"tool": "Nap", "args": {"n": n}} for n in range(3)]])
    finally:
        loop.set_task_factory(None)
    assert result.status is SagaStatus.SUCCESS
    assert made.count("StepRunner.run") == 3


async def test_a_parallel_group_runs_each_step_with_its_own_arguments_and_tool_mixing_refs_and_tools() -> None:
    """A parallel group whose steps alternate tools, some with arguments validated with the plan and some with
    `$ref`s resolved as the group starts, runs each step with its own tool and its own arguments."""
    registry = ToolRegistry()
    seen: list[tuple[str, int]] = []

    @registry.tool
    class Double:
        """Return twice `n`."""

        async def execute(self, n: int) -> int:
            seen.append(("Double", n))
            await asyncio.sleep(0)
            return 2 * n

        async def compensate(self, result: int | None) -> None:
            return None

    @registry.tool
    class Negate:
        """Return minus `n`."""

        async def execute(self, n: int) -> int:
            seen.append(("Negate", n))
            await asyncio.sleep(0)
            return -n

        async def compensate(self, result: int | None) -> None:
            return None

    plan = [
        {"tool": "Double", "args": {"n": 5}, "id": "first"},
        [
            {"tool": "Double", "args": {"n": 1}, "id": "a"},
            {"tool": "Double", "args": {"n": {"$ref": "first"}}, "id": "b"},
            {"tool": "Negate", "args": {"n": 3}, "id": "c"},
            {"tool": "Negate", "args": {"n": {"$ref": "first"}}, "id": "d"},
            {"tool": "Double", "args": {"n": 4}, "id": "e"},
        ],
    ]
    result = await SagaExecutor(registry).run(plan)
    assert result.status is SagaStatus.SUCCESS
    assert [(step.step_id, step.result) for step in result.steps] == [
        ("first", 10),
        ("a", 2),
        ("b", 20),
        ("c", -3),
        ("d", -10),
        ("e", 8),
    ]
    assert sorted(seen) == sorted(
        [("Double", 5), ("Double", 1), ("Double", 10), ("Negate", 3), ("Negate", 10), ("Double", 4)]
    )
