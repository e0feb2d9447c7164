"""Child sagas on every store (API.md §18): `saga.child()` runs a saga as one step of its parent, `parent_id` links
back, a SUCCESS child is undone as a whole when its parent compensates, and a child resumes with its parent only."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from store_calls import count_calls

from saga_runtime import (
    DynamicSaga,
    IdempotencyConflictError,
    PlanValidationError,
    SagaExecutor,
    SagaInProgressError,
    SagaStatus,
    StepContext,
    StepFailedError,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._engine import _children
from saga_runtime._storage import SagaStore

from .conftest import Stores


def make_registry(calls: list[str], hang: set[str], started: asyncio.Event) -> ToolRegistry:
    """Return a registry whose tool logs its calls and undos (hanging once on the items in `hang`), a child saga
    function `pick`, and a parent `order` that runs `pick` and a plan as children."""
    registry = ToolRegistry()

    @registry.tool
    class Reserve:
        async def execute(self, item: str, ctx: StepContext) -> dict[str, str]:
            if item in hang:
                hang.discard(item)
                started.set()
                await asyncio.sleep(60)
            if item.startswith("bad"):
                raise RuntimeError(f"no stock of {item}")
            calls.append(item)
            return {"item": item, "key": ctx.idempotency_key}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            calls.append(f"undo {ctx.args['item']}")

    @registry.saga
    async def pick(saga: DynamicSaga, items: list[str]) -> int:
        for item in items:
            await saga.call("Reserve", item=item)
        return len(items)

    @registry.saga
    async def order(saga: DynamicSaga, items: list[str], then_fail: bool = False) -> dict[str, Any]:
        await saga.call("Reserve", item="top")
        picked = await saga.child(pick, args={"items": items})
        planned = await saga.child([{"id": "p", "tool": "Reserve", "args": {"item": "plan"}}], saga_id="plan-child")
        if then_fail:
            raise RuntimeError("the parent gives up")
        return {"picked": picked.output, "parent": picked.parent_id, "plan": planned.status.value}

    return registry


async def test_a_child_runs_as_one_step_and_links_back(stores: Stores, store: SagaStore) -> None:
    """A child's id defaults to <parent>/<step>, its result names its parent; the parent's record holds it as one
    step; running the parent again returns it from the record, no tool called; the link survives export."""
    calls: list[str] = []
    executor = SagaExecutor(make_registry(calls, set(), asyncio.Event()), store=store)
    result = await executor.run("order", args={"items": ["a", "b"]}, saga_id="o-1")
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"picked": 2, "parent": "o-1", "plan": "SUCCESS"}
    assert [(s.step_id, s.tool_name) for s in result.steps] == [
        ("Reserve-0", "Reserve"),
        ("pick-1", "saga.child"),
        ("child-2", "saga.child"),
    ]
    assert result.step("pick-1").result == {"saga_id": "o-1/pick-1", "status": "SUCCESS", "output": 2}
    child = await store.get_saga("o-1/pick-1")
    assert child is not None
    assert (child.parent_id, child.status, child.output, child.function) == ("o-1", SagaStatus.SUCCESS, 2, "pick")
    planned = await store.get_saga("plan-child")
    assert planned is not None
    assert (planned.parent_id, planned.kind) == ("o-1", "plan")
    assert result.parent_id is None
    assert calls == ["top", "a", "b", "plan"]
    again = await executor.run("order", args={"items": ["a", "b"]}, saga_id="o-1")
    assert again.output == result.output
    assert calls == ["top", "a", "b", "plan"]
    for saga_id in ("o-1", "o-1/pick-1", "plan-child"):
        assert await store.verify_saga(saga_id)
    target = await stores.open("memory")
    await target.import_saga(await store.export_saga("o-1/pick-1"))
    imported = await target.get_saga("o-1/pick-1")
    assert imported is not None
    assert imported.parent_id == "o-1"


async def test_a_success_child_is_undone_as_a_whole_when_its_parent_compensates(store: SagaStore) -> None:
    """The parent failing after its children undoes each SUCCESS child's steps in reverse, then the parent's own."""
    calls: list[str] = []
    executor = SagaExecutor(make_registry(calls, set(), asyncio.Event()), store=store)
    result = await executor.run("order", args={"items": ["a", "b"], "then_fail": True}, saga_id="o-2")
    assert result.status is SagaStatus.COMPENSATED
    assert calls == ["top", "a", "b", "plan", "undo plan", "undo b", "undo a", "undo top"]
    child = await store.get_saga("o-2/pick-1")
    assert child is not None
    assert child.status is SagaStatus.COMPENSATED
    assert [s.status for s in child.steps] == [StepStatus.COMPENSATED, StepStatus.COMPENSATED]
    assert "o-2" in (child.error or "")
    assert [s.status for s in result.steps] == [StepStatus.COMPENSATED] * 3
    for saga_id in ("o-2", "o-2/pick-1", "plan-child"):
        assert await store.verify_saga(saga_id)


async def test_a_failing_child_raises_step_failed_in_its_parent_its_effects_undone(store: SagaStore) -> None:
    """A child that compensates raises StepFailedError in the parent, which may go on; the child's effects are
    undone already, and the parent compensating later leaves it as it is."""
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())

    @registry.saga
    async def tries(saga: DynamicSaga) -> str:
        try:
            await saga.child("pick", args={"items": ["c", "bad-d"]})
        except StepFailedError as exc:
            return f"{exc.tool_name}: {exc.error_type}"
        return "no error"

    executor = SagaExecutor(registry, store=store)
    result = await executor.run(tries, saga_id="t-1")
    assert result.output == "saga.child: SagaFailedError"
    assert calls == ["c", "undo c"]
    child = await store.get_saga("t-1/pick-0")
    assert child is not None
    assert (child.status, child.parent_id) == (SagaStatus.COMPENSATED, "t-1")
    assert result.steps[0].status is StepStatus.FAILED


async def test_bad_child_input_raises_and_stores_nothing(store: SagaStore) -> None:
    """args= with a plan is a TypeError, an unregistered function or bad arguments a PlanValidationError, a saga_id
    taken by a saga that is not this one's child an IdempotencyConflictError: no step, no child stored."""
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())
    errors: list[str] = []

    @registry.saga
    async def careless(saga: DynamicSaga) -> list[str]:
        attempts: list[Any] = [
            lambda: saga.child([{"id": "p", "tool": "Reserve", "args": {"item": "x"}}], args={"item": "x"}),
            lambda: saga.child("nobody"),
            lambda: saga.child("pick", args={"items": "not a list", "extra": 1}),
            lambda: saga.child("pick", args={"items": ["x"]}, saga_id="taken"),
        ]
        for attempt in attempts:
            try:
                await attempt()
            except (TypeError, PlanValidationError, IdempotencyConflictError) as exc:
                errors.append(type(exc).__name__)
        return errors

    executor = SagaExecutor(registry, store=store)
    await executor.run("pick", args={"items": []}, saga_id="taken")
    result = await executor.run(careless, saga_id="c-1")
    assert result.status is SagaStatus.SUCCESS
    assert errors == ["TypeError", "PlanValidationError", "PlanValidationError", "IdempotencyConflictError"]
    assert result.steps == []
    assert calls == []
    assert sorted(s.saga_id for s in await store.list_sagas()) == ["c-1", "taken"]


async def test_a_child_in_a_dynamic_saga_block_is_undone_when_the_block_raises(store: SagaStore) -> None:
    """`executor.saga()` blocks run children too: an exception leaving the block undoes the SUCCESS child."""
    calls: list[str] = []
    executor = SagaExecutor(make_registry(calls, set(), asyncio.Event()), store=store)
    seen: list[Any] = []

    async def block() -> None:
        async with executor.saga(saga_id="block") as saga:
            picked = await saga.child("pick", args={"items": ["a"]})
            seen.append((picked.saga_id, picked.parent_id, picked.output))
            raise RuntimeError("changed my mind")

    with pytest.raises(RuntimeError):
        await block()
    assert seen == [("block/pick-0", "block", 1)]
    assert calls == ["a", "undo a"]
    child = await store.get_saga("block/pick-0")
    assert child is not None
    assert child.status is SagaStatus.COMPENSATED


async def test_a_stopped_parent_resumes_its_child_recovery_never_drives_the_child_alone(store: SagaStore) -> None:
    """A worker stopped while a child's call runs leaves parent and child live; recovery drives the parent only,
    whose re-run resumes the same child: no second child, no call made twice, nothing compensated."""
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
    child = await store.load_saga("o-3/pick-1")
    assert child is not None
    assert child[0].status is SagaStatus.RUNNING  # stopped where it stood: its parent decides
    assert [row.status for row in child[1]] == [StepStatus.SUCCESS, StepStatus.RUNNING]
    results = await SagaExecutor(registry, store=store).recover()
    assert [r.saga_id for r in results] == ["o-3"]  # the child went on through its parent, not on its own
    assert results[0].output == {"picked": 3, "parent": "o-3", "plan": "SUCCESS"}
    assert calls == ["top", "a", "b", "c", "plan"]
    sagas = await store.list_sagas()
    assert sorted(s.saga_id for s in sagas) == ["o-3", "o-3/pick-1", "plan-child"]
    assert all(s.status is SagaStatus.SUCCESS for s in sagas)
    for saga_id in ("o-3", "o-3/pick-1"):
        assert await store.verify_saga(saga_id)


async def test_a_caller_cancelling_the_parent_mid_child_undoes_the_child(store: SagaStore) -> None:
    """The parent's caller cancelling while a child runs: the parent compensates, and with it the child's calls
    (the one cut mid-call, of unknown outcome, too)."""
    calls: list[str] = []
    hang = {"b"}
    started = asyncio.Event()
    executor = SagaExecutor(make_registry(calls, hang, started), store=store)
    running = asyncio.create_task(executor.run("order", args={"items": ["a", "b"]}, saga_id="o-4"))
    await asyncio.wait_for(started.wait(), 20)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    parent = await store.get_saga("o-4")
    child = await store.get_saga("o-4/pick-1")
    assert parent is not None
    assert child is not None
    assert (parent.status, child.status) == (SagaStatus.COMPENSATED, SagaStatus.COMPENSATED)
    assert calls == ["top", "a", "undo b", "undo a", "undo top"]


async def test_a_waiting_child_is_gone_on_with_by_its_parent_not_by_a_worker(store: SagaStore) -> None:
    """A child released to wait (a long sleep) is WAITING; once due, with its parent's worker stopped, recovery does
    not resume the child on its own: it resumes the parent, whose step goes on with the child."""
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())

    @registry.saga
    async def naps(saga: DynamicSaga) -> str:
        await saga.call("Reserve", item="before")
        await saga.sleep(1.0)
        await saga.call("Reserve", item="after")
        return "rested"

    @registry.saga
    async def waits(saga: DynamicSaga) -> Any:
        return (await saga.child(naps)).output

    # A stop lets running calls go on for compensation_timeout: cut at once, the parent's step is cut mid-wait.
    first = SagaExecutor(registry, store=store, wait_threshold=0.05, lease_timeout=60, compensation_timeout=0.05)
    await first.submit(waits, saga_id="w-1")
    worker = asyncio.create_task(first.serve(interval=0.02))
    for _ in range(500):
        child = await store.get_saga("w-1/naps-0")
        if child is not None and child.status is SagaStatus.WAITING:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the child never waited")
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker
    stopped = await store.get_saga("w-1")
    assert stopped is not None
    assert stopped.status is SagaStatus.RUNNING
    await asyncio.sleep(1.1)  # the child is due now
    results = await SagaExecutor(registry, store=store, wait_threshold=0.05).recover()
    assert [r.saga_id for r in results] == ["w-1"]  # the child went on through its parent, not on its own
    assert (results[0].status, results[0].output) == (SagaStatus.SUCCESS, "rested")
    assert calls == ["before", "after"]


async def test_recovery_compensating_a_dead_dynamic_saga_undoes_its_child(store: SagaStore) -> None:
    """An `executor.saga()` block whose process died after its child ended is compensated by recovery (its code is
    gone), and its SUCCESS child with it, as a whole."""
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())
    first = SagaExecutor(registry, store=store, lease_timeout=0.2)
    dying = first.saga(saga_id="dies")
    await dying.__aenter__()
    await dying.call("Reserve", item="own")
    picked = await dying.child("pick", args={"items": ["a", "b"]})
    assert picked.status is SagaStatus.SUCCESS
    await dying._keeper.stop()  # the process dies here: no heartbeat, no exit
    await asyncio.sleep(0.3)
    (result,) = await SagaExecutor(registry, store=store).recover()
    assert (result.saga_id, result.status) == ("dies", SagaStatus.COMPENSATED)
    child = await store.get_saga("dies/pick-1")
    assert child is not None
    assert child.status is SagaStatus.COMPENSATED
    assert calls == ["own", "a", "b", "undo b", "undo a", "undo own"]


async def test_a_purge_keeps_a_success_child_while_its_parent_may_still_undo_it(store: SagaStore) -> None:
    """A purge leaves a SUCCESS child whose parent is live (here WAITING): the parent failing later undoes the
    child's calls; once the parent has ended, the child is purged."""
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())

    @registry.saga
    async def holds_on(saga: DynamicSaga) -> str:
        await saga.child("pick", args={"items": ["a"]})
        if await saga.recv("verdict", timeout=3600) == "fail":
            raise RuntimeError("the parent fails after its child")
        return "kept"

    executor = SagaExecutor(registry, store=store, wait_threshold=0.05)
    waiting = await executor.run(holds_on, saga_id="h-1")
    assert waiting.status is SagaStatus.WAITING
    assert (await store.purge(older_than=0)).saga_ids == []
    await executor.send("h-1", "verdict", "fail")
    (result,) = await executor.recover()
    assert (result.saga_id, result.status) == ("h-1", SagaStatus.COMPENSATED)
    assert calls == ["a", "undo a"]
    assert sorted((await store.purge(older_than=0)).saga_ids) == ["h-1", "h-1/pick-0"]


async def test_running_a_live_child_by_its_id_is_refused_its_parent_drives_it(store: SagaStore) -> None:
    """`executor.run()` of a live child's function, arguments and id (its parent's worker stopped) raises
    SagaInProgressError and drives nothing; the parent's recovery then resumes the child, each call once."""
    calls: list[str] = []
    hang = {"b"}
    started = asyncio.Event()
    registry = make_registry(calls, hang, started)
    first = SagaExecutor(registry, store=store, compensation_timeout=0.2, lease_timeout=60)
    await first.submit("order", args={"items": ["a", "b", "c"]}, saga_id="o-5")
    worker = asyncio.create_task(first.serve(interval=0.02))
    await asyncio.wait_for(started.wait(), 20)
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker
    other = SagaExecutor(registry, store=store)
    with pytest.raises(SagaInProgressError, match="driven through its parent"):
        await other.run("pick", args={"items": ["a", "b", "c"]}, saga_id="o-5/pick-1")
    assert calls == ["top", "a"]
    (result,) = await other.recover()
    assert (result.saga_id, result.status) == ("o-5", SagaStatus.SUCCESS)
    assert calls == ["top", "a", "b", "c", "plan"]
    again = await other.run("pick", args={"items": ["a", "b", "c"]}, saga_id="o-5/pick-1")
    assert (again.status, again.parent_id) == (SagaStatus.SUCCESS, "o-5")  # ended: its record, as for any saga


async def test_a_child_that_could_not_undo_its_effects_leaves_its_parent_compensation_failed(store: SagaStore) -> None:
    """A child ending COMPENSATION_FAILED (a refund refused) makes its compensating parent COMPENSATION_FAILED, not
    COMPENSATED, even when the parent caught the child's failure; once the child's compensation is retried, the
    parent's retry ends it COMPENSATED, each refund made once."""
    calls: list[str] = []
    refusing = {"stuck"}
    registry = ToolRegistry()

    @registry.tool
    class Pay:
        async def execute(self, item: str, ctx: StepContext) -> dict[str, str]:
            if item == "bad":
                raise RuntimeError("declined")
            calls.append(item)
            return {"item": item}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            if ctx.args["item"] in refusing:
                raise RuntimeError("refund refused")
            calls.append(f"undo {ctx.args['item']}")

    @registry.saga
    async def kid(saga: DynamicSaga) -> None:
        await saga.call("Pay", item="stuck")
        await saga.call("Pay", item="bad")

    @registry.saga
    async def dad(saga: DynamicSaga) -> None:
        await saga.call("Pay", item="own")
        with contextlib.suppress(StepFailedError):
            await saga.child(kid)
        raise RuntimeError("the parent fails later")

    executor = SagaExecutor(registry, store=store)
    result = await executor.run(dad, saga_id="d-1")
    child = await store.get_saga("d-1/kid-1")
    assert child is not None
    assert child.status is SagaStatus.COMPENSATION_FAILED
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert result.step("kid-1").status is StepStatus.COMPENSATION_FAILED
    assert calls == ["own", "stuck", "undo own"]
    refusing.clear()
    assert (await executor.retry_compensation("d-1/kid-1")).status is SagaStatus.COMPENSATED
    retried = await executor.retry_compensation("d-1")
    assert retried.status is SagaStatus.COMPENSATED
    assert calls == ["own", "stuck", "undo own", "undo stuck"]
    for saga_id in ("d-1", "d-1/kid-1"):
        assert await store.verify_saga(saga_id)


async def test_the_built_in_child_tool_is_refused_outside_saga_child(store: SagaStore) -> None:
    """A plan step, a `saga.call` or an MCP server naming "saga.child" is refused, naming the step, nothing stored
    and nothing run; model tool lists never hold it."""
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())
    executor = SagaExecutor(registry, store=store)
    child_args = {"saga_id": "sneaky", "plan": [{"id": "p", "tool": "Reserve", "args": {"item": "x"}}]}
    plan = [
        {"id": "ok", "tool": "Reserve", "args": {"item": "a"}},
        {"id": "sneak", "tool": "saga.child", "args": child_args},
    ]
    for attempt in (
        lambda: executor.run(plan, saga_id="p-1"),
        lambda: executor.submit(plan, saga_id="p-2"),
        lambda: executor.run(plan[1:]),  # alone: the plan's fast validation refuses it too
    ):
        with pytest.raises(PlanValidationError, match=r"step 'sneak'.*'saga\.child' is built in") as caught:
            await attempt()
        assert not isinstance(caught.value, StepFailedError)
    errors: list[str] = []

    @registry.saga
    async def careless(saga: DynamicSaga) -> None:
        for attempt in (
            lambda: saga.call("saga.child", **child_args),
            lambda: saga.group([("saga.child", child_args)]),
            lambda: saga.child([plan[1]]),
        ):
            try:
                await attempt()
            except PlanValidationError as exc:
                errors.append(str(exc))

    result = await executor.run(careless, saga_id="c-2")
    assert result.status is SagaStatus.SUCCESS
    assert result.steps == []
    assert len(errors) == 3
    assert all("'saga.child' is built in" in error for error in errors), errors
    assert calls == []
    assert [s.saga_id for s in await store.list_sagas()] == ["c-2"]
    assert "saga.child" not in {tool["function"]["name"] for tool in registry.to_openai_tools()}
    assert "saga.child" not in {tool["name"] for tool in registry.to_anthropic_tools()}
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    from saga_runtime.integrations.mcp import saga_mcp_server

    with pytest.raises(ValueError, match=r"'saga\.child' is built in"):
        saga_mcp_server(executor, names=["Reserve", "saga.child"])
    assert saga_mcp_server(executor, names=["Reserve"]) is not None


async def wait_for_status(store: SagaStore, saga_id: str, status: SagaStatus) -> None:
    """Return once the saga `saga_id` is stored in `status` (within a generous bound)."""
    for _ in range(1000):
        saga = await store.get_saga(saga_id)
        if saga is not None and saga.status is status:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{saga_id} never came to {status.value}")


async def test_a_waiting_childs_parent_reads_the_store_rarely_while_it_waits(store: SagaStore) -> None:
    """While its child waits for a message, the parent's step only reads the store, a few times in three seconds
    (it looked ten times a second, claiming the child each time); the message sent, it goes on."""
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())

    @registry.saga
    async def listens(saga: DynamicSaga) -> str:
        message = await saga.recv("go")
        await saga.call("Reserve", item=message["item"])
        return str(message["item"])

    @registry.saga
    async def asks(saga: DynamicSaga) -> Any:
        return (await saga.child(listens)).output

    executor = SagaExecutor(registry, store=store, wait_threshold=0.05)
    parent = asyncio.create_task(executor.run(asks, saga_id="a-1"))
    await wait_for_status(store, "a-1/listens-0", SagaStatus.WAITING)
    await asyncio.sleep(1.0)  # its looks have grown apart
    looks: list[str] = []
    count_calls(store, looks)
    await asyncio.sleep(3.0)
    idle = list(looks)
    assert 0 < len(idle) < 15, idle  # fewer than five a second (was about eighty)
    assert {"claim_waiting", "save", "change_saga"}.isdisjoint(idle), idle  # nothing written while it waits
    await executor.send("a-1/listens-0", "go", {"item": "late"})
    result = await asyncio.wait_for(parent, 20)
    assert (result.status, result.output) == (SagaStatus.SUCCESS, "late")
    assert calls == ["late"]


async def test_a_waiting_childs_parent_goes_on_at_once_when_its_child_is_due(
    store: SagaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the parent's looks at a waiting child a minute apart, it still goes on at once: when the child's sleep
    ends (its wake time), when a message for it is sent in this process, when its step is approved in it."""
    monkeypatch.setattr(_children, "_FIRST_LOOK", 60.0)
    monkeypatch.setattr(_children, "_MOST_LOOK", 60.0)
    calls: list[str] = []
    registry = make_registry(calls, set(), asyncio.Event())

    @registry.tool(approval=True)
    class Ship:
        async def execute(self, item: str) -> str:
            calls.append(f"ship {item}")
            return item

    @registry.saga
    async def slow(saga: DynamicSaga) -> str:
        await saga.sleep(1.0)
        await saga.call("Reserve", item="rested")
        message = await saga.recv("go")
        return str(await saga.call("Ship", item=message["item"]))

    @registry.saga
    async def asks(saga: DynamicSaga) -> Any:
        return (await saga.child(slow)).output

    executor = SagaExecutor(registry, store=store, wait_threshold=0.05)
    parent = asyncio.create_task(executor.run(asks, saga_id="a-2"))
    for _ in range(1000):  # woken by its wake time: the sleep ended, it waits for its message
        if calls == ["rested"]:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError(f"the child's sleep was never gone on from: {calls}")
    await wait_for_status(store, "a-2/slow-0", SagaStatus.WAITING)
    await executor.send("a-2/slow-0", "go", {"item": "box"})
    for _ in range(1000):  # woken by the message: it waits for the decision
        if await executor.pending_approvals():
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the child never asked for its approval")
    (request,) = await executor.pending_approvals()
    await executor.approve(request.saga_id, request.step_id, by="ops", resume=False)
    result = await asyncio.wait_for(parent, 20)
    assert (result.status, result.output) == (SagaStatus.SUCCESS, "box")
    assert calls == ["rested", "ship box"]


async def test_framework_adapters_refuse_to_give_the_built_in_child_tool_to_a_model(store: SagaStore) -> None:
    """`saga_tools(saga, names=[...])` naming "saga.child" raises ValueError; without names it is not listed."""
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed")
    from saga_runtime.integrations.langchain import saga_tools

    registry = make_registry([], set(), asyncio.Event())
    executor = SagaExecutor(registry, store=store)
    async with executor.saga("tools-1") as saga:
        with pytest.raises(ValueError, match=r"'saga\.child' is built in"):
            saga_tools(saga, names=["Reserve", "saga.child"])
        assert [tool.name for tool in saga_tools(saga)] == ["Reserve"]
