"""A PARKED saga has an operator path that undoes it: `executor.unpark(saga_id, compensate=True)`."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from orphans import planned_orphan

from saga_runtime import (
    SagaExecutor,
    SagaInProgressError,
    SagaResult,
    SagaStatus,
    SagaStore,
    StepContext,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._records import StepRow, idempotency_key, seal_all

CALLS: Counter[str] = Counter()
registry = ToolRegistry()


@registry.tool
class Charge:
    async def execute(self, amount: int, ctx: StepContext) -> dict[str, Any]:
        CALLS["charge"] += 1
        return {"tx": ctx.idempotency_key, "amount": amount}

    async def compensate(self, result: dict[str, Any] | None, ctx: StepContext) -> None:
        CALLS[f"refund {None if result is None else result['amount']}"] += 1


PLAN = [
    {"id": "charge", "tool": "Charge", "args": {"amount": 900}},
    {"id": "again", "tool": "Charge", "args": {"amount": 5}},
]


async def park(store: Any, saga_id: str, *, attempts: int = 5, tools: ToolRegistry | None = None) -> SagaResult:
    """Leave a saga its recoveries kept failing on: one charge done, one of unknown outcome; recover() parks it."""
    saga = planned_orphan(saga_id, PLAN, registry, recovery_attempts=attempts)
    started = saga.created_at
    done = StepRow(saga_id, 0, "charge", 0, "Charge", {"amount": 900}, idempotency_key(saga_id, "charge"))
    done.status, done.attempts, done.started_at, done.finished_at = StepStatus.SUCCESS, 1, started, started
    done.result = {"tx": done.idempotency_key, "amount": 900}
    unknown = StepRow(saga_id, 1, "again", 1, "Charge", {"amount": 5}, idempotency_key(saga_id, "again"))
    unknown.status, unknown.attempts, unknown.started_at = StepStatus.RUNNING, 6, started
    seal_all([done, unknown], None)
    assert await store.create_saga(saga, [done, unknown]) is None
    (parked,) = await SagaExecutor(tools or registry, store=store).recover()
    assert parked.status is SagaStatus.PARKED
    return parked


@pytest.fixture(autouse=True)
def _count_from_zero() -> None:
    """Count every test's tool calls from zero."""
    CALLS.clear()


async def test_unpark_with_compensate_undoes_every_step_once(store: SagaStore) -> None:
    """The charge is refunded with its result and the step of unknown outcome with None; nothing runs forward."""
    await park(store, "stuck")
    result = await SagaExecutor(registry, store=store).unpark("stuck", compensate=True)
    assert result is not None
    assert result.status is SagaStatus.COMPENSATED
    assert CALLS == {"refund 900": 1, "refund None": 1}
    assert "an operator chose to compensate it after it was parked" in (result.error or "")
    assert await store.verify_saga("stuck")
    with pytest.raises(SagaInProgressError, match="not PARKED"):
        await SagaExecutor(registry, store=store).unpark("stuck", compensate=True)
    assert CALLS == {"refund 900": 1, "refund None": 1}


async def test_unpark_with_compensate_by_an_executor_without_the_tools_leaves_it_to_recovery(store: SagaStore) -> None:
    """Without the tools the saga is only made COMPENSATING; the next recover() with them undoes it."""
    await park(store, "stuck")
    assert await SagaExecutor(ToolRegistry(), store=store).unpark("stuck", compensate=True) is None
    stored = await store.get_saga("stuck")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATING
    (result,) = await SagaExecutor(registry, store=store).recover()
    assert result.status is SagaStatus.COMPENSATED
    assert CALLS == {"refund 900": 1, "refund None": 1}


async def test_a_tool_failing_with_an_unstorable_message_still_fails_and_compensates(store: SagaStore) -> None:
    """An exception whose text holds NUL, a lone surrogate and a megabyte is recorded escaped and bounded: the step
    fails and the saga compensates on every store, instead of the write of its failure being refused."""
    odd = ToolRegistry()
    odd.register(Charge())

    @odd.tool
    class Odd:
        async def execute(self) -> None:
            raise ValueError("bad\x00byte \udc80 " + "x" * 1_000_000)

    plan = [{"id": "charge", "tool": "Charge", "args": {"amount": 7}}, {"id": "odd", "tool": "Odd"}]
    result = await SagaExecutor(odd, store=store).run(plan, saga_id="odd-error")
    assert result.status is SagaStatus.COMPENSATED
    assert CALLS == {"charge": 1, "refund 7": 1}
    error = result.step("odd").error or ""
    assert error.startswith("ValueError: bad\\x00byte \\udc80 xxx")
    assert len(error) < 2100
    assert await store.verify_saga("odd-error")


renamed = ToolRegistry()


@renamed.tool(name="Charge")
class ChargeInCents:
    async def execute(self, cents: int, ctx: StepContext) -> dict[str, Any]:
        CALLS["charge"] += 1
        return {"tx": ctx.idempotency_key, "amount": cents}

    async def compensate(self, result: dict[str, Any] | None, ctx: StepContext) -> None:
        CALLS[f"refund {None if result is None else result['amount']}"] += 1


async def test_a_saga_parked_for_a_renamed_argument_is_compensated_whole(store: SagaStore) -> None:
    """Its arguments no longer fit the tool: unparked with compensation, no step stays RUNNING in the ended saga."""
    await park(store, "renamed")
    result = await SagaExecutor(renamed, store=store).unpark("renamed", compensate=True)
    assert result is not None
    assert result.status is SagaStatus.COMPENSATED
    assert {step.step_id: step.status for step in result.steps} == {
        "charge": StepStatus.COMPENSATED,
        "again": StepStatus.COMPENSATED,
    }
    assert CALLS == {"refund 900": 1, "refund None": 1}


@registry.tool(irreversible=True)
class Notify:
    async def execute(self, text: str) -> None:
        CALLS["notify"] += 1


async def test_an_unknown_outcome_nobody_can_undo_ends_cancelled_not_running(store: SagaStore) -> None:
    """A crashed irreversible step cannot be compensated: the compensated saga records it CANCELLED, never RUNNING."""
    plan = [
        {"id": "charge", "tool": "Charge", "args": {"amount": 7}},
        {"id": "tell", "tool": "Notify", "args": {"text": "hi"}},
    ]
    saga = planned_orphan("told", plan, registry, status=SagaStatus.COMPENSATING, error="a crash")
    started = saga.created_at
    done = StepRow("told", 0, "charge", 0, "Charge", {"amount": 7}, idempotency_key("told", "charge"))
    done.status, done.attempts, done.started_at, done.finished_at = StepStatus.SUCCESS, 1, started, started
    done.result = {"tx": done.idempotency_key, "amount": 7}
    tell = StepRow("told", 1, "tell", 1, "Notify", {"text": "hi"}, idempotency_key("told", "tell"))
    tell.status, tell.attempts, tell.started_at = StepStatus.RUNNING, 1, started
    seal_all([done, tell], None)
    assert await store.create_saga(saga, [done, tell]) is None
    (result,) = await SagaExecutor(registry, store=store).recover()
    assert result.status is SagaStatus.COMPENSATED
    statuses = {step.step_id: step.status for step in result.steps}
    assert statuses == {"charge": StepStatus.COMPENSATED, "tell": StepStatus.CANCELLED}
    assert CALLS == {"refund 7": 1}


async def test_a_saga_parked_because_its_plan_no_longer_validates_says_what_ran(store: SagaStore) -> None:
    """The park reason lists the plan's problems, without the refused plan's "nothing was stored or run"."""
    parked = await park(store, "no-longer", attempts=0, tools=renamed)
    assert "its plan no longer validates" in (parked.error or "")
    assert "amount" in (parked.error or "")
    assert "nothing was stored or run" not in (parked.error or "")
    stored = await store.get_saga("no-longer")
    assert stored is not None
    assert "nothing was stored or run" not in (stored.error or "")
