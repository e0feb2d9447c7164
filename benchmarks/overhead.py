"""In-memory overhead: a 10-step saga against awaiting the same 10 coroutines bare.

Reports, for a successful saga and for one whose last step fails so that nine compensations run, the whole saga's
microseconds (`saga_us`) and the overhead per step over the floor. The floor (bare awaits) is measured in the same
process, interleaved with the saga runs. Targets: at most 11 us of overhead per step for the successful saga, at
most 200 us for the whole failing one; and the store's shape, counted from the code by the guard tests' own
functions (benchmarks/shape.py): at most 16 members in the core store protocol, no store write called outside the
journal.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

from benchmarks import shape
from benchmarks._report import Target, value
from saga_runtime import SagaExecutor, ToolRegistry

STEPS = 10
SUCCESS = "10-step saga"
FAILING = "10-step saga, last step fails, 9 compensations"

TARGETS = [
    Target(f"in memory, {SUCCESS}: overhead per step", 11, "us", value("overhead_us_per_step", workload=SUCCESS)),
    Target(f"in memory, {FAILING}: whole saga", 200, "us", value("saga_us", workload=FAILING)),
    *shape.TARGETS,
]

registry = ToolRegistry()


@registry.tool
class Noop:
    """Do nothing, asynchronously."""

    async def execute(self, n: int) -> int:
        return n

    async def compensate(self, result: int | None) -> None:
        return None


@registry.tool
class Boom:
    """Fail."""

    async def execute(self, n: int) -> int:
        raise RuntimeError("boom")


async def bare(n: int) -> int:
    """The floor: the same coroutine a Noop step awaits."""
    return n


@dataclass
class Overhead:
    """One workload's result."""

    name: str
    floor_us: float
    saga_us: float

    @property
    def per_step_us(self) -> float:
        return (self.saga_us - self.floor_us) / STEPS

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": self.name,
            "floor_us_per_saga": round(self.floor_us, 2),
            "saga_us": round(self.saga_us, 2),
            "overhead_us_per_step": round(self.per_step_us, 2),
            "ratio": round(self.saga_us / self.floor_us, 1),
        }


async def _measure(rounds: int, fail_last: bool) -> Overhead:
    executor = SagaExecutor(registry)
    plan = [{"tool": "Noop", "args": {"n": i}} for i in range(STEPS)]
    if fail_last:
        plan[-1] = {"tool": "Boom", "args": {"n": 0}}
    floors, sagas = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        for i in range(STEPS):
            await bare(i)
        floors.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = await executor.run(plan)
        sagas.append(time.perf_counter() - started)
        assert result.status.value == ("COMPENSATED" if fail_last else "SUCCESS")
    # Medians: a stray GC pause or scheduler hiccup moves the mean, not the median.
    return Overhead(
        FAILING if fail_last else SUCCESS,
        statistics.median(floors) * 1e6,
        statistics.median(sagas) * 1e6,
    )


def run(quick: bool = False) -> list[Overhead]:
    """Measure both workloads; `quick` runs a few rounds only, to check the script works."""
    rounds = 20 if quick else 2000
    return [asyncio.run(_measure(rounds, fail_last=False)), asyncio.run(_measure(rounds, fail_last=True))]


if __name__ == "__main__":
    for item in run():
        print(item.as_dict())
