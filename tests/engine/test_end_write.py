"""A saga's end, written by a store that writes inline, hands the store its rows as they are, unsealed."""

from __future__ import annotations

import anyio

from saga_runtime import SagaStatus, StepStatus, ToolRegistry
from saga_runtime._engine import EngineConfig
from saga_runtime._engine._claim import Drives
from saga_runtime._engine._journal import Journal
from saga_runtime._records import StepRow, idempotency_key
from saga_runtime._storage import MemoryStore


async def test_a_sealed_row_the_end_changes_is_sealed_afresh() -> None:
    """A row read sealed and changed by the end alone (a running step cut) is sealed again by the store: it verifies."""
    store = MemoryStore(signing_key=b"k" * 32)
    config = EngineConfig(
        registry=ToolRegistry(),
        store=store,
        executor_id="me",
        lease_timeout=30.0,
        compensation_timeout=10.0,
        thread_limiter=anyio.CapacityLimiter(1),
        call_limiter=None,
    )
    saga = Drives(config).new_saga("e1", "dynamic")
    row = StepRow("e1", 0, "a", 0, "Noop", {}, idempotency_key("e1", "a"), status=StepStatus.RUNNING, attempts=1)
    assert await store.create_saga(saga.copy(), [row.copy()]) is None
    loaded = await store.load_saga("e1")  # sealed as it is read
    assert loaded is not None
    stored, rows = loaded
    assert rows[0].hash is not None
    journal = Journal(config, stored, rows, owner="me")
    journal.saga_to(SagaStatus.COMPENSATING)
    journal.end(SagaStatus.COMPENSATION_FAILED, "gave up")
    assert journal.wrote_now()
    again = await store.load_saga("e1")
    assert again is not None
    assert again[1][0].status is StepStatus.CANCELLED
    assert await store.verify_saga("e1")
