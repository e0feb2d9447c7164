"""Results as JSON, idempotent saga ids, budgets, and the write-ahead protocol (durability invariants 1, 2, 3, 6)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import anyio
import anyio.lowlevel
import pydantic
import pytest
from shop_tools import boom_tool

from saga_runtime import (
    Budget,
    BudgetExceededError,
    IdempotencyConflictError,
    MemoryStore,
    RetryPolicy,
    SagaExecutor,
    SagaInProgressError,
    SagaStatus,
    StepContext,
    StepStatus,
    ToolRegistry,
)

HANDSHAKE = 2.0


class Receipt(pydantic.BaseModel):
    """A pydantic result."""

    tx_id: str
    amount: Decimal
    at: datetime


@dataclasses.dataclass
class Parcel:
    """A dataclass result."""

    tracking: uuid.UUID
    weight: float
    tags: tuple[str, ...]


class FakeSocket:
    """Something a tool might wrongly return: a live handle with no JSON form."""

    def __init__(self) -> None:
        self.fd = 7
        self.closed = False


def echo_registry() -> tuple[ToolRegistry, list[int]]:
    """Return a registry whose `Effect` returns its `n`, and the list of the n it was called with."""
    registry = ToolRegistry()
    called: list[int] = []

    @registry.tool
    class Effect:
        async def execute(self, n: int) -> int:
            called.append(n)
            return n

    return registry, called


# -- results as JSON -------------------------------------------------------------------------------------------


async def test_rich_results_are_stored_as_json_and_compensated_round_tripped() -> None:
    """Pydantic models, dataclasses, datetimes, Decimals and UUIDs are stored as JSON and compensate gets that JSON."""
    registry = ToolRegistry()
    tracking = uuid.UUID("12345678-1234-5678-1234-567812345678")
    at = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    values: dict[str, Any] = {
        "model": Receipt(tx_id="tx-1", amount=Decimal("12.50"), at=at),
        "dataclass": Parcel(tracking=tracking, weight=1.5, tags=("fragile", "heavy")),
        "datetime": at,
        "date": date(2024, 5, 1),
        "decimal": Decimal("0.10"),
        "uuid": tracking,
        "nested": {"ids": [tracking], "when": at, "set": {3}},
    }
    received: dict[str, Any] = {}

    @registry.tool
    class Rich:
        async def execute(self, kind: str) -> Any:
            return values[kind]

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            received[ctx.step_id] = result

    boom_tool(registry)
    plan = [[{"id": kind, "tool": "Rich", "args": {"kind": kind}} for kind in values], {"id": "boom", "tool": "Boom"}]
    executor = SagaExecutor(registry)
    result = await executor.run(plan, saga_id="rich")

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    expected = {
        "model": {"tx_id": "tx-1", "amount": "12.50", "at": "2024-05-01T12:00:00Z"},
        "dataclass": {"tracking": str(tracking), "weight": 1.5, "tags": ["fragile", "heavy"]},
        "datetime": "2024-05-01T12:00:00Z",
        "date": "2024-05-01",
        "decimal": "0.10",
        "uuid": str(tracking),
        "nested": {"ids": [str(tracking)], "when": "2024-05-01T12:00:00Z", "set": [3]},
    }
    assert received == expected
    for kind, value in expected.items():
        record = result.step(kind)
        assert record.result == value
        assert json.loads(json.dumps(record.result)) == record.result
        assert record.status is StepStatus.COMPENSATED
    stored = await executor.store.get_saga("rich")
    assert stored is not None
    assert {s.step_id: s.result for s in stored.steps if s.step_id != "boom"} == expected


async def test_result_of_a_successful_saga_is_json() -> None:
    """A successful saga's results are the JSON forms of what tools returned, also for $refs to them."""
    registry = ToolRegistry()
    seen: list[Any] = []

    @registry.tool
    class Make:
        async def execute(self) -> Receipt:
            return Receipt(tx_id="tx-9", amount=Decimal("3.00"), at=datetime(2024, 1, 1, tzinfo=UTC))

    @registry.tool
    class Use:
        async def execute(self, receipt: dict, amount: str) -> None:
            seen.append((receipt, amount))

    result = await SagaExecutor(registry).run(
        [
            {"id": "make", "tool": "Make"},
            {"id": "use", "tool": "Use", "args": {"receipt": {"$ref": "make"}, "amount": {"$ref": "make.amount"}}},
        ]
    )

    assert result.status is SagaStatus.SUCCESS, result.describe()
    stored = {"tx_id": "tx-9", "amount": "3.00", "at": "2024-01-01T00:00:00Z"}
    assert result.result_of("make") == stored
    assert seen == [(stored, "3.00")]


@pytest.mark.parametrize("value_factory", [object, FakeSocket], ids=["object", "socket-like"])
async def test_non_json_result_fails_names_tool_and_type_and_is_compensated_with_raw_value(value_factory) -> None:
    """A non-JSON result fails its step naming tool and type, is undone with the raw value; saga compensates."""
    registry = ToolRegistry()
    raw = value_factory()
    log: list[tuple[str, Any]] = []

    @registry.tool
    class Effect:
        async def execute(self) -> str:
            return "charged"

        async def compensate(self, result: Any) -> None:
            log.append(("effect", result))

    @registry.tool(name="open_conn", retry=RetryPolicy(max_attempts=3, initial_interval=0))
    class OpenConn:
        async def execute(self) -> Any:
            log.append(("open", None))
            return raw

        async def compensate(self, result: Any) -> None:
            log.append(("close", result))

    @registry.tool
    class After:
        async def execute(self) -> None:
            log.append(("after", None))

    plan = [{"id": "effect", "tool": "Effect"}, {"id": "conn", "tool": "open_conn"}, {"id": "after", "tool": "After"}]
    executor = SagaExecutor(registry)
    result = await executor.run(plan, saga_id="not-storable")

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    conn = result.step("conn")
    assert conn.error_type == "ResultNotStorableError"
    assert "open_conn" in (conn.error or "")
    assert type(raw).__name__ in (conn.error or "")
    assert conn.result is None
    assert conn.status is StepStatus.COMPENSATED
    closes = [value for kind, value in log if kind == "close"]
    assert len(closes) == 1
    assert closes[0] is raw
    assert ("effect", "charged") in log
    assert log.index(("effect", "charged")) > log.index(("close", raw))
    assert ("after", None) not in log
    assert log.count(("open", None)) == 1  # the effect happened: the value is not fetched again
    assert result.step("after").status is StepStatus.PENDING
    stored = await executor.store.get_saga("not-storable")
    assert stored is not None
    assert json.dumps(stored.to_dict())


async def test_nan_and_infinity_become_null() -> None:
    """NaN and infinities in a result are stored as null, and the stored result is strict JSON."""
    registry = ToolRegistry()

    @registry.tool
    class Odd:
        async def execute(self, which: str) -> Any:
            return {"nan": math.nan, "inf": {"x": math.inf, "y": [1.0, -math.inf]}, "bare": math.nan}[which]

    plan = [[{"id": w, "tool": "Odd", "args": {"which": w}} for w in ("nan", "inf", "bare")]]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.SUCCESS
    assert result.result_of("nan") is None
    assert result.result_of("bare") is None
    assert result.result_of("inf") == {"x": None, "y": [1.0, None]}
    json.dumps(result.to_dict(), allow_nan=False)


# -- idempotency -----------------------------------------------------------------------------------------------


async def test_finished_saga_id_returns_the_stored_result_without_calling_tools() -> None:
    """A finished saga's id (SUCCESS or COMPENSATED) run again returns its stored result and calls no tool."""
    registry = ToolRegistry()
    calls: list[str] = []

    @registry.tool
    class Effect:
        async def execute(self, key: str, fail: bool = False) -> str:
            calls.append(f"exec {key}")
            if fail:
                raise RuntimeError("no")
            return key

        async def compensate(self, result: str) -> None:
            calls.append(f"comp {result}")

    executor = SagaExecutor(registry)
    good = [{"id": "a", "tool": "Effect", "args": {"key": "a"}}]
    bad = [
        {"id": "a", "tool": "Effect", "args": {"key": "a"}},
        {"id": "b", "tool": "Effect", "args": {"key": "b", "fail": True}},
    ]
    first_good = await executor.run(good, saga_id="good")
    first_bad = await executor.run(bad, saga_id="bad")
    assert first_good.status is SagaStatus.SUCCESS
    assert first_bad.status is SagaStatus.COMPENSATED
    calls_before = list(calls)

    again_good = await executor.run(good, saga_id="good")
    again_bad = await executor.run(bad, saga_id="bad")

    assert calls == calls_before
    assert again_good.to_dict() == first_good.to_dict()
    assert again_bad.to_dict() == first_bad.to_dict()
    # Another executor on the same store sees the same.
    other = SagaExecutor(registry, store=executor.store)
    assert (await other.run(good, saga_id="good")).to_dict() == first_good.to_dict()
    assert calls == calls_before


async def test_same_id_with_another_plan_is_a_conflict() -> None:
    """The same saga_id with a different plan raises IdempotencyConflictError and runs nothing."""
    registry, called = echo_registry()
    executor = SagaExecutor(registry)
    await executor.run([{"id": "a", "tool": "Effect", "args": {"n": 1}}], saga_id="order-1")

    with pytest.raises(IdempotencyConflictError) as info:
        await executor.run([{"id": "a", "tool": "Effect", "args": {"n": 2}}], saga_id="order-1")
    assert info.value.saga_id == "order-1"
    assert "order-1" in str(info.value)
    assert called == [1]
    stored = await executor.store.get_saga("order-1")
    assert stored is not None
    assert stored.result_of("a") == 1


async def test_running_saga_id_raises_saga_in_progress() -> None:
    """A second run of an id that is still running raises SagaInProgressError and calls no tool."""
    registry = ToolRegistry()
    started = anyio.Event()
    release = anyio.Event()
    calls = 0

    @registry.tool
    class Hold:
        async def execute(self) -> str:
            nonlocal calls
            calls += 1
            started.set()
            await release.wait()
            return "done"

    executor = SagaExecutor(registry)
    plan = [{"id": "hold", "tool": "Hold"}]
    async with anyio.create_task_group() as tg:
        results = []

        async def first() -> None:
            results.append(await executor.run(plan, saga_id="busy"))

        tg.start_soon(first)
        with anyio.fail_after(HANDSHAKE):
            await started.wait()
        with pytest.raises(SagaInProgressError) as info:
            await executor.run(plan, saga_id="busy")
        assert info.value.saga_id == "busy"
        assert info.value.owner == executor.executor_id
        release.set()

    assert calls == 1
    assert results[0].status is SagaStatus.SUCCESS
    # Once finished, the id returns the stored result.
    assert (await executor.run(plan, saga_id="busy")).to_dict() == results[0].to_dict()
    assert calls == 1


async def test_gathered_runs_of_one_id_execute_once() -> None:
    """asyncio.gather of two runs of one saga id executes the tool exactly once."""
    registry = ToolRegistry()
    calls = 0

    @registry.tool
    class Effect:
        async def execute(self) -> str:
            nonlocal calls
            calls += 1
            await anyio.sleep(0.01)
            return "done"

    executor = SagaExecutor(registry)
    plan = [{"id": "e", "tool": "Effect"}]
    outcomes = await asyncio.gather(
        executor.run(plan, saga_id="twin"), executor.run(plan, saga_id="twin"), return_exceptions=True
    )

    assert calls == 1
    results = [o for o in outcomes if not isinstance(o, BaseException)]
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(results) == 1
    assert results[0].status is SagaStatus.SUCCESS
    assert all(isinstance(e, SagaInProgressError) for e in errors)


# -- budgets ---------------------------------------------------------------------------------------------------


async def test_charges_accumulate_into_cost_and_tokens() -> None:
    """ctx.charge from async and sync tools adds up into result.cost and result.tokens, stored with the saga."""
    registry = ToolRegistry()

    @registry.tool
    class LLM:
        async def execute(self, cost: float, tokens: int, ctx: StepContext) -> None:
            ctx.charge(cost=cost, tokens=tokens)

    @registry.tool
    class SyncLLM:
        def execute(self, cost: float, tokens: int, ctx: StepContext) -> None:
            ctx.charge(cost=cost / 2, tokens=tokens // 2)
            ctx.charge(cost=cost / 2, tokens=tokens // 2)

    plan = [
        [
            {"tool": "LLM", "args": {"cost": 0.25, "tokens": 100}},
            {"tool": "SyncLLM", "args": {"cost": 0.5, "tokens": 40}},
        ],
        {"tool": "LLM", "args": {"cost": 0.125, "tokens": 7}},
    ]
    executor = SagaExecutor(registry)
    result = await executor.run(plan, saga_id="spend", budget=Budget(max_cost=10.0, max_tokens=1000))

    assert result.status is SagaStatus.SUCCESS
    assert result.cost == pytest.approx(0.875)
    assert result.tokens == 147
    stored = await executor.store.get_saga("spend")
    assert stored is not None
    assert stored.cost == pytest.approx(0.875)
    assert stored.tokens == 147


@pytest.mark.parametrize(
    ("budget", "charge"),
    [(Budget(max_cost=1.0), {"cost": 0.4}), (Budget(max_tokens=100), {"tokens": 40})],
    ids=["max_cost", "max_tokens"],
)
async def test_crossing_the_budget_fails_the_step_without_retry_and_compensates(budget, charge) -> None:
    """The charge crossing a cap fails its step at once (no retry), is counted, and the saga compensates."""
    registry = ToolRegistry()
    calls: list[str] = []

    @registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0))
    class Spend:
        async def execute(self, key: str, ctx: StepContext) -> str:
            calls.append(key)
            ctx.charge(**charge)
            return key

        async def compensate(self, result: str) -> None:
            calls.append(f"undo {result}")

    plan = [{"id": key, "tool": "Spend", "args": {"key": key}} for key in ("s1", "s2", "s3", "s4")]
    executor = SagaExecutor(registry)
    result = await executor.run(plan, saga_id="over", budget=budget)

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert calls == ["s1", "s2", "s3", "undo s2", "undo s1"]
    s3 = result.step("s3")
    assert s3.status is StepStatus.FAILED
    assert s3.error_type == "BudgetExceededError"
    assert s3.attempts == 1
    assert result.step("s4").status is StepStatus.PENDING
    # Every charge counts, the one that crossed included.
    assert result.cost == pytest.approx(3 * charge.get("cost", 0.0))
    assert result.tokens == 3 * charge.get("tokens", 0)
    stored = await executor.store.get_saga("over")
    assert stored is not None
    assert stored.cost == pytest.approx(result.cost)
    assert stored.tokens == result.tokens


async def test_budget_exceeded_error_carries_the_numbers() -> None:
    """The BudgetExceededError a tool sees carries cost and cap, and the saga's error names the budget."""
    registry = ToolRegistry()
    caught: list[BudgetExceededError] = []

    @registry.tool
    class Spend:
        async def execute(self, ctx: StepContext) -> None:
            try:
                ctx.charge(cost=2.5)
            except BudgetExceededError as exc:
                caught.append(exc)
                raise

    result = await SagaExecutor(registry).run([{"id": "s", "tool": "Spend"}], budget=Budget(max_cost=2.0))

    assert result.status is SagaStatus.COMPENSATED
    assert len(caught) == 1
    assert caught[0].cost == pytest.approx(2.5)
    assert caught[0].max_cost == 2.0
    assert "max_cost" in (result.step("s").error or "")


async def test_parallel_charges_cannot_jointly_pass_a_cap() -> None:
    """Two parallel steps each charging 0.6 against max_cost=1.0: exactly one is refused and the saga compensates."""
    registry = ToolRegistry()
    ready = {key: anyio.Event() for key in ("p1", "p2")}
    outcomes: dict[str, str] = {}

    @registry.tool
    class Spend:
        async def execute(self, key: str, ctx: StepContext) -> str:
            ready[key].set()
            with anyio.fail_after(HANDSHAKE):
                for event in ready.values():
                    await event.wait()
            try:
                ctx.charge(cost=0.6)
            except BudgetExceededError:
                outcomes[key] = "refused"
                raise
            outcomes[key] = "charged"
            return key

    plan = [
        [{"id": "p1", "tool": "Spend", "args": {"key": "p1"}}, {"id": "p2", "tool": "Spend", "args": {"key": "p2"}}]
    ]
    result = await SagaExecutor(registry).run(plan, budget=Budget(max_cost=1.0))

    assert sorted(outcomes.values()) == ["charged", "refused"]
    assert result.status is SagaStatus.COMPENSATED
    assert [s.error_type for s in result.steps].count("BudgetExceededError") == 1
    assert not all(s.status is StepStatus.SUCCESS for s in result.steps)
    assert result.cost == pytest.approx(1.2)


async def test_parallel_sync_charges_cannot_jointly_pass_a_cap() -> None:
    """Many sync tools charging from worker threads at once never all pass: the sum over the cap is refused."""
    registry = ToolRegistry()
    refused: list[str] = []

    @registry.tool
    class SyncSpend:
        def execute(self, i: int, ctx: StepContext) -> int:
            for _ in range(50):
                try:
                    ctx.charge(tokens=1)
                except BudgetExceededError:
                    refused.append(str(i))
                    raise
            return i

    plan = [[{"tool": "SyncSpend", "args": {"i": i}} for i in range(4)]]
    result = await SagaExecutor(registry).run(plan, budget=Budget(max_tokens=150))

    assert result.status is SagaStatus.COMPENSATED
    assert refused
    assert any(s.error_type == "BudgetExceededError" for s in result.steps)
    assert result.tokens >= 151


# -- write-ahead (invariants 1 and 2) ----------------------------------------------------------------------------


class LoggingStore(MemoryStore):
    """A memory store that logs, in order with the tools' own events, every row it is asked to write."""

    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        super().__init__()
        self.log = log

    async def create_saga(self, saga, steps):
        self.log.append(("create", saga.status.value, {r.step_id: self._row(r) for r in steps}))
        return await super().create_saga(saga, steps)

    async def save(self, saga, steps, *, owner=None, reseal=True, lease=True):
        self.log.append(("save", None if saga is None else saga.status.value, {r.step_id: self._row(r) for r in steps}))
        await super().save(saga, steps, owner=owner, reseal=reseal, lease=lease)

    @staticmethod
    def _row(row) -> dict[str, Any]:
        return {
            "status": row.status.value,
            "attempts": row.attempts,
            "key": row.idempotency_key,
            "compensation_attempts": row.compensation_attempts,
        }


def saved_rows(log: list[tuple[Any, ...]], before: int, step_id: str) -> list[dict[str, Any]]:
    """Return every row of `step_id` the store was asked to write before log index `before`, oldest first."""
    return [entry[2][step_id] for entry in log[:before] if entry[0] in ("create", "save") and step_id in entry[2]]


async def test_write_ahead_each_attempt_is_saved_running_before_its_tool_runs() -> None:
    """Invariant 1: each attempt is saved RUNNING with its attempt number and idempotency key before execute runs."""
    registry = ToolRegistry()
    log: list[tuple[Any, ...]] = []

    @registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0))
    class Effect:
        async def execute(self, fail_until: int, ctx: StepContext) -> str:
            log.append(("exec", ctx.step_id, ctx.attempt, ctx.idempotency_key))
            if ctx.attempt < fail_until:
                raise ConnectionError("again")
            return "ok"

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            log.append(("comp", ctx.step_id, ctx.attempt, ctx.idempotency_key))

    @registry.tool
    class SyncEffect:
        def execute(self, ctx: StepContext) -> str:
            log.append(("exec", ctx.step_id, ctx.attempt, ctx.idempotency_key))
            return "sync"

    boom_tool(registry)
    plan = [
        [{"id": "a", "tool": "Effect", "args": {"fail_until": 3}}, {"id": "b", "tool": "SyncEffect"}],
        {"id": "c", "tool": "Effect", "args": {"fail_until": 2}},
        {"id": "boom", "tool": "Boom"},
    ]
    executor = SagaExecutor(registry, store=LoggingStore(log))
    result = await executor.run(plan, saga_id="wal")

    assert result.status is SagaStatus.COMPENSATED
    execs = [(i, e) for i, e in enumerate(log) if e[0] == "exec"]
    assert sorted((e[1], e[2]) for _, e in execs) == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1), ("c", 2)]
    for index, (_, step_id, attempt, key) in execs:
        rows = saved_rows(log, index, step_id)
        assert rows, f"{step_id} attempt {attempt} ran before any row of it was saved"
        latest = rows[-1]
        assert latest == {"status": "RUNNING", "attempts": attempt, "key": key, "compensation_attempts": 0}, (
            step_id,
            attempt,
            latest,
        )
        assert key == result.step(step_id).idempotency_key
    # Compensations are written ahead too: the attempt is counted in the store before compensate runs.
    comps = [(i, e) for i, e in enumerate(log) if e[0] == "comp"]
    assert sorted(e[1] for _, e in comps) == ["a", "c"]
    for index, (_, step_id, attempt, _key) in comps:
        latest = saved_rows(log, index, step_id)[-1]
        assert latest["compensation_attempts"] == attempt
        assert latest["status"] == "SUCCESS"


async def test_result_before_progress_outcomes_saved_before_next_group_and_before_return() -> None:
    """Invariant 2: a group's outcomes are saved before any step of the next group starts and before run() returns."""
    registry = ToolRegistry()
    log: list[tuple[Any, ...]] = []
    group_of = {"a": 0, "b": 0, "c": 1, "d": 2, "e": 2}

    @registry.tool(retry_scope="step")
    class Effect:
        async def execute(self, fail: bool, ctx: StepContext) -> str:
            log.append(("exec", ctx.step_id))
            await anyio.lowlevel.checkpoint()
            if fail:
                raise RuntimeError("optional step failed")
            return ctx.step_id

    plan = [
        [{"id": "a", "tool": "Effect", "args": {"fail": False}}, {"id": "b", "tool": "Effect", "args": {"fail": True}}],
        {"id": "c", "tool": "Effect", "args": {"fail": False}},
        [
            {"id": "d", "tool": "Effect", "args": {"fail": False}},
            {"id": "e", "tool": "Effect", "args": {"fail": False}},
        ],
    ]
    store = LoggingStore(log)
    result = await SagaExecutor(registry, store=store).run(plan, saga_id="rbp")
    log.append(("returned",))

    assert result.status is SagaStatus.SUCCESS, result.describe()
    final = {r.step_id: r.status.value for r in result.steps}
    assert final == {"a": "SUCCESS", "b": "FAILED", "c": "SUCCESS", "d": "SUCCESS", "e": "SUCCESS"}
    first_exec = {}
    for i, entry in enumerate(log):
        if entry[0] == "exec":
            first_exec.setdefault(group_of[entry[1]], i)
    for step_id, group in group_of.items():
        later = [i for g, i in first_exec.items() if g > group]
        checkpoints = [*later, len(log) - 1]  # the next group's first start, and run() returning
        for index in checkpoints:
            rows = saved_rows(log, index, step_id)
            assert rows, f"{step_id} was never saved before log index {index}"
            assert rows[-1]["status"] == final[step_id], (step_id, index, rows[-1])
    # The saga's own terminal status was saved before run() returned.
    saga_saves = [entry[1] for entry in log if entry[0] == "save" and entry[1] is not None]
    assert saga_saves[-1] == "SUCCESS"
    stored = await store.get_saga("rbp")
    assert stored is not None
    assert stored.to_dict() == result.to_dict()


async def test_nothing_is_stored_or_run_for_a_refused_plan() -> None:
    """A plan refused by validation writes nothing to the store and runs no tool."""
    from saga_runtime import PlanValidationError

    registry, called = echo_registry()
    log: list[tuple[Any, ...]] = []
    store = LoggingStore(log)
    with pytest.raises(PlanValidationError):
        await SagaExecutor(registry, store=store).run(
            [{"id": "a", "tool": "Effect", "args": {"n": 1}}, {"id": "b", "tool": "Effect", "args": {"n": "lots"}}],
            saga_id="refused",
        )

    assert log == []
    assert called == []
    assert await store.get_saga("refused") is None


async def test_non_json_result_compensation_is_not_cut_short_by_a_failing_sibling() -> None:
    """The at-once compensation of an unstorable result runs to its end even when a sibling fails meanwhile."""
    registry = ToolRegistry()
    compensating = anyio.Event()
    log: list[str] = []

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=1))
    class OpenConn:
        async def execute(self) -> Any:
            return FakeSocket()

        async def compensate(self, result: Any) -> None:
            compensating.set()
            for _ in range(5):
                await anyio.sleep(0.001)
            result.closed = True
            log.append("closed")

    @registry.tool
    class Boom:
        async def execute(self) -> None:
            with anyio.fail_after(HANDSHAKE):
                await compensating.wait()
            raise RuntimeError("boom")

    result = await SagaExecutor(registry).run([[{"id": "conn", "tool": "OpenConn"}, {"id": "boom", "tool": "Boom"}]])

    assert log == ["closed"]
    assert result.step("conn").status is StepStatus.COMPENSATED
    assert result.step("conn").compensation_attempts == 1
    assert result.status is SagaStatus.COMPENSATED


async def test_non_json_result_with_scope_step_is_compensated_and_the_saga_goes_on() -> None:
    """With retry_scope="step" an unstorable result fails only its step: compensated at once, the saga goes on."""
    registry = ToolRegistry()
    log: list[Any] = []

    @registry.tool(retry_scope="step")
    class OpenConn:
        async def execute(self) -> Any:
            return FakeSocket()

        async def compensate(self, result: Any) -> None:
            log.append(type(result).__name__)

    @registry.tool
    class After:
        async def execute(self) -> str:
            log.append("after")
            return "after"

    result = await SagaExecutor(registry).run([{"id": "conn", "tool": "OpenConn"}, {"id": "after", "tool": "After"}])

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert log == ["FakeSocket", "after"]
    conn = result.step("conn")
    assert conn.error_type == "ResultNotStorableError"
    assert conn.status is StepStatus.COMPENSATED


@pytest.mark.parametrize("cause", ["result not storable", "scope-step timeout"])
async def test_a_step_compensated_at_once_is_not_compensated_again(cause: str) -> None:
    """Invariant 3: a step compensated at once is not compensated a second time when the saga later compensates."""
    registry = ToolRegistry()
    compensations: list[str] = []

    @registry.tool(timeout=0.02 if cause == "scope-step timeout" else None, retry_scope="step")
    class Effect:
        async def execute(self) -> Any:
            if cause == "scope-step timeout":
                await anyio.Event().wait()
            return FakeSocket()

        async def compensate(self, result: Any) -> None:
            compensations.append(type(result).__name__)

    boom_tool(registry)
    result = await SagaExecutor(registry).run([{"id": "effect", "tool": "Effect"}, {"id": "boom", "tool": "Boom"}])

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert len(compensations) == 1
    assert result.step("effect").status is StepStatus.COMPENSATED
    assert result.step("effect").compensation_attempts == 1


async def test_the_same_plan_written_differently_is_not_a_conflict() -> None:
    """The same plan with other key order or as Step objects under the same id returns the stored result."""
    from saga_runtime import Step

    registry = ToolRegistry()
    calls = 0

    @registry.tool
    class Effect:
        async def execute(self, a: int, b: int) -> int:
            nonlocal calls
            calls += 1
            return a + b

    executor = SagaExecutor(registry)
    first = await executor.run([{"id": "s", "tool": "Effect", "args": {"a": 1, "b": 2}}], saga_id="same")
    second = await executor.run([{"args": {"b": 2, "a": 1}, "tool": "Effect", "id": "s"}], saga_id="same")
    third = await executor.run([Step(tool="Effect", args={"a": 1, "b": 2}, id="s")], saga_id="same")

    assert calls == 1
    assert first.to_dict() == second.to_dict() == third.to_dict()


async def test_a_refused_plan_leaves_its_id_free() -> None:
    """A saga id whose plan was refused is not taken: a valid plan can run under it afterwards."""
    from saga_runtime import PlanValidationError

    registry = ToolRegistry()

    @registry.tool
    class Effect:
        async def execute(self, n: int) -> int:
            return n

    executor = SagaExecutor(registry)
    with pytest.raises(PlanValidationError):
        await executor.run([{"tool": "Effect", "args": {"n": "lots"}}], saga_id="free")
    result = await executor.run([{"id": "e", "tool": "Effect", "args": {"n": 5}}], saga_id="free")

    assert result.status is SagaStatus.SUCCESS
    assert result.result_of("e") == 5
