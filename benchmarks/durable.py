"""Durable cost: a 10-step saga, one at a time, against the raw driver inserting one step row per step.

The floor (see benchmarks/_floors.py) is one connection in autocommit doing one INSERT of a step row per step:
on a SQLite file in WAL mode with synchronous=FULL, and on PostgreSQL and MariaDB/MySQL over 127.0.0.1. Floor
and saga are measured in the same run, on the same database, interleaved round by round; the report is the
median time per saga of each and the saga's as a multiple of the floor's (`ratio`, lower is better), the same for
the client's CPU time (`time.process_time`, the whole process: the event loop and aiosqlite's thread), and on
SQLite the statements the driver runs per saga, BEGIN and COMMIT included (sqlite3's trace callback). The server
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
from saga_runtime._storage._sqlite import SQLiteDialect
from saga_runtime._storage._sqlstore import SQLStore

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
    *(
        Target(f"durable, one at a time, {name}: time per saga / floor's", bound, "x", value("ratio", store=store))
        for name, store, bound in (
            ("SQLite", "sqlite", 1.5),
            ("PostgreSQL", "postgresql", 1.5),
            ("MariaDB", "mysql", 2.5),
        )
    ),
    Target("durable, SQLite: statements per 10-step saga", 25, "", value("statements_per_saga", store="sqlite")),
    Target(
        "durable, one at a time, PostgreSQL: client CPU per saga / floor's",
        2.0,
        "x",
        value("cpu_ratio", store="postgresql"),
    ),
]


@dataclass
class Durable:
    """One store's result."""

    store: str
    floor_ms: float | None = None
    saga_ms: float | None = None
    floor_cpu_ms: float | None = None
    saga_cpu_ms: float | None = None
    statements: float | None = None
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "floor_ms_per_saga": _round(self.floor_ms, 3),
            "saga_ms_per_saga": _round(self.saga_ms, 3),
            "ratio": _ratio(self.saga_ms, self.floor_ms),
            "floor_cpu_ms_per_saga": _round(self.floor_cpu_ms, 3),
            "saga_cpu_ms_per_saga": _round(self.saga_cpu_ms, 3),
            "cpu_ratio": _ratio(self.saga_cpu_ms, self.floor_cpu_ms),
            "statements_per_saga": _round(self.statements, 1),
            "skipped": self.skipped,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _ratio(saga: float | None, floor: float | None) -> float | None:
    return None if not (saga and floor) else round(saga / floor, 2)


async def _statement_counter(store: Any) -> list[str] | None:
    """Return a list every statement the SQLite store's connection runs is appended to; None on other stores."""
    if not (isinstance(store, SQLStore) and isinstance(store.dialect, SQLiteDialect)):
        return None
    seen: list[str] = []
    await store.dialect._tx.call(lambda conn: conn.set_trace_callback(seen.append))
    return seen


async def _measure(name: str, url: str, floor: Floor, rounds: int) -> Durable:
    floor_times, saga_times, floor_cpu, saga_cpu = [], [], [], []
    statements = None
    try:
        async with open_store(url) as store:
            executor = SagaExecutor(registry, store=store)
            await executor.run(PLAN)  # warm: the statements counted are the sagas' own
            seen = await _statement_counter(store)
            for n in range(rounds):
                started, cpu = time.perf_counter(), time.process_time()
                await floor.saga(n)
                floor_times.append(time.perf_counter() - started)
                floor_cpu.append(time.process_time() - cpu)
                started, cpu = time.perf_counter(), time.process_time()
                result = await executor.run(PLAN)
                saga_times.append(time.perf_counter() - started)
                saga_cpu.append(time.process_time() - cpu)
                assert result.status.value == "SUCCESS", result.error
            if seen is not None:
                statements = len(seen) / rounds
    finally:
        await floor.close()
    median = statistics.median
    return Durable(
        name,
        median(floor_times) * 1e3,
        median(saga_times) * 1e3,
        median(floor_cpu) * 1e3,
        median(saga_cpu) * 1e3,
        statements,
    )


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
