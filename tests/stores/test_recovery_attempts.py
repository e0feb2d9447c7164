"""Recovery attempts count only sagas a worker started driving, on every store: stopping workers parks nothing."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from saga_runtime import SagaExecutor, SagaStatus, StepContext, ToolRegistry

from .conftest import Stores

CHAIN: list[Any] = [
    {"tool": "Effect", "args": {"name": "a"}, "id": "a"},
    {"tool": "Effect", "args": {"name": "b"}, "id": "b"},
]
LEASE = 0.3


class Crash(BaseException):
    """Stands for the process dying inside a tool: nothing after it is recorded, the lease is never given up."""


def tools(crash: set[str], pause: float = 0.0) -> ToolRegistry:
    """Return a registry whose Effect dies in the steps named in `crash`, and takes `pause` seconds."""
    registry = ToolRegistry()

    @registry.tool
    class Effect:
        async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
            if name in crash:
                raise Crash
            await asyncio.sleep(pause)
            return {"name": name}

    return registry


async def dies(work: Any) -> None:
    """Await `work`, which must end by a Crash (alone, or from recovery's task group)."""
    with pytest.raises(BaseException) as caught:
        await work
    error = caught.value
    assert isinstance(error.exceptions[0] if isinstance(error, BaseExceptionGroup) else error, Crash), error


async def orphans(store: Any, count: int, lease: float = LEASE) -> list[str]:
    """Leave `count` sagas RUNNING under a dead executor's lease (it died in step b); return their ids."""
    dead = SagaExecutor(tools({"b"}), store=store, executor_id="dead", lease_timeout=lease)
    ids = [f"o{i:03d}" for i in range(count)]
    for saga_id in ids:
        with pytest.raises(Crash):
            await dead.run(CHAIN, saga_id=saga_id)
    return ids


async def test_stopping_recovering_workers_parks_no_healthy_saga(stores: Stores, kind: str) -> None:
    """A recovering worker stopped again and again during a backlog of orphans parks none of them; all succeed."""
    # A lease long enough that a loaded machine's stalls never lapse it: a lapsed lease is not a clean stop.
    lease = 1.0
    store = await stores.open(kind, wipe=True)
    ids = await orphans(store, 30, lease)
    await asyncio.sleep(lease + 0.05)
    for round_ in range(4):
        worker = SagaExecutor(
            tools(set(), pause=1.0),  # stopped mid-step: no outcome recorded
            store=store,
            executor_id=f"stopped-{round_}",
            lease_timeout=lease,
            recovery_concurrency=2,
            max_recovery_attempts=2,
        )
        recovering = asyncio.ensure_future(worker.recover())
        await asyncio.sleep(0.12)
        recovering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await recovering
        await asyncio.sleep(lease + 0.05)  # what it claimed but never drove is free again
    assert await store.list_sagas(status="PARKED") == []
    last = SagaExecutor(tools(set()), store=store, executor_id="last", lease_timeout=lease, max_recovery_attempts=2)
    await last.recover()
    statuses = {summary.saga_id: summary.status for summary in await store.list_sagas(limit=100)}
    assert statuses == dict.fromkeys(ids, SagaStatus.SUCCESS)


async def test_a_saga_whose_recoveries_keep_dying_is_parked(stores: Stores, kind: str) -> None:
    """Recoveries that die driving a saga (no step's outcome recorded) count up, and park it after the maximum."""
    store = await stores.open(kind, wipe=True)
    (_saga_id,) = await orphans(store, 1)
    for attempt in range(2):
        await asyncio.sleep(LEASE + 0.05)
        dying = SagaExecutor(
            tools({"b"}), store=store, executor_id=f"dying-{attempt}", lease_timeout=LEASE, max_recovery_attempts=2
        )
        await dies(dying.recover())
    await asyncio.sleep(LEASE + 0.05)
    worker = SagaExecutor(tools(set()), store=store, executor_id="last", lease_timeout=LEASE, max_recovery_attempts=2)
    (parked,) = await worker.recover()
    assert parked.status is SagaStatus.PARKED
    assert "recovery failed 2 times" in (parked.error or "")


async def test_progress_gives_the_recovery_attempts_back(stores: Stores, kind: str) -> None:
    """A recovery that records a step's outcome resets the saga's count of failed recoveries to 0."""
    store = await stores.open(kind, wipe=True)
    (saga_id,) = await orphans(store, 1)
    await asyncio.sleep(LEASE + 0.05)
    once = SagaExecutor(tools({"b"}), store=store, executor_id="once", lease_timeout=LEASE)
    await dies(once.recover())
    loaded = await store.load_saga(saga_id)
    assert loaded is not None
    assert loaded[0].recovery_attempts == 1
    await asyncio.sleep(LEASE + 0.05)
    done = SagaExecutor(tools(set()), store=store, executor_id="done", lease_timeout=LEASE)
    (result,) = await done.recover()
    assert result.status is SagaStatus.SUCCESS
    loaded = await store.load_saga(saga_id)
    assert loaded is not None
    assert loaded[0].recovery_attempts == 0


async def test_a_stopped_worker_releases_the_orphans_it_had_not_begun(stores: Stores, kind: str) -> None:
    """Orphans a stopped serve() claimed but had not begun (waiting their turn) are released at once, not leased."""
    lease = 1.0
    store = await stores.open(kind, wipe=True)
    ids = await orphans(store, 4, lease)
    await asyncio.sleep(lease + 0.05)
    worker = SagaExecutor(
        tools(set(), pause=0.5), store=store, executor_id="stopped", lease_timeout=30, recovery_concurrency=1
    )
    serving = asyncio.ensure_future(worker.serve())
    for _ in range(200):  # until the worker has claimed them all
        loaded = [await store.load_saga(saga_id) for saga_id in ids]
        if all(row is not None and row[0].owner == "stopped" for row in loaded):
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # the first one's step runs now
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    held = []
    for saga_id in ids:
        loaded = await store.load_saga(saga_id)
        assert loaded is not None
        if not loaded[0].status.is_terminal and loaded[0].owner == "stopped":
            held.append(saga_id)
    assert held == [], held  # another worker may resume every live one at once
