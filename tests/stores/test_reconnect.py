"""A lost connection loses no saga: store operations retry on a fresh connection, with backoff, for `retry_for`.

The servers are never stopped here (other work runs against them): the store's own connections are killed,
with pg_terminate_backend on PostgreSQL and KILL on MariaDB, between two operations and while one waits.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest
from conftest import mysql_connect

from saga_runtime._exceptions import StoreBusyError, StoreConnectionError, StoreError
from saga_runtime._records import SagaStatus, StepStatus
from saga_runtime._storage import SagaStore, _sqlstore, open_store
from saga_runtime._storage._sqlstore import DEFAULT_RETRY_FOR

from .conftest import T0, Stores, as_stored, make_saga, make_steps

SERVERS = ("postgresql", "mysql")
WAIT = 10.0  # seconds to see the store's statement blocked on the held lock


class Admin:
    """A connection of the test's own to a server database: it holds locks and kills the store's connections."""

    def __init__(self, kind: str, conn: Any) -> None:
        self.kind = kind
        self.conn = conn

    async def fetch(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Return the rows of a query."""
        if self.kind == "postgresql":
            return [tuple(record) for record in await self.conn.fetch(sql, *params)]
        async with self.conn.cursor() as cursor:
            await cursor.execute(sql, params or None)
            return list(await cursor.fetchall())

    async def kill_store_connections(self) -> int:
        """Kill every other connection to this database (the store's); return how many were killed."""
        if self.kind == "postgresql":
            rows = await self.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return sum(1 for (killed,) in rows if killed)
        ids = await self.fetch(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
        )
        for (ident,) in ids:
            await self.fetch(f"KILL {int(ident)}")
        return len(ids)

    async def lock_saga(self, saga_id: str) -> None:
        """Begin a transaction holding the row lock of a saga, so the store's writes of it wait."""
        await self.fetch("BEGIN")
        marker = "$1" if self.kind == "postgresql" else "%s"
        assert await self.fetch(f"SELECT saga_id FROM sagas WHERE saga_id = {marker} FOR UPDATE", saga_id)

    async def wait_for_a_blocked_store(self) -> None:
        """Return once a statement of the store waits for the lock this connection holds."""
        if self.kind == "postgresql":
            sql = (
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
            )
        else:
            # Only this database's waits: other work on the server may wait for locks of its own.
            sql = (
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p "
                "ON p.ID = t.trx_mysql_thread_id WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
            )
        # InnoDB refreshes INNODB_TRX only once it was left unread for 0.1 s: poll slower than that.
        pause = 0.01 if self.kind == "postgresql" else 0.15
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while (await self.fetch(sql))[0][0] == 0:
            assert loop.time() < deadline, "the store's write never waited for the lock"
            await asyncio.sleep(pause)

    async def commit(self) -> None:
        """End the transaction, releasing its locks."""
        await self.fetch("COMMIT")


@asynccontextmanager
async def admin(kind: str, url: str) -> AsyncIterator[Admin]:
    """Open an Admin connection to the database at `url`."""
    if kind == "postgresql":
        pg = await asyncpg.connect(url, timeout=5)
        try:
            yield Admin(kind, pg)
        finally:
            await pg.close()
        return
    my = await mysql_connect(url)
    try:
        yield Admin(kind, my)
    finally:
        my.close()


async def fill(store: SagaStore, prefix: str, count: int) -> None:
    """Create `count` sagas with two steps each."""
    for n in range(count):
        saga_id = f"{prefix}-{n:02d}"
        assert await store.create_saga(make_saga(saga_id), make_steps(saga_id, 2)) is None


async def all_there(store: SagaStore, prefix: str, count: int) -> None:
    """Assert the `count` sagas of `prefix` are stored whole."""
    for n in range(count):
        saga_id = f"{prefix}-{n:02d}"
        assert await store.load_saga(saga_id) == (as_stored(store, make_saga(saga_id)), make_steps(saga_id, 2)), saga_id


def retries(caplog: pytest.LogCaptureFixture, what: str) -> list[logging.LogRecord]:
    """Return the records of retries of `what` logged on the saga_runtime logger (DEBUG: the outage is a WARNING)."""
    head = f"{what} lost its connection, retry"
    return [
        record
        for record in caplog.records
        if record.name == "saga_runtime" and record.levelno == logging.DEBUG and record.message.startswith(head)
    ]


@pytest.mark.parametrize("kind", SERVERS)
async def test_connections_killed_between_operations_lose_nothing(stores: Stores, kind: str) -> None:
    """The store's connections killed while idle: every next operation succeeds on new ones, every row is there."""
    url = await stores.blank_url(kind)
    store = await stores.open(kind, url, min_size=2, max_size=4)
    await fill(store, "a", 10)
    async with admin(kind, url) as db:
        assert await db.kill_store_connections() >= 1
        await fill(store, "b", 5)  # a write first
        await all_there(store, "a", 10)
        assert await db.kill_store_connections() >= 1
        assert len(await store.list_sagas(limit=100)) == 15  # a read first
        assert await db.kill_store_connections() >= 1
        claimed = await store.claim_expired("me", T0 + timedelta(hours=2), T0 + timedelta(hours=1), limit=3)
        assert [saga.recovery_attempts for saga, _ in claimed] == [3, 3, 3]  # a claim counts nothing
        assert await db.kill_store_connections() >= 1
        ids = [saga.saga_id for saga, _ in claimed]
        assert await store.renew_leases("me", ids, T0 + timedelta(hours=3), T0) == set(ids)
    await all_there(store, "b", 5)


@pytest.mark.parametrize("kind", SERVERS)
async def test_connection_killed_during_a_save_is_retried(
    stores: Stores, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A save whose connection is killed while it waits for a lock is retried (logged at WARNING) and commits."""
    url = await stores.blank_url(kind)
    store = await stores.open(kind, url, max_size=3)
    await fill(store, "a", 10)
    saga, steps = make_saga("a-03"), make_steps("a-03", 3)
    saga.status, saga.cost = SagaStatus.SUCCESS, 7.5
    for row in steps:
        row.status, row.result = StepStatus.SUCCESS, {"after": "the kill"}
    caplog.set_level(logging.DEBUG, logger="saga_runtime")
    async with admin(kind, url) as db:
        await db.lock_saga("a-03")
        save = asyncio.ensure_future(store.save(saga, steps))
        try:
            await db.wait_for_a_blocked_store()
            assert await db.kill_store_connections() >= 1
        finally:
            await db.commit()
        await asyncio.wait_for(save, 20)
    assert retries(caplog, "save"), "the save was not retried"
    assert await store.load_saga("a-03") == (as_stored(store, saga), steps)
    for n in (0, 1, 2, 4, 5, 6, 7, 8, 9):
        saga_id = f"a-{n:02d}"
        assert await store.load_saga(saga_id) == (as_stored(store, make_saga(saga_id)), make_steps(saga_id, 2))


@pytest.mark.parametrize("kind", SERVERS)
async def test_without_retries_a_lost_connection_surfaces(
    stores: Stores, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With retry_for=0 a save whose connection is killed raises StoreConnectionError; the next call reconnects."""
    url = await stores.blank_url(kind)
    store = await stores.open(kind, url, retry_for=0)
    await fill(store, "a", 2)
    caplog.set_level(logging.DEBUG, logger="saga_runtime")
    changed = make_saga("a-01", status=SagaStatus.COMPENSATING)
    async with admin(kind, url) as db:
        await db.lock_saga("a-01")
        save = asyncio.ensure_future(store.save(changed, []))
        try:
            await db.wait_for_a_blocked_store()
            assert await db.kill_store_connections() >= 1
        finally:
            await db.commit()
        with pytest.raises(StoreConnectionError) as caught:
            await asyncio.wait_for(save, 20)
    assert caught.value.url == store.url
    assert not retries(caplog, "save")
    await all_there(store, "a", 2)  # nothing written, nothing lost, and the store works again
    await store.save(changed, [])
    assert await store.load_saga("a-01") == (as_stored(store, changed), make_steps("a-01", 2))


async def test_sqlite_reopens_a_connection_closed_under_it(stores: Stores, caplog: pytest.LogCaptureFixture) -> None:
    """SQLite: the store's connection closed under it is reopened (logged retry); with retry_for=0 it surfaces."""
    url = await stores.blank_url("sqlite")
    store = await stores.open("sqlite", url)
    await fill(store, "a", 3)
    caplog.set_level(logging.DEBUG, logger="saga_runtime")
    await store.dialect._conn.close()  # type: ignore[attr-defined]
    await fill(store, "b", 3)
    assert retries(caplog, "create_saga")
    await all_there(store, "a", 3)
    await store.close()

    strict = await stores.open("sqlite", url, retry_for=0)
    await strict.dialect._conn.close()  # type: ignore[attr-defined]
    with pytest.raises(StoreConnectionError, match="closed"):
        await strict.load_saga("a-00")
    await all_there(strict, "b", 3)  # the next call opens the file again


async def test_a_lost_sqlite_memory_database_is_not_reopened_empty(stores: Stores) -> None:
    """sqlite:///:memory: lives in its connection: once that is closed, calls fail instead of seeing an empty store."""
    store = await stores.open("sqlite", "sqlite:///:memory:")
    await fill(store, "a", 1)
    await store.dialect._conn.close()  # type: ignore[attr-defined]
    for _ in range(2):
        with pytest.raises(StoreError, match="in-memory database"):
            await store.load_saga("a-00")


@asynccontextmanager
async def failing(store: Any, error: Exception, calls: list[float]) -> AsyncIterator[None]:
    """Make every transaction and batch write of `store` fail with `error`, noting when each was attempted."""
    dialect = store.dialect

    class Broken:
        async def __aenter__(self) -> Any:
            calls.append(asyncio.get_running_loop().time())
            raise error

        async def __aexit__(self, *exc_info: object) -> None:
            return None

    async def write_batch(writes: object) -> object:  # (SQLite's batches take the lock without `transaction`)
        calls.append(asyncio.get_running_loop().time())
        raise error

    dialect.transaction = lambda **kwargs: Broken()
    dialect.write_batch = write_batch
    try:
        yield
    finally:
        del dialect.transaction
        del dialect.write_batch


async def test_retries_back_off_and_give_up_after_retry_for(
    stores: Stores, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that stays lost: retries back off (doubling waits), stop after retry_for, and the error says so."""
    monkeypatch.setattr(_sqlstore, "random", SimpleNamespace(uniform=lambda low, high: high))  # no jitter
    store = await stores.open("sqlite", retry_for=0.6)
    caplog.set_level(logging.DEBUG, logger="saga_runtime")
    calls: list[float] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with failing(store, StoreConnectionError("lost the connection", url=store.url), calls):
        with pytest.raises(StoreConnectionError) as caught:
            await store.load_saga("x")
    elapsed = loop.time() - started
    assert 0.6 <= elapsed < 2.0
    assert len(calls) >= 4
    waits = [b - a for a, b in itertools.pairwise(calls)]
    assert waits[0] < waits[1] < waits[2]  # 0.05, 0.1, 0.2 s, ...; the last is cut to the deadline
    assert any("gave up after" in note for note in caught.value.__notes__)
    assert len(retries(caplog, "load_saga")) == len(calls) - 1


@pytest.mark.parametrize(
    "error", [StoreBusyError("busy"), ValueError("not a connection error")], ids=["busy", "value-error"]
)
async def test_only_connection_errors_are_retried(stores: Stores, error: Exception) -> None:
    """Busy (deadlock, lock timeout) and other errors surface at once: the caller decides about those."""
    store = await stores.open("sqlite")
    calls: list[float] = []
    async with failing(store, error, calls):
        with pytest.raises(type(error)):
            await store.save(make_saga("x"), [])
    assert len(calls) == 1


async def test_closing_the_store_stops_its_retries(stores: Stores) -> None:
    """An operation retrying when the store is closed stops with "closed" instead of retrying on."""
    store = await stores.open("sqlite", retry_for=30)
    calls: list[float] = []
    async with failing(store, StoreConnectionError("lost", url=store.url), calls):
        task = asyncio.ensure_future(store.load_saga("x"))
        while len(calls) < 2:  # noqa: ASYNC110 - polls what the patched transaction noted; no event to wait on
            await asyncio.sleep(0.01)
        await store.close()
        with pytest.raises(Exception, match="closed"):
            await asyncio.wait_for(task, 5)


async def test_retry_for_is_an_option(stores: Stores, sql_kind: str) -> None:
    """retry_for defaults to 30 s, is set by keyword or URL query (keyword wins), and refuses negative values."""
    default = await stores.open(sql_kind)
    assert default.retry_for == DEFAULT_RETRY_FOR == 30.0  # type: ignore[attr-defined]
    query = await stores.open(sql_kind, stores.url(sql_kind) + "?retry_for=2.5")
    assert query.retry_for == 2.5  # type: ignore[attr-defined]
    keyword = await stores.open(sql_kind, stores.url(sql_kind) + "?retry_for=2.5", retry_for=0)
    assert keyword.retry_for == 0  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="retry_for"):
        await open_store(stores.url(sql_kind), retry_for=-1)


async def test_the_memory_store_accepts_retry_for() -> None:
    """open_store("memory://", retry_for=...) works (there is no connection to lose), so callers need no branch."""
    async with open_store("memory://", retry_for=5) as store:
        assert await store.load_saga("x") is None


async def test_a_postgres_backend_terminated_between_saves_is_reported_as_a_lost_connection(
    stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    """A save right after its backend was terminated is retried as a lost connection, never logged as a bug."""
    url = await stores.blank_url("postgresql")
    store = await stores.open("postgresql", url, max_size=1)
    await fill(store, "a", 1)
    caplog.set_level(logging.DEBUG)
    async with admin("postgresql", url) as db:
        for _ in range(8):
            assert await db.kill_store_connections() == 1
            await store.save(make_saga("a-00"), make_steps("a-00", 2))  # at once: the server's farewell just came
            await all_there(store, "a", 1)
    logged = [record.getMessage() for record in caplog.records]
    assert not [text for text in logged if "bug" in text or "cannot switch to state" in text], logged
    assert retries(caplog, "save") or retries(caplog, "load_saga"), logged  # each kill was a reconnect
