"""Durable throughput under concurrency: 10-step sagas at concurrency 1, 8, 50 and 200, per store.

At concurrency C, C tasks each run sagas one after another (at least 2 each, and enough for a few hundred sagas
in all); the report is sagas/s and step transitions/s (10 per saga). The floor, measured in the same run on
the same database and interleaved round by round, is the raw driver doing one insert+commit per step transition
at the same concurrency: C tasks each inserting and committing 10 rows per "saga", on a pool of the same size
the store uses (`POOL` connections, opened up front for both); for SQLite, one connection behind a lock, as the
store has. `ratio` is saga throughput / raw throughput (1.0: as fast as the floor, higher is better), and
`scaling` is the throughput at C over the throughput at concurrency 1.

Stores as in benchmarks/durable.py: a SQLite file (synchronous=FULL), and PostgreSQL and MariaDB/MySQL databases
created for the run (SAGA_RUNTIME_BENCH_POSTGRES_URL / SAGA_RUNTIME_BENCH_MYSQL_URL); an unreachable server is
reported as skipped.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.durable import PLAN, SERVERS, STEPS, _admin, registry
from saga_runtime import SagaExecutor, open_store

LEVELS = (1, 8, 50, 200)
QUICK_LEVELS = (1, 8)
POOL = 10  # the PostgreSQL and MySQL stores' default max_size

Saga = Callable[[int], Awaitable[None]]
Close = Callable[[], Awaitable[None]]


@dataclass
class Throughput:
    """One store at one concurrency."""

    store: str
    concurrency: int
    sagas: int = 0
    raw_sagas_per_s: float | None = None
    saga_sagas_per_s: float | None = None
    raw_scaling: float | None = None
    saga_scaling: float | None = None
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        raw, saga = self.raw_sagas_per_s, self.saga_sagas_per_s

        def rounded(value: float | None, digits: int = 1) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "store": self.store,
            "concurrency": self.concurrency,
            "sagas_per_round": self.sagas,
            "floor: raw sagas/s (10 commits each)": rounded(raw),
            "floor: raw commits/s": rounded(None if raw is None else raw * STEPS),
            "saga sagas/s": rounded(saga),
            "saga step transitions/s": rounded(None if saga is None else saga * STEPS),
            "ratio": None if not (raw and saga) else round(saga / raw, 3),
            "raw scaling vs c=1": rounded(self.raw_scaling, 2),
            "saga scaling vs c=1": rounded(self.saga_scaling, 2),
            "skipped": self.skipped,
        }


# -- raw floors: one insert+commit per step transition, on a pool the size of the store's ---------------------


async def _raw_sqlite(path: Path) -> tuple[Saga, Close]:
    import aiosqlite

    conn = await aiosqlite.connect(path, isolation_level=None)
    for pragma in ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA busy_timeout=5000"):
        await conn.execute(pragma)
    await conn.execute("CREATE TABLE IF NOT EXISTS raw_steps (saga INTEGER, step INTEGER, payload TEXT)")
    lock = asyncio.Lock()  # one connection: transactions of concurrent tasks must not interleave on it

    async def saga(n: int) -> None:
        for step in range(STEPS):
            async with lock:
                await conn.execute("BEGIN IMMEDIATE")
                await conn.execute("INSERT INTO raw_steps VALUES (?, ?, ?)", (n, step, '{"n": 1}'))
                await conn.execute("COMMIT")

    return saga, conn.close


async def _raw_postgres(url: str) -> tuple[Saga, Close]:
    import asyncpg

    pool = await asyncpg.create_pool(url, min_size=POOL, max_size=POOL)
    await pool.execute("CREATE TABLE IF NOT EXISTS raw_steps (saga INTEGER, step INTEGER, payload JSONB)")

    async def saga(n: int) -> None:
        for step in range(STEPS):
            async with pool.acquire() as conn:  # autocommit: the insert is its own transaction
                await conn.execute("INSERT INTO raw_steps VALUES ($1, $2, $3)", n, step, '{"n": 1}')

    return saga, pool.close


async def _raw_mysql(url: str) -> tuple[Saga, Close]:
    import aiomysql

    parts = urlsplit(url)
    pool = await aiomysql.create_pool(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        db=parts.path.lstrip("/"),
        autocommit=True,
        minsize=POOL,
        maxsize=POOL,
    )
    async with pool.acquire() as conn, conn.cursor() as cursor:
        await cursor.execute("CREATE TABLE IF NOT EXISTS raw_steps (saga INTEGER, step INTEGER, payload JSON)")

    async def saga(n: int) -> None:
        for step in range(STEPS):
            async with pool.acquire() as conn, conn.cursor() as cursor:
                await cursor.execute("INSERT INTO raw_steps VALUES (%s, %s, %s)", (n, step, '{"n": 1}'))

    async def close() -> None:
        pool.close()
        await pool.wait_closed()

    return saga, close


# -- the measurement ----------------------------------------------------------------------------------------------


async def _rate(saga: Saga, concurrency: int, each: int, first: int) -> float:
    """Run `concurrency` tasks of `each` sagas one after another; return sagas per second."""

    async def worker(w: int) -> None:
        for i in range(each):
            await saga(first + w * each + i)

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return concurrency * each / (time.perf_counter() - started)


async def _measure(
    name: str, url: str, raw: tuple[Saga, Close], levels: tuple[int, ...], rounds: int, least: int, options: Any
) -> list[Throughput]:
    raw_saga, raw_close = raw
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
                raws, sagas = [], []
                for _ in range(rounds):
                    raws.append(await _rate(raw_saga, level, each, counter))
                    sagas.append(await _rate(saga, level, each, counter))
                    counter += level * each
                results.append(Throughput(name, level, level * each, statistics.median(raws), statistics.median(sagas)))
    finally:
        await raw_close()
    base_raw, base_saga = results[0].raw_sagas_per_s, results[0].saga_sagas_per_s
    for item in results:
        if base_raw and base_saga and item.raw_sagas_per_s and item.saga_sagas_per_s:
            item.raw_scaling = item.raw_sagas_per_s / base_raw
            item.saga_scaling = item.saga_sagas_per_s / base_saga
    return results


async def _server(kind: str, levels: tuple[int, ...], rounds: int, least: int) -> list[Throughput]:
    variable, default = SERVERS[kind]
    admin_url = os.environ.get(variable, default)
    name = f"saga_runtime_bench_{secrets.token_hex(4)}"
    try:
        await _admin(kind, admin_url, f"CREATE DATABASE {name}")
    except Exception as exc:
        return [Throughput(kind, level, skipped=f"{type(exc).__name__}: {exc} (set {variable})") for level in levels]
    url = urlsplit(admin_url)._replace(path=f"/{name}").geturl()
    try:
        raw = await (_raw_postgres(url) if kind == "postgresql" else _raw_mysql(url))
        options = {"min_size": POOL, "max_size": POOL}
        return await _measure(kind, url, raw, levels, rounds, least, options)
    finally:
        await _admin(kind, admin_url, f"DROP DATABASE IF EXISTS {name}")


async def _all(levels: tuple[int, ...], rounds: int, least: int, note: Callable[[str], None]) -> list[Throughput]:
    results = []
    note("concurrency: sqlite")
    with tempfile.TemporaryDirectory() as folder:
        raw = await _raw_sqlite(Path(folder) / "raw.db")
        url = f"sqlite:///{folder}/sagas.db"
        results += await _measure("sqlite (synchronous=FULL)", url, raw, levels, rounds, least, {"synchronous": "FULL"})
    for kind in SERVERS:
        note(f"concurrency: {kind}")
        results += await _server(kind, levels, rounds, least)
    return results


def run(quick: bool = False, note: Callable[[str], None] = lambda _: None) -> list[Throughput]:
    """Measure every store at every concurrency; `quick`: concurrency 1 and 8, one small round, to check the script."""
    if quick:
        return asyncio.run(_all(QUICK_LEVELS, 1, 8, note))
    return asyncio.run(_all(LEVELS, 3, 200, note))


if __name__ == "__main__":
    import sys

    for item in run(quick="--quick" in sys.argv, note=print):
        print(item.as_dict())
