"""A step row first written at its intent: a saga created with no step rows (or only its first, RUNNING), its
steps arriving in later owner-conditional saves, and every reading of it working meanwhile, on every store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from saga_runtime import LeaseLostError
from saga_runtime._records import (
    SagaRow,
    SagaStatus,
    StepRow,
    StepStatus,
    idempotency_key,
    identity_hash,
    now,
    planned_identities,
    seal,
)
from saga_runtime._storage import MemoryStore, SagaStore

from .conftest import as_stored

# Three steps in two groups: "a", then "b" and "c" side by side.
PLAN = [
    [{"id": "a", "tool": "charge", "args": {"n": 1}}],
    [{"id": "b", "tool": "ship", "args": {}}, {"id": "c", "tool": "mail", "args": {}}],
]


def _saga(saga_id: str) -> SagaRow:
    started = now()
    return SagaRow(
        saga_id=saga_id,
        kind="plan",
        plan=PLAN,
        plan_hash="ab" * 32,
        status=SagaStatus.RUNNING,
        owner="me",
        lease_expires_at=started + timedelta(seconds=30),
        created_at=started,
        updated_at=started,
    )


def _step(saga: SagaRow, seq: int, *, sealed: bool = True) -> StepRow:
    """Return the step at `seq` as its intent writes it (RUNNING), linked and sealed as the engine seals it."""
    planned = planned_identities(saga)
    assert planned is not None
    identity = planned[seq]
    key = idempotency_key(saga.saga_id, identity.step_id)
    row = StepRow(saga.saga_id, seq, identity.step_id, identity.group, identity.tool_name, {"n": seq}, key)
    row.status, row.attempts, row.started_at = StepStatus.RUNNING, 1, now()
    link = identity_hash(planned[seq - 1] if seq else None, saga.saga_id)
    if sealed:
        seal(row, link, None)
    else:
        row.prev_hash = link  # as the engine hands it: linked, for the store to seal
    return row


async def test_a_saga_is_created_without_step_rows(store: SagaStore) -> None:
    """create_saga with the saga row alone stores no step row; get_saga still shows every planned step PENDING."""
    saga = _saga("bare")
    assert await store.create_saga(saga, []) is None
    assert await store.load_saga("bare") == (as_stored(store, saga), [])
    result = await store.get_saga("bare")
    assert result is not None
    assert [(step.step_id, step.status) for step in result.steps] == [
        (step_id, StepStatus.PENDING) for step_id in ("a", "b", "c")
    ]
    (summary,) = await store.list_sagas()
    assert summary.step_count == 3  # the plan's steps, started or not
    assert (await store.export_saga("bare"))["steps"] == []
    assert await store.verify_saga("bare")


async def test_the_first_step_can_come_announced_running(store: SagaStore) -> None:
    """create_saga with the first step RUNNING stores it; the others come later, each at its intent."""
    saga = _saga("announced")
    first = _step(saga, 0)
    assert await store.create_saga(saga, [first]) is None
    assert await store.load_saga("announced") == (as_stored(store, saga), [first])
    await store.save(None, [_step(saga, 1)], owner="me")
    stored = await store.load_saga("announced")
    assert stored is not None
    assert [row.step_id for row in stored[1]] == ["a", "b"]


async def test_step_rows_arrive_in_owner_conditional_saves(store: SagaStore) -> None:
    """A step row first written by an owner-conditional save lands; a stale owner's is refused and not written."""
    saga = _saga("later")
    await store.create_saga(saga, [])
    await store.save(None, [_step(saga, 0)], owner="me")
    with pytest.raises(LeaseLostError):
        await store.save(None, [_step(saga, 1)], owner="someone else")
    stored = await store.load_saga("later")
    assert stored is not None
    assert [row.step_id for row in stored[1]] == ["a"]
    result = await store.get_saga("later")
    assert result is not None
    assert [(step.step_id, step.status) for step in result.steps] == [
        ("a", StepStatus.RUNNING),
        ("b", StepStatus.PENDING),
        ("c", StepStatus.PENDING),
    ]


async def test_a_running_saga_with_unwritten_steps_verifies(store: SagaStore) -> None:
    """Stored rows with planned steps never started (a gap in a group included) verify; a removed row does not."""
    saga = _saga("gap")
    await store.create_saga(saga, [_step(saga, 0)])
    await store.save(None, [_step(saga, 2)], owner="me")  # "c" started before "b" was written
    assert await store.verify_saga("gap"), (await store.verify_saga("gap")).problems
    stored = await store.load_saga("gap")
    assert stored is not None
    await store.import_saga(await store.export_saga("gap"))  # the same content again: a no-op


async def test_a_saga_missing_a_step_of_an_earlier_group_fails_verification() -> None:
    """A record of a later group with one of an earlier group missing (removed) fails verification."""
    store = MemoryStore()
    saga = _saga("holed")
    await store.create_saga(saga, [])
    await store.save(None, [_step(saga, 1)], owner="me")  # group 1 with group 0's "a" missing
    result = await store.verify_saga("holed")
    assert not result
    assert any("not the plan's steps" in problem for problem in result.problems)
    await store.close()


async def test_the_store_seals_linked_rows_around_a_gap(store: SagaStore) -> None:
    """Unsealed, linked rows written with a planned step between them unwritten are sealed by the store to verify."""
    saga = _saga("unsealed")
    await store.create_saga(saga, [_step(saga, 0, sealed=False)])
    await store.save(None, [_step(saga, 2, sealed=False)], owner="me")
    assert await store.verify_saga("unsealed"), (await store.verify_saga("unsealed")).problems
    await store.save(None, [_step(saga, 1, sealed=False)], owner="me")
    assert await store.verify_saga("unsealed")
