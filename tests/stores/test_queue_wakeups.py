"""An idle worker is woken by a submit: LISTEN/NOTIFY on PostgreSQL, in process on memory; others poll."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest

from saga_runtime import SagaExecutor, SagaStatus, StepContext, ToolRegistry, open_store

from .conftest import Stores

LONG = 30.0  # the worker's poll interval: far longer than any test waits

registry = ToolRegistry()


@registry.tool
class Mark:
    async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
        return {"name": name}


def plan(name: str) -> list[dict[str, Any]]:
    """Return a one-step plan."""
    return [{"id": "mark", "tool": "Mark", "args": {"name": name}}]


async def started_within(worker: SagaExecutor, submitter: SagaExecutor, saga_id: str) -> float:
    """Serve with a long interval, submit once the worker is idle; return the seconds to the saga's end."""
    task = asyncio.create_task(worker.serve(interval=LONG))
    try:
        await asyncio.sleep(0.5)  # its first round found nothing: it waits
        began = time.monotonic()
        handle = await submitter.submit(plan(saga_id), saga_id=saga_id)
        result = await handle.result(timeout=10)
        assert result.status is SagaStatus.SUCCESS
        return time.monotonic() - began
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_an_idle_postgres_worker_starts_another_process_submit_at_once(stores: Stores) -> None:
    """A submit through another pool (another process) wakes a PostgreSQL worker polling every 30 s."""
    served = await stores.open("postgresql", wipe=True)
    async with open_store(stores.url("postgresql")) as other:
        elapsed = await started_within(SagaExecutor(registry, served), SagaExecutor(registry, other), "pg-wake")
    assert elapsed < 5, elapsed


async def test_a_postgres_worker_listens_again_after_its_connection_is_lost(stores: Stores) -> None:
    """Its listening backend terminated, a worker listens again and is woken by the next submit."""
    url = stores.url("postgresql")
    served = await stores.open("postgresql", url, wipe=True)
    worker, submitter = SagaExecutor(registry, served), SagaExecutor(registry, served)
    task = asyncio.create_task(worker.serve(interval=LONG))
    try:
        await asyncio.sleep(0.5)
        conn = await asyncpg.connect(url)
        try:
            ended = await conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
            )
        finally:
            await conn.close()
        assert [row[0] for row in ended] == [True]  # the worker's listening connection, and only it
        await asyncio.sleep(2.0)  # it notices, and listens again a second later
        handle = await submitter.submit(plan("again"), saga_id="pg-again")
        assert (await handle.result(timeout=10)).status is SagaStatus.SUCCESS
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_an_idle_memory_worker_starts_a_submit_at_once() -> None:
    """On a memory store, a submit wakes the worker of the same store at once."""
    async with open_store("memory://") as store:
        executor = SagaExecutor(registry, store)
        elapsed = await started_within(executor, executor, "mem-wake")
    assert elapsed < 5, elapsed
