"""An executor that can no longer prove its lease stops the saga instead of racing a possible new owner."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from saga_runtime import (
    DynamicSaga,
    LeaseLostError,
    MemoryStore,
    RetryPolicy,
    SagaEvent,
    SagaExecutor,
    SagaStatus,
    StepStatus,
    StoreConnectionError,
    ToolRegistry,
)
from saga_runtime._records import SagaRow, StepRow, now


class UnreachableForRenewals(MemoryStore):
    """A store whose lease renewals fail, as when the database is unreachable from this worker."""

    async def renew_leases(
        self, owner: str, saga_ids: Sequence[str], lease_expires_at: datetime, now: datetime
    ) -> set[str]:
        raise StoreConnectionError("the database is unreachable", url=self.url)


async def test_a_lease_that_runs_out_unrenewed_is_taken_back_when_nobody_else_took_the_saga(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """When renewals fail until the lease runs out (the store unreachable from this worker), nothing says the saga
    was taken over: the running step finishes, the next one starts only once a write confirms the lease (nobody
    else took the saga), and the saga ends SUCCESS, each step run once."""
    ran: list[str] = []
    registry = ToolRegistry()

    @registry.tool
    class Slow:
        async def execute(self, name: str) -> str:
            if name == "slow":
                await asyncio.sleep(1.0)  # more than three leases: every renewal meanwhile fails
            ran.append(name)
            return name

    store = UnreachableForRenewals()
    executor = SagaExecutor(registry, store=store, lease_timeout=0.3)
    plan = [
        {"id": "slow", "tool": "Slow", "args": {"name": "slow"}},
        {"id": "next", "tool": "Slow", "args": {"name": "next"}},
    ]
    result = await asyncio.wait_for(executor.run(plan, saga_id="stalled"), timeout=5)
    assert result.status is SagaStatus.SUCCESS
    assert ran == ["slow", "next"]
    assert "lease ran out while the store was unreachable" in caplog.text
    assert "taken over" not in caplog.text


class RecordingStore(MemoryStore):
    """A memory store that keeps a copy of every save it is asked for, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.saves: list[tuple[SagaRow | None, list[StepRow]]] = []

    async def save(
        self,
        saga: SagaRow | None,
        steps: Sequence[StepRow],
        *,
        owner: str | None = None,
        reseal: bool = True,
        lease: bool = True,
    ) -> None:
        self.saves.append((None if saga is None else saga.copy(), [row.copy() for row in steps]))
        await super().save(saga, steps, owner=owner, reseal=reseal, lease=lease)


def stalling_registry(lease: float, stalled_until: list[datetime]) -> ToolRegistry:
    """Return a registry whose `Step` tool, called with name "stall", blocks the loop for 0.9 of `lease` (no
    renewal runs: the lease nearly ends) and notes in `stalled_until` when it stopped."""
    registry = ToolRegistry()

    @registry.tool
    class Step:
        async def execute(self, name: str) -> str:
            if name == "stall":
                time.sleep(lease * 0.9)  # noqa: ASYNC251 - the point: the loop stalls, no renewal runs, the lease nearly ends
                stalled_until.append(now())
            return name

    return registry


async def test_a_step_never_starts_on_an_almost_expired_lease() -> None:
    """The intent write of a step starting with under a quarter of the lease left also extends the lease."""
    lease = 0.5
    stalled_until: list[datetime] = []
    registry = stalling_registry(lease, stalled_until)

    store = RecordingStore()
    executor = SagaExecutor(registry, store=store, lease_timeout=lease)
    plan = [
        {"id": "stall", "tool": "Step", "args": {"name": "stall"}},
        {"id": "next", "tool": "Step", "args": {"name": "next"}},
    ]

    result = await executor.run(plan, saga_id="late-lease")

    assert result.status is SagaStatus.SUCCESS
    (intent,) = [
        saga
        for saga, steps in store.saves
        if any(r.step_id == "next" and r.status is StepStatus.RUNNING for r in steps)
    ]
    assert intent is not None, "the intent of the next step was written without extending the lease"
    assert intent.lease_expires_at is not None
    assert intent.lease_expires_at >= stalled_until[0] + timedelta(seconds=lease)


async def test_a_saga_function_s_call_never_starts_on_an_almost_expired_lease() -> None:
    """A saga function's call written with under a quarter of the lease left extends the lease, as a plan step's
    intent does; a call written with more left leaves the stored lease as it is (the lease loop renews it)."""
    lease = 0.5
    stalled_until: list[datetime] = []
    registry = stalling_registry(lease, stalled_until)

    @registry.saga
    async def stalls(saga: DynamicSaga) -> None:
        for name in ("first", "stall", "next"):
            await saga.call("Step", name=name)

    store = RecordingStore()
    executor = SagaExecutor(registry, store=store, lease_timeout=lease)

    result = await executor.run(stalls, saga_id="late-lease-function")

    assert result.status is SagaStatus.SUCCESS

    def intent(name: str) -> SagaRow | None:
        (saga,) = [
            saga
            for saga, steps in store.saves
            if any(r.args == {"name": name} and r.status is StepStatus.RUNNING for r in steps)
        ]
        return saga

    first, stall, late = intent("first"), intent("stall"), intent("next")
    assert first is not None
    assert stall is not None
    assert late is not None, "a call's intent was written without the saga row (its chain head)"
    assert stall.lease_expires_at == first.lease_expires_at  # a lease fresh enough: left as it was
    assert late.lease_expires_at is not None
    assert late.lease_expires_at >= stalled_until[0] + timedelta(seconds=lease)


class TakenOverAtRenewal(MemoryStore):
    """A store whose lease renewals answer that another executor owns the saga now."""

    def __init__(self) -> None:
        super().__init__()
        self.renewed = asyncio.Event()

    async def renew_leases(
        self, owner: str, saga_ids: Sequence[str], lease_expires_at: datetime, now: datetime
    ) -> set[str]:
        self.renewed.set()
        return set()


async def test_a_fenced_engine_runs_and_retries_no_compensation(caplog: pytest.LogCaptureFixture) -> None:
    """Fenced while compensating: the compensation in flight ends; no other starts, is retried or is reported failed."""
    store = TakenOverAtRenewal()
    undone: list[str] = []
    events: list[SagaEvent] = []
    registry = ToolRegistry()

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=False))
    class Charge:
        async def execute(self, name: str) -> str:
            if name == "fails":
                raise ValueError("declined")
            return name

        async def compensate(self, result: str | None) -> None:
            if result == "second":
                await store.renewed.wait()  # in flight when the lease is lost: it runs to its end
            undone.append(str(result))

    executor = SagaExecutor(registry, store=store, lease_timeout=0.3, hooks=[events.append])
    plan = [{"tool": "Charge", "args": {"name": name}} for name in ("first", "second", "fails")]

    with pytest.raises(LeaseLostError):
        await asyncio.wait_for(executor.run(plan, saga_id="fenced-undo"), timeout=10)

    assert undone == ["second"]  # "first" is left to the new owner
    finished = [(e.step_id, e.error) for e in events if e.kind == "compensation_finished"]
    assert all(error is None for _, error in finished), finished
    assert "NOT undone" not in caplog.text


class TakenOverAsTheCallerCancels(MemoryStore):
    """A store whose lease renewal answers "taken over" in the same turn as the caller cancels the run."""

    def __init__(self) -> None:
        super().__init__()
        self.caller: asyncio.Task[object] | None = None

    async def renew_leases(
        self, owner: str, saga_ids: Sequence[str], lease_expires_at: datetime, now: datetime
    ) -> set[str]:
        assert self.caller is not None
        self.caller.cancel()
        return set()


def _blocking_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    class Wait:
        async def execute(self) -> str:
            await asyncio.sleep(5)
            return "done"

        async def compensate(self, result: str | None) -> None:
            return None

    return registry


async def test_a_caller_cancelling_as_the_lease_is_lost_gets_its_cancellation() -> None:
    """run() cancelled by its caller in the turn its lease is lost raises CancelledError, not LeaseLostError."""
    store = TakenOverAsTheCallerCancels()
    executor = SagaExecutor(_blocking_registry(), store=store, lease_timeout=0.3)
    task = asyncio.create_task(executor.run([{"tool": "Wait"}], saga_id="both"))
    store.caller = task
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=5)
    assert task.cancelled()


async def test_a_dynamic_saga_cancelled_as_its_lease_is_lost_gives_the_cancellation() -> None:
    """A dynamic block cancelled by its caller in the turn its lease is lost raises CancelledError out of it."""
    store = TakenOverAsTheCallerCancels()
    executor = SagaExecutor(_blocking_registry(), store=store, lease_timeout=0.3)

    async def block() -> None:
        async with executor.saga("both-dynamic") as saga:
            await saga.call("Wait")

    task = asyncio.create_task(block())
    store.caller = task
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=5)
    assert task.cancelled()


async def test_a_lease_lost_without_a_cancellation_still_raises_lease_lost() -> None:
    """Fenced alone (nobody cancelled the caller), a dynamic block raises LeaseLostError."""
    store = TakenOverAtRenewal()
    executor = SagaExecutor(_blocking_registry(), store=store, lease_timeout=0.3)
    with pytest.raises(LeaseLostError):
        async with executor.saga("fenced-dynamic") as saga:
            await asyncio.wait_for(saga.call("Wait"), timeout=5)
