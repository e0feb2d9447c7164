"""Queues through the public API on every store: submit, handles, workers starting sagas within limits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from saga_runtime import (
    IdempotencyConflictError,
    PlanValidationError,
    Queue,
    RateLimit,
    SagaEvent,
    SagaExecutor,
    SagaInProgressError,
    SagaNotFoundError,
    SagaStatus,
    SagaStore,
    StepContext,
    ToolRegistry,
)

from .conftest import Stores

PLAN: list[Any] = [
    {"tool": "Effect", "args": {"name": "a"}, "id": "a"},
    {"tool": "Effect", "args": {"name": "b"}, "id": "b"},
]


class Ledger:
    """Tools that note every start and end, and how many run at once (overall and per key)."""

    def __init__(self, pause: float = 0.0) -> None:
        self.started: list[str] = []
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.registry = ToolRegistry()
        ledger = self

        @self.registry.tool
        class Effect:
            async def execute(self, name: str, ctx: StepContext, key: str = "", **_: Any) -> dict[str, Any]:
                ledger.started.append(name)
                for slot in ("*", key):
                    ledger.running[slot] = ledger.running.get(slot, 0) + 1
                    ledger.peak[slot] = max(ledger.peak.get(slot, 0), ledger.running[slot])
                try:
                    await asyncio.sleep(pause)
                finally:
                    for slot in ("*", key):
                        ledger.running[slot] -= 1
                return {"name": name}

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                return None


def one_step(name: str, key: str = "") -> list[Any]:
    """Return a one-step plan that notes `name` (and runs under `key` in the ledger)."""
    return [{"tool": "Effect", "args": {"name": name, "key": key}, "id": "only"}]


@asynccontextmanager
async def worker(executor: SagaExecutor, **options: Any) -> AsyncIterator[asyncio.Task[None]]:
    """Run `executor.serve(**options)` in a task for the block, then stop it."""
    task = asyncio.create_task(executor.serve(interval=0.02, **options))
    try:
        yield task
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_submit_stores_a_queued_saga_and_runs_nothing(store: SagaStore) -> None:
    """submit() stores the saga QUEUED, calls no tool, and emits saga_queued once stored."""
    ledger = Ledger()
    events: list[SagaEvent] = []
    executor = SagaExecutor(ledger.registry, store, hooks=[events.append])
    handle = await executor.submit(PLAN, saga_id="q-1")
    assert handle.saga_id == "q-1"
    assert await handle.status() is SagaStatus.QUEUED
    assert not SagaStatus.QUEUED.is_terminal
    assert ledger.started == []
    assert [event.kind for event in events] == ["saga_queued"]
    assert await executor.recover() == []  # recovery never takes a queued saga
    assert await handle.status() is SagaStatus.QUEUED


async def test_submit_is_idempotent_on_the_id(store: SagaStore) -> None:
    """The same id and plan again stores nothing; another plan raises IdempotencyConflictError."""
    executor = SagaExecutor(Ledger().registry, store)
    first = await executor.submit(PLAN, saga_id="q-2", priority=3)
    again = await executor.submit(PLAN, saga_id="q-2")
    assert again.saga_id == first.saga_id
    with pytest.raises(IdempotencyConflictError):
        await executor.submit(one_step("z"), saga_id="q-2")
    assert len(await store.list_sagas()) == 1


async def test_a_bad_plan_or_option_stores_nothing(store: SagaStore) -> None:
    """A refused plan, a naive not_before, a negative priority or a bad queue raise and store nothing."""
    executor = SagaExecutor(Ledger().registry, store)
    with pytest.raises(PlanValidationError):
        await executor.submit([{"tool": "Nope", "args": {}}], saga_id="bad")
    with pytest.raises(ValueError, match="aware"):
        await executor.submit(PLAN, not_before=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="priority"):
        await executor.submit(PLAN, priority=-1)
    with pytest.raises(ValueError, match="queue"):
        await executor.submit(PLAN, queue="")
    assert await store.list_sagas() == []


async def test_run_of_a_queued_id_is_refused(store: SagaStore) -> None:
    """run() with the id of a QUEUED saga raises SagaInProgressError and runs nothing."""
    ledger = Ledger()
    executor = SagaExecutor(ledger.registry, store)
    await executor.submit(PLAN, saga_id="q-3")
    with pytest.raises(SagaInProgressError, match="QUEUED"):
        await executor.run(PLAN, saga_id="q-3")
    assert ledger.started == []


async def test_handle_result_times_out_then_a_worker_finishes_it(store: SagaStore) -> None:
    """result(timeout) raises TimeoutError while queued; a worker serving the queue runs it to SUCCESS."""
    ledger = Ledger()
    executor = SagaExecutor(ledger.registry, store)
    handle = await executor.submit(PLAN, saga_id="q-4", queue="payouts")
    with pytest.raises(TimeoutError):
        await handle.result(timeout=0.05)
    async with worker(executor, queues=[Queue("payouts")]):
        result = await executor.handle("q-4").result(timeout=10)
    assert result.status is SagaStatus.SUCCESS
    assert ledger.started == ["a", "b"]


async def test_a_handle_of_an_unknown_id_names_it(store: SagaStore) -> None:
    """A handle's status of an unknown id raises SagaNotFoundError, a KeyError naming the id."""
    executor = SagaExecutor(Ledger().registry, store)
    with pytest.raises(KeyError, match="nobody"):
        await executor.handle("nobody").status()
    with pytest.raises(SagaNotFoundError):
        await executor.handle("nobody").result(timeout=1)


async def test_a_worker_starts_by_priority_then_submit_order(store: SagaStore) -> None:
    """One at a time, queued sagas start lowest priority first, then in submit order; other queues wait."""
    ledger = Ledger()
    executor = SagaExecutor(ledger.registry, store)
    for name, priority in (("late", 5), ("first", 0), ("second", 0), ("middle", 2)):
        await executor.submit(one_step(name), saga_id=name, priority=priority)
        await asyncio.sleep(0.002)  # distinct submit times
    await executor.submit(one_step("elsewhere"), saga_id="elsewhere", queue="other")
    async with worker(executor, concurrency=1):
        await executor.handle("late").result(timeout=10)
    assert ledger.started == ["first", "second", "middle", "late"]
    assert await executor.handle("elsewhere").status() is SagaStatus.QUEUED


async def test_not_before_delays_the_start(store: SagaStore) -> None:
    """A saga whose not_before has not passed waits; an aware datetime in the past starts at once."""
    ledger = Ledger()
    executor = SagaExecutor(ledger.registry, store)
    later = await executor.submit(one_step("later"), saga_id="later", not_before=3600)
    await executor.submit(one_step("now"), saga_id="now", not_before=datetime.now(UTC) - timedelta(seconds=1))
    async with worker(executor):
        await executor.handle("now").result(timeout=10)
        await asyncio.sleep(0.1)
    assert await later.status() is SagaStatus.QUEUED
    assert ledger.started == ["now"]


async def test_queue_limits_hold_across_two_workers(stores: Stores, kind: str) -> None:
    """Two workers on one store never run more than concurrency sagas of a queue, nor key_concurrency per key."""
    first = await stores.open(kind, wipe=True)
    second = first if kind == "memory" else await stores.open(kind, stores.url(kind))
    ledger = Ledger(pause=0.05)
    queue = Queue("limited", concurrency=3, key_concurrency=1)
    one = SagaExecutor(ledger.registry, first)
    two = SagaExecutor(ledger.registry, second)
    for index in range(12):
        await one.submit(
            one_step(f"s{index}", key=f"k{index % 4}"), saga_id=f"s{index}", queue="limited", key=f"k{index % 4}"
        )
    async with worker(one, queues=[queue]), worker(two, queues=[queue]):
        for index in range(12):
            assert (await one.handle(f"s{index}").result(timeout=30)).status is SagaStatus.SUCCESS
    assert sorted(ledger.started) == sorted(f"s{index}" for index in range(12))
    assert ledger.peak["*"] <= 3
    assert all(ledger.peak[f"k{k}"] == 1 for k in range(4))


async def test_a_rate_limit_bounds_starts_per_window(store: SagaStore) -> None:
    """RateLimit(2, per=60) starts two sagas of the queue, and the third waits for the window."""
    ledger = Ledger()
    executor = SagaExecutor(ledger.registry, store)
    for name in ("r1", "r2", "r3"):
        await executor.submit(one_step(name), saga_id=name, queue="rated")
    async with worker(executor, queues=[Queue("rated", rate_limit=RateLimit(2, per=60))]):
        await executor.handle("r2").result(timeout=10)
        await asyncio.sleep(0.1)
    assert sorted(ledger.started) == ["r1", "r2"]  # started together: in either order
    assert await executor.handle("r3").status() is SagaStatus.QUEUED


def test_queue_options_are_validated() -> None:
    """Queue and RateLimit refuse a negative or zero limit, and a Queue takes its limits by keyword."""
    with pytest.raises(ValueError, match="concurrency"):
        Queue("q", concurrency=0)
    with pytest.raises(ValueError, match="key_concurrency"):
        Queue("q", key_concurrency=-1)
    with pytest.raises(ValueError, match="limit"):
        RateLimit(-1)
    with pytest.raises(ValueError, match="per"):
        RateLimit(1, per=0)
    with pytest.raises(TypeError):
        Queue("q", 3)  # type: ignore[misc]


async def test_a_stopped_worker_compensates_nothing_and_releases_its_sagas(store: SagaStore) -> None:
    """Cancelling serve() lets the running call return, compensates nothing, and leaves the saga unowned to resume."""
    gate = asyncio.Event()
    calls: list[str] = []
    registry = ToolRegistry()

    @registry.tool
    class Slow:
        async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
            calls.append(f"do {name}")
            if name == "a" and not gate.is_set():
                gate.set()
                await asyncio.sleep(0.2)
            return {"name": name}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            calls.append(f"undo {ctx.args['name']}")

    plan = [{"tool": "Slow", "args": {"name": n}, "id": n} for n in ("a", "b")]
    first = SagaExecutor(registry, store, lease_timeout=60)
    await first.submit(plan, saga_id="deploy")
    task = asyncio.create_task(first.serve(interval=0.02))
    await asyncio.wait_for(gate.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await store.load_saga("deploy")
    assert stored is not None
    assert stored[0].status is SagaStatus.RUNNING
    assert stored[0].owner is None  # released: the next worker takes it at once, not after the 60 s lease
    assert not any(call.startswith("undo") for call in calls)
    second = SagaExecutor(registry, store, lease_timeout=60)
    async with worker(second):
        result = await second.handle("deploy").result(timeout=10)
    assert result.status is SagaStatus.SUCCESS
    assert not any(call.startswith("undo") for call in calls)
    assert calls == ["do a", "do b"]  # the call running at the stop returned and was recorded: not run again


async def test_cancel_of_a_queued_saga_ends_it_at_once(store: SagaStore) -> None:
    """cancel() of a QUEUED saga ends it COMPENSATED, no tool called, its error saying cancelled and why."""
    ledger = Ledger()
    events: list[SagaEvent] = []
    executor = SagaExecutor(ledger.registry, store, hooks=[events.append])
    handle = await executor.submit(PLAN, saga_id="c-1")
    result = await executor.cancel("c-1", reason="customer changed their mind")
    assert result.status is SagaStatus.COMPENSATED
    assert result.error is not None
    assert "cancelled" in result.error
    assert "customer changed their mind" in result.error
    assert (await handle.result(timeout=1)).status is SagaStatus.COMPENSATED
    async with worker(executor):
        await asyncio.sleep(0.1)
    assert ledger.started == []
    assert [event.kind for event in events] == ["saga_queued", "saga_cancel_requested"]


async def test_cancel_of_a_queued_saga_is_recorded_and_sealed(store: SagaStore) -> None:
    """A QUEUED saga cancelled carries its CancelRecord (who, when, why) in the sealed record, as a running one."""
    executor = SagaExecutor(Ledger().registry, store, executor_id="ops-q")
    await executor.submit(PLAN, saga_id="c-5")
    await executor.submit(PLAN, saga_id="c-6")
    before = datetime.now(UTC)
    result = await executor.cancel("c-5", reason="duplicate order")
    assert result.cancel is not None
    assert (result.cancel.by, result.cancel.reason) == ("ops-q", "duplicate order")
    assert before <= result.cancel.at <= datetime.now(UTC)
    named = await executor.cancel("c-6", by="alice")
    assert named.cancel is not None
    assert (named.cancel.by, named.cancel.reason) == ("alice", None)
    stored = await store.get_saga("c-5")
    assert stored is not None
    assert stored.cancel == result.cancel
    assert await store.verify_saga("c-5")
    assert await store.verify_saga("c-6")


async def test_cancel_of_a_terminal_or_unknown_saga(store: SagaStore) -> None:
    """A terminal saga is returned unchanged; an unknown id raises SagaNotFoundError, a KeyError naming it."""
    executor = SagaExecutor(Ledger().registry, store)
    done = await executor.run(PLAN, saga_id="c-2")
    again = await executor.cancel("c-2", reason="too late")
    assert again.status is SagaStatus.SUCCESS == done.status
    assert again.error is None
    with pytest.raises(SagaNotFoundError, match="ghost"):
        await executor.cancel("ghost")
    with pytest.raises(KeyError):
        await executor.cancel("ghost")


async def test_cancel_of_a_running_saga_is_noticed_by_its_owner(store: SagaStore) -> None:
    """A RUNNING saga's owner notices the request within lease_timeout/3 and compensates; later steps never run."""
    calls: list[str] = []
    registry = ToolRegistry()

    @registry.tool
    class Step:
        async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
            calls.append(f"do {name}")
            if name == "a":
                await asyncio.sleep(0.6)
            return {"name": name}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            calls.append(f"undo {ctx.args['name']}")

    plan = [{"tool": "Step", "args": {"name": n}, "id": n} for n in ("a", "b")]
    executor = SagaExecutor(registry, store, lease_timeout=0.3)
    running = asyncio.create_task(executor.run(plan, saga_id="c-3"))
    await asyncio.sleep(0.05)
    asked = await executor.cancel("c-3", reason="stop it")
    assert asked.status is SagaStatus.RUNNING
    result = await asyncio.wait_for(running, 10)
    assert result.status is SagaStatus.COMPENSATED
    assert result.error is not None
    assert "stop it" in result.error
    assert calls == ["do a", "undo a"]


async def test_cancel_of_a_waiting_saga_rejects_its_requests(store: SagaStore) -> None:
    """A WAITING saga's undecided requests are rejected with decided_by="cancel", and the saga compensates."""
    registry = ToolRegistry()

    @registry.tool(approval=True)
    class Pay:
        async def execute(self, amount: int, ctx: StepContext) -> dict[str, Any]:
            return {"paid": amount}

    executor = SagaExecutor(registry, store)
    waiting = await executor.run([{"tool": "Pay", "args": {"amount": 5}, "id": "pay"}], saga_id="c-4")
    assert waiting.status is SagaStatus.WAITING
    result = await executor.cancel("c-4", reason="fraud")
    assert result.status is SagaStatus.COMPENSATED
    assert [request.decided_by for request in result.approvals] == ["cancel"]


async def test_serve_samples_each_queue_depth_into_a_hook(store: SagaStore) -> None:
    """A hook with observe_queue_depth (PrometheusHook) is told how many sagas wait in each served queue."""
    depths: list[tuple[str, int]] = []

    class DepthHook:
        def __call__(self, event: SagaEvent) -> None:
            return None

        def observe_queue_depth(self, queue: str, depth: int) -> None:
            depths.append((queue, depth))

    executor = SagaExecutor(Ledger().registry, store, hooks=[DepthHook()])
    await executor.submit(one_step("later"), saga_id="d-1", queue="slow", not_before=3600)
    async with worker(executor, queues=["slow"]):
        await asyncio.sleep(0.1)
    assert ("slow", 1) in depths
