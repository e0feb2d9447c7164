"""Durable cost: a 10-step saga, one at a time, against the raw driver inserting one step row per step.

The floor (see benchmarks/_floors.py) is one connection in autocommit doing one INSERT of a step row per step:
on a SQLite file in WAL mode with synchronous=FULL, and on PostgreSQL and MariaDB/MySQL over 127.0.0.1. Floor
and saga are measured in the same run, on the same database, interleaved round by round; the report is the
median time per saga of each and the saga's as a multiple of the floor's (`ratio`, lower is better). The server
URLs come from SAGA_RUNTIME_BENCH_POSTGRES_URL / SAGA_RUNTIME_BENCH_MYSQL_URL (defaults: the local servers); each
run creates a database of its own there and drops it at the end. A server that cannot be reached is reported
as skipped.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._floors import SERVERS, STEPS, Floor, Unreachable, database, server_floor, sqlite_floor
from benchmarks._report import Target, value
from saga_runtime import SagaExecutor, ToolRegistry, open_store

registry = ToolRegistry()


@registry.tool
class Noop:
    """Do nothing; the cost measured is the saga's own."""

    async def execute(self, n: int) -> int:
        return n

    async def compensate(self, result: int | None) -> None:
        return None


PLAN = [{"tool": "Noop", "args": {"n": i}} for i in range(STEPS)]

TARGETS = [
    Target(f"durable, one at a time, {name}: time per saga / floor's", bound, "x", value("ratio", store=store))
    for name, store, bound in (("SQLite", "sqlite", 1.5), ("PostgreSQL", "postgresql", 1.5), ("MariaDB", "mysql", 2.5))
]


@dataclass
class Durable:
    """One store's result."""

    store: str
    floor_ms: float | None = None
    saga_ms: float | None = None
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        ratio = None if not (self.floor_ms and self.saga_ms) else round(self.saga_ms / self.floor_ms, 2)
        return {
            "store": self.store,
            "floor_ms_per_saga": None if self.floor_ms is None else round(self.floor_ms, 3),
            "saga_ms_per_saga": None if self.saga_ms is None else round(self.saga_ms, 3),
            "ratio": ratio,
            "skipped": self.skipped,
        }


async def _measure(name: str, url: str, floor: Floor, rounds: int) -> Durable:
    floor_times, saga_times = [], []
    try:
        async with open_store(url) as store:
            executor = SagaExecutor(registry, store=store)
            for n in range(rounds):
                started = time.perf_counter()
                await floor.saga(n)
                floor_times.append(time.perf_counter() - started)
                started = time.perf_counter()
                result = await executor.run(PLAN)
                saga_times.append(time.perf_counter() - started)
                assert result.status.value == "SUCCESS", result.error
    finally:
        await floor.close()
    return Durable(name, statistics.median(floor_times) * 1e3, statistics.median(saga_times) * 1e3)


async def _server(kind: str, rounds: int) -> Durable:
    try:
        async with database(kind) as url:
            return await _measure(kind, url, await server_floor(kind, url, None), rounds)
    except Unreachable as exc:
        return Durable(kind, skipped=str(exc))


async def _all(rounds: int) -> list[Durable]:
    results = []
    with tempfile.TemporaryDirectory() as folder:
        floor = await sqlite_floor(Path(folder) / "raw.db")
        results.append(await _measure("sqlite (synchronous=FULL)", f"sqlite:///{folder}/sagas.db", floor, rounds))
    for kind in SERVERS:
        results.append(await _server(kind, rounds))
    return results


def run(quick: bool = False) -> list[Durable]:
    """Measure every store; `quick` runs a few rounds only, to check the script works."""
    return asyncio.run(_all(5 if quick else 200))


if __name__ == "__main__":
    for item in run():
        print(item.as_dict())
