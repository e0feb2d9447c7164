"""What a saga function writes per call: one write of its step rows, as a plan's step (API.md §18)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from saga_runtime import DynamicSaga, SagaExecutor, SagaStatus, StepContext, ToolRegistry, open_store
from saga_runtime._storage import MemoryStore

CALLS = 5


def make_registry(checks: list[bool]) -> ToolRegistry:
    """Return a registry of Add (adds one) and Check (verifies its own saga in the memory store, mid-run)."""
    registry = ToolRegistry()

    @registry.tool
    class Add:
        async def execute(self, n: int) -> int:
            return n + 1

        async def compensate(self, result: int | None) -> None:
            return None

    @registry.tool
    class Check:
        async def execute(self, store_of: str, ctx: StepContext) -> bool:
            verdict = await STORES[store_of].verify_saga(ctx.saga_id)
            checks.append(bool(verdict))
            return bool(verdict)

        async def compensate(self, result: bool | None) -> None:
            return None

    @registry.saga
    async def counted(saga: DynamicSaga) -> int:
        n = 0
        for _ in range(CALLS):
            n = await saga.call("Add", n=n)  # each call's arguments come from the last result
        return n

    @registry.saga
    async def checked(saga: DynamicSaga) -> None:
        await saga.call("Add", n=0)
        await saga.call("Add", n=1)
        await saga.call("Check", store_of="memory")
        await saga.call("Add", n=2)

    return registry


STORES: dict[str, Any] = {}


async def test_a_function_writes_once_per_call_as_a_plan_writes_once_per_step(tmp_path: Path) -> None:
    """A saga function of N calls saves its rows N + 1 times (each call's success goes with the next call's intent),
    one more than a plan of the same N steps, whose first intent goes with the saga's creation."""
    registry = make_registry([])
    async with open_store(f"sqlite:///{tmp_path / 'sagas.db'}") as store:
        saves: list[int] = []
        save = store.save

        async def counting(*args: Any, **kwargs: Any) -> None:
            saves.append(1)
            await save(*args, **kwargs)

        store.save = counting  # type: ignore[method-assign]
        executor = SagaExecutor(registry, store=store)
        result = await executor.run("counted")
        assert result.status is SagaStatus.SUCCESS
        assert result.output == CALLS
        function_saves = len(saves)
        saves.clear()
        plan = [{"id": f"s{i}", "tool": "Add", "args": {"n": i}} for i in range(CALLS)]
        assert (await executor.run(plan)).status is SagaStatus.SUCCESS
        assert function_saves == CALLS + 1
        assert function_saves == len(saves) + 1
        assert await store.verify_saga(result.saga_id)
        _, rows = await store.load_saga(result.saga_id) or (None, [])
        assert [row.result for row in rows] == list(range(1, CALLS + 1))


async def test_a_function_in_memory_verifies_while_it_runs_and_once_ended() -> None:
    """In the memory store a saga function's record (its chain head over the calls so far) verifies mid-run, and
    once ended, with its calls' rows written one write per call."""
    checks: list[bool] = []
    store = MemoryStore()
    STORES["memory"] = store
    try:
        result = await SagaExecutor(make_registry(checks), store=store).run("checked")
    finally:
        STORES.clear()
    assert result.status is SagaStatus.SUCCESS
    assert checks == [True]
    verdict = await store.verify_saga(result.saga_id)
    assert verdict, verdict.problems
    loaded = await store.load_saga(result.saga_id)
    assert loaded is not None
    assert [row.tool_name for row in loaded[1]] == ["Add", "Add", "Check", "Add"]
