"""Statements locking several saga rows at once take them in one order (by saga id): two never deadlock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from saga_runtime._storage import _sqlstore
from saga_runtime._storage._batch import Outcome, Write
from saga_runtime._storage._sqlstore import SQLStore
from saga_runtime._storage._sqlwrite import write_of

from .conftest import Stores, make_saga, make_steps
from .test_reconnect import admin

OWNER = "executor-1"  # make_saga's owner
# Long enough for a statement sent meanwhile to reach the lock it waits for, on a loaded machine.
SETTLE = 0.5


IDS = [f"order-{n}" for n in range(3)]


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
@pytest.mark.parametrize(
    ("saved", "held", "renewed", "chunk"),
    [
        pytest.param(IDS[::-1], IDS[1], IDS, None, id="owner-checks-backwards"),
        pytest.param([IDS[2], IDS[0]], IDS[2], IDS, None, id="a-saga-row-then-an-owner-check"),
        # A renewal of many ids goes in chunks, in one transaction: the chunks too in saga id order.
        pytest.param([IDS[1], IDS[0]], IDS[0], IDS[::-1], 1, id="a-renewal-in-chunks"),
    ],
)
async def test_a_batch_of_owner_checked_saves_and_a_lease_renewal_never_deadlock(
    stores: Stores,
    kind: str,
    saved: list[str],
    held: str,
    renewed: list[str],
    chunk: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch of owner-checked saves (its first with a saga row) and a renewal of the same leases both pass."""
    store = await stores.open(kind, wipe=True)
    assert isinstance(store, SQLStore)
    if chunk is not None:
        monkeypatch.setattr(_sqlstore, "_IN_CHUNK", chunk)
    ids = IDS
    for saga_id in ids:
        assert await store.create_saga(make_saga(saga_id), make_steps(saga_id, 1)) is None
    # The batch written through the dialect itself: only so does a test choose a batch's shape and its moment.
    dialect: Any = store._dialect
    writes = [write_of(store._codec, "save", make_saga(saved[0]), [], owner=OWNER)]
    writes += [Write("save", saga_id, None, [], owner=OWNER) for saga_id in saved[1:]]
    now = datetime.now(UTC)
    async with admin(kind, stores.url(kind)) as db:
        # One saga held by a third transaction: each statement locks what it can, then waits for it.
        await db.fetch("BEGIN")
        await db.fetch(f"SELECT saga_id FROM sagas WHERE saga_id = '{held}' FOR UPDATE")
        batch = asyncio.create_task(dialect.write_batch(writes))
        await asyncio.sleep(SETTLE)
        renewal = asyncio.create_task(store.renew_leases(OWNER, renewed, now + timedelta(seconds=30), now))
        await asyncio.sleep(SETTLE)
        await db.fetch("COMMIT")
        outcomes, renewed = await asyncio.gather(batch, renewal, return_exceptions=True)
    assert outcomes == [Outcome.WRITTEN] * len(saved), outcomes
    assert renewed == set(ids), renewed
