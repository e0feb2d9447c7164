"""Durable sagas many at a time: 10-step sagas at concurrency 1, 8, 50 and 200, per store.

At concurrency C, C tasks each run sagas one after another (at least 2 each, and enough for a few hundred sagas
in all); the time per saga is the wall time over the sagas run. The floor (see benchmarks/_floors.py), measured
in the same run on the same database and interleaved round by round, is C tasks each inserting one step row
per step, autocommitted: on SQLite all of them on one shared aiosqlite connection, with no lock of the
benchmark's own; on PostgreSQL and MariaDB/MySQL on a pool of `POOL` connections, one held per saga (the store
gets a pool of the same size). `ratio` is the saga's time per saga as a multiple of the floor's (lower is better;
below 1.0 the store's group commit beats one commit per insert), and `scaling` is the throughput at C over the
throughput at concurrency 1.

Stores as in benchmarks/durable.py: a SQLite file (synchronous=FULL), and PostgreSQL and MariaDB/MySQL databases
created for the run (SAGA_RUNTIME_BENCH_POSTGRES_URL / SAGA_RUNTIME_BENCH_MYSQL_URL); an unreachable server is
reported as skipped.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._floors import POOL, SERVERS, STEPS, Floor, Unreachable, database, server_floor, sqlite_floor
from benchmarks._report import Target, value
from benchmarks.durable import PLAN, registry
from saga_runtime import SagaExecutor, open_store

LEVELS = (1, 8, 50, 200)
QUICK_LEVELS = (1, 50)

TARGETS = [
    Target(
        f"durable, 50 at a time, {name}: time per saga / floor's",
        bound,
        "x",
        value("ratio", store=store, concurrency=50),
    )
    for name, store, bound in (("SQLite", "sqlite", 0.8), ("PostgreSQL", "postgresql", 1.0))
]


@dataclass
class Throughput:
    """One store at one concurrency."""

    store: str
    concurrency: int
    sagas: int = 0
    floor_sagas_per_s: float | None = None
    saga_sagas_per_s: float | None = None
    saga_scaling: float | None = None
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        floor, saga = self.floor_sagas_per_s, self.saga_sagas_per_s

        def rounded(value: float | None, digits: int = 1) -> float | None:
            return None if value is None else round(value, digits)

        def ms_per_saga(rate: float | None) -> float | None:
            return None if not rate else round(1e3 / rate, 3)

        return {
            "store": self.store,
            "concurrency": self.concurrency,
            "sagas_per_round": self.sagas,
            "floor_ms_per_saga": ms_per_saga(floor),
            "saga_ms_per_saga": ms_per_saga(saga),
            "ratio": None if not (floor and saga) else round(floor / saga, 3),
            "floor: raw commits/s": rounded(None if floor is None else floor * STEPS),
            "saga step transitions/s": rounded(None if saga is None else saga * STEPS),
            "saga scaling vs c=1": rounded(self.saga_scaling, 2),
            "skipped": self.skipped,
        }


async def _rate(saga: Callable[[int], Awaitable[None]], concurrency: int, each: int, first: int) -> float:
    """Run `concurrency` tasks of `each` sagas one after another; return sagas per second."""

    async def worker(w: int) -> None:
        for i in range(each):
            await saga(first + w * each + i)

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return concurrency * each / (time.perf_counter() - started)


async def _measure(
    name: str, url: str, floor: Floor, levels: tuple[int, ...], rounds: int, least: int, options: Any
) -> list[Throughput]:
    results: list[Throughput] = []
    try:
        async with open_store(url, **options) as store:
            executor = SagaExecutor(registry, store=store)

            async def saga(n: int) -> None:
                result = await executor.run(PLAN)
                assert result.status.value == "SUCCESS", result.error

            counter = 0
            for level in levels:
                each = max(2, least // level)
                floors, sagas = [], []
                for _ in range(rounds):
                    floors.append(await _rate(floor.saga, level, each, counter))
                    sagas.append(await _rate(saga, level, each, counter))
                    counter += level * each
                median = statistics.median
                results.append(Throughput(name, level, level * each, median(floors), median(sagas)))
    finally:
        await floor.close()
    base = results[0].saga_sagas_per_s
    for item in results:
        if base and item.saga_sagas_per_s:
            item.saga_scaling = item.saga_sagas_per_s / base
    return results


async def _server(kind: str, levels: tuple[int, ...], rounds: int, least: int) -> list[Throughput]:
    try:
        async with database(kind) as url:
            floor = await server_floor(kind, url, POOL)
            options = {"min_size": POOL, "max_size": POOL}
            return await _measure(kind, url, floor, levels, rounds, least, options)
    except Unreachable as exc:
        return [Throughput(kind, level, skipped=str(exc)) for level in levels]


async def _all(levels: tuple[int, ...], rounds: int, least: int, note: Callable[[str], None]) -> list[Throughput]:
    results = []
    note("concurrency: sqlite")
    with tempfile.TemporaryDirectory() as folder:
        floor = await sqlite_floor(Path(folder) / "raw.db")
        url = f"sqlite:///{folder}/sagas.db"
        options = {"synchronous": "FULL"}
        results += await _measure("sqlite (synchronous=FULL)", url, floor, levels, rounds, least, options)
    for kind in SERVERS:
        note(f"concurrency: {kind}")
        results += await _server(kind, levels, rounds, least)
    return results


def run(quick: bool = False, note: Callable[[str], None] = lambda _: None) -> list[Throughput]:
    """Measure every store at every concurrency; `quick`: concurrency 1 and 50, one small round, to check the script."""
    if quick:
        return asyncio.run(_all(QUICK_LEVELS, 1, 8, note))
    return asyncio.run(_all(LEVELS, 3, 200, note))


if __name__ == "__main__":
    import sys

    for item in run(quick="--quick" in sys.argv, note=print):
        print(item.as_dict())
