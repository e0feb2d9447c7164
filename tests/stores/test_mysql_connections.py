"""MariaDB/MySQL keeps one spare connection between calls: never at the cost of a caller waiting for the pool.

The spare saves a sequential saga the pool's lock and wake-up task on every write; these tests pin that it is
reused, and what it must not cost: a call that waits for the pool gets a connection, a spare the server ended is
replaced without an error, closing the store returns the spare, and the spare is never kept inside a transaction.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio

from saga_runtime import SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._storage import SagaStore

from .conftest import Stores, make_saga, make_steps
from .test_reconnect import admin

registry = ToolRegistry()


@registry.tool
class Pause:
    """Yield to the event loop, so sagas interleave."""

    async def execute(self, n: int) -> int:
        await asyncio.sleep(0)
        return n

    async def compensate(self, result: int | None) -> None:
        return None


PLAN = [{"tool": "Pause", "args": {"n": n}} for n in range(4)]
_OTHERS = "FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"


async def _connections(url: str) -> int:
    async with admin("mysql", url) as db:
        rows = await db.fetch(f"SELECT COUNT(*) {_OTHERS}")
    return int(rows[0][0])


async def test_a_one_connection_pool_serves_reads_and_writes_of_concurrent_sagas(stores: Stores) -> None:
    """With a pool of one connection, the spare is handed back whenever a call waits: nothing starves."""
    store = await stores.open("mysql", await stores.blank_url("mysql"), min_size=1, max_size=1)
    executor = SagaExecutor(registry, store=store)

    async def reader(seen: list[int]) -> None:
        for _ in range(20):
            seen.append(len(await store.list_sagas(limit=100)))
            await asyncio.sleep(0)

    seen: list[int] = []
    with anyio.fail_after(30):  # a starved call would wait forever
        results = await asyncio.gather(*(executor.run(PLAN) for _ in range(12)), reader(seen), reader(seen))
    assert [r.status for r in results[:12]] == [SagaStatus.SUCCESS] * 12
    assert len(seen) == 40
    assert len(await store.list_sagas(limit=100)) == 12


async def test_sequential_calls_reuse_one_connection_without_asking_the_pool(stores: Stores) -> None:
    """One call after another takes the spare: the pool is asked once, not once per call."""
    store = await stores.open("mysql", await stores.blank_url("mysql"), min_size=1, max_size=2)
    pool = store.dialect._pool  # type: ignore[attr-defined]
    asked: list[int] = []

    class Counting:
        """The store's pool, counting what is asked of it."""

        def __getattr__(self, name: str) -> Any:
            return getattr(pool, name)

        def acquire(self, *args: Any, **kwargs: Any) -> Any:
            asked.append(1)
            return pool.acquire(*args, **kwargs)

    store.dialect._pool = Counting()  # type: ignore[attr-defined]
    executor = SagaExecutor(registry, store=store)
    for _ in range(5):
        assert (await executor.run(PLAN)).status is SagaStatus.SUCCESS
    assert len(asked) <= 1


async def test_a_spare_connection_the_server_ended_is_replaced_without_an_error(stores: Stores) -> None:
    """The spare killed while idle (a restart, an idle timeout): the next call gets a new one, with no retry."""
    url = await stores.blank_url("mysql")
    store = await stores.open("mysql", url, min_size=1, max_size=2, retry_for=0)
    await store.create_saga(make_saga("before"), make_steps("before", 2))
    async with admin("mysql", url) as db:
        assert await db.kill_store_connections() >= 1
    await asyncio.sleep(0.2)  # the client sees the socket close
    await store.create_saga(make_saga("after"), make_steps("after", 2))  # retry_for=0: a dead spare would fail
    assert sorted(s.saga_id for s in await store.list_sagas()) == ["after", "before"]


async def test_closing_the_store_returns_its_spare_connection(stores: Stores) -> None:
    """close() hands the spare back before closing the pool: prompt, and no connection is left open."""
    url = await stores.blank_url("mysql")
    store: SagaStore = await stores.open("mysql", url, min_size=1, max_size=2)
    await store.create_saga(make_saga("kept"), make_steps("kept", 2))
    assert store.dialect._spare is not None  # type: ignore[attr-defined]
    started = time.monotonic()
    await store.close()
    assert time.monotonic() - started < 4  # the pool's close would wait for a connection never given back
    # The server ends a session once it sees its socket close: soon, not at once.
    for _ in range(100):
        if not await _connections(url):
            break
        await asyncio.sleep(0.05)
    assert await _connections(url) == 0


async def test_a_connection_left_in_a_transaction_is_not_kept(stores: Stores) -> None:
    """A call that leaves its connection inside a transaction hands it back to the pool, which drops it."""
    url = await stores.blank_url("mysql")
    store = await stores.open("mysql", url, min_size=1, max_size=2)
    await store.create_saga(make_saga("s1"), make_steps("s1", 2))
    async with store._transaction(begin=False) as tx:  # type: ignore[attr-defined]
        await tx.execute("BEGIN")
        await tx.execute("DELETE FROM steps WHERE saga_id = %s", ["s1"])
    assert store.dialect._spare is None  # type: ignore[attr-defined]
    await asyncio.sleep(0.2)  # the server sees the dropped connection close, and rolls its transaction back
    async with admin("mysql", url) as db:
        assert (await db.fetch("SELECT COUNT(*) FROM steps"))[0][0] == 2


async def test_back_to_back_calls_of_one_task_do_not_starve_a_caller_waiting_for_the_pool(stores: Stores) -> None:
    """A task calling the store back to back hands the connection to a caller waiting for it (a one-connection pool)."""
    store = await stores.open("mysql", await stores.blank_url("mysql"), min_size=1, max_size=1)
    await store.create_saga(make_saga("busy"), [])
    stop = time.monotonic() + 3

    async def busy() -> None:
        while time.monotonic() < stop:
            await store.load_saga("busy")  # (no other wait between the calls)

    async def one_call() -> float:
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await store.list_sagas(limit=1)
        return time.monotonic() - started

    _, waited = await asyncio.gather(busy(), one_call())
    assert waited < 1.5  # starved, it waits until the busy task stops (3 s)


async def test_a_caller_waiting_for_the_pool_is_served_when_a_cancelled_call_drops_its_connection(
    stores: Stores,
) -> None:
    """A call cancelled mid-statement drops its connection; a caller waiting for a one-connection pool gets another."""
    store = await stores.open("mysql", await stores.blank_url("mysql"), min_size=1, max_size=1, retry_for=0)

    async def slow() -> None:
        async with store.dialect.transaction(begin=False) as tx:  # type: ignore[attr-defined]
            await tx.fetch("SELECT SLEEP(2)")

    cut = asyncio.ensure_future(slow())
    await asyncio.sleep(0.2)
    waiting = asyncio.ensure_future(store.list_sagas(limit=1))
    await asyncio.sleep(0.2)
    cut.cancel()
    with anyio.fail_after(5):  # never woken, it would wait until another call gave a connection back
        await waiting
