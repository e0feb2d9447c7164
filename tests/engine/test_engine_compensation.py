"""Compensation: reverse order, concurrency within a group, what is (not) undone, failures, retries, and results."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime

import anyio
import anyio.lowlevel
import pytest
from shop_tools import boom_tool

from saga_runtime import (
    RetryPolicy,
    SagaExecutor,
    SagaFailedError,
    SagaResult,
    SagaStatus,
    StepContext,
    StepRecord,
    StepStatus,
    ToolRegistry,
)

HANDSHAKE = 2.0
NO_RETRY = RetryPolicy(max_attempts=1)


async def test_compensation_runs_groups_in_reverse_and_a_group_concurrently() -> None:
    """Compensations run groups last to first, a group's concurrently, each group finishing before an earlier starts."""
    registry = ToolRegistry()
    log: list[tuple[str, str]] = []
    group_of = {"a0": 0, "a1": 0, "b0": 1, "c0": 2, "c1": 2}
    comp_started = {key: anyio.Event() for key in group_of}

    @registry.tool(compensation_retry=NO_RETRY)
    class Effect:
        async def execute(self, key: str) -> str:
            log.append(("exec", key))
            return key

        async def compensate(self, result: str) -> None:
            log.append(("comp_start", result))
            comp_started[result].set()
            # Wait for every sibling's compensation to have started: only concurrent compensations get past this.
            siblings = [k for k, g in group_of.items() if g == group_of[result]]
            with anyio.fail_after(HANDSHAKE):
                for key in siblings:
                    await comp_started[key].wait()
            await anyio.lowlevel.checkpoint()
            log.append(("comp_end", result))

    boom_tool(registry)

    plan = [
        [{"id": "a0", "tool": "Effect", "args": {"key": "a0"}}, {"id": "a1", "tool": "Effect", "args": {"key": "a1"}}],
        {"id": "b0", "tool": "Effect", "args": {"key": "b0"}},
        [{"id": "c0", "tool": "Effect", "args": {"key": "c0"}}, {"id": "c1", "tool": "Effect", "args": {"key": "c1"}}],
        {"id": "boom", "tool": "Boom"},
    ]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    comp = [(kind, key) for kind, key in log if kind.startswith("comp")]
    assert {key for _, key in comp} == set(group_of)
    # Group order of the starts is strictly non-increasing: 2, 2, 1, 0, 0.
    start_groups = [group_of[key] for kind, key in comp if kind == "comp_start"]
    assert start_groups == sorted(start_groups, reverse=True)
    for i, (kind, key) in enumerate(comp):
        if kind == "comp_start":
            later_groups = {k for k, g in group_of.items() if g > group_of[key]}
            ended = {k for kd, k in comp[:i] if kd == "comp_end"}
            assert later_groups <= ended, f"{key} started before {later_groups - ended} finished"
    for key in group_of:
        record = result.step(key)
        assert record.status is StepStatus.COMPENSATED
        assert record.compensated_at is not None
        assert record.compensation_attempts == 1
    assert result.step("boom").status is StepStatus.FAILED


async def test_compensate_receives_the_stored_json_result() -> None:
    """compensate receives the JSON round-tripped result (tuples become lists, datetimes strings), as stored."""
    registry = ToolRegistry()
    received: list[object] = []
    when = datetime(2024, 5, 1, 12, 30)

    @registry.tool
    class Book:
        async def execute(self) -> dict:
            return {"pair": (1, 2), "when": when, "n": 3}

        async def compensate(self, result: dict) -> None:
            received.append(result)

    boom_tool(registry)

    result = await SagaExecutor(registry).run([{"id": "book", "tool": "Book"}, {"id": "boom", "tool": "Boom"}])

    expected = json.loads(json.dumps({"pair": [1, 2], "when": when.isoformat(), "n": 3}))
    assert received == [expected]
    assert result.step("book").result == expected
    assert result.step("book").status is StepStatus.COMPENSATED


async def test_failed_steps_are_not_compensated() -> None:
    """A step whose tool raised is FAILED and never compensated; its earlier SUCCESS steps are."""
    registry = ToolRegistry()
    compensated: list[object] = []

    @registry.tool
    class Effect:
        async def execute(self, key: str, fail: bool = False) -> str:
            if fail:
                raise RuntimeError(f"{key} failed")
            return key

        async def compensate(self, result: object) -> None:
            compensated.append(result)

    plan = [
        {"id": "ok", "tool": "Effect", "args": {"key": "ok"}},
        {"id": "bad", "tool": "Effect", "args": {"key": "bad", "fail": True}},
    ]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.COMPENSATED
    assert compensated == ["ok"]
    bad = result.step("bad")
    assert bad.status is StepStatus.FAILED
    assert bad.compensated_at is None
    assert bad.compensation_attempts == 0
    assert "bad failed" in (bad.error or "")
    assert bad.error_type == "RuntimeError"


async def test_tools_without_compensate_are_skipped_and_stay_success() -> None:
    """A SUCCESS step of a tool without compensate stays SUCCESS when the saga compensates."""
    registry = ToolRegistry()
    compensated: list[object] = []

    @registry.tool
    class Lookup:
        async def execute(self) -> str:
            return "read-only"

    @registry.tool
    class Effect:
        async def execute(self) -> str:
            return "done"

        async def compensate(self, result: object) -> None:
            compensated.append(result)

    boom_tool(registry)

    plan = [[{"id": "lookup", "tool": "Lookup"}, {"id": "effect", "tool": "Effect"}], {"id": "boom", "tool": "Boom"}]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.COMPENSATED
    assert compensated == ["done"]
    lookup = result.step("lookup")
    assert lookup.status is StepStatus.SUCCESS
    assert lookup.result == "read-only"
    assert lookup.compensated_at is None
    assert result.step("effect").status is StepStatus.COMPENSATED


async def test_nothing_to_undo_still_ends_compensated() -> None:
    """A saga whose first step fails has nothing to undo and ends COMPENSATED."""
    registry = ToolRegistry()

    @registry.tool
    class Boom:
        async def execute(self) -> None:
            raise RuntimeError("boom")

        async def compensate(self, result: object) -> None:
            raise AssertionError("a FAILED step is never compensated")

    result = await SagaExecutor(registry).run([{"id": "boom", "tool": "Boom"}])

    assert result.status is SagaStatus.COMPENSATED
    assert result.step("boom").status is StepStatus.FAILED
    assert "boom" in (result.error or "")


async def test_compensation_failure_is_recorded_and_others_still_run() -> None:
    """A failing compensation is recorded (status, error, attempts), the others still run; saga COMPENSATION_FAILED."""
    registry = ToolRegistry()
    compensated: list[str] = []

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=2, initial_interval=0))
    class Effect:
        async def execute(self, key: str) -> str:
            return key

        async def compensate(self, result: str) -> None:
            compensated.append(result)
            if result == "stuck":
                raise RuntimeError("refund API down")

    boom_tool(registry)

    plan = [
        {"id": "first", "tool": "Effect", "args": {"key": "first"}},
        [
            {"id": "stuck", "tool": "Effect", "args": {"key": "stuck"}},
            {"id": "peer", "tool": "Effect", "args": {"key": "peer"}},
        ],
        {"id": "last", "tool": "Effect", "args": {"key": "last"}},
        {"id": "boom", "tool": "Boom"},
    ]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.COMPENSATION_FAILED
    stuck = result.step("stuck")
    assert stuck.status is StepStatus.COMPENSATION_FAILED
    assert "refund API down" in (stuck.compensation_error or "")
    assert stuck.compensation_attempts == 2
    assert stuck.compensated_at is None
    for key in ("first", "peer", "last"):
        assert result.step(key).status is StepStatus.COMPENSATED, key
        assert result.step(key).compensation_error is None
    # The failure in group 1 did not stop the compensation of group 0.
    assert compensated.count("stuck") == 2
    assert compensated.index("first") > compensated.index("last")
    assert "first" in compensated
    with pytest.raises(SagaFailedError) as info:
        result.raise_for_status()
    assert "COMPENSATION_FAILED" in str(info.value)
    assert any("refund API down" in line for line in info.value.errors)


async def test_compensation_is_retried_per_compensation_retry_then_succeeds() -> None:
    """A compensation failing twice is retried per compensation_retry and then succeeds: COMPENSATED, 3 attempts."""
    registry = ToolRegistry()
    attempts: list[int] = []

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=3, initial_interval=0))
    class Flaky:
        async def execute(self) -> str:
            return "charged"

        async def compensate(self, result: str, ctx: StepContext) -> None:
            attempts.append(ctx.attempt)
            assert ctx.phase == "compensate"
            if ctx.attempt < 3:
                raise ConnectionError("try again")

    boom_tool(registry)

    result = await SagaExecutor(registry).run([{"id": "flaky", "tool": "Flaky"}, {"id": "boom", "tool": "Boom"}])

    assert result.status is SagaStatus.COMPENSATED
    assert attempts == [1, 2, 3]
    flaky = result.step("flaky")
    assert flaky.status is StepStatus.COMPENSATED
    assert flaky.compensation_attempts == 3
    assert flaky.compensation_error is None
    assert flaky.compensated_at is not None


async def test_compensation_retry_gives_up_after_max_attempts() -> None:
    """A compensation that keeps failing is tried exactly max_attempts times, then COMPENSATION_FAILED."""
    registry = ToolRegistry()
    calls = 0

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=4, initial_interval=0))
    class Stuck:
        async def execute(self) -> str:
            return "x"

        async def compensate(self, result: str) -> None:
            nonlocal calls
            calls += 1
            raise RuntimeError("still down")

    boom_tool(registry)

    result = await SagaExecutor(registry).run([{"id": "stuck", "tool": "Stuck"}, {"id": "boom", "tool": "Boom"}])

    assert calls == 4
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert result.step("stuck").compensation_attempts == 4
    assert "4 attempts" in (result.step("stuck").compensation_error or "")


async def test_raise_for_status_names_the_failing_step() -> None:
    """raise_for_status raises SagaFailedError carrying saga_id, step_id, tool_name and attempts of the culprit."""
    registry = ToolRegistry()

    @registry.tool
    class Effect:
        async def execute(self) -> str:
            return "ok"

        async def compensate(self, result: str) -> None:
            return None

    @registry.tool(name="charge", retry=RetryPolicy(max_attempts=2, initial_interval=0))
    class Charge:
        async def execute(self) -> None:
            raise RuntimeError("card declined")

    result = await SagaExecutor(registry).run(
        [{"id": "effect", "tool": "Effect"}, {"id": "pay", "tool": "charge"}], saga_id="order-7"
    )

    assert result.status is SagaStatus.COMPENSATED
    with pytest.raises(SagaFailedError) as info:
        result.raise_for_status()
    error = info.value
    assert error.saga_id == "order-7"
    assert error.step_id == "pay"
    assert error.tool_name == "charge"
    assert error.attempts == 2
    assert error.status == "COMPENSATED"
    assert "order-7" in str(error)
    assert "card declined" in str(error)


async def test_raise_for_status_returns_the_result_on_success() -> None:
    """raise_for_status returns the very result when the saga ended SUCCESS."""
    registry = ToolRegistry()

    @registry.tool
    class Effect:
        async def execute(self) -> int:
            return 1

    result = await SagaExecutor(registry).run([{"id": "e", "tool": "Effect"}])

    assert result.raise_for_status() is result


async def test_result_of_and_to_dict() -> None:
    """result_of gives a step's stored result; to_dict is JSON-able and carries statuses as their names."""
    registry = ToolRegistry()

    @registry.tool
    class Effect:
        async def execute(self, n: int) -> dict:
            return {"n": n, "when": datetime(2024, 1, 2, 3, 4, 5)}

    result = await SagaExecutor(registry).run(
        [{"id": "a", "tool": "Effect", "args": {"n": 1}}, {"id": "b", "tool": "Effect", "args": {"n": 2}}],
        metadata={"user": "u1"},
    )

    assert result.result_of("a") == {"n": 1, "when": "2024-01-02T03:04:05"}
    assert result.result_of("b")["n"] == 2
    with pytest.raises(KeyError):
        result.result_of("nope")
    data = result.to_dict()
    text = json.dumps(data)
    assert json.loads(text) == data
    assert data["status"] == "SUCCESS"
    assert data["saga_id"] == result.saga_id
    assert data["metadata"] == {"user": "u1"}
    assert [s["status"] for s in data["steps"]] == ["SUCCESS", "SUCCESS"]
    assert data["steps"][0]["result"] == {"n": 1, "when": "2024-01-02T03:04:05"}
    assert SagaResult.model_validate(data).to_dict() == data


def test_statuses_are_str_enums_whose_values_are_their_names() -> None:
    """SagaStatus and StepStatus are str enums; each member's value is its name; the documented members exist."""
    assert [s.name for s in SagaStatus] == [
        "RUNNING",
        "COMPENSATING",
        "SUCCESS",
        "COMPENSATED",
        "COMPENSATION_FAILED",
        "PARKED",
        "WAITING",
        "QUEUED",
    ]
    assert {s.name for s in StepStatus} == {
        "PENDING",
        "RUNNING",
        "SUCCESS",
        "FAILED",
        "CANCELLED",
        "COMPENSATED",
        "COMPENSATION_FAILED",
        "WAITING",
        "REJECTED",
    }
    for enum in (SagaStatus, StepStatus):
        for member in enum:
            assert isinstance(member, str)
            assert member.value == member.name
            assert member == member.name
            assert enum(member.name) is member
            assert json.dumps(member) == f'"{member.name}"'


def test_step_record_and_saga_result_are_pydantic_models() -> None:
    """StepRecord and SagaResult expose the documented fields."""
    step_fields = set(StepRecord.model_fields)
    assert {
        "step_id",
        "group",
        "tool_name",
        "args",
        "status",
        "result",
        "error",
        "error_type",
        "attempts",
        "idempotency_key",
        "started_at",
        "finished_at",
        "compensated_at",
        "compensation_error",
    } <= step_fields
    assert {
        "saga_id",
        "status",
        "steps",
        "error",
        "metadata",
        "created_at",
        "finished_at",
        "cost",
        "tokens",
    } <= set(SagaResult.model_fields)


async def test_a_compensation_bounded_by_its_own_scope_runs_once_and_compensates() -> None:
    """A compensate that pauses inside its own anyio/asyncio timeout (as an HTTP client does) runs once, to its end."""
    registry = ToolRegistry()
    refunds: list[str] = []

    @registry.tool
    class Pay:
        async def execute(self, key: str) -> str:
            return key

        async def compensate(self, result: str) -> None:
            with anyio.fail_after(5):
                await asyncio.sleep(0.01)
            async with asyncio.timeout(5):
                await asyncio.sleep(0.01)
                refunds.append(result)

    boom_tool(registry)
    result = await SagaExecutor(registry).run(
        [{"id": "pay", "tool": "Pay", "args": {"key": "k"}}, {"id": "boom", "tool": "Boom"}]
    )

    assert result.status is SagaStatus.COMPENSATED
    assert refunds == ["k"]
