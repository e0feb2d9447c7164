"""Dynamic sagas, live: `async with executor.saga(...) as saga`, calls, groups, charges and how a block ends."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from cancelling import cancel_once

from saga_runtime import (
    Budget,
    BudgetExceededError,
    DynamicSaga,
    IdempotencyConflictError,
    PlanValidationError,
    RetryPolicy,
    SagaError,
    SagaExecutor,
    SagaInProgressError,
    SagaStatus,
    Step,
    StepContext,
    StepFailedError,
    StepStatus,
    ToolRegistry,
    UnknownToolError,
    open_store,
)

# A handshake that never completes would hang a broken engine; this bound turns the hang into a failure.
HANDSHAKE = 2.0


class Ledger:
    """What the tools of one test did, in order."""

    def __init__(self) -> None:
        self.executed: list[tuple[str, Any]] = []
        self.compensated: list[tuple[str, Any]] = []
        self.keys: dict[Any, str] = {}


def make_registry(ledger: Ledger) -> ToolRegistry:
    """Return a registry of small tools that report to `ledger`."""
    registry = ToolRegistry()

    @registry.tool
    class Book:
        async def execute(self, item: str, ctx: StepContext) -> dict[str, Any]:
            ledger.executed.append(("Book", item))
            ledger.keys[item] = ctx.idempotency_key
            return {"item": item}

        async def compensate(self, result: dict[str, Any] | None) -> None:
            ledger.compensated.append(("Book", result))

    @registry.tool
    class Note:
        async def execute(self, text: str) -> str:
            ledger.executed.append(("Note", text))
            return text

        async def compensate(self, result: str | None) -> None:
            ledger.compensated.append(("Note", result))

    @registry.tool(retry=RetryPolicy(max_attempts=2, initial_interval=0.0, jitter=False))
    class Fail:
        async def execute(self, reason: str) -> None:
            ledger.executed.append(("Fail", reason))
            raise ValueError(reason)

        async def compensate(self, result: Any) -> None:
            ledger.compensated.append(("Fail", result))

    return registry


@pytest.fixture
def ledger() -> Ledger:
    """Return a fresh ledger."""
    return Ledger()


@pytest.fixture
def executor(ledger: Ledger) -> SagaExecutor:
    """Return an executor over a private memory store with the ledger's tools."""
    return SagaExecutor(make_registry(ledger))


async def stored_steps(executor: SagaExecutor, saga_id: str) -> dict[str, Any]:
    """Return the stored step records of a saga by step id."""
    result = await executor.store.get_saga(saga_id)
    assert result is not None
    return {step.step_id: step for step in result.steps}


# -- calls -----------------------------------------------------------------------------------------------------


async def test_call_returns_the_stored_json_round_tripped_result() -> None:
    """saga.call returns the result as stored (tuples become lists, datetimes ISO strings), not the raw value."""
    registry = ToolRegistry()
    when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

    @registry.tool
    class Stamp:
        async def execute(self) -> dict[str, Any]:
            return {"pair": (1, 2), "when": when}

    executor = SagaExecutor(registry)
    async with executor.saga(saga_id="json") as saga:
        value = await saga.call("Stamp")

    assert value == {"pair": [1, 2], "when": when.isoformat().replace("+00:00", "Z")}
    assert (await stored_steps(executor, "json"))["Stamp-0"].result == value


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_metadata_is_a_deep_copy_and_changing_it_changes_nothing_stored(kind: str, tmp_path: Any) -> None:
    """saga.metadata is a copy all the way down: a nested value changed in place is not stored, and the record
    still verifies after later writes."""
    url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'meta.db'}"
    registry = ToolRegistry()

    @registry.tool
    class Ship:
        async def execute(self, n: int) -> int:
            return n

    async with open_store(url) as store:
        executor = SagaExecutor(registry, store)
        async with executor.saga(saga_id="meta") as saga:
            await saga.set_metadata(items=[1])
            saga.metadata["items"].append(2)
            await saga.call("Ship", n=1)
            assert saga.metadata == {"items": [1]}
        stored = await store.get_saga("meta")
        assert stored is not None
        assert (stored.status, stored.metadata["items"]) == (SagaStatus.SUCCESS, [1])
        assert await store.verify_saga("meta")


async def test_each_call_is_durable_before_call_returns(executor: SagaExecutor) -> None:
    """By the time saga.call returns, its step is stored SUCCESS with its result, while the saga still runs."""
    async with executor.saga(saga_id="durable") as saga:
        await saga.call("Book", item="room")
        stored = await executor.store.get_saga("durable")
        assert stored is not None
        assert stored.status is SagaStatus.RUNNING
        assert [(s.step_id, s.status, s.result) for s in stored.steps] == [
            ("Book-0", StepStatus.SUCCESS, {"item": "room"})
        ]
    assert saga.result is not None
    assert saga.result.status is SagaStatus.SUCCESS
    stored = await executor.store.get_saga("durable")
    assert stored is not None
    assert stored.status is SagaStatus.SUCCESS


async def test_step_ids_are_tool_and_position_unless_given(executor: SagaExecutor) -> None:
    """Step ids are "<tool>-<seq>" by call position; a (tool, args, step_id) triple or a Step names its own."""
    async with executor.saga(saga_id="ids") as saga:
        await saga.call("Book", item="a")
        await saga.group([("Note", {"text": "b"}), ("Book", {"item": "c"})])
        await saga.group([("Book", {"item": "d"}, "my-id"), Step(tool="Note", args={"text": "e"}, id="step-e")])
        await saga.call("Note", text="f")

    assert saga.result is not None
    assert [(s.step_id, s.group) for s in saga.result.steps] == [
        ("Book-0", 0),
        ("Note-1", 1),
        ("Book-2", 1),
        ("my-id", 2),
        ("step-e", 2),
        ("Note-5", 3),
    ]


async def test_failed_call_raises_step_failed_error_with_structured_fields(
    executor: SagaExecutor, ledger: Ledger
) -> None:
    """A call whose attempts are exhausted raises StepFailedError carrying saga_id, step_id, tool, attempts, error."""
    async with executor.saga(saga_id="fails") as saga:
        with pytest.raises(StepFailedError) as caught:
            await saga.call("Fail", reason="card declined")

    error = caught.value
    assert isinstance(error, SagaError)
    assert (error.saga_id, error.step_id, error.tool_name, error.attempts) == ("fails", "Fail-0", "Fail", 2)
    assert error.error_type == "ValueError"
    assert error.error is not None
    assert "card declined" in error.error
    assert ledger.executed == [("Fail", "card declined")] * 2
    assert ledger.compensated == []  # FAILED means no effect: nothing to undo


async def test_failed_call_cause_is_the_tool_exception_live(executor: SagaExecutor) -> None:
    """Live, StepFailedError.__cause__ is the exception the tool raised (as StepFailedError's docstring says)."""
    async with executor.saga(saga_id="cause") as saga:
        with pytest.raises(StepFailedError) as caught:
            await saga.call("Fail", reason="boom")

    assert isinstance(caught.value.__cause__, ValueError)
    assert str(caught.value.__cause__) == "boom"


async def test_caught_call_failure_lets_the_saga_succeed(executor: SagaExecutor, ledger: Ledger) -> None:
    """Catching StepFailedError and going on ends the saga SUCCESS; earlier calls are not undone."""
    async with executor.saga(saga_id="goes-on") as saga:
        await saga.call("Book", item="hotel")
        with pytest.raises(StepFailedError):
            await saga.call("Fail", reason="no seats")
        assert await saga.call("Note", text="booked another way") == "booked another way"

    assert saga.result is not None
    assert saga.result.status is SagaStatus.SUCCESS
    statuses = {s.step_id: s.status for s in saga.result.steps}
    assert statuses == {"Book-0": StepStatus.SUCCESS, "Fail-1": StepStatus.FAILED, "Note-2": StepStatus.SUCCESS}
    assert ledger.compensated == []


async def test_timed_out_call_is_compensated_with_none_before_the_error_arrives() -> None:
    """A call whose last attempt timed out (unknown outcome) is compensated with None before StepFailedError."""
    registry = ToolRegistry()
    compensated: list[Any] = []

    @registry.tool(timeout=0.02)
    class Hang:
        async def execute(self) -> None:
            await anyio.sleep_forever()

        async def compensate(self, result: Any) -> None:
            compensated.append(result)

    async with SagaExecutor(registry).saga(saga_id="timeout") as saga:
        with pytest.raises(StepFailedError) as caught:
            await saga.call("Hang")
        assert compensated == [None]

    assert caught.value.error_type == "TimeoutError"
    assert saga.result is not None
    assert saga.result.steps[0].status is StepStatus.COMPENSATED


# -- groups ----------------------------------------------------------------------------------------------------


async def test_group_returns_results_in_list_order_whatever_finishes_first() -> None:
    """Members finishing in reverse order still get ids and results by their place in the list."""
    registry = ToolRegistry()
    finished = [anyio.Event() for _ in range(3)]
    order: list[int] = []

    @registry.tool
    class Chain:
        async def execute(self, i: int) -> int:
            if i + 1 < len(finished):
                with anyio.fail_after(HANDSHAKE):
                    await finished[i + 1].wait()
            order.append(i)
            finished[i].set()
            return i * 10

    async with SagaExecutor(registry).saga(saga_id="order") as saga:
        results = await saga.group([("Chain", {"i": i}) for i in range(3)])

    assert order == [2, 1, 0]
    assert results == [0, 10, 20]
    assert saga.result is not None
    assert [(s.step_id, s.args, s.result) for s in saga.result.steps] == [
        ("Chain-0", {"i": 0}, 0),
        ("Chain-1", {"i": 1}, 10),
        ("Chain-2", {"i": 2}, 20),
    ]


async def test_gathered_calls_take_positions_in_the_order_they_were_made() -> None:
    """asyncio.gather of saga.call: positions follow the order of the calls, not the order they finish in."""
    registry = ToolRegistry()
    second_done = anyio.Event()

    @registry.tool
    class Echo:
        async def execute(self, x: int) -> int:
            if x == 1:
                with anyio.fail_after(HANDSHAKE):
                    await second_done.wait()
            else:
                second_done.set()
            return x

    async with SagaExecutor(registry).saga(saga_id="gather") as saga:
        results = await asyncio.gather(saga.call("Echo", x=1), saga.call("Echo", x=2))

    assert results == [1, 2]
    assert saga.result is not None
    assert [(s.step_id, s.args) for s in saga.result.steps] == [("Echo-0", {"x": 1}), ("Echo-1", {"x": 2})]


def group_tools(ledger: Ledger) -> tuple[ToolRegistry, anyio.Event]:
    """Return tools for a group where Boom fails once Quick has finished and Slow is running."""
    registry = ToolRegistry()
    quick_done, slow_started = anyio.Event(), anyio.Event()

    @registry.tool
    class Quick:
        async def execute(self) -> str:
            quick_done.set()
            return "quick"

        async def compensate(self, result: Any) -> None:
            ledger.compensated.append(("Quick", result))

    @registry.tool
    class Slow:
        async def execute(self) -> str:
            slow_started.set()
            await anyio.sleep_forever()
            return "never"

        async def compensate(self, result: Any) -> None:
            ledger.compensated.append(("Slow", result))

    @registry.tool
    class Boom:
        async def execute(self) -> None:
            with anyio.fail_after(HANDSHAKE):
                await quick_done.wait()
                await slow_started.wait()
            raise ValueError("boom")

        async def compensate(self, result: Any) -> None:
            ledger.compensated.append(("Boom", result))

    return registry, slow_started


async def test_group_failure_cancels_and_compensates_running_siblings(ledger: Ledger) -> None:
    """A failing member cancels running siblings, compensated at once with None; succeeded siblings stay SUCCESS."""
    registry, _ = group_tools(ledger)
    executor = SagaExecutor(registry)
    async with executor.saga(saga_id="group-fail") as saga:
        with pytest.raises(StepFailedError):
            await saga.group([("Quick", {}), ("Boom", {}), ("Slow", {})])
        # Already undone and recorded when the error reaches the caller.
        assert ledger.compensated == [("Slow", None)]
        steps = await stored_steps(executor, "group-fail")
        assert {k: s.status for k, s in steps.items()} == {
            "Quick-0": StepStatus.SUCCESS,
            "Boom-1": StepStatus.FAILED,
            "Slow-2": StepStatus.COMPENSATED,
        }
        assert steps["Slow-2"].error_type == "CancelledError"

    assert saga.result is not None
    assert saga.result.status is SagaStatus.SUCCESS
    assert saga.result.step("Quick-0").status is StepStatus.SUCCESS
    assert ledger.compensated == [("Slow", None)]


async def test_group_step_failed_error_names_the_member_that_failed(ledger: Ledger) -> None:
    """StepFailedError from a group names the member that failed, not a sibling cancelled because of it."""
    registry, _ = group_tools(ledger)
    async with SagaExecutor(registry).saga(saga_id="group-culprit") as saga:
        with pytest.raises(StepFailedError) as caught:
            await saga.group([("Quick", {}), ("Slow", {}), ("Boom", {})])

    assert (caught.value.step_id, caught.value.error_type) == ("Boom-2", "ValueError")


# -- leaving the block -----------------------------------------------------------------------------------------


async def test_exception_leaving_the_block_compensates_completed_calls_in_reverse(
    executor: SagaExecutor, ledger: Ledger
) -> None:
    """An exception leaving the block undoes every completed call, last first, then is re-raised as itself."""
    stop = RuntimeError("the agent gave up")
    saga = executor.saga(saga_id="undo")

    async def agent() -> None:
        async with saga:
            await saga.call("Book", item="flight")
            await saga.call("Note", text="seat 4A")
            with pytest.raises(StepFailedError):
                await saga.call("Fail", reason="no hotel")
            await saga.call("Book", item="car")
            raise stop

    with pytest.raises(RuntimeError) as caught:
        await agent()

    assert caught.value is stop
    assert ledger.compensated == [("Book", {"item": "car"}), ("Note", "seat 4A"), ("Book", {"item": "flight"})]
    assert saga.result is not None
    assert saga.result.status is SagaStatus.COMPENSATED
    assert saga.result.error is not None
    assert "the agent gave up" in saga.result.error
    stored = await executor.store.get_saga("undo")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED
    assert {s.step_id: s.status for s in stored.steps} == {
        "Book-0": StepStatus.COMPENSATED,
        "Note-1": StepStatus.COMPENSATED,
        "Fail-2": StepStatus.FAILED,
        "Book-3": StepStatus.COMPENSATED,
    }


async def test_caller_cancellation_compensates_and_propagates(ledger: Ledger) -> None:
    """Cancelling the caller mid-call undoes the call in flight (with None) and the completed ones, then goes on."""
    registry = make_registry(ledger)
    started = anyio.Event()

    @registry.tool
    class Wait:
        async def execute(self) -> None:
            started.set()
            await anyio.sleep_forever()

        async def compensate(self, result: Any) -> None:
            ledger.compensated.append(("Wait", result))

    executor = SagaExecutor(registry)
    holder: list[DynamicSaga] = []

    async def agent() -> None:
        async with executor.saga(saga_id="cancelled") as saga:
            holder.append(saga)
            await saga.call("Book", item="ticket")
            await saga.call("Wait")

    await cancel_once(agent(), started)

    assert ledger.compensated == [("Wait", None), ("Book", {"item": "ticket"})]
    stored = await executor.store.get_saga("cancelled")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED
    assert holder[0].result is not None
    assert holder[0].result.status is SagaStatus.COMPENSATED


# -- budgets ---------------------------------------------------------------------------------------------------


async def test_charge_is_written_at_once_and_the_crossing_charge_raises(executor: SagaExecutor) -> None:
    """saga.charge is stored before it returns; the charge that crosses the Budget raises and is still counted."""
    async with executor.saga(saga_id="money", budget=Budget(max_cost=1.0, max_tokens=100)) as saga:
        await saga.charge(cost=0.25, tokens=10)
        stored = await executor.store.get_saga("money")
        assert stored is not None
        assert (stored.cost, stored.tokens) == (0.25, 10)
        await saga.charge(tokens=90)
        with pytest.raises(BudgetExceededError) as caught:
            await saga.charge(tokens=1)
        assert (caught.value.saga_id, caught.value.tokens, caught.value.max_tokens) == ("money", 101, 100)
        stored = await executor.store.get_saga("money")
        assert stored is not None
        assert (stored.cost, stored.tokens) == (0.25, 101)
        assert (saga.cost, saga.tokens) == (0.25, 101)


async def test_budget_error_leaving_the_block_compensates(executor: SagaExecutor, ledger: Ledger) -> None:
    """A BudgetExceededError from saga.charge that leaves the block compensates the calls made so far."""
    saga = executor.saga(saga_id="over", budget=Budget(max_cost=1.0))

    async def agent() -> None:
        async with saga:
            await saga.call("Book", item="suite")
            await saga.charge(cost=1.5)

    with pytest.raises(BudgetExceededError):
        await agent()

    assert ledger.compensated == [("Book", {"item": "suite"})]
    assert saga.result is not None
    assert saga.result.status is SagaStatus.COMPENSATED
    assert saga.result.cost == 1.5


async def test_budget_exceeded_in_a_tool_comes_through_as_itself() -> None:
    """A tool's ctx.charge crossing the Budget makes saga.call raise BudgetExceededError, with no retry."""
    registry = ToolRegistry()
    attempts: list[int] = []

    @registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.0, jitter=False))
    class Llm:
        async def execute(self, ctx: StepContext) -> str:
            attempts.append(ctx.attempt)
            ctx.charge(cost=2.0, tokens=5)
            return "answer"

    executor = SagaExecutor(registry)
    async with executor.saga(saga_id="llm", budget=Budget(max_cost=1.0)) as saga:
        with pytest.raises(BudgetExceededError) as caught:
            await saga.call("Llm")
        assert not isinstance(caught.value, StepFailedError)
        assert caught.value.cost == 2.0

    assert attempts == [1]
    assert saga.result is not None
    step = saga.result.step("Llm-0")
    assert (step.status, step.error_type) == (StepStatus.FAILED, "BudgetExceededError")
    assert (saga.result.cost, saga.result.tokens) == (2.0, 5)


# -- refusals --------------------------------------------------------------------------------------------------


async def test_a_second_entry_of_a_running_id_raises_in_progress(ledger: Ledger) -> None:
    """While a saga id is running, entering it again (same or another live executor) raises SagaInProgressError."""
    registry = make_registry(ledger)
    executor = SagaExecutor(registry)
    other = SagaExecutor(registry, store=executor.store)
    async with executor.saga(saga_id="busy") as saga:
        await saga.call("Book", item="x")
        for contender in (executor, other):
            with pytest.raises(SagaInProgressError) as caught:
                async with contender.saga(saga_id="busy"):
                    pytest.fail("entered a saga that is running")
            assert (caught.value.saga_id, caught.value.owner) == ("busy", executor.executor_id)
        await saga.call("Book", item="y")

    assert ledger.executed == [("Book", "x"), ("Book", "y")]
    assert saga.result is not None
    assert saga.result.status is SagaStatus.SUCCESS


async def test_a_plan_saga_id_cannot_name_a_dynamic_saga(executor: SagaExecutor) -> None:
    """executor.saga with a plan saga's id (live or replay) raises IdempotencyConflictError, and vice versa."""
    result = await executor.run([{"tool": "Note", "args": {"text": "hi"}}], saga_id="plan-1")
    assert result.status is SagaStatus.SUCCESS
    before = await executor.store.export_saga("plan-1")
    for replay in (False, True):
        with pytest.raises(IdempotencyConflictError):
            async with executor.saga(saga_id="plan-1", replay=replay):
                pytest.fail("entered a plan saga as a dynamic one")
    assert await executor.store.export_saga("plan-1") == before

    async with executor.saga(saga_id="dyn-1") as saga:
        await saga.call("Note", text="hi")
    with pytest.raises(IdempotencyConflictError):
        await executor.run([{"tool": "Note", "args": {"text": "hi"}}], saga_id="dyn-1")


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("Book", {"item": ["not", "a", "string"]}),
        ("Book", {}),
        ("Book", {"item": "x", "extra": 1}),
        ("Nope", {"item": "x"}),
    ],
    ids=["bad-type", "missing", "unknown-arg", "unknown-tool"],
)
async def test_invalid_call_is_refused_and_nothing_recorded(
    executor: SagaExecutor, ledger: Ledger, tool: str, args: dict[str, Any]
) -> None:
    """A call with bad arguments or an unknown tool raises PlanValidationError; nothing runs or is stored."""
    async with executor.saga(saga_id="refuse") as saga:
        with pytest.raises(PlanValidationError) as caught:
            await saga.call(tool, **args)
        assert caught.value.problems
        assert (await executor.store.get_saga("refuse")).steps == []  # type: ignore[union-attr]
        await saga.call("Note", text="after")

    assert ledger.executed == [("Note", "after")]
    assert saga.result is not None
    assert [s.step_id for s in saga.result.steps] == ["Note-0"]  # the refused call took no position


async def test_malformed_group_is_refused(executor: SagaExecutor, ledger: Ledger) -> None:
    """saga.group refuses an empty list, a non-list, a non-mapping args and a bad step id; nothing runs."""
    async with executor.saga(saga_id="malformed") as saga:
        for calls in ([], "Book", [("Book",)], [("Book", "item=x")], [("Book", {"item": "x"}, "a.b")]):
            with pytest.raises(PlanValidationError):
                await saga.group(calls)  # type: ignore[arg-type]
        with pytest.raises(PlanValidationError, match=r"available: .*Book"):  # the message lists the tools
            await saga.call("Nope")

    assert ledger.executed == []
    assert saga.result is not None
    assert saga.result.steps == []


async def test_unknown_tool_in_a_call_raises_unknown_tool_error(executor: SagaExecutor) -> None:
    """saga.call of a tool the registry lacks raises UnknownToolError, as a plan naming it does."""
    with pytest.raises(UnknownToolError):
        await executor.run([{"tool": "Nope"}])
    async with executor.saga(saga_id="unknown") as saga:
        with pytest.raises(UnknownToolError):
            await saga.call("Nope")


async def test_a_group_refused_for_a_duplicate_step_id_records_nothing(executor: SagaExecutor, ledger: Ledger) -> None:
    """A group whose members share a step id raises PlanValidationError and stores none of its members."""
    async with executor.saga(saga_id="dup") as saga:
        with pytest.raises(PlanValidationError):
            await saga.group([("Note", {"text": "a"}, "same"), ("Note", {"text": "b"}, "same")])
        await saga.call("Note", text="after")

    assert ledger.executed == [("Note", "after")]
    assert saga.result is not None
    assert [s.step_id for s in saga.result.steps] == ["Note-0"]


async def test_the_saga_is_usable_only_inside_its_block(executor: SagaExecutor) -> None:
    """call, group and charge outside the block raise RuntimeError; a DynamicSaga is entered once."""
    saga = executor.saga(saga_id="outside")
    with pytest.raises(RuntimeError):
        await saga.call("Note", text="early")
    async with saga:
        await saga.call("Note", text="inside")
    for use in (
        saga.call("Note", text="late"),
        saga.group([("Note", {"text": "late"})]),
        saga.charge(cost=1.0),
    ):
        with pytest.raises(RuntimeError):
            await use
    with pytest.raises(RuntimeError):
        async with saga:
            pytest.fail("entered twice")
    assert saga.result is not None
    assert len(saga.result.steps) == 1
