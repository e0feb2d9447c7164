"""Saga functions on every store: the function's record and output sealed, exported, imported; resumed in place."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga_runtime import DynamicSaga, MemoryStore, SagaExecutor, SagaStatus, StepContext, StepStatus, ToolRegistry
from saga_runtime._exceptions import StoreError
from saga_runtime._storage import SagaStore

from .conftest import Stores


def make_registry(calls: list[str], hang: set[str], started: asyncio.Event) -> ToolRegistry:
    """Return a registry with a tool that logs its calls (hanging once on the items in `hang`) and a saga function."""
    registry = ToolRegistry()

    @registry.tool
    class Reserve:
        async def execute(self, item: str, ctx: StepContext) -> dict[str, str]:
            if item in hang:
                hang.discard(item)
                started.set()
                await asyncio.sleep(60)
            calls.append(item)
            return {"item": item, "key": ctx.idempotency_key}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            calls.append(f"undo {ctx.args['item']}")

    @registry.saga(version="2")
    async def order(saga: DynamicSaga, items: list[str], note: str = "") -> dict[str, Any]:
        keys = []
        for item in items:
            keys.append((await saga.call("Reserve", item=item))["key"])
        return {"reserved": len(keys), "note": note, "price": 12.5}

    return registry


async def test_a_saga_function_record_verifies_exports_and_imports(stores: Stores, store: SagaStore) -> None:
    """The function's name, version, arguments and output are stored sealed; export/import and replay keep them."""
    calls: list[str] = []
    executor = SagaExecutor(make_registry(calls, set(), asyncio.Event()), store=store)
    result = await executor.run("order", args={"items": ["a", "b"], "note": "é"}, saga_id="o-1")
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"reserved": 2, "note": "é", "price": 12.5}
    stored = await store.get_saga("o-1")
    assert stored is not None
    assert (stored.function, stored.output) == ("order", result.output)
    loaded = await store.load_saga("o-1")
    assert loaded is not None
    assert loaded[0].plan == {"function": "order", "version": "2", "args": {"items": ["a", "b"], "note": "é"}}
    assert await store.verify_saga("o-1")
    target = await stores.open("memory")
    await target.import_saga(await store.export_saga("o-1"))
    assert await target.verify_saga("o-1")
    imported = await target.get_saga("o-1")
    assert imported is not None
    assert imported.output == result.output
    replayed = await executor.replay("o-1")
    assert replayed.output == result.output
    again = await executor.run("order", args={"items": ["a", "b"], "note": "é"}, saga_id="o-1")
    assert again.output == result.output
    assert calls == ["a", "b"]


async def test_an_edited_output_breaks_the_seal(store: SagaStore) -> None:
    """Changing the recorded output of a saga function is found by verify_saga."""
    executor = SagaExecutor(make_registry([], set(), asyncio.Event()), store=store)
    await executor.run("order", args={"items": ["a"]}, saga_id="o-2")
    exported = await store.export_saga("o-2")
    for entry in exported["saga"]["history"]:
        if entry.get("kind") == "output":
            entry["value"] = {"reserved": 99}
    forged = MemoryStore()
    try:
        await forged.import_saga(exported)
    except StoreError:
        return  # refused on import: the seal does not match
    assert not await forged.verify_saga("o-2")


async def test_a_stopped_worker_s_saga_function_is_resumed_on_every_store(store: SagaStore) -> None:
    """A worker stopped mid-call releases the saga; recovery re-runs the function, serving the recorded call."""
    calls: list[str] = []
    hang = {"b"}
    started = asyncio.Event()
    registry = make_registry(calls, hang, started)
    first = SagaExecutor(registry, store=store, compensation_timeout=0.2, lease_timeout=60)
    await first.submit("order", args={"items": ["a", "b", "c"]}, saga_id="o-3")
    worker = asyncio.create_task(first.serve(interval=0.02))
    await asyncio.wait_for(started.wait(), 20)
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker
    loaded = await store.load_saga("o-3")
    assert loaded is not None
    assert [row.status for row in sorted(loaded[1], key=lambda r: r.seq)] == [StepStatus.SUCCESS, StepStatus.RUNNING]
    (result,) = await SagaExecutor(registry, store=store).recover()
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"reserved": 3, "note": "", "price": 12.5}
    assert calls == ["a", "b", "c"]
    assert await store.verify_saga("o-3")


async def test_a_released_sleep_is_resumed_by_recovery_once_due(store: SagaStore) -> None:
    """A saga function that sleeps past wait_threshold is WAITING, unowned; recovery resumes it once due."""
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())

    @registry.saga
    async def later(saga: DynamicSaga) -> int:
        await saga.call("Reserve", item="first")
        await saga.sleep(0.3)
        await saga.call("Reserve", item="second")
        return 2

    executor = SagaExecutor(registry, store=store, wait_threshold=0.01)
    waiting = await executor.run(later, saga_id="sleepy")
    assert waiting.status is SagaStatus.WAITING
    loaded = await store.load_saga("sleepy")
    assert loaded is not None
    assert loaded[0].owner is None
    assert await executor.recover() == []
    await asyncio.sleep(0.35)
    (result,) = await executor.recover()
    assert result.status is SagaStatus.SUCCESS
    assert result.output == 2
    assert calls == ["first", "second"]
    assert await store.verify_saga("sleepy")


async def test_a_message_wakes_a_waiting_saga_function_on_every_store(store: SagaStore) -> None:
    """A saga function released to wait for a message is resumed by recovery once the message is stored."""
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())

    @registry.saga
    async def asks(saga: DynamicSaga) -> Any:
        await saga.call("Reserve", item="asked")
        answer = await saga.recv("answer")
        await saga.call("Reserve", item=f"answered-{answer['n']}")
        return answer

    executor = SagaExecutor(registry, store=store, wait_threshold=0.01)
    assert (await executor.run(asks, saga_id="asks")).status is SagaStatus.WAITING
    assert await executor.recover() == []
    await executor.send("asks", "answer", {"n": 5}, idempotency_key="a-1")
    await executor.send("asks", "answer", {"n": 6}, idempotency_key="a-1")  # the same key: nothing more
    (result,) = await executor.recover()
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"n": 5}
    assert calls == ["asked", "answered-5"]
    assert await store.verify_saga("asks")


async def test_on_postgresql_a_send_wakes_a_serving_worker_at_once(stores: Stores) -> None:
    """On PostgreSQL, send() NOTIFYs the workers: a saga waiting for the message goes on long before `interval`."""
    store = await stores.open("postgresql", wipe=True)
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())

    @registry.saga
    async def hears(saga: DynamicSaga) -> Any:
        return await saga.recv("ping")

    executor = SagaExecutor(registry, store=store, wait_threshold=0.01)
    assert (await executor.run(hears, saga_id="hears")).status is SagaStatus.WAITING
    worker = asyncio.create_task(executor.serve(interval=60))  # no round in the test's time: only the NOTIFY
    try:
        await asyncio.sleep(0.5)  # the worker LISTENs
        await executor.send("hears", "ping", {"n": 1})
        result = await executor.handle("hears").result(timeout=20)
    finally:
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
    assert result.output == {"n": 1}


async def test_a_saga_function_s_calls_leave_its_lease_to_the_lease_loop(store: SagaStore) -> None:
    """Each call of a saga function writes the saga row (its chain head) but leaves the stored lease as it is."""
    leases: list[Any] = []
    registry = ToolRegistry()

    @registry.tool
    class Look:
        async def execute(self, n: int, ctx: StepContext) -> int:
            loaded = await store.load_saga(ctx.saga_id)
            assert loaded is not None
            leases.append((loaded[0].owner, loaded[0].lease_expires_at))
            return n

    @registry.saga
    async def looks(saga: DynamicSaga) -> int:
        return sum([await saga.call("Look", n=n) for n in range(4)])

    executor = SagaExecutor(registry, store=store, lease_timeout=600)  # no renewal within the test
    result = await executor.run(looks, saga_id="looks")
    assert result.status is SagaStatus.SUCCESS
    assert result.output == 6
    assert len(leases) == 4
    assert leases[0][1] is not None
    assert leases == [leases[0]] * 4, "a call's write moved the stored lease"
    assert await store.verify_saga("looks")
