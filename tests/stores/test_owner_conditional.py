"""Owner-conditional saves, pinned on every store: `save(..., owner=...)` writes only for the saga's lease owner.

A worker whose event loop stalled past its lease must not write (and then run a step) once another executor took the
saga over: its save is checked against the stored owner in the same transaction as the write, and refused whole.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from saga_runtime._exceptions import LeaseLostError
from saga_runtime._records import SagaRow, SagaStatus, StepRow, StepStatus
from saga_runtime._storage import SagaStore

from .conftest import Stores, as_stored, make_saga, make_steps
from .test_reconnect import admin

OWNER = "executor-1"  # make_saga's owner


async def stored(store: SagaStore, saga_id: str, steps: int = 3) -> tuple[SagaRow, list[StepRow]]:
    """Create a saga owned by OWNER with `steps` steps; return what was stored."""
    saga, rows = make_saga(saga_id), make_steps(saga_id, steps)
    assert await store.create_saga(saga.copy(), [row.copy() for row in rows]) is None
    return saga, rows


def changed(saga: SagaRow, rows: list[StepRow]) -> tuple[SagaRow, list[StepRow]]:
    """Return copies of a saga's rows with the saga finished and every step's result replaced."""
    saga = saga.copy()
    saga.status, saga.cost, saga.error = SagaStatus.SUCCESS, 9.5, None
    rows = [row.copy() for row in rows]
    for row in rows:
        row.status, row.result, row.attempts = StepStatus.SUCCESS, {"written": "by the owner"}, 7
    return saga, rows


async def test_a_save_by_the_owner_writes(store: SagaStore) -> None:
    """save(owner=the stored owner) writes the saga row and the steps, as an unconditional save does."""
    saga, rows = await stored(store, "own-1")
    new_saga, new_rows = changed(saga, rows)
    await store.save(new_saga.copy(), [row.copy() for row in new_rows], owner=OWNER)
    assert await store.load_saga("own-1") == (as_stored(store, new_saga), new_rows)
    more = make_steps("own-1", 4)[3]  # a step added (steps only, no saga row)
    await store.save(None, [more.copy()], owner=OWNER)
    assert await store.load_saga("own-1") == (as_stored(store, new_saga), [*new_rows, more])


async def test_a_save_by_the_owner_may_hand_the_saga_on(store: SagaStore) -> None:
    """The owner's save may itself change the owner (release the lease): the check is on the stored owner."""
    saga, rows = await stored(store, "own-2")
    released = saga.copy()
    released.owner, released.lease_expires_at = None, None
    await store.save(released.copy(), [], owner=OWNER)
    assert await store.load_saga("own-2") == (as_stored(store, released), rows)
    with pytest.raises(LeaseLostError):
        await store.save(saga.copy(), [], owner=OWNER)  # not its owner any more


@pytest.mark.parametrize("with_saga_row", [True, False], ids=["saga-and-steps", "steps-only"])
async def test_a_save_by_another_owner_writes_nothing(store: SagaStore, with_saga_row: bool) -> None:
    """save(owner=someone else) raises LeaseLostError (with the saga id) and leaves the saga row and steps untouched."""
    saga, rows = await stored(store, "own-3")
    new_saga, new_rows = changed(saga, rows)
    extra = make_steps("own-3", 5)[3:]  # new steps too: nothing of them may appear
    with pytest.raises(LeaseLostError, match="another executor") as caught:
        await store.save(new_saga if with_saga_row else None, [*new_rows, *extra], owner="executor-stale")
    assert caught.value.saga_id == "own-3"
    assert await store.load_saga("own-3") == (as_stored(store, saga), rows)


async def test_an_owned_save_of_a_saga_not_stored_writes_nothing(store: SagaStore) -> None:
    """An owner-conditional save of a saga that is not stored is refused: no owner holds it, nothing is written."""
    saga, rows = make_saga("own-4"), make_steps("own-4", 2)
    with pytest.raises(LeaseLostError):
        await store.save(saga, rows, owner=OWNER)
    with pytest.raises(LeaseLostError):
        await store.save(None, make_steps("own-4", 2), owner=OWNER)
    assert await store.load_saga("own-4") is None


async def test_an_unowned_saga_refuses_owned_saves(store: SagaStore) -> None:
    """A stored saga with no owner (NULL) is owned by nobody: every owner-conditional save of it is refused."""
    saga, rows = make_saga("own-5"), make_steps("own-5", 2)
    saga.owner = None
    assert await store.create_saga(saga.copy(), [row.copy() for row in rows]) is None
    with pytest.raises(LeaseLostError):
        await store.save(None, changed(saga, rows)[1], owner=OWNER)
    assert await store.load_saga("own-5") == (as_stored(store, saga), rows)


async def test_without_an_owner_a_save_is_unconditional(store: SagaStore) -> None:
    """owner=None keeps the unconditional save: it writes whoever owns the saga."""
    saga, rows = await stored(store, "own-6")
    saga.owner = "executor-2"
    await store.save(saga.copy(), [])
    new_saga, new_rows = changed(saga, rows)
    await store.save(new_saga.copy(), [row.copy() for row in new_rows])
    assert await store.load_saga("own-6") == (as_stored(store, new_saga), new_rows)


async def test_a_stalled_owner_cannot_write_after_a_takeover(store: SagaStore) -> None:
    """A worker whose lease expired and was claimed by another cannot write; the new owner can."""
    saga, rows = await stored(store, "own-7")
    expired = saga.lease_expires_at
    assert expired is not None
    assert await store.claim_saga(
        "own-7", "executor-2", expired + timedelta(seconds=30), expired + timedelta(seconds=1)
    )
    _, new_rows = changed(saga, rows)
    with pytest.raises(LeaseLostError):
        await store.save(None, new_rows, owner=OWNER)
    await store.save(None, [new_rows[0].copy()], owner="executor-2")
    loaded = await store.load_saga("own-7")
    assert loaded is not None
    assert loaded[1] == [new_rows[0], *rows[1:]]


async def test_an_owned_save_is_of_one_saga(store: SagaStore) -> None:
    """An owner-conditional save with rows of two sagas is refused (ValueError) before anything is written."""
    first, first_rows = await stored(store, "own-8")
    second, second_rows = await stored(store, "own-9")
    mixed = [changed(first, first_rows)[1][0], changed(second, second_rows)[1][0]]
    with pytest.raises(ValueError, match="one saga"):
        await store.save(None, mixed, owner=OWNER)
    assert await store.load_saga("own-8") == (as_stored(store, first), first_rows)
    assert await store.load_saga("own-9") == (as_stored(store, second), second_rows)


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
@pytest.mark.parametrize("with_saga_row", [True, False], ids=["saga-and-steps", "steps-only"])
async def test_the_owner_is_checked_on_the_row_a_takeover_just_committed(
    stores: Stores, kind: str, with_saga_row: bool
) -> None:
    """A save waiting on the saga's row lock while another executor takes the saga over sees the new owner: refused."""
    url = await stores.blank_url(kind)
    store = await stores.open(kind, url)
    saga, rows = await stored(store, "own-11")
    new_saga, new_rows = changed(saga, rows)
    marker = "$1" if kind == "postgresql" else "%s"
    async with admin(kind, url) as db:
        await db.lock_saga("own-11")
        save = asyncio.ensure_future(store.save(new_saga if with_saga_row else None, new_rows, owner=OWNER))
        try:
            await db.wait_for_a_blocked_store()
            await db.fetch(f"UPDATE sagas SET owner = 'executor-2' WHERE saga_id = {marker}", "own-11")
        finally:
            await db.commit()
        with pytest.raises(LeaseLostError):
            await asyncio.wait_for(save, 20)
    saga.owner = "executor-2"
    assert await store.load_saga("own-11") == (as_stored(store, saga), rows)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "mysql"])
async def test_a_release_retried_after_its_commit_lost_its_answer_is_not_reported_lost(
    stores: Stores, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save that changed the owner, committed, then lost its connection is retried and reported written."""
    from saga_runtime._exceptions import StoreConnectionError

    store = await stores.open(kind, wipe=True)
    await stored(store, "released")
    write_batch, calls = store._write_batch, []  # type: ignore[attr-defined]

    async def answer_lost_once(writes: object) -> object:
        outcome = await write_batch(writes)  # committed for real
        calls.append(writes)
        if len(calls) == 1:
            raise StoreConnectionError("connection lost after the commit", url=store.url)
        return outcome

    monkeypatch.setattr(store, "_write_batch", answer_lost_once)
    released = make_saga("released")
    released.owner, released.lease_expires_at = None, None
    await store.save(released, [], owner=OWNER)  # no LeaseLostError: the lost try's commit was this write
    loaded = await store.load_saga("released")
    assert loaded is not None
    assert loaded[0].owner is None
    assert len(calls) == 2
