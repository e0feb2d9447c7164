"""Events and streams (API.md §18): what a reader of a saga's stream costs the store while idle, and how soon a
reader in the writer's process sees a value.

Two workloads on SQLite, each run twice in the same run: as readers were before (a read of the store every 0.1 s,
no notice: the floor) and as they are now (a notice from the writer in this process, and a store poll that backs
off from 0.1 s to 1 s while nothing changes):

- Idle reader: `read_stream` of a WAITING saga function that writes nothing more, for `IDLE_SECONDS`; reported:
  the reader's store reads per second, and `ratio` now over before.
- In-process wake: a saga function writes `VALUES` stream values 30 ms apart while a reader in the same process
  reads them; reported: p50 and p99 from `write_stream` returning (the value durable) to the reader having it,
  and `ratio` of the p50s (SQLite's own write, the same before and now, is left out).

`python -m benchmarks.published [--quick]` runs only these.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import saga_runtime._published as published
from benchmarks._report import Target, value
from saga_runtime import DynamicSaga, SagaExecutor, ToolRegistry, open_store

IDLE_SECONDS = 10.0
VALUES = 100
IDLE = "events and streams: an idle stream reader's store reads per second, SQLite (before: a read every 0.1 s)"
WAKE = "events and streams: write_stream -> read_stream in the writer's process, SQLite (before: a read every 0.1 s)"


class _NoNotice:
    """A watch that is never told: the reader only sleeps (readers as they were before)."""

    async def wait(self, seconds: float) -> bool:
        await asyncio.sleep(seconds)
        return False


@contextlib.contextmanager
def _as_before() -> Iterator[None]:
    """Make readers poll the store every 0.1 s, with no notice, as they did before."""
    saved = published._FIRST_PAUSE, published._MOST_PAUSE, published.watching

    @contextlib.contextmanager
    def unwatched(url: str, saga_id: str) -> Iterator[_NoNotice]:
        yield _NoNotice()

    published._FIRST_PAUSE = published._MOST_PAUSE = 0.1
    published.watching = unwatched  # type: ignore[assignment]
    try:
        yield
    finally:
        published._FIRST_PAUSE, published._MOST_PAUSE, published.watching = saved


class _Counting:
    """A store whose saga reads are counted."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def load_saga(self, saga_id: str) -> Any:
        self.reads += 1
        return await self.store.load_saga(saga_id)


@dataclass
class Idle:
    """The idle reader's store reads per second, before and now."""

    seconds: float
    before: float
    now: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds idle": self.seconds,
            "floor: reads/s before": round(self.before, 2),
            "reads/s now": round(self.now, 2),
            "ratio": round(self.now / self.before, 3) if self.before else None,
        }


async def _idle_reads(url: str, seconds: float) -> float:
    registry = ToolRegistry()

    @registry.saga
    async def waits(saga: DynamicSaga) -> None:
        await saga.write_stream("log", "started")
        await saga.recv("never", timeout=3600)  # released: WAITING, written nothing more

    async with open_store(url) as store:
        executor = SagaExecutor(registry, store, wait_threshold=0.01)
        result = await executor.run(waits, saga_id="idle")
        assert result.status.value == "WAITING", result.status
        counted = _Counting(store)

        async def read() -> None:
            async for _ in published.read_stream(counted, "idle", "log", 1):  # type: ignore[arg-type]
                raise AssertionError("the idle saga wrote nothing")

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await read()
        return counted.reads / seconds


def idle(quick: bool = False) -> list[Idle]:
    """Measure an idle reader's store reads per second, before and now; `quick`: 5 s each."""
    seconds = 5.0 if quick else IDLE_SECONDS
    with tempfile.TemporaryDirectory() as folder:
        with _as_before():
            before = asyncio.run(_idle_reads(f"sqlite:///{Path(folder) / 'before.db'}", seconds))
        now = asyncio.run(_idle_reads(f"sqlite:///{Path(folder) / 'now.db'}", seconds))
    return [Idle(seconds, before, now)]


@dataclass
class Wake:
    """Write -> read in the writer's process, before and now (ms)."""

    values: int
    before_p50: float
    before_p99: float
    now_p50: float
    now_p99: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "values": self.values,
            "floor: p50 ms before": round(self.before_p50, 2),
            "p99 ms before": round(self.before_p99, 2),
            "p50 ms now": round(self.now_p50, 2),
            "p99 ms now": round(self.now_p99, 2),
            "ratio": round(self.now_p50 / self.before_p50, 3) if self.before_p50 else None,
        }


async def _latencies(url: str, count: int) -> list[float]:
    registry = ToolRegistry()
    written: dict[int, float] = {}
    read: dict[int, float] = {}

    @registry.saga
    async def ticks(saga: DynamicSaga, count: int) -> None:
        await saga.set_event("ready", True)
        for number in range(count):
            await saga.write_stream("t", number)
            written[number] = time.perf_counter()  # durable now: the reader's wait starts here
            await asyncio.sleep(0.03)
        await saga.close_stream("t")

    async with open_store(url) as store:
        executor = SagaExecutor(registry, store)

        async def reader() -> None:
            await executor.get_event("w", "ready", timeout=30)  # the saga is stored
            async for number in executor.read_stream("w", "t"):
                read[number] = time.perf_counter()

        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(executor.run(ticks, args={"count": count}, saga_id="w"))
            tasks.create_task(reader())
    # A value read before its writer's call returned (the notice comes with the write) counts as 0.
    return [max(0.0, (read[n] - written[n]) * 1000) for n in range(count)]


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wake(quick: bool = False) -> list[Wake]:
    """Measure write_stream -> read_stream in one process, before and now; `quick`: 20 values."""
    count = 20 if quick else VALUES
    with tempfile.TemporaryDirectory() as folder:
        with _as_before():
            before = asyncio.run(_latencies(f"sqlite:///{Path(folder) / 'before.db'}", count))
        now = asyncio.run(_latencies(f"sqlite:///{Path(folder) / 'now.db'}", count))
    return [Wake(count, statistics.median(before), _p(before, 0.99), statistics.median(now), _p(now, 0.99))]


IDLE_TARGETS = [
    Target("events and streams, an idle reader: store reads/s now over a read every 0.1 s", 0.2, "x", value("ratio"))
]
WAKE_TARGETS = [
    Target("events and streams, write -> reader in the writer's process: p50 now over before", 0.2, "x", value("ratio"))
]

WORKLOADS: dict[str, tuple[str, Any, list[Target]]] = {
    IDLE: ("events and streams: idle reader", idle, IDLE_TARGETS),
    WAKE: ("events and streams: in-process wake", wake, WAKE_TARGETS),
}


if __name__ == "__main__":
    from benchmarks._report import table

    quick = "--quick" in sys.argv
    for title, (_, measure, targets) in WORKLOADS.items():
        rows = [item.as_dict() for item in measure(quick)]
        print(table(title, rows) + "\n")
        print(table("targets", [target.verdict(rows) for target in targets]) + "\n")
