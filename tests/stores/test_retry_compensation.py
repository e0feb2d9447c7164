"""retry_compensation() claims the saga first: two callers at once (two executors, two processes) never both undo."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga_runtime import SagaExecutor, SagaInProgressError, SagaStatus, SagaStore, ToolRegistry


class Refunds:
    """A charge whose refund fails while the service is down, and blocks while `hold` is set."""

    def __init__(self) -> None:
        self.down = True
        self.hold: asyncio.Event | None = None
        self.refunded: list[int] = []
        self.failing: set[int] = set()  # refunds of these amounts fail
        self.registry = ToolRegistry()
        refunds = self

        @self.registry.tool
        class Charge:
            """Charge `n`; a negative `n` fails (after the others ran, so they are compensated)."""

            async def execute(self, n: int) -> int:
                if n < 0:
                    raise ValueError("card declined")
                return n

            async def compensate(self, result: int) -> None:
                if refunds.down or result in refunds.failing:
                    raise ConnectionError("refund service down")
                if refunds.hold is not None:
                    await refunds.hold.wait()
                refunds.refunded.append(result)


async def failed_refunds(stores: Any, kind: str) -> tuple[SagaStore, Refunds, SagaExecutor, SagaExecutor]:
    """Return a store holding saga "refunds" left COMPENSATION_FAILED (its refunds were down), and two operators."""
    store: SagaStore = await stores.open(kind, wipe=True)
    world = Refunds()
    first = SagaExecutor(world.registry, store=store, executor_id="operator-1")
    second = SagaExecutor(world.registry, store=store, executor_id="operator-2")
    plan = [
        {"tool": "Charge", "args": {"n": 1}},
        {"tool": "Charge", "args": {"n": 2}},
        {"tool": "Charge", "args": {"n": -1}},
    ]
    assert (await first.run(plan, saga_id="refunds")).status is SagaStatus.COMPENSATION_FAILED
    return store, world, first, second


async def test_two_executors_retrying_one_saga_compensate_it_once(
    stores: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of two executors calling retry_compensation at once, one compensates; the other gets SagaInProgressError."""
    store, world, first, second = await failed_refunds(stores, kind)

    world.down, world.hold = False, asyncio.Event()
    # Both callers read the saga (COMPENSATION_FAILED) before either claims it: the race the claim must settle.
    both_read = asyncio.Barrier(2)
    load = store.load_saga

    reads = 0

    async def load_then_wait(saga_id: str) -> Any:
        nonlocal reads
        loaded = await load(saga_id)
        reads += 1
        if reads <= 2:  # the two first reads, one per caller; the winner reads again after its claim
            await both_read.wait()
        return loaded

    monkeypatch.setattr(store, "load_saga", load_then_wait)
    tries = [asyncio.create_task(caller.retry_compensation("refunds")) for caller in (first, second)]
    done, _ = await asyncio.wait(tries, return_when=asyncio.FIRST_COMPLETED)
    (loser,) = done
    with pytest.raises(SagaInProgressError, match="another caller is retrying"):
        loser.result()
    monkeypatch.undo()
    world.hold.set()
    (winner,) = [task for task in tries if task is not loser]
    result = await winner
    assert result.status is SagaStatus.COMPENSATED
    assert world.refunded == [2, 1]
    assert await store.verify_saga("refunds")


async def test_a_retry_that_read_the_saga_before_another_finished_compensates_nothing_twice(
    stores: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller whose first read predates another caller's whole retry compensates only what is still not undone."""
    store, world, first, second = await failed_refunds(stores, kind)
    world.down = False
    stale_read = asyncio.Event()
    go_on = asyncio.Event()
    load = store.load_saga
    reads = 0

    async def second_reads_early(saga_id: str) -> Any:
        nonlocal reads
        loaded = await load(saga_id)
        reads += 1
        if reads == 1:  # the second caller's first read: it waits while the first caller retries
            stale_read.set()
            await go_on.wait()
        return loaded

    monkeypatch.setattr(store, "load_saga", second_reads_early)
    late = asyncio.create_task(second.retry_compensation("refunds"))
    await stale_read.wait()
    monkeypatch.setattr(store, "load_saga", load)
    world.failing = {1}  # the first caller undoes 2, but refund 1 fails again
    assert (await first.retry_compensation("refunds")).status is SagaStatus.COMPENSATION_FAILED
    assert world.refunded == [2]
    world.failing = set()
    go_on.set()
    result = await late
    assert result.status is SagaStatus.COMPENSATED
    assert world.refunded == [2, 1]  # never 2 twice
