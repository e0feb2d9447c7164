"""A finished saga is freed by reference counting alone: nothing of it waits for the cyclic garbage collector.

A reference cycle through the engine (a bound method of it held by something it holds) keeps every finished saga's
rows until a full collection: at 50 concurrent sagas that is ~15 MiB of peak RSS (benchmarks/memory.py).
"""

from __future__ import annotations

import asyncio
import gc

from saga_runtime import SagaExecutor, ToolRegistry

registry = ToolRegistry()


@registry.tool
class Echo:
    """Return its argument."""

    async def execute(self, n: int) -> int:
        return n

    async def compensate(self, result: int | None) -> None:
        return None


def test_finished_sagas_leave_no_cyclic_garbage() -> None:
    """Twenty finished sagas leave nothing for the cyclic collector: reference counting frees them at once."""

    async def main() -> int:
        executor = SagaExecutor(registry)
        plan = [{"tool": "Echo", "args": {"n": i}} for i in range(5)]
        await asyncio.gather(*(executor.run(plan) for _ in range(5)))  # warm-up: one-time objects
        gc.collect()
        gc.disable()
        try:
            await asyncio.gather(*(executor.run(plan) for _ in range(20)))
            return gc.collect()
        finally:
            gc.enable()

    assert asyncio.run(main()) == 0


@registry.tool
class Fail:
    """Fail at once."""

    async def execute(self, n: int) -> int:
        raise RuntimeError(f"failed {n}")


def test_failed_and_compensated_sagas_leave_no_cyclic_garbage() -> None:
    """Sagas whose last step fails and that compensate leave nothing for the cyclic collector (the error's traceback
    holds no engine)."""

    async def main() -> tuple[int, list[str]]:
        executor = SagaExecutor(registry)
        plan: list[dict[str, object]] = [{"tool": "Echo", "args": {"n": i}} for i in range(4)]
        plan.append({"tool": "Fail", "args": {"n": 0}})
        await executor.run(plan)  # warm-up: one-time objects
        gc.collect()
        gc.disable()
        try:
            results = [await executor.run(plan) for _ in range(10)]
            return gc.collect(), [result.status.value for result in results]
        finally:
            gc.enable()

    garbage, statuses = asyncio.run(main())
    assert statuses == ["COMPENSATED"] * 10
    assert garbage == 0
