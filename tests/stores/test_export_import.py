"""Export and import: plain JSON that round-trips between any two stores."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from saga_runtime._exceptions import IdempotencyConflictError, StoreError
from saga_runtime._records._export import import_rows
from saga_runtime._storage import SagaStore

from .conftest import KINDS, Near, Stores, as_stored, local_clock, make_saga, make_steps


async def _target(stores: Stores, source_kind: str, target_kind: str) -> SagaStore:
    """Open the import target: a second, empty database when both ends are of one kind."""
    if source_kind == target_kind:
        return await stores.open(target_kind, await stores.blank_url(target_kind))
    return await stores.open(target_kind, wipe=True)


@pytest.mark.parametrize("target_kind", KINDS)
@pytest.mark.parametrize("source_kind", KINDS)
async def test_export_import_round_trip_between_stores(stores: Stores, source_kind: str, target_kind: str) -> None:
    """A saga exported from one store imports into another equal; again is a no-op; other content conflicts."""
    source = await stores.open(source_kind, wipe=True)
    saga, steps = make_saga("exp-1"), make_steps("exp-1", 4)
    await source.create_saga(saga, steps)
    document = await source.export_saga("exp-1")
    document = json.loads(json.dumps(document))  # it is plain JSON
    target = await _target(stores, source_kind, target_kind)

    # Its lease as the source's database wrote it, or the target's: where either judges leases on its own clock.
    expected = as_stored(target if local_clock(source) else source, saga)
    await target.import_saga(document)
    assert await target.load_saga("exp-1") == (expected, steps)
    exported = await target.export_saga("exp-1")
    lease = datetime.fromisoformat(exported["saga"]["lease_expires_at"])
    assert lease == Near(datetime.fromisoformat(document["saga"]["lease_expires_at"]))  # the target's clock
    exported["saga"]["lease_expires_at"] = document["saga"]["lease_expires_at"]
    assert exported == document

    await target.import_saga(document)  # identical content: nothing happens
    assert await target.load_saga("exp-1") == (expected, steps)

    changed = json.loads(json.dumps(document))
    changed["steps"][2]["result"] = {"forged": True}
    with pytest.raises(IdempotencyConflictError) as caught:
        await target.import_saga(changed)
    assert caught.value.saga_id == "exp-1"
    assert await target.load_saga("exp-1") == (expected, steps)


async def test_import_with_a_step_more_conflicts(store: SagaStore) -> None:
    """An import adding a step to an existing saga is other content: a conflict, nothing written."""
    saga, steps = make_saga("exp-2"), make_steps("exp-2", 2)
    await store.create_saga(saga, steps)
    document = await store.export_saga("exp-2")
    document["steps"].append(dict(document["steps"][-1], step_id="step-9", seq=9, idempotency_key="k9"))
    with pytest.raises(IdempotencyConflictError):
        await store.import_saga(document)
    assert await store.load_saga("exp-2") == (as_stored(store, saga), steps)


async def test_import_of_a_document_in_another_offset_is_identical(store: SagaStore) -> None:
    """Times written with another UTC offset are the same instants: re-importing them is a no-op."""
    await store.create_saga(make_saga("exp-3"), make_steps("exp-3", 1))
    document = await store.export_saga("exp-3")
    document["saga"]["created_at"] = "2024-05-17T11:30:15.123456+02:00"
    await store.import_saga(document)
    assert await store.load_saga("exp-3") == (as_stored(store, make_saga("exp-3")), make_steps("exp-3", 1))


async def test_import_of_a_malformed_document_raises_store_error(store: SagaStore) -> None:
    """A document that is not a saga export is refused with StoreError, nothing written."""
    with pytest.raises(StoreError, match="not a saga export"):
        await store.import_saga({"hello": "world"})
    assert await store.list_sagas() == []


async def test_an_imported_row_owns_its_plan(store: SagaStore) -> None:
    """An imported saga row holds its own plan: editing the document afterwards changes nothing imported."""
    await store.create_saga(make_saga("exp-5"), make_steps("exp-5", 1))
    document = await store.export_saga("exp-5")
    saga, _ = import_rows(document)
    assert saga.plan == document["saga"]["plan"]
    assert saga.plan is not document["saga"]["plan"]
    stored = json.loads(json.dumps(saga.plan))
    document["saga"]["plan"]["edited"] = True
    assert saga.plan == stored
