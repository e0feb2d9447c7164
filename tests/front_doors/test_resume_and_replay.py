"""Durable re-execution and replay: re-entered dynamic sagas, replayed records, resumed plan sagas, budgets."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import anyio
import pytest
from cancelling import cancel_once
from orphans import orphan_saga

from saga_runtime import (
    Budget,
    BudgetExceededError,
    DynamicSaga,
    IdempotencyConflictError,
    MemoryStore,
    PlanValidationError,
    ReplayDivergenceError,
    RetryPolicy,
    SagaExecutor,
    SagaInProgressError,
    SagaStatus,
    StepContext,
    StepFailedError,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaRow, StepRow, idempotency_key, now

# A handshake that never completes would hang a broken engine; this bound turns the hang into a failure.
HANDSHAKE = 2.0
DEAD = "dead-executor"


class Ledger:
    """What the tools of one test did, in order."""

    def __init__(self) -> None:
        self.executed: list[tuple[str, Any]] = []
        self.compensated: list[tuple[str, Any]] = []
        self.contexts: list[StepContext] = []
        self.gate = anyio.Event()  # Gate blocks until this is set
        self.gate_started = anyio.Event()


def make_registry(ledger: Ledger) -> ToolRegistry:
    """Return a registry of small tools that report to `ledger`."""
    registry = ToolRegistry()

    @registry.tool
    class Book:
        async def execute(self, item: str, ctx: StepContext) -> dict[str, Any]:
            ledger.executed.append(("Book", item))
            ledger.contexts.append(ctx)
            return {"item": item, "key": ctx.idempotency_key}

        async def compensate(self, result: dict[str, Any] | None) -> None:
            ledger.compensated.append(("Book", result))

    @registry.tool
    class Gate:
        async def execute(self, item: str, ctx: StepContext) -> dict[str, Any]:
            ledger.executed.append(("Gate", item))
            ledger.contexts.append(ctx)
            ledger.gate_started.set()
            await ledger.gate.wait()
            return {"item": item, "key": ctx.idempotency_key}

        async def compensate(self, result: dict[str, Any] | None) -> None:
            ledger.compensated.append(("Gate", result))

    @registry.tool
    class Spend:
        async def execute(self, cost: float, ctx: StepContext) -> float:
            ledger.executed.append(("Spend", cost))
            ctx.charge(cost=cost, tokens=1)
            return cost

    @registry.tool
    class Fail:
        async def execute(self, reason: str) -> None:
            ledger.executed.append(("Fail", reason))
            raise ValueError(reason)

    return registry


@pytest.fixture
def ledger() -> Ledger:
    """Return a fresh ledger."""
    return Ledger()


@pytest.fixture
def registry(ledger: Ledger) -> ToolRegistry:
    """Return the ledger's tools."""
    return make_registry(ledger)


@pytest.fixture
def executor(registry: ToolRegistry) -> SagaExecutor:
    """Return an executor over a private memory store."""
    return SagaExecutor(registry, executor_id="first")


async def enter(executor: SagaExecutor, saga_id: str, **options: Any) -> DynamicSaga:
    """Enter a dynamic saga without a block (to leave it unfinished, as a killed process does)."""
    saga = executor.saga(saga_id=saga_id, **options)
    return await saga.__aenter__()


def restart(executor: SagaExecutor) -> SagaExecutor:
    """Return the successor of `executor` (killed: its running sagas forgotten) over the same store."""
    return SagaExecutor(executor.registry, store=executor.store, executor_id=executor.executor_id)


# -- re-entering an unfinished dynamic saga --------------------------------------------------------------------


async def test_reentry_serves_recorded_calls_without_calling_tools_then_goes_on_live(
    executor: SagaExecutor, ledger: Ledger
) -> None:
    """A re-entered unfinished saga gets its recorded results in order without tool calls, then runs live."""
    saga = await enter(executor, "agent")
    first = [
        await saga.call("Book", item="flight"),
        await saga.group([("Book", {"item": "hotel"}), ("Book", {"item": "car"})]),
        await saga.call("Book", item="dinner"),
    ]
    assert len(ledger.executed) == 4
    ledger.executed.clear()

    async with restart(executor).saga(saga_id="agent") as again:
        assert not again.replaying
        served = [
            await again.call("Book", item="flight"),
            await again.group([("Book", {"item": "hotel"}), ("Book", {"item": "car"})]),
            await again.call("Book", item="dinner"),
        ]
        assert ledger.executed == []
        live = await again.call("Book", item="show")

    assert served == first
    assert ledger.executed == [("Book", "show")]
    assert live["item"] == "show"
    assert again.result is not None
    assert again.result.status is SagaStatus.SUCCESS
    assert [s.step_id for s in again.result.steps] == ["Book-0", "Book-1", "Book-2", "Book-3", "Book-4"]


async def test_reentry_after_the_lease_expired_on_another_executor(registry: ToolRegistry, ledger: Ledger) -> None:
    """Another executor may re-enter a saga only once its owner's lease has expired."""
    store = MemoryStore()
    owner = SagaExecutor(registry, store=store, lease_timeout=0.1)
    heir = SagaExecutor(registry, store=store)
    saga = await enter(owner, "leased")
    recorded = await saga.call("Book", item="a")
    with pytest.raises(SagaInProgressError):
        await enter(heir, "leased")

    await saga._keeper.stop()  # the owner dies: its heartbeat stops, and its lease runs out
    await anyio.sleep(0.15)
    async with heir.saga(saga_id="leased") as again:
        assert await again.call("Book", item="a") == recorded
        await again.call("Book", item="b")

    assert ledger.executed == [("Book", "a"), ("Book", "b")]
    stored = await store.get_saga("leased")
    assert stored is not None
    assert stored.status is SagaStatus.SUCCESS


async def test_reentry_reruns_a_call_recorded_without_outcome_with_its_idempotency_key(
    executor: SagaExecutor, ledger: Ledger
) -> None:
    """A call recorded RUNNING (the process died in it) runs again on re-entry, with the same idempotency key."""
    saga = await enter(executor, "mid-call")
    await saga.call("Book", item="a")
    task = asyncio.create_task(saga.call("Gate", item="pay"))
    with anyio.fail_after(HANDSHAKE):
        await ledger.gate_started.wait()
    task.cancel()  # the process dies while the call runs: nothing after the write-ahead record is written
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await executor.store.get_saga("mid-call")
    assert stored is not None
    assert [(s.step_id, s.status, s.attempts) for s in stored.steps][1] == ("Gate-1", StepStatus.RUNNING, 1)
    first_key = ledger.contexts[-1].idempotency_key

    ledger.gate.set()
    async with restart(executor).saga(saga_id="mid-call") as again:
        await again.call("Book", item="a")
        result = await again.call("Gate", item="pay")

    assert ledger.executed == [("Book", "a"), ("Gate", "pay"), ("Gate", "pay")]
    assert ledger.contexts[-1].idempotency_key == first_key == stored.steps[1].idempotency_key
    assert result == {"item": "pay", "key": first_key}
    assert ledger.compensated == []
    assert again.result is not None
    step = again.result.step("Gate-1")
    assert (step.status, step.attempts) == (StepStatus.SUCCESS, 2)


@pytest.mark.parametrize(
    ("tool", "args"),
    [("Book", {"item": "other"}), ("Fail", {"reason": "a"})],
    ids=["other-args", "other-tool"],
)
async def test_reentry_with_a_different_call_raises_divergence(
    executor: SagaExecutor, ledger: Ledger, tool: str, args: dict[str, Any]
) -> None:
    """A re-entered saga making another call than the record holds at that position raises ReplayDivergenceError."""
    saga = await enter(executor, "diverge")
    await saga.call("Book", item="a")
    await saga.call("Book", item="b")
    ledger.executed.clear()

    again = await enter(restart(executor), "diverge")
    await again.call("Book", item="a")
    with pytest.raises(ReplayDivergenceError) as caught:
        await again.call(tool, **args)
    assert (caught.value.saga_id, caught.value.position) == ("diverge", 1)
    assert ledger.executed == []


async def test_reentry_serves_a_recorded_failure_again(executor: SagaExecutor, ledger: Ledger) -> None:
    """A call recorded FAILED raises the same StepFailedError on re-entry without calling the tool."""
    saga = await enter(executor, "failed-call")
    with pytest.raises(StepFailedError) as first:
        await saga.call("Fail", reason="declined")
    ledger.executed.clear()

    async with restart(executor).saga(saga_id="failed-call") as again:
        with pytest.raises(StepFailedError) as second:
            await again.call("Fail", reason="declined")

    assert ledger.executed == []
    fields = ("saga_id", "step_id", "tool_name", "attempts", "error", "error_type")
    assert [getattr(second.value, f) for f in fields] == [getattr(first.value, f) for f in fields]


async def test_reentry_serves_group_members_by_list_position_not_finish_order(ledger: Ledger) -> None:
    """Group members that finished in reverse order are served by their place in the list on re-entry."""
    registry = make_registry(ledger)
    finished = [anyio.Event() for _ in range(3)]

    @registry.tool
    class Chain:
        async def execute(self, i: int) -> int:
            if i + 1 < len(finished):
                with anyio.fail_after(HANDSHAKE):
                    await finished[i + 1].wait()
            ledger.executed.append(("Chain", i))
            finished[i].set()
            return i * 10

    executor = SagaExecutor(registry, executor_id="chain")
    saga = await enter(executor, "chain")
    assert await saga.group([("Chain", {"i": i}) for i in range(3)]) == [0, 10, 20]
    assert ledger.executed == [("Chain", 2), ("Chain", 1), ("Chain", 0)]
    ledger.executed.clear()

    again = await enter(restart(executor), "chain")
    assert await again.group([("Chain", {"i": i}) for i in range(3)]) == [0, 10, 20]
    assert ledger.executed == []
    again_too = await enter(restart(executor), "chain")
    with pytest.raises(ReplayDivergenceError):
        await again_too.group([("Chain", {"i": i}) for i in (2, 1, 0)])


async def test_reentry_serves_gathered_calls_by_the_order_they_were_made(ledger: Ledger) -> None:
    """asyncio.gather of saga.call is served by call order on re-entry, whichever call finished first."""
    registry = make_registry(ledger)
    second_done = anyio.Event()

    @registry.tool
    class Echo:
        async def execute(self, x: int) -> int:
            if x == 1 and not second_done.is_set():
                with anyio.fail_after(HANDSHAKE):
                    await second_done.wait()
            ledger.executed.append(("Echo", x))
            second_done.set()
            return x

    executor = SagaExecutor(registry, executor_id="gather")
    saga = await enter(executor, "gather")
    assert await asyncio.gather(saga.call("Echo", x=1), saga.call("Echo", x=2)) == [1, 2]
    assert ledger.executed == [("Echo", 2), ("Echo", 1)]
    ledger.executed.clear()

    async with restart(executor).saga(saga_id="gather") as again:
        assert await asyncio.gather(again.call("Echo", x=1), again.call("Echo", x=2)) == [1, 2]
    assert ledger.executed == []

    swapped = await enter(restart(executor), "gather")
    with pytest.raises(ReplayDivergenceError):
        await asyncio.gather(swapped.call("Echo", x=2), swapped.call("Echo", x=1))


async def test_concurrent_reentry_of_one_id_raises_in_progress(executor: SagaExecutor) -> None:
    """While one block has re-entered an unfinished saga, a second entry of its id raises SagaInProgressError."""
    saga = await enter(executor, "twice")
    await saga.call("Book", item="a")

    heir = restart(executor)
    async with heir.saga(saga_id="twice") as again:
        with pytest.raises(SagaInProgressError):
            await enter(heir, "twice")
        await again.call("Book", item="a")
    assert again.result is not None
    assert again.result.status is SagaStatus.SUCCESS


async def test_reentry_of_a_compensating_saga_finishes_compensation_once(
    executor: SagaExecutor, ledger: Ledger
) -> None:
    """A saga that died while compensating finishes on re-entry, never compensating a COMPENSATED step twice."""
    saga = await enter(executor, "undoing")
    await saga.call("Book", item="a")
    await saga.call("Book", item="b")
    loaded = await executor.store.load_saga("undoing")
    assert loaded is not None
    row, steps = loaded
    row.status = SagaStatus.COMPENSATING
    steps[1].status = StepStatus.COMPENSATED  # "b" was undone before the process died
    await executor.store.save(row, [steps[1]])

    async with restart(executor).saga(saga_id="undoing") as again:
        assert again.replaying
        assert (await again.call("Book", item="a"))["item"] == "a"

    assert ledger.compensated == [("Book", {"item": "a", "key": steps[0].idempotency_key})]
    assert again.result is not None
    assert again.result.status is SagaStatus.COMPENSATED


# -- replay and finished sagas ---------------------------------------------------------------------------------


async def test_finished_saga_reentered_is_served_from_the_record_and_unchanged(
    executor: SagaExecutor, ledger: Ledger
) -> None:
    """Re-entering a finished saga serves its calls, refuses unrecorded ones, spends nothing and writes nothing."""
    async with executor.saga(saga_id="done", budget=Budget(max_cost=1.0)) as saga:
        first = await saga.call("Book", item="a")
        with pytest.raises(StepFailedError):
            await saga.call("Fail", reason="no")
        await saga.charge(cost=0.5)
    ledger.executed.clear()
    before = await executor.store.export_saga("done")

    async with executor.saga(saga_id="done") as again:
        assert again.replaying
        assert await again.call("Book", item="a") == first
        with pytest.raises(StepFailedError):
            await again.call("Fail", reason="no")
        await again.charge(cost=5.0)
        with pytest.raises(ReplayDivergenceError):
            await again.call("Book", item="more")

    assert ledger.executed == []
    assert await executor.store.export_saga("done") == before
    assert again.result is not None
    assert (again.result.status, again.result.cost) == (SagaStatus.SUCCESS, 0.5)


async def test_replay_serves_every_call_from_the_record_and_writes_nothing(
    executor: SagaExecutor, ledger: Ledger
) -> None:
    """replay=True serves recorded calls, raises ReplayDivergenceError for other or unrecorded calls, writes nothing."""
    saga = await enter(executor, "replayed")
    first = await saga.call("Book", item="a")
    await saga.call("Book", item="b")
    ledger.executed.clear()
    before = await executor.store.export_saga("replayed")

    async with executor.saga(saga_id="replayed", replay=True) as replay:
        assert replay.replaying
        assert await replay.call("Book", item="a") == first
        await replay.call("Book", item="b")
        with pytest.raises(ReplayDivergenceError) as unrecorded:
            await replay.call("Book", item="c")
    assert unrecorded.value.position == 2

    with pytest.raises(ReplayDivergenceError) as different:
        async with executor.saga(saga_id="replayed", replay=True) as replay:
            await replay.call("Book", item="x")
    assert different.value.position == 0

    assert ledger.executed == []
    assert ledger.compensated == []
    assert await executor.store.export_saga("replayed") == before
    with pytest.raises(ReplayDivergenceError):
        async with executor.saga(saga_id="never-ran", replay=True):
            pytest.fail("replayed a saga that is not stored")


async def test_replay_refuses_a_call_recorded_without_outcome(executor: SagaExecutor, ledger: Ledger) -> None:
    """replay=True raises ReplayDivergenceError for a recorded call whose outcome is unknown, and runs nothing."""
    saga = await enter(executor, "unknown-outcome")
    await cancel_once(saga.call("Gate", item="pay"), ledger.gate_started)
    before = await executor.store.export_saga("unknown-outcome")

    ledger.gate.set()
    replay = await enter(executor, "unknown-outcome", replay=True)
    with pytest.raises(ReplayDivergenceError):
        await replay.call("Gate", item="pay")
    assert ledger.executed == [("Gate", "pay")]
    assert await executor.store.export_saga("unknown-outcome") == before


# -- budgets across re-execution -------------------------------------------------------------------------------


async def test_budget_survives_reentry_and_counts_only_new_charges(executor: SagaExecutor, ledger: Ledger) -> None:
    """A re-executed saga does not count its recorded charges twice; new charges add, and the Budget still binds."""
    saga = await enter(executor, "budget", budget=Budget(max_cost=1.0, max_tokens=10))
    await saga.charge(cost=0.25, tokens=2)
    await saga.call("Spend", cost=0.25)
    await saga.charge(cost=0.125)
    original = (saga.cost, saga.tokens)
    assert original == (0.625, 3)

    async with restart(executor).saga(saga_id="budget", budget=Budget(max_cost=1.0, max_tokens=10)) as again:
        await again.charge(cost=0.25, tokens=2)
        await again.call("Spend", cost=0.25)
        await again.charge(cost=0.125)
        assert (again.cost, again.tokens) == original
        stored = await executor.store.get_saga("budget")
        assert stored is not None
        assert (stored.cost, stored.tokens) == original
        await again.charge(cost=0.25)
        assert again.cost == 0.875
        with pytest.raises(BudgetExceededError) as caught:
            await again.charge(cost=0.25)  # 1.125: the limit counts the first run's spending too
        assert caught.value.cost == 1.125

    assert ledger.executed == [("Spend", 0.25)]
    assert again.result is not None
    assert (again.result.cost, again.result.tokens) == (1.125, 3)


async def test_reentered_charge_that_crossed_the_budget_raises_again(executor: SagaExecutor) -> None:
    """The recorded charge that crossed the Budget raises BudgetExceededError again when the saga is re-executed."""
    saga = await enter(executor, "crossed", budget=Budget(max_cost=1.0))
    await saga.charge(cost=0.75)
    with pytest.raises(BudgetExceededError):
        await saga.charge(cost=0.5)

    again = await enter(restart(executor), "crossed", budget=Budget(max_cost=1.0))
    await again.charge(cost=0.75)
    with pytest.raises(BudgetExceededError):
        await again.charge(cost=0.5)


# -- leases ----------------------------------------------------------------------------------------------------


async def test_a_live_dynamic_saga_keeps_its_lease_between_calls(registry: ToolRegistry) -> None:
    """A dynamic saga whose block is still running is not re-entered by another executor, however long it thinks."""
    store = MemoryStore()
    owner = SagaExecutor(registry, store=store, lease_timeout=0.05)
    other = SagaExecutor(registry, store=store, lease_timeout=0.05)
    async with owner.saga(saga_id="thinking") as saga:
        await saga.call("Book", item="a")
        await anyio.sleep(0.15)  # the agent waits for a slow LLM answer
        with pytest.raises(SagaInProgressError):
            await enter(other, "thinking")


async def test_a_live_plan_saga_keeps_its_lease_during_a_long_step(registry: ToolRegistry, ledger: Ledger) -> None:
    """While a plan saga's step runs past lease_timeout, another executor running its id gets SagaInProgressError."""
    store = MemoryStore()
    owner = SagaExecutor(registry, store=store, lease_timeout=0.05)
    other = SagaExecutor(registry, store=store, lease_timeout=0.05)
    plan = [{"tool": "Gate", "args": {"item": "slow"}, "id": "slow"}]
    running = asyncio.create_task(owner.run(plan, saga_id="long"))
    try:
        with anyio.fail_after(HANDSHAKE):
            await ledger.gate_started.wait()
        await anyio.sleep(0.15)
        ledger.gate.set()  # so that a second run, if wrongly allowed, finishes instead of hanging
        with pytest.raises(SagaInProgressError):
            await other.run(plan, saga_id="long")
    finally:
        ledger.gate.set()
        await running
    assert ledger.executed == [("Gate", "slow")]


# -- executor.replay -------------------------------------------------------------------------------------------

PLAN: list[Any] = [
    {"id": "a", "tool": "Book", "args": {"item": "flight"}},
    [
        {"id": "b", "tool": "Book", "args": {"item": {"$ref": "a.item"}}},
        {"id": "c", "tool": "Book", "args": {"item": "car"}},
    ],
]


async def test_executor_replay_returns_the_stored_result_without_calling_tools(
    executor: SagaExecutor, ledger: Ledger
) -> None:
    """executor.replay rebuilds a plan saga's result from its record, calls no tool and writes nothing."""
    original = await executor.run(PLAN, saga_id="trip")
    assert original.status is SagaStatus.SUCCESS
    ledger.executed.clear()
    before = await executor.store.export_saga("trip")

    replayed = await executor.replay("trip")

    assert ledger.executed == []
    assert replayed.to_dict() == original.to_dict()
    assert await executor.store.export_saga("trip") == before
    with pytest.raises(ReplayDivergenceError):
        await executor.replay("no-such-saga")


async def test_executor_replay_of_a_dynamic_saga_returns_its_record(executor: SagaExecutor, ledger: Ledger) -> None:
    """executor.replay of a dynamic saga returns its stored result without calling a tool."""
    async with executor.saga(saga_id="dyn") as saga:
        await saga.call("Book", item="a")
    ledger.executed.clear()
    replayed = await executor.replay("dyn")
    assert saga.result is not None
    assert replayed.to_dict() == saga.result.to_dict()
    assert ledger.executed == []


def _edit_args(saga: SagaRow, steps: list[StepRow]) -> list[StepRow]:
    steps[2].args = {"item": "bus"}
    return [steps[2]]


def _edit_referenced_result(saga: SagaRow, steps: list[StepRow]) -> list[StepRow]:
    steps[0].result = {"item": "train", "key": steps[0].idempotency_key}
    return [steps[0]]


def _edit_tool(saga: SagaRow, steps: list[StepRow]) -> list[StepRow]:
    steps[1].tool_name = "Gate"
    return [steps[1]]


def _swap_positions(saga: SagaRow, steps: list[StepRow]) -> list[StepRow]:
    steps[0].seq, steps[2].seq = steps[2].seq, steps[0].seq
    return [steps[0], steps[2]]


def _edit_plan(saga: SagaRow, steps: list[StepRow]) -> list[StepRow]:
    saga.plan = [[{**saga.plan[0][0], "args": {"item": "boat"}}], saga.plan[1]]
    return []


@pytest.mark.parametrize(
    "tamper",
    [_edit_args, _edit_referenced_result, _edit_tool, _swap_positions, _edit_plan],
    ids=["args", "referenced-result", "tool", "order", "plan"],
)
async def test_executor_replay_detects_a_record_that_disagrees_with_its_plan(
    executor: SagaExecutor, tamper: Any
) -> None:
    """executor.replay raises ReplayDivergenceError when a row was edited so the record no longer fits the plan."""
    await executor.run(PLAN, saga_id="tampered")
    loaded = await executor.store.load_saga("tampered")
    assert loaded is not None
    saga, steps = loaded
    changed = tamper(saga, steps)
    await executor.store.save(saga, changed)

    with pytest.raises(ReplayDivergenceError) as caught:
        await executor.replay("tampered")
    assert caught.value.saga_id == "tampered"


async def test_executor_replay_detects_a_missing_step(executor: SagaExecutor, registry: ToolRegistry) -> None:
    """executor.replay raises ReplayDivergenceError when a step's record is gone."""
    await executor.run(PLAN, saga_id="gap")
    data = await executor.store.export_saga("gap")
    del data["steps"][1]
    store = MemoryStore()
    await store.import_saga(data)

    with pytest.raises(ReplayDivergenceError):
        await SagaExecutor(registry, store=store).replay("gap")


# -- resuming a plan saga whose owner is gone ------------------------------------------------------------------

Outcome = tuple[StepStatus, Any]


async def crashed_plan_saga(
    executor: SagaExecutor,
    plan: list[Any],
    saga_id: str,
    outcomes: dict[str, Outcome],
    *,
    status: SagaStatus = SagaStatus.RUNNING,
    owner: str = DEAD,
    lease: timedelta = timedelta(seconds=-1),
) -> dict[str, str]:
    """Store a plan saga as a dead executor left it; return each step's idempotency key."""
    planned = build_plan(plan, executor.registry)
    started = now()
    saga = orphan_saga(
        saga_id, planned.to_json(), plan_hash=planned.digest, status=status, owner=owner, started=started, lease=lease
    )
    rows = []
    for seq, step in enumerate(planned.steps):
        row = StepRow(
            saga_id=saga_id,
            seq=seq,
            step_id=step.step_id,
            group=step.group,
            tool_name=step.tool_name,
            args=step.args,
            idempotency_key=idempotency_key(saga_id, step.step_id),
        )
        if step.step_id in outcomes:
            row.status, row.result = outcomes[step.step_id]
            row.attempts, row.started_at = 1, started
            if row.status is StepStatus.FAILED:
                row.error, row.error_type = "ValueError: declined (after 1 attempt)", "ValueError"
        rows.append(row)
    assert await executor.store.create_saga(saga, rows) is None
    return {row.step_id: row.idempotency_key for row in rows}


RESUMABLE: list[Any] = [
    {"id": "a", "tool": "Book", "args": {"item": "flight"}},
    [
        {"id": "b", "tool": "Book", "args": {"item": "hotel"}},
        {"id": "c", "tool": "Book", "args": {"item": "car"}},
        {"id": "d", "tool": "Book", "args": {"item": "dinner"}},
    ],
    {"id": "e", "tool": "Book", "args": {"item": {"$ref": "a.item"}}},
]


async def test_run_resumes_a_plan_saga_left_running_by_a_gone_executor(executor: SagaExecutor, ledger: Ledger) -> None:
    """run() resumes: SUCCESS steps never run again; RUNNING/CANCELLED steps run again with their original key."""
    flight = {"item": "flight", "key": "recorded"}
    keys = await crashed_plan_saga(
        executor,
        RESUMABLE,
        "resume",
        {
            "a": (StepStatus.SUCCESS, flight),
            "b": (StepStatus.SUCCESS, {"item": "hotel", "key": "recorded"}),
            "c": (StepStatus.RUNNING, None),
            "d": (StepStatus.CANCELLED, None),
        },
    )

    result = await executor.run(RESUMABLE, saga_id="resume")

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert sorted(ledger.executed) == [("Book", "car"), ("Book", "dinner"), ("Book", "flight")]
    assert ledger.executed[-1] == ("Book", "flight")  # e, its $ref resolved from a's recorded result
    by_item = {ctx.args["item"]: ctx for ctx in ledger.contexts}
    assert by_item["car"].idempotency_key == keys["c"]
    assert by_item["dinner"].idempotency_key == keys["d"]
    assert by_item["car"].attempt == 2
    assert result.result_of("a") == flight
    assert result.step("c").attempts == 2
    assert ledger.compensated == []
    stored = await executor.store.get_saga("resume")
    assert stored is not None
    assert stored.status is SagaStatus.SUCCESS
    assert stored.steps[-1].args == {"item": "flight"}


async def test_resume_of_a_saga_with_a_failed_step_compensates(executor: SagaExecutor, ledger: Ledger) -> None:
    """A resumed plan saga with a recorded FAILED step (scope "saga") compensates; later groups never run."""
    flight = {"item": "flight", "key": "recorded"}
    await crashed_plan_saga(
        executor,
        RESUMABLE,
        "resume-failed",
        {
            "a": (StepStatus.SUCCESS, flight),
            "b": (StepStatus.FAILED, None),
            "c": (StepStatus.RUNNING, None),
        },
    )

    result = await executor.run(RESUMABLE, saga_id="resume-failed")

    assert result.status is SagaStatus.COMPENSATED
    assert ledger.executed == []
    assert ledger.compensated == [("Book", None), ("Book", flight)]  # c (unknown outcome), then a
    statuses = {s.step_id: s.status for s in result.steps}
    assert statuses == {
        "a": StepStatus.COMPENSATED,
        "b": StepStatus.FAILED,
        "c": StepStatus.COMPENSATED,
        "d": StepStatus.PENDING,
        "e": StepStatus.PENDING,
    }


async def test_resume_of_a_compensating_saga_compensates_each_step_once(executor: SagaExecutor, ledger: Ledger) -> None:
    """A plan saga left COMPENSATING finishes compensating, skipping steps already COMPENSATED."""
    flight = {"item": "flight", "key": "recorded"}
    await crashed_plan_saga(
        executor,
        RESUMABLE,
        "resume-undo",
        {
            "a": (StepStatus.SUCCESS, flight),
            "b": (StepStatus.COMPENSATED, {"item": "hotel"}),
            "c": (StepStatus.FAILED, None),
            "d": (StepStatus.CANCELLED, None),
        },
        status=SagaStatus.COMPENSATING,
    )

    result = await executor.run(RESUMABLE, saga_id="resume-undo")

    assert result.status is SagaStatus.COMPENSATED
    assert ledger.executed == []
    assert ledger.compensated == [("Book", None), ("Book", flight)]  # d, then a; never b again
    assert result.step("b").status is StepStatus.COMPENSATED


async def test_run_refuses_a_plan_saga_whose_owner_is_alive(executor: SagaExecutor, ledger: Ledger) -> None:
    """run() of a saga id whose owner's lease is current raises SagaInProgressError and runs nothing."""
    await crashed_plan_saga(
        executor,
        RESUMABLE,
        "owned",
        {"a": (StepStatus.RUNNING, None)},
        owner="someone-else",
        lease=timedelta(seconds=60),
    )
    before = await executor.store.export_saga("owned")

    with pytest.raises(SagaInProgressError) as caught:
        await executor.run(RESUMABLE, saga_id="owned")

    assert caught.value.owner == "someone-else"
    assert ledger.executed == []
    assert await executor.store.export_saga("owned") == before


async def test_run_of_an_unfinished_saga_with_another_plan_conflicts(executor: SagaExecutor, ledger: Ledger) -> None:
    """run() with a left-behind saga's id but a different plan raises IdempotencyConflictError and runs nothing."""
    await crashed_plan_saga(executor, RESUMABLE, "other-plan", {"a": (StepStatus.RUNNING, None)})

    with pytest.raises(IdempotencyConflictError):
        await executor.run([{"id": "a", "tool": "Book", "args": {"item": "boat"}}], saga_id="other-plan")
    assert ledger.executed == []


async def test_resumed_plan_saga_replays_cleanly(executor: SagaExecutor, ledger: Ledger) -> None:
    """A plan saga finished by resumption is accepted by executor.replay, and its id returns the stored result."""
    await crashed_plan_saga(
        executor, RESUMABLE, "resumed-replay", {"a": (StepStatus.SUCCESS, {"item": "flight", "key": "k"})}
    )
    result = await executor.run(RESUMABLE, saga_id="resumed-replay")
    ledger.executed.clear()

    assert (await executor.replay("resumed-replay")).to_dict() == result.to_dict()
    assert (await executor.run(RESUMABLE, saga_id="resumed-replay")).to_dict() == result.to_dict()
    assert ledger.executed == []


# -- re-execution beyond the record ----------------------------------------------------------------------------


async def test_reentry_after_a_refused_call_serves_later_calls_from_the_record(
    executor: SagaExecutor, ledger: Ledger
) -> None:
    """A call refused for a duplicate step id takes no position, so re-entry still serves the calls after it."""
    saga = await enter(executor, "refused")
    await saga.group([("Book", {"item": "a"}, "mine")])
    with pytest.raises(PlanValidationError):
        await saga.group([("Book", {"item": "b"}, "mine")])
    await saga.call("Book", item="c")
    ledger.executed.clear()

    again = await enter(restart(executor), "refused")
    await again.group([("Book", {"item": "a"}, "mine")])
    with pytest.raises(PlanValidationError):
        await again.group([("Book", {"item": "b"}, "mine")])
    await again.call("Book", item="c")
    assert ledger.executed == []


async def test_retry_attempts_keep_counting_across_reentry(ledger: Ledger) -> None:
    """A call re-run after a crash sees ctx.attempt continue from the recorded attempts, with the same key."""
    registry = make_registry(ledger)
    seen: list[tuple[int, str]] = []
    gate, started = anyio.Event(), anyio.Event()

    @registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.0, jitter=False))
    class Flaky:
        async def execute(self, ctx: StepContext) -> str:
            seen.append((ctx.attempt, ctx.idempotency_key))
            started.set()
            await gate.wait()
            return "ok"

    executor = SagaExecutor(registry, executor_id="flaky")
    saga = await enter(executor, "flaky")
    await cancel_once(saga.call("Flaky"), started)

    gate.set()
    async with restart(executor).saga(saga_id="flaky") as again:
        assert await again.call("Flaky") == "ok"
    assert [attempt for attempt, _ in seen] == [1, 2]
    assert seen[0][1] == seen[1][1]
