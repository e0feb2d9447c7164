"""The raw drivers' floors the durable benchmarks measure against, and the databases they run on.

A floor is what a user writing their own durable loop would measure side by side: one INSERT of a step row per
step, each autocommitted (its own transaction), with nothing of the benchmark's own around it.

- One saga at a time: one connection (SQLite: a WAL file with synchronous=FULL; PostgreSQL and MariaDB/MySQL
  over 127.0.0.1 by default).
- Many at a time: on SQLite, every task shares the one aiosqlite connection, each inserting its own rows, with no
  lock of the benchmark's own (aiosqlite runs the calls one after another on its thread); on PostgreSQL and
  MariaDB/MySQL, a pool of `POOL` connections, one connection held per saga for its ten inserts.

A step row has the columns and keys of the stores' `steps` table that a step's outcome fills: the saga and step
ids (the primary key), the tool, its JSON arguments, its idempotency key (unique), its status and JSON result.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

STEPS = 10
#: The connections of a floor's pool, and of the store measured against it, when sagas run many at a time.
POOL = 20
SERVERS = {
    "postgresql": ("SAGA_RUNTIME_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mysql": ("SAGA_RUNTIME_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql"),
}

_TABLE = (
    "CREATE TABLE IF NOT EXISTS raw_steps (saga_id VARCHAR(200) NOT NULL, step_id VARCHAR(200) NOT NULL, "
    "tool_name TEXT NOT NULL, args {json}, idempotency_key VARCHAR(200) NOT NULL UNIQUE, status VARCHAR(32) NOT "
    "NULL, result {json}, PRIMARY KEY (saga_id, step_id))"
)
_INSERT = "INSERT INTO raw_steps VALUES ({marks})"


def _row(saga: int, step: int) -> tuple[str, str, str, str, str, str, str]:
    """Return the step row of step `step` of raw saga number `saga`."""
    saga_id = f"raw-{saga}"
    return (saga_id, f"step-{step}", "Noop", f'{{"n": {step}}}', f"{saga_id}/{step}", "SUCCESS", str(step))


@dataclass
class Floor:
    """A raw driver ready to run: `saga(n)` inserts the ten step rows of raw saga `n`; `close()` lets go."""

    saga: Callable[[int], Awaitable[None]]
    close: Callable[[], Awaitable[None]]


async def sqlite_floor(path: Path) -> Floor:
    """Return the SQLite floor on the file `path`: one autocommitting connection, shared by every saga."""
    import aiosqlite

    conn = await aiosqlite.connect(path, isolation_level=None)  # None: autocommit, each INSERT its own transaction
    for pragma in ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA busy_timeout=5000"):
        await conn.execute(pragma)
    await conn.execute(_TABLE.format(json="TEXT"))
    insert = _INSERT.format(marks=", ".join("?" * 7))

    async def saga(n: int) -> None:
        for step in range(STEPS):
            await conn.execute(insert, _row(n, step))

    return Floor(saga, conn.close)


async def postgres_floor(url: str, pool: int | None) -> Floor:
    """Return the PostgreSQL floor: one connection (`pool` None), or a pool of `pool`, one connection per saga."""
    import asyncpg

    insert = _INSERT.format(marks=", ".join(f"${i}" for i in range(1, 8)))
    if pool is None:
        conn = await asyncpg.connect(url)
        await conn.execute(_TABLE.format(json="JSONB"))

        async def alone(n: int) -> None:
            for step in range(STEPS):  # autocommit: outside a transaction block, each statement is one
                await conn.execute(insert, *_row(n, step))

        return Floor(alone, conn.close)
    connections = await asyncpg.create_pool(url, min_size=pool, max_size=pool)
    await connections.execute(_TABLE.format(json="JSONB"))

    async def pooled(n: int) -> None:
        async with connections.acquire() as held:
            for step in range(STEPS):
                await held.execute(insert, *_row(n, step))

    return Floor(pooled, connections.close)


def mysql_options(url: str) -> dict[str, Any]:
    """Return aiomysql's connection options for a mysql:// URL."""
    parts = urlsplit(url)
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": parts.username or "root",
        "password": parts.password or "",
    }


async def mysql_floor(url: str, pool: int | None) -> Floor:
    """Return the MariaDB/MySQL floor: one connection (`pool` None), or a pool of `pool`, one connection per saga."""
    import aiomysql

    options = {**mysql_options(url), "db": urlsplit(url).path.lstrip("/"), "autocommit": True}
    insert = _INSERT.format(marks=", ".join(["%s"] * 7))
    if pool is None:
        conn = await aiomysql.connect(**options)
        async with conn.cursor() as cursor:
            await cursor.execute(_TABLE.format(json="JSON"))

        async def alone(n: int) -> None:
            async with conn.cursor() as cursor:
                for step in range(STEPS):
                    await cursor.execute(insert, _row(n, step))

        async def close() -> None:
            conn.close()

        return Floor(alone, close)
    connections = await aiomysql.create_pool(minsize=pool, maxsize=pool, **options)
    async with connections.acquire() as conn, conn.cursor() as cursor:
        await cursor.execute(_TABLE.format(json="JSON"))

    async def pooled(n: int) -> None:
        async with connections.acquire() as held, held.cursor() as cursor:
            for step in range(STEPS):
                await cursor.execute(insert, _row(n, step))

    async def close_pool() -> None:
        connections.close()
        await connections.wait_closed()

    return Floor(pooled, close_pool)


async def server_floor(kind: str, url: str, pool: int | None) -> Floor:
    """Return the floor of the server `kind` ("postgresql" or "mysql") at `url`."""
    return await (postgres_floor(url, pool) if kind == "postgresql" else mysql_floor(url, pool))


async def admin(kind: str, url: str, statement: str) -> None:
    """Run one statement on the server `kind` at `url`, outside any database of the run."""
    if kind == "postgresql":
        import asyncpg

        conn = await asyncpg.connect(url, timeout=5)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()
    else:
        import aiomysql

        conn = await aiomysql.connect(**mysql_options(url), connect_timeout=5, autocommit=True)
        try:
            async with conn.cursor() as cursor:
                await cursor.execute(statement)
        finally:
            conn.close()


class Unreachable(Exception):
    """The server could not be reached: its workloads are reported as skipped, with why."""


@contextlib.asynccontextmanager
async def database(kind: str) -> AsyncIterator[str]:
    """Create a database of the run's own on the server `kind`, yield its URL, and drop it at the end.

    Raise `Unreachable` (saying which variable names the server) when the server cannot be reached.
    """
    variable, default = SERVERS[kind]
    admin_url = os.environ.get(variable, default)
    name = f"saga_runtime_bench_{secrets.token_hex(4)}"
    try:
        await admin(kind, admin_url, f"CREATE DATABASE {name}")
    except Exception as exc:
        raise Unreachable(f"{type(exc).__name__}: {exc} (set {variable})") from exc
    try:
        yield urlsplit(admin_url)._replace(path=f"/{name}").geturl()
    finally:
        await admin(kind, admin_url, f"DROP DATABASE IF EXISTS {name}")
