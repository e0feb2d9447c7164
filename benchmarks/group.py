"""A parallel group: one saga of a single group of 100 steps that each sleep 10 ms, against `asyncio.gather`.

The floor is `asyncio.gather` of the same 100 `asyncio.sleep(0.01)` calls, measured in the same process and
interleaved round by round with the saga (in-memory store). Both should take about 10 ms, not 100 x 10 ms; the
report is the median wall time of each and their ratio (target: the saga within 1.1x of the floor).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

from benchmarks._report import Target, value
from saga_runtime import SagaExecutor, ToolRegistry

WIDTH = 100
SLEEP_S = 0.010

TARGETS = [Target("in memory, a group of 100 x 10 ms: time / asyncio.gather's", 1.1, "x", value("ratio"))]

registry = ToolRegistry()


@registry.tool
class Sleep:
    """Sleep for `ms` milliseconds, asynchronously."""

    async def execute(self, ms: int) -> int:
        await asyncio.sleep(ms / 1000)
        return ms

    async def compensate(self, result: int | None) -> None:
        return None


PLAN = [[{"tool": "Sleep", "args": {"ms": int(SLEEP_S * 1000)}} for _ in range(WIDTH)]]


@dataclass
class Group:
    """The group workload's result."""

    floor_ms: float
    saga_ms: float
    rounds: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": f"1 group of {WIDTH} steps x {SLEEP_S * 1000:.0f} ms sleep",
            "rounds": self.rounds,
            "floor_ms (asyncio.gather)": round(self.floor_ms, 3),
            "saga_ms": round(self.saga_ms, 3),
            "overhead_ms": round(self.saga_ms - self.floor_ms, 3),
            "ratio": round(self.saga_ms / self.floor_ms, 3),
        }


async def _measure(rounds: int) -> Group:
    executor = SagaExecutor(registry)
    result = await executor.run(PLAN)  # warm-up: imports, first-call caches
    assert result.status.value == "SUCCESS", result.error
    floors, sagas = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        await asyncio.gather(*(asyncio.sleep(SLEEP_S) for _ in range(WIDTH)))
        floors.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = await executor.run(PLAN)
        sagas.append(time.perf_counter() - started)
        assert result.status.value == "SUCCESS", result.error
    return Group(statistics.median(floors) * 1e3, statistics.median(sagas) * 1e3, rounds)


def run(quick: bool = False) -> list[Group]:
    """Measure the group; `quick` runs a few rounds only, to check the script works."""
    return [asyncio.run(_measure(3 if quick else 50))]


if __name__ == "__main__":
    for item in run():
        print(item.as_dict())
