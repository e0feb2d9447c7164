"""PostgreSQL keeps one spare connection between calls: never at the cost of a caller waiting for the pool.

The spare saves a sequential saga the pool's release on every write; these tests pin what it must not cost: a
call that waits for the pool gets a connection, closing the store returns the spare, and the spare is never left
inside a transaction.
"""

from __future__ import annotations

import asyncio

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


async def _connections(url: str) -> int:
    async with admin("postgresql", url) as db:
        rows = await db.fetch(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    return int(rows[0][0])


async def test_a_one_connection_pool_serves_reads_and_writes_of_concurrent_sagas(stores: Stores) -> None:
    """With a pool of one connection, the spare is handed back whenever a call waits: nothing starves."""
    store = await stores.open("postgresql", await stores.blank_url("postgresql"), min_size=1, max_size=1)
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


async def test_closing_the_store_returns_its_spare_connection(stores: Stores) -> None:
    """close() hands the spare back before closing the pool: prompt, and no connection is left open."""
    url = await stores.blank_url("postgresql")
    store: SagaStore = await open_store_kept(stores, url)
    saga = make_saga("kept")
    await store.create_saga(saga, make_steps("kept", 2))
    assert await _connections(url) >= 1
    with anyio.fail_after(4):  # under the 5 s a pool waits for a connection never released
        await store.close()
    assert await _connections(url) == 0


async def test_the_spare_connection_is_never_left_in_a_transaction(stores: Stores) -> None:
    """A transaction that fails midway is rolled back: the next call on the spare sees no half-done work."""
    url = await stores.blank_url("postgresql")
    store = await open_store_kept(stores, url)
    await store.create_saga(make_saga("s1"), make_steps("s1", 2))
    transaction = store._transaction  # type: ignore[attr-defined]
    try:
        async with transaction(begin=True) as tx:
            await tx.execute("DELETE FROM steps WHERE saga_id = $1", ["s1"])
            raise RuntimeError("the caller fails inside the transaction")
    except RuntimeError:
        pass
    async with admin("postgresql", url) as db:
        idle = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in%'"
        assert (await db.fetch(idle))[0][0] == 0
    loaded = await store.load_saga("s1")
    assert loaded is not None
    assert len(loaded[1]) == 2


async def open_store_kept(stores: Stores, url: str) -> SagaStore:
    """Open a PostgreSQL store of at most two connections at `url`."""
    return await stores.open("postgresql", url, min_size=1, max_size=2)
