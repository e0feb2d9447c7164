"""Values at the size limit are written on every store, alone and in batches (MariaDB's packet is 16 MiB)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga_runtime import LeaseLostError, SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._records import MAX_JSON_BYTES, StepStatus, canonical_json

from .conftest import Stores, as_stored, make_saga, make_steps
from .test_group_commit import OWNER, Batches


async def test_a_plan_and_metadata_within_the_limits_are_stored_whole_on_every_store(stores: Stores, kind: str) -> None:
    """A create whose plan, step arguments and metadata are each within the limits is written, however escaped."""
    store = await stores.open(kind, wipe=True)
    registry = ToolRegistry()

    @registry.tool
    class Echo:
        async def execute(self, value: str) -> str:
            return value

    # Quotes: two bytes each in JSON, four once MySQL escapes them. The plan holds the arguments once, the step
    # rows once more.
    value = '"' * 480_000
    plan = [{"id": f"e{i}", "tool": "Echo", "args": {"value": value}} for i in range(4)]
    metadata = {"note": '"' * 600_000}
    assert len(canonical_json(plan).encode()) <= MAX_JSON_BYTES
    executor = SagaExecutor(registry, store=store)

    result = await executor.run(plan, saga_id="big", metadata=metadata)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    stored = await store.get_saga("big")
    assert stored is not None
    assert stored.metadata == metadata
    assert [step.result for step in stored.steps] == [value] * 4
    assert await store.verify_saga("big")


async def test_a_batch_is_bounded_by_bytes_not_characters(stores: Stores, sql_kind: str) -> None:
    """Queued saves of results in four-byte characters are batched by their bytes: every one is written."""
    store = await stores.open(sql_kind, wipe=True, max_size=1) if sql_kind != "sqlite" else None
    store = store or await stores.open(sql_kind, wipe=True)
    ids = [f"wide-{n}" for n in range(6)]
    for saga_id in ids:
        assert await store.create_saga(make_saga(saga_id), make_steps(saga_id, 1)) is None
    batches = Batches(store, holds=1)

    def rows(saga_id: str) -> Any:
        steps = make_steps(saga_id, 1)
        steps[0].status, steps[0].result = StepStatus.SUCCESS, {"text": "\U0001f600" * 838_800}
        return steps

    first = asyncio.create_task(store.save(None, rows(ids[0]), owner=OWNER))
    await batches.held(0)  # the others queue up behind it, to be batched together
    rest = [asyncio.create_task(store.save(None, rows(saga_id), owner=OWNER)) for saga_id in ids[1:]]
    await asyncio.sleep(0.05)
    batches.release(0)
    await asyncio.gather(first, *rest)

    for saga_id in ids:
        loaded = await store.load_saga(saga_id)
        assert loaded is not None
        assert loaded[1] == rows(saga_id)
    assert max(len(batch) for batch in batches.seen) < 5  # 13 MB of UTF-8 does not go in one statement


async def test_a_write_too_large_for_one_packet_keeps_its_owner_check(stores: Stores, sql_kind: str) -> None:
    """A save too large for one statement still writes only under its owner: a stale owner writes nothing."""
    store = await stores.open(sql_kind, wipe=True)
    assert await store.create_saga(make_saga("large"), make_steps("large", 2)) is None
    rows = make_steps("large", 2)
    for row in rows:
        row.status, row.result = StepStatus.SUCCESS, {"quotes": '"' * 2_500_000}  # 10 MB each, escaped by MySQL

    with pytest.raises(LeaseLostError):
        await store.save(make_saga("large"), rows, owner="someone-else")
    assert await store.load_saga("large") == (as_stored(store, make_saga("large")), make_steps("large", 2))

    await store.save(make_saga("large"), rows, owner=OWNER)
    assert await store.load_saga("large") == (as_stored(store, make_saga("large")), rows)
