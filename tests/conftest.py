"""Shared fixtures of the test suite."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from saga_runtime._storage import redact_url

# -- Database servers ------------------------------------------------------------------------------------------
#
# Store tests run for real against PostgreSQL and MySQL/MariaDB. The URLs name a server and a database to connect
# to for administration; each test session creates databases of its own there and drops them at the end.
# Unreachable: the tests skip, naming the variable to set; under CI=true they fail instead.

POSTGRES_URL_VAR = "SAGA_RUNTIME_TEST_POSTGRES_URL"
MYSQL_URL_VAR = "SAGA_RUNTIME_TEST_MYSQL_URL"
SERVER_URLS = {
    "postgresql": (POSTGRES_URL_VAR, "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mysql": (MYSQL_URL_VAR, "mysql://root@127.0.0.1:3306/mysql"),
}


def run_sync(make: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine to completion on a loop of its own, in a thread, whatever loop is running here."""

    async def main() -> Any:
        return await make()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


def with_database(url: str, name: str) -> str:
    """Return `url` pointing at database `name`."""
    return urlsplit(url)._replace(path=f"/{name}").geturl()


async def mysql_connect(url: str) -> Any:
    """Open an autocommitting aiomysql connection to the server and database of `url`."""
    import aiomysql

    parts = urlsplit(url)
    return await aiomysql.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        db=parts.path.lstrip("/") or None,
        connect_timeout=5,
        autocommit=True,
    )


async def admin_execute(kind: str, url: str, statements: list[str]) -> None:
    """Run statements on a server with its raw driver, outside any store."""
    if kind == "postgresql":
        import asyncpg

        conn = await asyncpg.connect(url, timeout=5)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()
    else:
        conn = await mysql_connect(url)
        try:
            async with conn.cursor() as cursor:
                # Notes such as "table does not exist" under IF EXISTS are not test failures.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for statement in statements:
                        await cursor.execute(statement)
        finally:
            conn.close()


class TestDatabases:
    """Databases this session created on one server; dropped at the end."""

    __test__ = False

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.var, default = SERVER_URLS[kind]
        self.admin_url = os.environ.get(self.var) or default
        self.names: list[str] = []

    def url_of(self, name: str) -> str:
        """Return the URL of database `name` on this server."""
        return with_database(self.admin_url, name)

    async def execute(self, url: str, statements: list[str]) -> None:
        """Run statements at `url` (a database of this server) with the raw driver."""
        await admin_execute(self.kind, url, statements)

    def create(self) -> str:
        """Create a database with a unique name; return its URL."""
        name = f"saga_rt_test_{os.getpid()}_{secrets.token_hex(4)}"
        run_sync(lambda: admin_execute(self.kind, self.admin_url, [f"CREATE DATABASE {name}"]))
        self.names.append(name)
        return with_database(self.admin_url, name)

    def drop_all(self) -> None:
        """Drop every database this session created."""
        force = " WITH (FORCE)" if self.kind == "postgresql" else ""
        statements = [f"DROP DATABASE IF EXISTS {name}{force}" for name in self.names]
        if statements:
            run_sync(lambda: admin_execute(self.kind, self.admin_url, statements))
        self.names.clear()


def _server(kind: str) -> Iterator[TestDatabases]:
    databases = TestDatabases(kind)
    try:
        databases.create()
    except Exception as exc:
        message = (
            f"no {kind} server for the store tests at {redact_url(databases.admin_url)} "
            f"({type(exc).__name__}: {exc}); "
            f"start one, or set {databases.var} to the URL of one"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield databases
    finally:
        databases.drop_all()


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[TestDatabases]:
    """Return the session's PostgreSQL databases (skip, or under CI fail, if the server is unreachable)."""
    yield from _server("postgresql")


@pytest.fixture(scope="session")
def mysql_databases() -> Iterator[TestDatabases]:
    """Return the session's MySQL/MariaDB databases (skip, or under CI fail, if the server is unreachable)."""
    yield from _server("mysql")


@pytest.fixture(scope="session")
def postgres_url(postgres_databases: TestDatabases) -> str:
    """Return the URL of a PostgreSQL database of this session, shared by its tests."""
    return with_database(postgres_databases.admin_url, postgres_databases.names[0])


@pytest.fixture(scope="session")
def mysql_url(mysql_databases: TestDatabases) -> str:
    """Return the URL of a MySQL/MariaDB database of this session, shared by its tests."""
    return with_database(mysql_databases.admin_url, mysql_databases.names[0])
