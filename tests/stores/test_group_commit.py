"""Group commit, pinned on every store: concurrent saves share commits, and each still gets its own outcome.

On the SQL stores the batches are observed (and held) by wrapping the store's `_write_batch`, the one call that
writes a batch; the memory store has no batches, and must give the same outcomes.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

import pytest

from saga_runtime._exceptions import LeaseLostError, StoreBusyError, StoreError
from saga_runtime._records import SagaStatus, StepRow, StepStatus, idempotency_key
from saga_runtime._storage import SagaStore, _batch
from saga_runtime._storage._sqlstore import SQLStore

from .conftest import Stores, as_stored, make_saga, make_steps, sqlite_file
from .test_reconnect import admin, retries

OWNER = "executor-1"  # make_saga's owner


class Batches:
    """Record the batches a SQL store writes (the saga ids of their writes), holding the n-th at `gates[n]`."""

    def __init__(self, store: SagaStore, holds: int = 0) -> None:
        self.seen: list[list[str]] = []
        self.tasks: list[asyncio.Task[Any] | None] = []
        self.gates = [asyncio.Event() for _ in range(holds)]
        self.entered = [asyncio.Event() for _ in range(holds)]
        self.sql = isinstance(store, SQLStore)
        if not self.sql:
            return
        original = store._write_batch  # type: ignore[attr-defined]

        async def write_batch(writes: Sequence[Any]) -> Any:
            n = len(self.seen)
            self.seen.append([write.saga_id for write in writes])
            self.tasks.append(asyncio.current_task())
            if n < len(self.gates):
                self.entered[n].set()
                await self.gates[n].wait()
            return await original(writes)

        store._write_batch = write_batch  # type: ignore[attr-defined]

    async def held(self, n: int) -> None:
        """Return once the n-th batch is being written (and held); at once on the memory store."""
        if self.sql:
            await asyncio.wait_for(self.entered[n].wait(), 10)

    def release(self, n: int) -> None:
        """Let the n-th batch go on."""
        if self.gates:
            self.gates[n].set()


async def create(store: SagaStore, count: int, prefix: str = "g") -> list[str]:
    """Create `count` sagas owned by OWNER with two steps each; return their ids."""
    ids = [f"{prefix}-{n:02d}" for n in range(count)]
    for saga_id in ids:
        assert await store.create_saga(make_saga(saga_id), make_steps(saga_id, 2)) is None
    return ids


def finished(saga_id: str) -> list[StepRow]:
    """Return a saga's two steps, finished with a result naming the saga."""
    rows = make_steps(saga_id, 2)
    for row in rows:
        row.status, row.result = StepStatus.SUCCESS, {"saga": saga_id}
    return rows


async def is_finished(store: SagaStore, saga_id: str) -> bool:
    """Tell whether a saga's steps are stored as `finished` wrote them."""
    loaded = await store.load_saga(saga_id)
    return loaded is not None and loaded[1] == finished(saga_id)


async def is_untouched(store: SagaStore, saga_id: str) -> bool:
    """Tell whether a saga is stored exactly as `create` stored it."""
    return await store.load_saga(saga_id) == (as_stored(store, make_saga(saga_id)), make_steps(saga_id, 2))


async def test_concurrent_saves_share_commits_and_all_are_durable(store: SagaStore) -> None:
    """Thirty concurrent saves all commit, in fewer transactions than saves (SQL stores batch them)."""
    ids = await create(store, 30)
    batches = Batches(store)
    await asyncio.gather(*(store.save(None, finished(saga_id), owner=OWNER) for saga_id in ids))
    for saga_id in ids:
        assert await is_finished(store, saga_id), saga_id
    if batches.sql:
        assert sorted(saga_id for batch in batches.seen for saga_id in batch) == ids  # each written once
        assert len(batches.seen) < len(ids)
        assert max(len(batch) for batch in batches.seen) > 1


async def test_a_lone_save_is_written_in_its_callers_task(stores: Stores, sql_kind: str) -> None:
    """A save at an idle store goes straight through: written alone, in the caller's task, no flusher started."""
    store = await stores.open(sql_kind, wipe=True)
    (saga_id,) = await create(store, 1)
    batches = Batches(store)
    await store.save(None, finished(saga_id))
    assert batches.seen == [[saga_id]]
    assert batches.tasks == [asyncio.current_task()]
    assert await is_finished(store, saga_id)


async def test_refused_saves_in_a_batch_fail_alone(store: SagaStore) -> None:
    """In one batch, a save with a stale owner and one with a duplicate idempotency key fail; the others commit."""
    ids = await create(store, 10)
    batches = Batches(store, holds=1)
    first = asyncio.ensure_future(store.save(None, finished(ids[0]), owner=OWNER))
    await batches.held(0)  # the store is busy: the saves below gather into one batch
    thief = finished(ids[9])
    thief[1].idempotency_key = idempotency_key(ids[0], "step-0")  # another saga's step holds it
    saves = [store.save(None, finished(saga_id), owner=OWNER) for saga_id in ids[1:8]]
    saves.append(store.save(None, finished(ids[8]), owner="executor-stale"))
    saves.append(store.save(make_saga(ids[9], status=SagaStatus.SUCCESS), thief, owner=OWNER))
    pending = asyncio.gather(*saves, return_exceptions=True)
    await asyncio.sleep(0.05)
    batches.release(0)
    await first
    outcomes = await asyncio.wait_for(pending, 20)
    assert outcomes[:7] == [None] * 7
    assert isinstance(outcomes[7], LeaseLostError)
    assert outcomes[7].saga_id == ids[8]
    assert isinstance(outcomes[8], StoreError)
    assert not isinstance(outcomes[8], LeaseLostError)
    for saga_id in ids[:8]:
        assert await is_finished(store, saga_id), saga_id
    assert await is_untouched(store, ids[8])
    assert await is_untouched(store, ids[9])
    if batches.sql:
        assert sorted(batches.seen[1]) == ids[1:]  # the refused two shared a batch with the others


async def test_a_save_cancelled_in_its_batch_does_not_break_the_others(store: SagaStore) -> None:
    """A caller cancelled while its batch is being written leaves alone: the batch commits for the others."""
    ids = await create(store, 6)
    batches = Batches(store, holds=2)
    first = asyncio.ensure_future(store.save(None, finished(ids[0])))
    await batches.held(0)
    saves = [asyncio.ensure_future(store.save(None, finished(saga_id))) for saga_id in ids[1:]]
    await asyncio.sleep(0.01)
    batches.release(0)
    await first
    await batches.held(1)  # the five are in a batch now, held
    saves[2].cancel()
    await asyncio.sleep(0.01)
    batches.release(1)
    outcomes = await asyncio.wait_for(asyncio.gather(*saves, return_exceptions=True), 20)
    if batches.sql:  # the memory store's saves were done before the cancellation
        assert isinstance(outcomes[2], asyncio.CancelledError)
    assert [outcomes[n] for n in (0, 1, 3, 4)] == [None] * 4
    for saga_id in (ids[0], ids[1], ids[2], ids[4], ids[5]):
        assert await is_finished(store, saga_id), saga_id
    await store.save(None, finished(ids[3]))  # the store, and that saga, go on
    assert await is_finished(store, ids[3])


async def test_a_save_cancelled_in_the_queue_is_dropped(stores: Stores) -> None:
    """SQLite (one writer): a save cancelled before its batch was taken is never written; the others are."""
    store = await stores.open("sqlite")
    ids = await create(store, 4)
    batches = Batches(store, holds=1)
    first = asyncio.ensure_future(store.save(None, finished(ids[0])))
    await batches.held(0)
    saves = [asyncio.ensure_future(store.save(None, finished(saga_id))) for saga_id in ids[1:]]
    await asyncio.sleep(0.01)
    saves[1].cancel()
    batches.release(0)
    outcomes = await asyncio.wait_for(asyncio.gather(first, *saves, return_exceptions=True), 20)
    assert isinstance(outcomes[2], asyncio.CancelledError)
    assert batches.seen == [[ids[0]], [ids[1], ids[3]]]
    assert await is_untouched(store, ids[2])
    for saga_id in (ids[0], ids[1], ids[3]):
        assert await is_finished(store, saga_id), saga_id


async def test_close_fails_queued_saves_and_waits_for_those_being_written(stores: Stores, sql_kind: str) -> None:
    """close() with saves pending: each save either commits or fails with "closed"; close() itself returns."""
    store = await stores.open(sql_kind, wipe=True)
    ids = await create(store, 5)
    batches = Batches(store, holds=1)
    saves = [asyncio.ensure_future(store.save(None, finished(saga_id))) for saga_id in ids]
    await batches.held(0)
    closing = asyncio.ensure_future(store.close())
    await asyncio.sleep(0.05)
    assert not closing.done()  # it waits for the batch being written
    batches.release(0)
    await asyncio.wait_for(closing, 20)
    outcomes = await asyncio.wait_for(asyncio.gather(*saves, return_exceptions=True), 20)
    assert outcomes[0] is None  # the one being written when close() was called committed
    for outcome in outcomes[1:]:
        assert outcome is None or (isinstance(outcome, StoreError) and "closed" in str(outcome)), outcome
    with pytest.raises(StoreError, match="closed"):
        await store.save(None, finished(ids[0]))
    reopened = await stores.open(sql_kind)
    assert await is_finished(reopened, ids[0])
    for saga_id, outcome in zip(ids[1:], outcomes[1:], strict=True):
        assert await (is_finished if outcome is None else is_untouched)(reopened, saga_id), saga_id


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_a_batch_that_loses_its_connection_is_retried(
    stores: Stores, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch whose connection is killed while it waits for a lock is retried whole; every save of it commits."""
    url = await stores.blank_url(kind)
    store = await stores.open(kind, url, max_size=3)
    ids = await create(store, 5)
    caplog.set_level(logging.DEBUG, logger="saga_runtime")  # each retry is at DEBUG
    batches = Batches(store, holds=1)
    async with admin(kind, url) as db:
        await db.lock_saga(ids[3])
        first = asyncio.ensure_future(store.save(None, finished(ids[0]), owner=OWNER))
        await batches.held(0)
        saves = asyncio.gather(*(store.save(None, finished(saga_id), owner=OWNER) for saga_id in ids[1:]))
        await asyncio.sleep(0.05)
        batches.release(0)
        await first
        try:
            await db.wait_for_a_blocked_store()
            assert await db.kill_store_connections() >= 1
        finally:
            await db.commit()
        await asyncio.wait_for(saves, 20)
    assert retries(caplog, "save"), "the batch was not retried"
    assert sorted(batches.seen[1]) == ids[1:]
    for saga_id in ids:
        assert await is_finished(store, saga_id), saga_id


async def test_a_sqlite_batch_that_finds_the_database_locked_fails_once(stores: Stores) -> None:
    """SQLite: a batch refused the write lock (another process holds it) fails its saves at once, not one by one."""
    url = stores.url("sqlite")
    store = await stores.open("sqlite", url, busy_timeout=0.2)
    ids = await create(store, 6)
    batches = Batches(store)
    holder = sqlite3.connect(sqlite_file(url), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(store.save(None, finished(saga_id)) for saga_id in ids), return_exceptions=True), 20
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert all(isinstance(outcome, StoreBusyError) for outcome in outcomes), outcomes
    assert len(batches.seen) == 2  # the first save alone, then the other five together: no write retried alone
    for saga_id in ids:
        assert await is_untouched(store, saga_id), saga_id


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_many_queued_saves_go_as_two_batches_at_once_on_a_server(stores: Stores, kind: str) -> None:
    """On a server store, saves queued behind a lone write are written as two batches at the same time, not one."""
    store = await stores.open(kind, wipe=True)
    ids = await create(store, 31)
    batches = Batches(store, holds=3)
    first = asyncio.ensure_future(store.save(None, finished(ids[0]), owner=OWNER))
    await batches.held(0)  # the lone write, held: the others queue behind it
    rest = [asyncio.ensure_future(store.save(None, finished(saga_id), owner=OWNER)) for saga_id in ids[1:]]
    await batches.held(1)
    await batches.held(2)  # both batches of the queue are being written while neither has ended
    assert sorted(len(batch) for batch in batches.seen[1:]) == [15, 15]
    for n in range(3):
        batches.release(n)
    await asyncio.wait_for(asyncio.gather(first, *rest), 20)
    for saga_id in ids:
        assert await is_finished(store, saga_id), saga_id


def save_owned(store: SagaStore, saga_id: str) -> asyncio.Future[None]:
    """Start a save of a saga's finished steps under OWNER, in a task of its own."""
    return asyncio.ensure_future(store.save(None, finished(saga_id), owner=OWNER))


async def save_twice(store: SagaStore, saga_id: str) -> None:
    """Save a saga's finished steps under OWNER twice, one save after the other."""
    await store.save(None, finished(saga_id), owner=OWNER)
    await store.save(None, finished(saga_id), owner=OWNER)


async def more_batches_than(batches: Batches, count: int) -> None:
    """Return once more than `count` batches were seen (at most about 2 s)."""
    for _ in range(200):
        if len(batches.seen) > count:
            return
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_few_saves_arriving_while_many_are_written_wait_and_join_the_next_writes(
    stores: Stores, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a server store, two saves arriving while 32 are written wait, then join a batch's callers' next saves."""
    monkeypatch.setattr(_batch, "GATHER_SECONDS", 60.0)  # the wait watched here is not cut short
    store = await stores.open(kind, wipe=True)
    ids = await create(store, 35)
    batches = Batches(store, holds=3)

    first = save_owned(store, ids[0])
    await batches.held(0)  # the lone write, held: the next 32 queue behind it and go as two batches of 16
    halves = [asyncio.ensure_future(save_twice(store, saga_id)) for saga_id in ids[1:33]]
    await batches.held(1)
    await batches.held(2)
    late = [save_owned(store, saga_id) for saga_id in ids[33:]]
    await asyncio.sleep(0.05)
    assert len(batches.seen) == 3  # the two late saves wait: no batch of their own
    batches.release(1)
    await more_batches_than(batches, 3)
    assert sorted(batches.seen[3]) == sorted([*batches.seen[1], *ids[33:]])  # the late two and the second saves
    batches.release(0)
    batches.release(2)
    await asyncio.wait_for(asyncio.gather(first, *halves, *late), 20)
    for saga_id in ids:
        assert await is_finished(store, saga_id), saga_id


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_after_a_batch_of_a_few_the_next_write_of_its_callers_goes_alone_at_once(
    stores: Stores, kind: str
) -> None:
    """On a server store, after a batch of five commits, its callers' first next save goes alone in its own task."""
    store = await stores.open(kind, wipe=True)
    ids = await create(store, 6)
    batches = Batches(store, holds=2)
    callers: dict[str, asyncio.Task[Any] | None] = {}

    async def twice(saga_id: str) -> None:
        await store.save(None, finished(saga_id), owner=OWNER)
        callers[saga_id] = asyncio.current_task()
        await store.save(None, finished(saga_id), owner=OWNER)

    first = save_owned(store, ids[0])
    await batches.held(0)
    rest = [asyncio.ensure_future(twice(saga_id)) for saga_id in ids[1:]]
    await batches.held(1)  # the five, in one batch
    batches.release(0)
    batches.release(1)
    await asyncio.wait_for(asyncio.gather(first, *rest), 20)
    assert sorted(batches.seen[1]) == ids[1:]
    alone = batches.seen[2]
    assert len(alone) == 1
    assert batches.tasks[2] is callers[alone[0]]
    assert sorted(saga_id for batch in batches.seen[2:] for saga_id in batch) == ids[1:]


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_the_flusher_of_a_small_batch_leaves_a_few_saves_to_a_batch_of_many(
    stores: Stores, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a server store, while 32 saves are written, a batch of eight leaves two waiting saves to one of many."""
    monkeypatch.setattr(_batch, "GATHER_SECONDS", 60.0)  # the wait watched here is not cut short
    store = await stores.open(kind, wipe=True)
    ids = await create(store, 43)
    batches = Batches(store, holds=4)

    first = save_owned(store, ids[0])
    await batches.held(0)
    halves = [asyncio.ensure_future(save_twice(store, saga_id)) for saga_id in ids[1:33]]
    await batches.held(1)
    await batches.held(2)  # 32 being written
    eight = [save_owned(store, saga_id) for saga_id in ids[33:41]]  # eight queued: a batch of their own
    await batches.held(3)
    assert sorted(batches.seen[3]) == ids[33:41]
    late = [save_owned(store, saga_id) for saga_id in ids[41:]]
    batches.release(3)
    await asyncio.wait_for(asyncio.gather(*eight), 20)
    await asyncio.sleep(0.05)
    assert len(batches.seen) == 4  # the two late saves still wait
    batches.release(1)
    await more_batches_than(batches, 4)
    assert sorted(batches.seen[4]) == sorted([*batches.seen[1], *ids[41:]])
    batches.release(0)
    batches.release(2)
    await asyncio.wait_for(asyncio.gather(first, *halves, *late), 20)
    for saga_id in ids:
        assert await is_finished(store, saga_id), saga_id


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_saves_waiting_for_a_batch_that_does_not_end_go_after_a_bound(stores: Stores, kind: str) -> None:
    """On a server store, a few saves waiting while 32 are being written go on a free slot once GATHER_SECONDS pass."""
    store = await stores.open(kind, wipe=True)
    ids = await create(store, 35)
    batches = Batches(store, holds=3)
    first = save_owned(store, ids[0])
    await batches.held(0)
    many = [save_owned(store, saga_id) for saga_id in ids[1:33]]
    await batches.held(1)
    await batches.held(2)  # 32 being written, held (a row lock elsewhere, say)
    late = [save_owned(store, saga_id) for saga_id in ids[33:]]
    await asyncio.wait_for(asyncio.gather(*late), 10)  # written while the batches of many are still held
    assert len(batches.seen) == 4
    assert sorted(batches.seen[3]) == ids[33:]
    for n in range(3):
        batches.release(n)
    await asyncio.wait_for(asyncio.gather(first, *many), 20)
    for saga_id in ids:
        assert await is_finished(store, saga_id), saga_id
