"""Writes whatever their shape: the statement a store picks for a batch (scalars or arrays, a key left out of an
update) changes no outcome."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from saga_runtime import LeaseLostError
from saga_runtime._exceptions import StoreError
from saga_runtime._records import SagaStatus, idempotency_key
from saga_runtime._storage import SagaStore
from saga_runtime._storage._mysql import MySQLDialect
from saga_runtime._storage._sqlstore import SQLStore

from .conftest import Stores, as_stored, make_saga, make_steps


async def test_a_saved_step_keeps_a_changed_idempotency_key(store: SagaStore) -> None:
    """A saved step's new idempotency key is stored; another step's key fails the save, which writes nothing."""
    saga, steps = make_saga("keys"), make_steps("keys", 2)
    await store.create_saga(saga, steps)
    steps[0].idempotency_key = "renewed-key"
    steps[0].attempts = 2
    await store.save(None, [steps[0]])
    assert await store.load_saga("keys") == (as_stored(store, saga), steps)
    before = await store.load_saga("keys")
    thief = steps[1].copy()
    thief.idempotency_key = "renewed-key"
    thief.attempts = 7
    with pytest.raises(StoreError):
        await store.save(None, [thief])
    assert await store.load_saga("keys") == before
    assert idempotency_key("keys", "step-1") == steps[1].idempotency_key


async def test_an_owned_save_mixing_kept_and_changed_keys_stores_every_row(store: SagaStore) -> None:
    """An owner's save of rows keeping their key, one changing it and a new one stores all; a stale owner's, none."""
    saga, steps = make_saga("mixed-keys"), make_steps("mixed-keys", 3)
    saga.owner = "me"
    await store.create_saga(saga, steps[:2])
    steps[0].attempts = 2
    steps[1].idempotency_key = "mixed-renewed"
    await store.save(None, steps, owner="me")
    assert await store.load_saga("mixed-keys") == (as_stored(store, saga), steps)
    stale = [row.copy() for row in steps]
    stale[0].idempotency_key = "stale-renewed"
    stale[2].attempts = 9
    with pytest.raises(LeaseLostError):
        await store.save(None, stale, owner="someone else")
    assert await store.load_saga("mixed-keys") == (as_stored(store, saga), steps)


@pytest.mark.parametrize("count", [1, 2, 32, 33, 80])
async def test_batches_of_every_size_round_trip(store: SagaStore, count: int) -> None:
    """Creates and owner-conditional saves of 1 to 80 step rows store every row exactly, and refuse a stale owner."""
    saga, steps = make_saga(f"size-{count}"), make_steps(f"size-{count}", count)
    saga.owner = "me"
    assert await store.create_saga(saga, steps) is None
    for row in steps:
        row.attempts += 1
    saga.status = SagaStatus.SUCCESS
    await store.save(saga, steps, owner="me")
    assert await store.load_saga(saga.saga_id) == (as_stored(store, saga), steps)
    for row in steps:
        row.attempts += 1
    await store.save(None, steps, owner="me")
    assert await store.load_saga(saga.saga_id) == (as_stored(store, saga), steps)
    stale = [row.copy() for row in steps]
    for row in stale:
        row.attempts = 99
    with pytest.raises(LeaseLostError):
        await store.save(None, stale, owner="someone else")
    assert await store.load_saga(saga.saga_id) == (as_stored(store, saga), steps)


async def test_concurrent_writes_of_many_sagas_all_land(stores: Stores, kind: str) -> None:
    """Many sagas created and saved at once (batches past the scalar-statement size) are all stored exactly."""
    store = await stores.open(kind, wipe=True)
    sagas = [(make_saga(f"many-{i}"), make_steps(f"many-{i}", 3)) for i in range(60)]
    await asyncio.gather(*(store.create_saga(saga, steps) for saga, steps in sagas))
    for _, steps in sagas:
        for row in steps:
            row.attempts += 1
    await asyncio.gather(*(store.save(saga, steps) for saga, steps in sagas))
    for saga, steps in sagas:
        assert await store.load_saga(saga.saga_id) == (as_stored(store, saga), steps)


async def test_awkward_values_in_batches_of_owner_checked_saves_land_exactly(stores: Stores, kind: str) -> None:
    """Owner-conditional saves of many sagas at once (batches) store text with quotes, backslashes, newlines,
    JSON-looking and non-ASCII characters, extreme numbers and times exactly; a stale owner's save among them
    writes nothing and fails alone."""
    store = await stores.open(kind, wipe=True)
    awkward = 'a "quoted" \\ back\\slash\nnew line, {"json": [1]} ünï ✓ 𝄞 \t'
    sagas = []
    for i in range(12):
        saga, steps = make_saga(f"odd-{i}"), make_steps(f"odd-{i}", 2)
        saga.owner, saga.error, saga.tokens, saga.cost = "me", awkward, 2**62, 1e-300 * (i + 1)
        steps[0].error, steps[0].result = awkward, {"text": awkward, "big": 2**53 + 1, "tiny": 5e-324}
        steps[1].attempts = 2**31 - 1
        sagas.append((saga, steps))
        assert await store.create_saga(saga, steps) is None
    for n, (saga, steps) in enumerate(sagas):
        steps = [row.copy() for row in steps]  # the rows created stay as they are (a memory store keeps them)
        for row in steps:
            row.attempts -= 1
            row.compensation_error = awkward
        sagas[n] = (saga, steps)
    saves = [store.save(None, steps, owner="me" if i else "someone else") for i, (_, steps) in enumerate(sagas)]
    outcomes = await asyncio.gather(*saves, return_exceptions=True)
    assert isinstance(outcomes[0], LeaseLostError)
    assert outcomes[1:] == [None] * 11
    stored = await store.load_saga("odd-0")
    assert stored is not None
    assert stored[1][0].compensation_error == "TimeoutError"  # as created: the stale owner's save wrote nothing
    for saga, steps in sagas[1:]:
        assert await store.load_saga(saga.saga_id) == (as_stored(store, saga), steps)


async def test_a_lone_write_on_mysql_is_one_statement_with_one_result(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MariaDB/MySQL: a lone owner-conditional save of step rows is one statement with one result: on MariaDB a
    compound statement, its own transaction (plain VALUES under the saga row's lock)."""
    import aiomysql

    store = await stores.open("mysql", wipe=True)
    saga, steps = make_saga("lone"), make_steps("lone", 2)
    saga.owner = "me"
    await store.create_saga(saga, [])
    sent: list[str] = []
    query = aiomysql.Connection.query

    async def counted_query(self: Any, sql: str, unbuffered: bool = False) -> int:
        sent.append(sql)
        return int(await query(self, sql, unbuffered))

    # Counted where statements leave the client, whichever path of the dialect sends them.
    monkeypatch.setattr(aiomysql.Connection, "query", counted_query)
    await store.save(None, steps, owner="me")
    assert len(sent) == 1
    assert isinstance(store, SQLStore)
    assert isinstance(store.dialect, MySQLDialect)
    async with store.dialect.transaction(begin=False) as tx:
        version = str((await tx.fetch("SELECT VERSION()"))[0][0])
    compound = store.dialect._compound
    assert compound == ("mariadb" in version.lower())
    assert sent[0].startswith("BEGIN NOT ATOMIC START TRANSACTION; IF EXISTS") == compound
    assert sent[0].count("START TRANSACTION") == compound
    assert sent[0].count("; COMMIT; END") == compound
    with pytest.raises(LeaseLostError):
        await store.save(None, steps, owner="someone else")
    assert await store.load_saga("lone") == (as_stored(store, saga), steps)


async def test_a_lone_owned_write_on_mysql_breaking_a_key_writes_nothing_and_keeps_its_connection(
    stores: Stores,
) -> None:
    """MariaDB/MySQL: a lone owner-conditional save of steps whose second row takes the first's idempotency key
    fails whole, its transaction is rolled back (the saga row's lock let go), and its connection stays in use."""
    store = await stores.open("mysql", wipe=True)
    assert isinstance(store, SQLStore)
    assert isinstance(store.dialect, MySQLDialect)
    saga = make_saga("thief")
    saga.owner = "me"
    await store.create_saga(saga, [])
    spare = store.dialect._spare
    assert spare is not None
    first, thief = make_steps("thief", 2)
    thief.idempotency_key = first.idempotency_key
    with pytest.raises(StoreError):
        await store.save(saga, [first, thief], owner="me")
    assert store.dialect._spare is spare
    if store.dialect._compound:  # MariaDB: the server's own word (an error's packet carries no status)
        async with store.dialect.transaction(begin=False) as tx:
            assert (await tx.fetch("SELECT @@in_transaction"))[0][0] == 0
    assert await store.load_saga("thief") == (as_stored(store, saga), [])
    steps = make_steps("thief", 2)
    await store.save(None, steps, owner="me")
    assert await store.load_saga("thief") == (as_stored(store, saga), steps)


@pytest.mark.parametrize("compound", [True, False], ids=["compound", "statements"])
async def test_lone_conditional_writes_on_mysql_in_either_form(stores: Stores, compound: bool) -> None:
    """MariaDB/MySQL: lone conditional writes with steps (a create, an owner's steps, its saga row with steps) land
    exactly, and write nothing when the id is taken or the owner lost, as compound statements (MariaDB) and as
    MySQL's statements (run here on whichever server the tests have)."""
    store = await stores.open("mysql", wipe=True)
    assert isinstance(store, SQLStore)
    assert isinstance(store.dialect, MySQLDialect)
    if compound and not store.dialect._compound:
        pytest.skip("the server is MySQL: no compound statement outside a stored program")
    store.dialect._compound = compound
    saga, steps = make_saga("either"), make_steps("either", 3)
    saga.owner = "me"
    assert await store.create_saga(saga, steps[:1]) is None
    assert await store.create_saga(make_saga("either"), steps[1:]) is not None  # taken: nothing written
    assert await store.load_saga("either") == (as_stored(store, saga), steps[:1])
    steps[0].attempts = 4
    await store.save(None, steps[:2], owner="me")
    with pytest.raises(LeaseLostError):
        await store.save(None, [steps[2]], owner="someone else")
    assert await store.load_saga("either") == (as_stored(store, saga), steps[:2])
    saga.status = SagaStatus.SUCCESS
    await store.save(saga, steps, owner="me")
    assert await store.load_saga("either") == (as_stored(store, saga), steps)
    stale = make_saga("either", status=SagaStatus.COMPENSATED)
    with pytest.raises(LeaseLostError):
        await store.save(stale, [steps[0].copy()], owner="someone else")
    assert await store.load_saga("either") == (as_stored(store, saga), steps)


async def test_step_times_of_any_year_round_trip_exactly(store: SagaStore) -> None:
    """Step times centuries from 1970 (past a float's exact microseconds) are stored exactly by creates and saves."""
    saga, steps = make_saga("far-times"), make_steps("far-times", 2)
    saga.owner = "me"
    steps[0].started_at = datetime(1650, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    steps[0].finished_at = datetime(2300, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    await store.create_saga(saga, steps)
    assert await store.load_saga("far-times") == (as_stored(store, saga), steps)
    steps[1].started_at = datetime(2299, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    steps[1].compensated_at = datetime(1655, 6, 7, 8, 9, 10, 111111, tzinfo=UTC)
    steps[1].attempts = 5
    await store.save(None, [steps[1]], owner="me")
    assert await store.load_saga("far-times") == (as_stored(store, saga), steps)
