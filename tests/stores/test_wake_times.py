"""Waiting sagas due by their wake time (schema version 15): workers ask only for the sagas due now."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from saga_runtime import DynamicSaga, SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._records import now
from saga_runtime._storage import SagaStore


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    class Note:
        async def execute(self, text: str) -> str:
            return text

    @registry.saga
    async def nap(saga: DynamicSaga) -> None:
        await saga.sleep(3600)
        await saga.call("Note", text="woke")

    @registry.saga
    async def listen(saga: DynamicSaga) -> Any:
        value = await saga.recv("go")
        await saga.call("Note", text="heard")
        return value

    @registry.saga
    async def listen_a_while(saga: DynamicSaga) -> Any:
        return await saga.recv("go", timeout=3600)

    return registry


async def test_a_sleeping_saga_function_is_due_only_at_its_wake_time(store: SagaStore) -> None:
    """A saga function asleep for an hour is not listed as due now; it is once its wake time has passed."""
    executor = SagaExecutor(_registry(), store, wait_threshold=0.1)
    assert (await executor.run("nap", saga_id="nap")).status is SagaStatus.WAITING
    assert "nap" not in await store.waiting_sagas(now())
    assert "nap" in await store.waiting_sagas(now() + timedelta(hours=1, seconds=5))


async def test_a_message_makes_a_waiting_saga_function_due_at_once(store: SagaStore) -> None:
    """A saga function waiting for a message is not due; the message sent to it makes it due at once."""
    executor = SagaExecutor(_registry(), store, wait_threshold=0.1)
    assert (await executor.run("listen", saga_id="l")).status is SagaStatus.WAITING
    assert (await executor.run("listen_a_while", saga_id="t")).status is SagaStatus.WAITING
    due = await store.waiting_sagas(now())
    assert "l" not in due
    assert "t" not in due
    assert "t" in await store.waiting_sagas(now() + timedelta(hours=1, seconds=5))  # its recv's deadline
    await executor.send("l", "go", {"n": 1})
    assert "l" in await store.waiting_sagas(now())
    await executor.recover()  # goes on with the sagas due: the one told of its message
    assert (await store.get_saga("l")).status is SagaStatus.SUCCESS  # type: ignore[union-attr]
    stored = await store.get_saga("t")
    assert stored is not None
    assert stored.status is SagaStatus.WAITING  # not due: left as it was
    assert "t" not in await store.waiting_sagas(now())


async def test_a_cancel_makes_a_waiting_saga_function_due_at_once(store: SagaStore) -> None:
    """A cancel of a saga function asleep for an hour makes it due now: the next look compensates it."""
    executor = SagaExecutor(_registry(), store, wait_threshold=0.1)
    assert (await executor.run("nap", saga_id="c")).status is SagaStatus.WAITING
    await executor.cancel("c", reason="no longer needed")
    assert "c" in await store.waiting_sagas(now())
    await executor.recover()
    result = await store.get_saga("c")
    assert result is not None
    assert (result.status, result.end_reason) == (SagaStatus.COMPENSATED, "cancelled")


async def test_a_queued_saga_with_a_later_start_says_it_waits_for_a_time(store: SagaStore) -> None:
    """A QUEUED saga whose not_before is to come says it waits for a time, naming it (issue 36's waiting kinds)."""
    executor = SagaExecutor(_registry(), store)
    later = now() + timedelta(hours=2)
    await executor.submit("nap", saga_id="later", not_before=later)
    await executor.submit("nap", saga_id="now")
    stored = await store.get_saga("later")
    assert stored is not None
    assert stored.waiting_for is not None
    assert stored.waiting_for["kind"] == "time"
    assert later.isoformat(timespec="seconds") in stored.waiting_for["detail"]
    now_saga = await store.get_saga("now")
    assert now_saga is not None
    assert now_saga.waiting_for is None
