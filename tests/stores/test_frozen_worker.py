"""A worker frozen past its lease (SIGSTOP, a stalled VM) starts no tool once it wakes, unless the saga is still its.

The freeze is played inside the store's write: right after the intent of step `b` is committed, the worker's event
loop stops (a blocking sleep, as a stopped process), and, in one test, another executor (another store handle, on
a loop of its own) recovers the saga meanwhile, as a second process would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections import Counter
from typing import Any

import pytest

from saga_runtime import LeaseLostError, SagaExecutor, SagaStatus, StepStatus, ToolRegistry, open_store
from saga_runtime._storage import SagaStore

from .conftest import Stores

LEASE = 1.0
PLAN = [{"id": "a", "tool": "Step", "args": {"name": "a"}}, {"id": "b", "tool": "Step", "args": {"name": "b"}}]


def run_sync(make: Any) -> Any:
    """Run a coroutine on a loop of its own, in a thread, while this one's loop is frozen."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, make()).result()


def make_registry(ran: Counter[str], keys: dict[str, set[str]]) -> ToolRegistry:
    """Return a registry whose Step tool counts its calls, and the idempotency keys they came with, by name."""
    from saga_runtime import StepContext

    registry = ToolRegistry()

    @registry.tool
    class Step:
        async def execute(self, name: str, ctx: StepContext) -> str:
            ran[name] += 1
            keys.setdefault(name, set()).add(ctx.idempotency_key)
            return name

        async def compensate(self, result: Any) -> None:
            ran[f"undo {result}"] += 1

    return registry


def freeze_after_intent_of_b(store: SagaStore, then: Any = None) -> None:
    """Make the store's writer freeze its event loop for 1.5 leases right after committing step b's intent."""
    real_save = store.save
    frozen = False

    async def save(saga: Any, steps: Any, *, owner: str | None = None, reseal: bool = True, lease: bool = True) -> None:
        nonlocal frozen
        await real_save(saga, steps, owner=owner, reseal=reseal, lease=lease)
        if not frozen and any(r.step_id == "b" and r.status is StepStatus.RUNNING for r in steps):
            frozen = True
            time.sleep(LEASE * 1.5)  # noqa: ASYNC251 - the point: the whole process stops, as under SIGSTOP
            if then is not None:
                then()

    store.save = save  # type: ignore[method-assign]


async def test_a_frozen_worker_starts_no_tool_after_another_took_its_saga_over(stores: Stores, kind: str) -> None:
    """Woken after another executor recovered and finished its saga, a worker does not call the tool it had
    announced: the store refuses to confirm its lease, and run() raises LeaseLostError; each step ran once."""
    ran: Counter[str] = Counter()
    keys: dict[str, set[str]] = {}
    store = await stores.open(kind, wipe=True)
    registry = make_registry(ran, keys)

    def heir_recovers() -> None:
        async def recover() -> list[Any]:
            if kind == "memory":  # one process's memory: the heir shares the store object
                return await SagaExecutor(registry, store=store, executor_id="heir").recover()
            async with open_store(stores.url(kind)) as own:
                return await SagaExecutor(registry, store=own, executor_id="heir").recover()

        (result,) = run_sync(recover)
        assert result.status is SagaStatus.SUCCESS

    freeze_after_intent_of_b(store, heir_recovers)
    executor = SagaExecutor(registry, store=store, executor_id="frozen", lease_timeout=LEASE)
    with pytest.raises(LeaseLostError, match="another executor"):
        await executor.run(PLAN, saga_id="frozen-1")
    assert ran == {"a": 1, "b": 1}  # b by the heir only
    stored = await store.get_saga("frozen-1")
    assert stored is not None
    assert stored.status is SagaStatus.SUCCESS


async def test_a_frozen_worker_whose_saga_nobody_took_goes_on_with_it(stores: Stores, kind: str) -> None:
    """Woken with nobody else holding its saga, a worker confirms its lease with the store and finishes the saga."""
    ran: Counter[str] = Counter()
    keys: dict[str, set[str]] = {}
    store = await stores.open(kind, wipe=True)
    freeze_after_intent_of_b(store)
    executor = SagaExecutor(make_registry(ran, keys), store=store, executor_id="frozen", lease_timeout=LEASE)
    result = await executor.run(PLAN, saga_id="frozen-2")
    assert result.status is SagaStatus.SUCCESS
    assert ran == {"a": 1, "b": 1}
