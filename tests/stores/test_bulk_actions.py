"""Bulk operator actions: every matching saga acted on once, with a summary that fails when any saga failed."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from saga_runtime import RetryPolicy, SagaAdmin, SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._records import now

from . import test_parked_compensation as parked
from .conftest import Stores

UNDONE: Counter[str] = Counter()
BROKEN = {"refunds": True}
registry = ToolRegistry()


@registry.tool(compensation_retry=RetryPolicy(max_attempts=1))
class Book:
    async def execute(self, seat: str) -> str:
        return seat

    async def compensate(self, result: str | None) -> None:
        if BROKEN["refunds"]:
            raise ConnectionError("the booking service is down")
        UNDONE[str(result)] += 1


@registry.tool
class Fail:
    async def execute(self) -> None:
        raise ValueError("no")


async def failed_sagas(store: Any, count: int) -> None:
    """Leave `count` COMPENSATION_FAILED sagas: their refund's service was down."""
    BROKEN["refunds"] = True
    executor = SagaExecutor(registry, store=store)
    for n in range(count):
        plan = [{"id": "book", "tool": "Book", "args": {"seat": f"s{n}"}}, {"id": "fail", "tool": "Fail"}]
        result = await executor.run(plan, saga_id=f"failed-{n}")
        assert result.status is SagaStatus.COMPENSATION_FAILED


async def test_retry_compensations_retries_every_failed_saga_once(stores: Stores, kind: str) -> None:
    """Every COMPENSATION_FAILED saga is retried once; the summary counts them; a later call finds none."""
    store = await stores.open(kind, wipe=True)
    await failed_sagas(store, 3)
    UNDONE.clear()
    admin = SagaAdmin(store, registry=registry)
    assert not await admin.retry_compensations()  # the service is still down: each fails again, once
    BROKEN["refunds"] = False
    assert len((await admin.retry_compensations(since=now() + timedelta(hours=1))).results) == 0
    summary = await admin.retry_compensations(since=timedelta(hours=1))
    assert summary
    assert {saga_id: r.status for saga_id, r in summary.results.items() if r is not None} == {
        f"failed-{n}": SagaStatus.COMPENSATED for n in range(3)
    }
    assert str(summary) == "retry-compensation: 3 saga(s): 3 COMPENSATED"
    assert UNDONE == {"s0": 1, "s1": 1, "s2": 1}
    again = await admin.retry_compensations()
    assert again
    assert again.results == {}


async def test_unpark_all_with_compensate_undoes_every_parked_saga_once(stores: Stores, kind: str) -> None:
    """Every PARKED saga is compensated once, and the summary names each; a second call finds none."""
    store = await stores.open(kind, wipe=True)
    parked.CALLS.clear()
    await parked.park(store, "p1")
    await parked.park(store, "p2")
    summary = await SagaAdmin(store, registry=parked.registry).unpark_all(compensate=True)
    assert summary
    assert sorted(summary.results) == ["p1", "p2"]
    assert parked.CALLS == {"refund 900": 2, "refund None": 2}
    assert (await SagaAdmin(store).unpark_all(compensate=True)).results == {}
