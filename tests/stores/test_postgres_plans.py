"""PostgreSQL plans a batch's statement to touch only the rows of its writes, however many sagas are stored."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from saga_runtime._storage._sqlstore import SQLStore

from .conftest import Stores, make_saga, make_steps
from .test_reconnect import admin

OWNER = "executor-1"  # make_saga's owner


async def test_a_batch_of_owner_checked_saves_looks_each_saga_up_by_its_key(stores: Stores) -> None:
    """A batch of saves without a saga row checks each owner through the primary key, not a scan of every saga."""
    url = await stores.blank_url("postgresql")
    store = await stores.open("postgresql", url)
    assert isinstance(store, SQLStore)
    ids = [f"checked-{n}" for n in range(3)]
    for saga_id in ids:
        assert await store.create_saga(make_saga(saga_id), make_steps(saga_id, 2)) is None
    async with admin("postgresql", url) as db:
        # Thousands of other sagas, counted by ANALYZE: enough for a scan of them all to cost more than a join.
        for statement in (
            "CREATE TEMP TABLE filler AS "
            "SELECT s.*, g FROM (SELECT * FROM sagas LIMIT 1) s, generate_series(1, 2000) g",
            "UPDATE filler SET saga_id = 'filler-' || g",
            "ALTER TABLE filler DROP COLUMN g",
            "INSERT INTO sagas SELECT * FROM filler",
            "ANALYZE sagas",
        ):
            await db.fetch(statement)
    dialect: Any = store._dialect
    written: list[tuple[str, Sequence[Any]]] = []
    fetch = dialect._autocommit_fetch

    async def seen(sql: str, params: Sequence[Any]) -> list[Any]:
        written.append((sql, params))
        return list(await fetch(sql, params))

    dialect._autocommit_fetch = seen
    # The first save goes alone at once; the two arriving meanwhile share the next batch.
    await asyncio.gather(*(store.save(None, make_steps(saga_id, 2), owner=OWNER) for saga_id in ids))
    batches = [(sql, params) for sql, params in written if sql.startswith("WITH checked")]
    assert len(batches) == 1, f"expected one batch of owner checks, sent: {[sql for sql, _ in written]}"
    ((sql, params),) = batches
    async with admin("postgresql", url) as db:
        plan = "\n".join(row[0] for row in await db.fetch(f"EXPLAIN {sql}", *params))
    assert "Index Scan using sagas_pkey" in plan, plan
    assert "Seq Scan on sagas" not in plan, plan
