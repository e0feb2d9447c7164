"""The claim-and-drive context manager: one path of an executor holds a saga at a time, and lets it go however it
leaves."""

from __future__ import annotations

import anyio
import pytest

from saga_runtime import SagaStatus, ToolRegistry
from saga_runtime._engine import Drives, EngineConfig
from saga_runtime._engine._claim import Take
from saga_runtime._records import SagaRow
from saga_runtime._storage import MemoryStore


def drives_over(store: MemoryStore, executor_id: str = "me") -> Drives:
    """Return the claims of an executor with no tools over `store`."""
    config = EngineConfig(
        registry=ToolRegistry(),
        store=store,
        executor_id=executor_id,
        lease_timeout=30.0,
        compensation_timeout=10.0,
        thread_limiter=anyio.CapacityLimiter(1),
        call_limiter=None,
    )
    return Drives(config)


async def stored_saga(saga_id: str) -> tuple[Drives, SagaRow]:
    """Return the claims of an executor over a new memory store, and a dynamic saga it created there."""
    store = MemoryStore()
    drives = drives_over(store)
    row = drives.new_saga(saga_id, "dynamic")
    assert await store.create_saga(row.copy(), []) is None
    return drives, row


async def test_a_saga_held_by_one_path_is_refused_to_another_until_it_is_let_go() -> None:
    """While a claim holds a saga, a second claim of it yields None; once left, the saga is free again."""
    drives, row = await stored_saga("s1")
    async with drives.claim(row, take="new") as held:
        assert held is not None
        assert "s1" in drives
        async with drives.claim(row, take="new") as again:
            assert again is None
        assert "s1" in drives  # the refused claim did not let the first one's saga go
    assert "s1" not in drives


async def test_a_refused_claim_does_not_let_go_of_the_saga_another_path_holds() -> None:
    """A claim refused because another path holds the saga leaves it in the set (regression: it was taken out)."""
    drives, row = await stored_saga("s5")
    async with drives.claim(row, take="new") as held:
        assert held is not None
        takes: tuple[Take, ...] = ("new", "orphan", "waiting")
        for take in takes:
            async with drives.claim(row, take=take) as again:
                assert again is None
            assert "s5" in drives


async def test_a_claim_lets_the_saga_go_when_its_block_raises() -> None:
    """An error inside the block (its session open) leaves the saga out of the set, and the error goes on."""
    drives, row = await stored_saga("s2")

    async def fail_inside() -> None:
        async with drives.claim(row, take="new") as held:
            assert held is not None
            held.start()
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await fail_inside()
    assert "s2" not in drives


async def test_a_claim_the_store_refuses_holds_nothing() -> None:
    """A saga another executor holds under a live lease is not taken: the claim yields None and holds no id."""
    store = MemoryStore()
    owner, other = drives_over(store, "owner"), drives_over(store, "other")
    row = owner.new_saga("s3", "dynamic")
    assert await store.create_saga(row.copy(), []) is None
    async with other.claim(row.copy(), take="orphan") as held:
        assert held is None
    assert "s3" not in other


async def test_a_reread_claim_holds_only_what_is_still_in_the_expected_status() -> None:
    """A claim asked to re-read gives the saga up when the stored row is not in the status it expects."""
    drives, row = await stored_saga("s4")
    async with drives.claim(row, take="new", reread={SagaStatus.WAITING}) as held:
        assert held is None
    async with drives.claim(row, take="new", reread={SagaStatus.RUNNING}) as held:
        assert held is not None
        assert held.saga.status is SagaStatus.RUNNING
    assert "s4" not in drives
