"""The saga row is sealed again only when a sealed field changed; a write of its lease alone keeps its seal."""

from __future__ import annotations

import time
from collections.abc import Sequence

from saga_runtime import SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._records import SagaRow, StepRow, StepStatus, saga_seal
from saga_runtime._storage import MemoryStore
from saga_runtime._storage._sealing import Sealing

KEY = b"k" * 32


class Noop:
    """A tool that does nothing."""

    registry = ToolRegistry()

    async def execute(self) -> None:
        return None


Noop.registry.tool(Noop)


class SealWatchingStore(MemoryStore):
    """A memory store noting, for each saga row written, whether it was resealed and whether its seal is right."""

    def __init__(self) -> None:
        super().__init__(signing_key=KEY)
        self.writes: list[tuple[bool, bool, list[StepRow]]] = []

    async def save(
        self,
        saga: SagaRow | None,
        steps: Sequence[StepRow],
        *,
        owner: str | None = None,
        reseal: bool = True,
        lease: bool = True,
    ) -> None:
        await super().save(saga, steps, owner=owner, reseal=reseal, lease=lease)
        if saga is not None:
            stored = await self.load_saga(saga.saga_id)  # the memory store seals a record when it is read
            assert stored is not None
            self.writes.append((reseal, stored[0].seal == saga_seal(stored[0], KEY), [row.copy() for row in steps]))


async def test_a_lease_only_write_keeps_the_seal_and_the_record_verifies() -> None:
    """A step's intent that extends a short lease writes the saga row without resealing it; every seal is right."""
    lease = 0.5
    registry = ToolRegistry()

    @registry.tool
    class Step:
        async def execute(self, name: str) -> str:
            if name == "stall":
                time.sleep(lease * 0.9)  # noqa: ASYNC251 - the loop stalls: the lease nearly ends
            return name

    store = SealWatchingStore()
    executor = SagaExecutor(registry, store=store, lease_timeout=lease)
    plan = [
        {"id": "stall", "tool": "Step", "args": {"name": "stall"}},
        {"id": "next", "tool": "Step", "args": {"name": "next"}},
    ]

    result = await executor.run(plan, saga_id="lease-only")

    assert result.status is SagaStatus.SUCCESS
    (extended,) = [
        reseal
        for reseal, _, steps in store.writes
        if any(r.step_id == "next" and r.status is StepStatus.RUNNING for r in steps)
    ]
    assert extended is False, "the lease-only write of the saga row sealed it again"
    assert all(right for _, right, _ in store.writes), "a saga row was stored with a seal that is not its content's"
    assert store.writes[-1][0] is True, "the saga's end (a sealed field changed) was not sealed again"
    assert await store.verify_saga("lease-only")


async def test_a_kept_seal_of_another_key_is_sealed_again() -> None:
    """`reseal=False` keeps a seal only if it is of the store's kind (signed with a key, or plain without one)."""
    plain = MemoryStore()
    await SagaExecutor(Noop.registry, store=plain).run([{"id": "a", "tool": "Noop", "args": {}}], saga_id="keyed")
    loaded = await plain.load_saga("keyed")
    assert loaded is not None
    row = loaded[0]
    assert row.seal == saga_seal(row, None)
    again = row.copy()
    Sealing(KEY).saga(again, reseal=False)  # as a store with a signing key writes it
    assert again.seal == saga_seal(row, KEY)
    kept = row.copy()
    kept.seal = "0" * 64  # (a plain seal: kept as it is, not computed again)
    Sealing(None).saga(kept, reseal=False)
    assert kept.seal == "0" * 64
    signed = MemoryStore(signing_key=KEY)
    await signed.create_saga(row.copy(), [])
    await signed.save(row.copy(), [], reseal=False)
    stored = await signed.load_saga("keyed")  # sealed as it is read: with the store's key
    assert stored is not None
    assert stored[0].seal == saga_seal(row, KEY)
