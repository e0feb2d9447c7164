"""An executor that can no longer prove its lease stops the saga instead of racing a possible new owner."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

import pytest

from saga_runtime import LeaseLostError, MemoryStore, SagaExecutor, SagaStatus, StoreConnectionError, ToolRegistry


class UnreachableForRenewals(MemoryStore):
    """A store whose lease renewals fail, as when the database is unreachable from this worker."""

    async def renew_leases(self, owner: str, saga_ids: Sequence[str], lease_expires_at: datetime) -> set[str]:
        raise StoreConnectionError("the database is unreachable", url=self.url)


async def test_a_lease_that_runs_out_unrenewed_fences_the_saga() -> None:
    """When renewals fail until the lease expires, run() stops the saga without compensating: LeaseLostError."""
    undone: list[str] = []
    cancelled = asyncio.Event()
    registry = ToolRegistry()

    @registry.tool
    class Slow:
        async def execute(self) -> str:
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "done"

        async def compensate(self, result: str | None) -> None:
            undone.append("undo")

    store = UnreachableForRenewals()
    executor = SagaExecutor(registry, store=store, lease_timeout=0.3)
    with pytest.raises(LeaseLostError, match="taken over"):
        await asyncio.wait_for(executor.run([{"tool": "Slow"}], saga_id="stalled"), timeout=5)
    assert cancelled.is_set()
    assert undone == []  # not compensated from here: the next owner decides
    stored = await store.get_saga("stalled")
    assert stored is not None
    assert stored.status is SagaStatus.RUNNING  # left live, for recovery
