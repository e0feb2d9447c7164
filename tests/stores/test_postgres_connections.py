"""PostgreSQL keeps one spare connection between calls: never at the cost of a caller waiting for the pool.

The spare saves a sequential saga the pool's release on every write; these tests pin that it is reused, and what it
must not cost: a call that waits for the pool gets a connection, a spare the server closed is replaced without an
error, closing the store returns the spare, and the spare is never kept inside a transaction.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio
import pytest

from saga_runtime import SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._storage import SagaStore
from saga_runtime._storage import _postgres as postgres_dialect

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


async def test_sequential_calls_reuse_one_connection_without_asking_the_pool(stores: Stores) -> None:
    """One call after another takes the spare: the pool is asked once, not once per call."""
    store = await open_store_kept(stores, await stores.blank_url("postgresql"))
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


async def test_a_spare_connection_the_server_closed_is_replaced_without_an_error(stores: Stores) -> None:
    """The spare killed while idle (a restart, an idle timeout): the next call gets a new one, with no retry."""
    url = await stores.blank_url("postgresql")
    store = await stores.open("postgresql", url, min_size=1, max_size=2, retry_for=0)
    await store.create_saga(make_saga("before"), make_steps("before", 2))
    async with admin("postgresql", url) as db:
        killed = await db.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    assert any(ok for (ok,) in killed)
    await asyncio.sleep(0.2)  # the client sees the socket close
    await store.create_saga(make_saga("after"), make_steps("after", 2))  # retry_for=0: a dead spare would fail
    assert sorted(s.saga_id for s in await store.list_sagas()) == ["after", "before"]


async def test_closing_the_store_returns_its_spare_connection(stores: Stores) -> None:
    """close() hands the spare back before closing the pool: prompt, and no connection is left open."""
    url = await stores.blank_url("postgresql")
    store: SagaStore = await open_store_kept(stores, url)
    await store.create_saga(make_saga("kept"), make_steps("kept", 2))
    assert await _connections(url) >= 1
    started = time.monotonic()
    await store.close()
    assert time.monotonic() - started < 4  # a pool waits 5 s for a connection never released
    assert await _connections(url) == 0


async def test_a_connection_left_in_a_transaction_is_not_kept(stores: Stores) -> None:
    """A call that leaves its connection inside a transaction hands it back to the pool, which rolls it back."""
    url = await stores.blank_url("postgresql")
    store = await open_store_kept(stores, url)
    await store.create_saga(make_saga("s1"), make_steps("s1", 2))
    async with store._transaction(begin=False) as tx:  # type: ignore[attr-defined]
        await tx.execute("BEGIN")
        await tx.execute("DELETE FROM steps WHERE saga_id = $1", ["s1"])
    async with admin("postgresql", url) as db:
        idle = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in%'"
        assert (await db.fetch(idle))[0][0] == 0
        assert (await db.fetch("SELECT count(*) FROM steps"))[0][0] == 2


async def open_store_kept(stores: Stores, url: str) -> Any:
    """Open a PostgreSQL store of at most two connections at `url`."""
    return await stores.open("postgresql", url, min_size=1, max_size=2)


async def test_batches_of_writes_make_a_new_connection_look_up_no_type(stores: Stores) -> None:
    """Batches of several writes (rows of every column type, as JSON documents) send only text, which asyncpg
    knows: a new connection asks the server's catalog for no type (a large query per connection otherwise)."""
    store = await stores.open("postgresql", await stores.blank_url("postgresql"), min_size=1, max_size=1)
    sagas = [(make_saga(f"typed-{i}"), make_steps(f"typed-{i}", 3)) for i in range(8)]
    await asyncio.gather(*(store.create_saga(saga, steps) for saga, steps in sagas))
    for _, steps in sagas:
        for row in steps:
            row.attempts += 1
    await asyncio.gather(*(store.save(saga, steps, owner="executor-1") for saga, steps in sagas))
    await asyncio.gather(*(store.save(None, steps[:1], owner="executor-1") for _, steps in sagas))
    async with store._transaction(begin=False) as tx:  # type: ignore[attr-defined]
        prepared = [text for (text,) in await tx.fetch("SELECT statement FROM pg_prepared_statements")]
    assert any("jsonb_array_elements(" in text for text in prepared)  # batches of several writes were written
    assert not [text for text in prepared if "pg_type" in text]


async def test_a_lone_write_after_the_driver_dropped_its_statements_prepares_them_again(stores: Stores) -> None:
    """Statements the driver let go of (its cache dropped: reload_schema_state) are prepared again, not run stale."""
    store = await open_store_kept(stores, await stores.blank_url("postgresql"))
    executor = SagaExecutor(registry, store=store)
    assert (await executor.run(PLAN)).status is SagaStatus.SUCCESS
    spare = store.dialect._spare_con  # type: ignore[attr-defined]
    assert spare is not None
    await spare.reload_schema_state()  # closes every statement it had prepared
    assert len(await store.list_sagas()) == 1  # a statement prepared anew: the closed ones are dropped on the server
    for _ in range(2):
        assert (await executor.run(PLAN)).status is SagaStatus.SUCCESS
    async with store._transaction(begin=False) as tx:  # type: ignore[attr-defined]
        assert (await tx.fetch("SELECT count(*) FROM steps WHERE status = 'SUCCESS'"))[0][0] == 3 * len(PLAN)


async def test_lone_writes_run_their_prepared_statement_directly(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saga written alone runs its writes' statements prepared once through the driver's protocol call."""
    calls: list[str] = []
    direct = postgres_dialect._run_prepared

    def counted(con: Any, state: Any, params: Any) -> Any:
        calls.append(state.name)
        return direct(con, state, params)

    monkeypatch.setattr(postgres_dialect, "_run_prepared", counted)
    store = await open_store_kept(stores, await stores.blank_url("postgresql"))
    executor = SagaExecutor(registry, store=store)
    for _ in range(3):
        assert (await executor.run(PLAN)).status is SagaStatus.SUCCESS
    assert len(calls) >= 2 * len(PLAN)  # the later sagas' writes: each statement prepared by its first run
