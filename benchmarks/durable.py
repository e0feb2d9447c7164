"""Durable cost: a 10-step saga, one at a time, against the raw driver committing one insert per step.

For each store (a SQLite file with synchronous=FULL, PostgreSQL, MariaDB/MySQL) both are measured in the same
run, on the same database, interleaved round by round; the report is the median per saga and the ratio. The
server URLs come from SAGA_RUNTIME_BENCH_POSTGRES_URL / SAGA_RUNTIME_BENCH_MYSQL_URL (defaults: the local
servers); each run creates a database of its own there and drops it at the end. A server that cannot be
reached is reported as skipped.
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

from saga_runtime import SagaExecutor, ToolRegistry, open_store

STEPS = 10
SERVERS = {
    "postgresql": ("SAGA_RUNTIME_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mysql": ("SAGA_RUNTIME_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql"),
}

registry = ToolRegistry()


@registry.tool
class Noop:
    """Do nothing; the cost measured is the saga's own."""

    async def execute(self, n: int) -> int:
        return n

    async def compensate(self, result: int | None) -> None:
        return None


PLAN = [{"tool": "Noop", "args": {"n": i}} for i in range(STEPS)]


@dataclass
class Durable:
    """One store's result."""

    store: str
    raw_ms: float | None = None
    saga_ms: float | None = None
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        ratio = None if not (self.raw_ms and self.saga_ms) else round(self.saga_ms / self.raw_ms, 2)
        return {
            "store": self.store,
            "raw_ms_per_10_commits": None if self.raw_ms is None else round(self.raw_ms, 3),
            "saga_ms": None if self.saga_ms is None else round(self.saga_ms, 3),
            "ratio": ratio,
            "skipped": self.skipped,
        }


# -- raw floors: one insert and one commit per step ---------------------------------------------------------------


async def _raw_sqlite(path: Path) -> tuple[Callable[[int], Awaitable[None]], Callable[[], Awaitable[None]]]:
    import aiosqlite

    conn = await aiosqlite.connect(path, isolation_level=None)
    for pragma in ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA busy_timeout=5000"):
        await conn.execute(pragma)
    await conn.execute("CREATE TABLE IF NOT EXISTS raw_steps (saga INTEGER, step INTEGER, payload TEXT)")

    async def saga(n: int) -> None:
        for step in range(STEPS):
            await conn.execute("BEGIN IMMEDIATE")
            await conn.execute("INSERT INTO raw_steps VALUES (?, ?, ?)", (n, step, '{"n": 1}'))
            await conn.execute("COMMIT")

    return saga, conn.close


async def _raw_postgres(url: str) -> tuple[Callable[[int], Awaitable[None]], Callable[[], Awaitable[None]]]:
    import asyncpg

    conn = await asyncpg.connect(url)
    await conn.execute("CREATE TABLE IF NOT EXISTS raw_steps (saga INTEGER, step INTEGER, payload JSONB)")

    async def saga(n: int) -> None:
        for step in range(STEPS):  # autocommit: each statement is its own transaction
            await conn.execute("INSERT INTO raw_steps VALUES ($1, $2, $3)", n, step, '{"n": 1}')

    return saga, conn.close


async def _raw_mysql(url: str) -> tuple[Callable[[int], Awaitable[None]], Callable[[], Awaitable[None]]]:
    import aiomysql

    parts = urlsplit(url)
    conn = await aiomysql.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        db=parts.path.lstrip("/"),
        autocommit=True,
    )
    async with conn.cursor() as cursor:
        await cursor.execute("CREATE TABLE IF NOT EXISTS raw_steps (saga INTEGER, step INTEGER, payload JSON)")

    async def saga(n: int) -> None:
        async with conn.cursor() as cursor:
            for step in range(STEPS):
                await cursor.execute("INSERT INTO raw_steps VALUES (%s, %s, %s)", (n, step, '{"n": 1}'))

    async def close() -> None:
        conn.close()

    return saga, close


# -- servers: a database of our own for the run -------------------------------------------------------------------


async def _admin(kind: str, url: str, statement: str) -> None:
    if kind == "postgresql":
        import asyncpg

        conn = await asyncpg.connect(url, timeout=5)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()
    else:
        import aiomysql

        parts = urlsplit(url)
        conn = await aiomysql.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=parts.username or "root",
            password=parts.password or "",
            connect_timeout=5,
            autocommit=True,
        )
        try:
            async with conn.cursor() as cursor:
                await cursor.execute(statement)
        finally:
            conn.close()


async def _measure(
    name: str,
    url: str,
    raw: tuple[Callable[[int], Awaitable[None]], Callable[[], Awaitable[None]]],
    rounds: int,
) -> Durable:
    raw_saga, raw_close = raw
    raw_times, saga_times = [], []
    try:
        async with open_store(url) as store:
            executor = SagaExecutor(registry, store=store)
            for n in range(rounds):
                started = time.perf_counter()
                await raw_saga(n)
                raw_times.append(time.perf_counter() - started)
                started = time.perf_counter()
                result = await executor.run(PLAN)
                saga_times.append(time.perf_counter() - started)
                assert result.status.value == "SUCCESS", result.error
    finally:
        await raw_close()
    return Durable(name, statistics.median(raw_times) * 1e3, statistics.median(saga_times) * 1e3)


async def _server(kind: str, rounds: int) -> Durable:
    variable, default = SERVERS[kind]
    admin_url = os.environ.get(variable, default)
    name = f"saga_runtime_bench_{secrets.token_hex(4)}"
    try:
        await _admin(kind, admin_url, f"CREATE DATABASE {name}")
    except Exception as exc:
        return Durable(kind, skipped=f"{type(exc).__name__}: {exc} (set {variable})")
    url = urlsplit(admin_url)._replace(path=f"/{name}").geturl()
    try:
        raw = await (_raw_postgres(url) if kind == "postgresql" else _raw_mysql(url))
        return await _measure(kind, url, raw, rounds)
    finally:
        await _admin(kind, admin_url, f"DROP DATABASE IF EXISTS {name}")


async def _all(rounds: int) -> list[Durable]:
    results = []
    with tempfile.TemporaryDirectory() as folder:
        raw = await _raw_sqlite(Path(folder) / "raw.db")
        results.append(await _measure("sqlite (synchronous=FULL)", f"sqlite:///{folder}/sagas.db", raw, rounds))
    for kind in SERVERS:
        results.append(await _server(kind, rounds))
    return results


def run(quick: bool = False) -> list[Durable]:
    """Measure every store; `quick` runs a few rounds only, to check the script works."""
    return asyncio.run(_all(5 if quick else 200))


if __name__ == "__main__":
    for item in run():
        print(item.as_dict())
