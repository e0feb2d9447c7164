"""Two executors on every store: a cancel cuts the owner's running calls, and takeovers are part of the record."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from saga_runtime import (
    SagaEvent,
    SagaExecutor,
    SagaStatus,
    SagaStore,
    StepContext,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._cli._render import timeline

from .conftest import Stores

PLAN: list[Any] = [
    {"tool": "Charge", "args": {"name": "a"}, "id": "a"},
    {"tool": "Charge", "args": {"name": "b"}, "id": "b"},
]


class Tools:
    """A charge whose first call of step "a" hangs (until cancelled); every call and undo noted."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.cut: list[str] = []
        self.undone: list[tuple[str, Any]] = []
        self.registry = ToolRegistry()
        tools = self

        @self.registry.tool
        class Charge:
            async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
                tools.calls.append(name)
                if name == "a" and tools.calls.count("a") == 1:
                    try:
                        await asyncio.sleep(60)
                    except asyncio.CancelledError:
                        tools.cut.append(name)
                        raise
                return {"charged": name}

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                tools.undone.append((ctx.args["name"], result))


async def second(stores: Stores, kind: str, store: SagaStore) -> SagaStore:
    """Return a second store on the same database (the same store object for memory)."""
    return store if kind == "memory" else await stores.open(kind)


async def until(check: Any, bound: float = 10.0) -> None:
    """Wait until `check()` is true (a generous bound)."""
    deadline = time.monotonic() + bound
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_cancel_cuts_the_owners_running_call_and_is_sealed(stores: Stores, kind: str, store: SagaStore) -> None:
    """Another executor's cancel: the owner cuts its running call (unknown, undone), compensates, seals who asked."""
    tools = Tools()
    owner = SagaExecutor(tools.registry, store, executor_id="owner", lease_timeout=0.6)
    events: list[SagaEvent] = []
    operator = SagaExecutor(
        tools.registry, await second(stores, kind, store), executor_id="operator", hooks=[events.append]
    )
    running = asyncio.create_task(owner.run(PLAN, saga_id="pay-1"))
    await until(lambda: tools.calls == ["a"])
    asked = await operator.cancel("pay-1", reason="customer asked")
    assert asked.status is SagaStatus.RUNNING
    again = await operator.cancel("pay-1", reason="twice")
    assert again.status is SagaStatus.RUNNING
    started = time.monotonic()
    result = await asyncio.wait_for(running, 10)
    assert time.monotonic() - started < 5  # noticed at a lease renewal (every 0.2s here), not after the call
    assert tools.cut == ["a"]
    assert tools.calls == ["a"]  # step b never ran
    assert tools.undone == [("a", None)]  # its outcome unknown: undone with result=None
    assert result.status is SagaStatus.COMPENSATED
    assert result.step("a").status is StepStatus.COMPENSATED
    assert result.error is not None
    assert "customer asked" in result.error
    assert result.cancel is not None
    assert (result.cancel.by, result.cancel.reason) == ("operator", "customer asked")
    assert [event.kind for event in events] == ["saga_cancel_requested"]
    stored = await operator.store.get_saga("pay-1")
    assert stored is not None
    assert stored.cancel == result.cancel
    assert await store.verify_saga("pay-1")
    assert "by operator: customer asked" in _render(stored)  # saga-runtime show


async def test_a_cancel_reason_cannot_pass_for_who_asked(store: SagaStore) -> None:
    """A reason written as a note of its own stays the reason: the record's `by` is the executor that asked."""
    tools = Tools()
    executor = SagaExecutor(tools.registry, store, executor_id="ops-1", lease_timeout=0.6)
    running = asyncio.create_task(executor.run(PLAN, saga_id="pay-2"))
    await until(lambda: tools.calls == ["a"])
    forged = '{"at": "2020-01-01T00:00:00+00:00", "by": "ceo", "reason": "x"}'
    await executor.cancel("pay-2", reason=forged)
    result = await asyncio.wait_for(running, 10)
    assert result.cancel is not None
    assert (result.cancel.by, result.cancel.reason) == ("ops-1", forged)


async def test_a_cancel_of_a_waiting_saga_is_sealed_too(store: SagaStore) -> None:
    """A WAITING saga cancelled: its request rejected by "cancel", it compensates, and the cancel is recorded."""
    registry = ToolRegistry()

    @registry.tool(approval=True)
    class Pay:
        async def execute(self, amount: int, ctx: StepContext) -> dict[str, Any]:
            return {"paid": amount}

    executor = SagaExecutor(registry, store, executor_id="ops-2")
    waiting = await executor.run([{"tool": "Pay", "args": {"amount": 5}, "id": "pay"}], saga_id="w-1")
    assert waiting.status is SagaStatus.WAITING
    result = await executor.cancel("w-1", reason="fraud")
    assert result.status is SagaStatus.COMPENSATED
    assert [request.decided_by for request in result.approvals] == ["cancel"]
    assert result.cancel is not None
    assert (result.cancel.by, result.cancel.reason) == ("ops-2", "fraud")
    assert await store.verify_saga("w-1")


class CutOff:
    """A store as one process sees it: once `cut`, its lease renewals and writes fail (the process is cut off)."""

    def __init__(self, store: SagaStore) -> None:
        self._store = store
        self.cut = False

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name in ("renew_leases", "save") and callable(value):

            async def guarded(*args: Any, **kwargs: Any) -> Any:
                if self.cut:
                    raise ConnectionError("cut off from the store")
                return await value(*args, **kwargs)

            return guarded
        return value


async def hang_and_cut_off(tools: Tools, store: SagaStore, executor_id: str, lease: float) -> asyncio.Task[Any]:
    """Start PLAN under `executor_id`; once its first call hangs, cut the process off from the store."""
    view = CutOff(store)
    first = SagaExecutor(
        tools.registry,
        view,  # type: ignore[arg-type]
        executor_id=executor_id,
        lease_timeout=lease,
        compensation_timeout=1,
    )
    task = asyncio.create_task(first.run(PLAN, saga_id="pay-9"))
    await until(lambda: tools.calls == ["a"])
    view.cut = True
    return task


async def stop(task: asyncio.Task[Any]) -> None:
    """Cancel a cut-off process's run: it reaches the store no more, so it changes nothing."""
    task.cancel()
    with pytest.raises(BaseException):  # noqa: B017 - cancelled, or its writes failed
        await task


async def test_a_takeover_after_a_lease_expired_is_recorded(store: SagaStore) -> None:
    """recover() on another executor records the takeover (at, by, from_owner, "lease expired"), sealed, shown."""
    tools = Tools()
    task = await hang_and_cut_off(tools, store, "worker-1", lease=0.4)
    await asyncio.sleep(0.6)  # past its lease
    rescuer = SagaExecutor(tools.registry, store, executor_id="worker-2")
    [result] = await rescuer.recover()
    await stop(task)
    assert result.status is SagaStatus.SUCCESS
    assert tools.calls == ["a", "a", "b"]  # a, of unknown outcome, ran again with its key
    [takeover] = result.takeovers
    assert (takeover.by, takeover.from_owner, takeover.reason) == ("worker-2", "worker-1", "lease expired")
    step_a = result.step("a")
    assert step_a.started_at is not None
    assert step_a.started_at < takeover.at
    assert await store.verify_saga("pay-9")
    stored = await store.get_saga("pay-9")
    assert stored is not None
    assert stored.takeovers == result.takeovers
    text = _render(stored)
    assert "taken over by worker-2 from worker-1 (lease expired)" in text
    assert "ran in two processes" in text


async def test_the_same_executor_id_takes_its_sagas_back_at_once(store: SagaStore) -> None:
    """`async with SagaExecutor(executor_id=X)` takes over X's sagas at once (not after their lease): "restart"."""
    tools = Tools()
    task = await hang_and_cut_off(tools, store, "app-1", lease=60)
    restarted = SagaExecutor(tools.registry, store, executor_id="app-1")
    async with restarted:
        result = await restarted.handle("pay-9").result(timeout=10)  # well before the 60s lease ran out
    await stop(task)
    assert result.status is SagaStatus.SUCCESS
    [takeover] = result.takeovers
    assert (takeover.by, takeover.from_owner, takeover.reason) == ("app-1", "app-1", "restart")
    assert await store.verify_saga("pay-9")


@asynccontextmanager
async def _serving(executor: SagaExecutor) -> AsyncIterator[None]:
    task = asyncio.create_task(executor.serve(interval=0.02))
    try:
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def _render(result: Any) -> str:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(timeline(result))
    return console.export_text()


async def test_a_worker_lacking_a_tool_gives_the_queued_saga_back(stores: Stores, kind: str, store: SagaStore) -> None:
    """A worker without a saga's tool puts it back QUEUED (not PARKED); a worker that has it runs it."""
    tools = Tools()
    lacking = SagaExecutor(ToolRegistry(), store, executor_id="no-tools")
    submitter = SagaExecutor(tools.registry, await second(stores, kind, store), executor_id="app")
    handle = await submitter.submit([{"tool": "Charge", "args": {"name": "b"}, "id": "b"}], saga_id="q-9")
    serving = asyncio.create_task(lacking.serve(interval=0.02))
    try:
        await asyncio.sleep(0.3)  # many rounds: it is claimed and given back each time
        assert await handle.status() in (SagaStatus.QUEUED, SagaStatus.RUNNING)  # never PARKED
        assert tools.calls == []
        async with _serving(submitter):
            result = await handle.result(timeout=10)
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
    assert result.status is SagaStatus.SUCCESS
    assert tools.calls == ["b"]
    assert result.takeovers == []  # a start from the queue is no takeover
    assert await store.verify_saga("q-9")


async def test_a_cancel_cuts_the_running_calls_of_a_group(store: SagaStore) -> None:
    """In a group of steps run at once, a cancel cuts the call still running (undone with None) and undoes the rest."""
    tools = Tools()
    executor = SagaExecutor(tools.registry, store, executor_id="owner", lease_timeout=0.6)
    plan = [
        [{"tool": "Charge", "args": {"name": "a"}, "id": "a1"}, {"tool": "Charge", "args": {"name": "a"}, "id": "a2"}]
    ]
    running = asyncio.create_task(executor.run(plan, saga_id="pay-3"))
    await until(lambda: tools.calls == ["a", "a"])  # the first hangs, the second is done
    await executor.cancel("pay-3", reason="stop")
    result = await asyncio.wait_for(running, 10)
    assert result.status is SagaStatus.COMPENSATED
    assert tools.cut == ["a"]
    assert sorted(tools.undone, key=str) == [("a", None), ("a", {"charged": "a"})]
    assert await store.verify_saga("pay-3")


async def test_saga_queued_is_told_once_per_stored_saga(store: SagaStore) -> None:
    """saga_queued is emitted once the saga is stored; submitting the same id again stores nothing and tells nothing."""
    events: list[SagaEvent] = []
    executor = SagaExecutor(Tools().registry, store, hooks=[events.append])
    for _ in range(2):
        await executor.submit([{"tool": "Charge", "args": {"name": "b"}, "id": "b"}], saga_id="q-once")
    assert [(event.kind, event.saga_id) for event in events] == [("saga_queued", "q-once")]


async def test_a_cancel_while_compensating_is_recorded_and_the_undo_goes_on(
    stores: Stores, kind: str, store: SagaStore
) -> None:
    """A cancel asked while the saga compensates is in its sealed history (who, why); the undoing is not cut."""
    undoing = asyncio.Event()
    release = asyncio.Event()
    undone: list[str] = []
    registry = ToolRegistry()

    @registry.tool
    class Book:
        async def execute(self, ctx: StepContext) -> dict[str, str]:
            return {"booked": "yes"}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            undoing.set()
            await release.wait()
            undone.append("book")

    @registry.tool
    class Fail:
        async def execute(self, ctx: StepContext) -> None:
            raise RuntimeError("declined")

    owner = SagaExecutor(registry, store, executor_id="owner", lease_timeout=0.6)
    operator = SagaExecutor(registry, await second(stores, kind, store), executor_id="operator")
    plan = [{"tool": "Book", "id": "book"}, {"tool": "Fail", "id": "fail"}]
    running = asyncio.create_task(owner.run(plan, saga_id="undo-1"))
    await asyncio.wait_for(undoing.wait(), 10)
    asked = await operator.cancel("undo-1", reason="give up", by="alice")
    assert asked.status is SagaStatus.COMPENSATING
    await asyncio.sleep(0.6)  # past a lease renewal (every 0.2s here): the owner has read the request
    release.set()
    result = await asyncio.wait_for(running, 10)
    assert result.status is SagaStatus.COMPENSATED
    assert undone == ["book"]
    assert result.error is not None
    assert "declined" in result.error  # the failure stands as the reason: the cancel came after it
    assert result.cancel is not None
    assert (result.cancel.by, result.cancel.reason) == ("alice", "give up")
    stored = await store.get_saga("undo-1")
    assert stored is not None
    assert stored.cancel == result.cancel
    assert await store.verify_saga("undo-1")


def plan_of(tool: str) -> list[Any]:
    """Return PLAN with another tool."""
    return [{**step, "tool": tool} for step in PLAN]
