"""Live unknown outcomes (a timed-out last attempt, a sibling cancelled mid-run) are settled by `reconcile` (§15)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import anyio
import pytest

from saga_runtime import (
    NOT_DONE,
    MemoryStore,
    SagaAdmin,
    SagaExecutor,
    SagaStatus,
    StepContext,
    StepStatus,
    ToolRegistry,
)

CALLS: Counter[str] = Counter()
ANSWER: dict[str, Any] = {}


def registry_with(answer: Any, *, retry_scope: str = "saga") -> ToolRegistry:
    """Return tools whose slow Pay times out and whose reconcile answers `answer`."""
    CALLS.clear()
    ANSWER["pay"] = answer
    registry = ToolRegistry()

    @registry.tool(timeout=0.05, retry_scope=retry_scope)  # type: ignore[arg-type]
    class Pay:
        async def execute(self, amount: int) -> dict[str, Any]:
            CALLS["execute"] += 1
            await anyio.sleep(10)
            return {"tx": "never"}

        async def compensate(self, result: Any) -> None:
            CALLS[f"refund {result}"] += 1

        async def reconcile(self, amount: int, ctx: StepContext) -> Any:
            CALLS[f"reconcile {ctx.phase}"] += 1
            answer = ANSWER["pay"]
            if isinstance(answer, Exception):
                raise answer
            return answer

    @registry.tool
    class Fail:
        async def execute(self) -> None:
            await anyio.sleep(0.01)
            raise RuntimeError("declined")

    @registry.tool
    class Note:
        async def execute(self) -> str:
            CALLS["note"] += 1
            return "noted"

    return registry


PLAN = [{"id": "pay", "tool": "Pay", "args": {"amount": 5}}, {"id": "note", "tool": "Note"}]


async def test_a_timed_out_step_found_done_succeeds_and_the_saga_goes_on() -> None:
    """The last attempt timed out but reconcile found the effect: SUCCESS with its answer, the next step runs."""
    result = await SagaExecutor(registry_with({"tx": "late"})).run(PLAN)
    assert result.status is SagaStatus.SUCCESS
    pay = result.step("pay")
    assert (pay.status, pay.result, pay.reconciled, pay.error) == (StepStatus.SUCCESS, {"tx": "late"}, True, None)
    assert CALLS == {"execute": 1, "reconcile reconcile": 1, "note": 1}


async def test_a_timed_out_step_found_not_done_is_not_compensated() -> None:
    """NOT_DONE after a timeout: the saga compensates, the step ends CANCELLED and compensate is never called."""
    result = await SagaExecutor(registry_with(NOT_DONE)).run(PLAN)
    assert result.status is SagaStatus.COMPENSATED
    pay = result.step("pay")
    assert (pay.status, pay.reconciled) == (StepStatus.CANCELLED, True)
    assert CALLS == {"execute": 1, "reconcile reconcile": 1}


async def test_without_an_answer_a_timed_out_step_is_compensated_with_none() -> None:
    """reconcile raising: as without it, the timed-out step is compensated with None."""
    result = await SagaExecutor(registry_with(ConnectionError("down"))).run(PLAN)
    assert result.status is SagaStatus.COMPENSATED
    assert not result.step("pay").reconciled
    assert CALLS["refund None"] == 1


@pytest.mark.parametrize(("answer", "refund"), [({"tx": "t1"}, "refund {'tx': 't1'}"), (NOT_DONE, None)])
async def test_a_step_scope_timeout_is_settled_before_its_undo(answer: Any, refund: str | None) -> None:
    """retry_scope="step": a timed-out step found done stays SUCCESS; found not done is never undone."""
    result = await SagaExecutor(registry_with(answer, retry_scope="step")).run(PLAN)
    assert result.status is SagaStatus.SUCCESS
    assert result.step("pay").reconciled
    assert not [call for call in CALLS if call.startswith("refund")]
    assert refund is None or result.step("pay").status is StepStatus.SUCCESS


async def test_a_sibling_cancelled_mid_run_is_reconciled_before_it_is_compensated() -> None:
    """A failing sibling cancels the running step; reconcile's answer is what compensate receives."""
    registry = registry_with({"tx": "half"})
    result = await SagaExecutor(registry).run([[{"id": "pay", "tool": "Pay", "args": {"amount": 5}}, {"tool": "Fail"}]])
    assert result.status is SagaStatus.COMPENSATED
    pay = result.step("pay")
    assert (pay.status, pay.result, pay.reconciled) == (StepStatus.COMPENSATED, {"tx": "half"}, True)
    assert CALLS == {"execute": 1, "reconcile reconcile": 1, "refund {'tx': 'half'}": 1}


def test_not_done_is_one_value_named_in_its_repr() -> None:
    """NOT_DONE is a singleton, shown as NOT_DONE, that survives a copy and pickling as itself."""
    import copy
    import pickle

    assert repr(NOT_DONE) == "NOT_DONE"
    assert copy.deepcopy(NOT_DONE) is NOT_DONE
    assert pickle.loads(pickle.dumps(NOT_DONE)) is NOT_DONE
    assert type(NOT_DONE)() is NOT_DONE


async def test_a_refused_reconcile_answer_is_logged_on_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """An answer that fails the result's validation (a pydantic error spans lines) is one WARNING line."""
    with caplog.at_level(logging.WARNING, logger="saga_runtime"):
        result = await SagaExecutor(registry_with("not a dict")).run(PLAN)
    assert result.status is SagaStatus.COMPENSATED
    refused = [r.getMessage() for r in caplog.records if "reconcile failed" in r.getMessage()]
    assert refused  # asked when the step timed out, and again before its undo
    assert all("\n" not in line and "dict" in line for line in refused)  # one line, still saying what was wrong


async def test_a_step_in_doubt_is_reconciled_only_once_the_saga_is_recorded_compensating() -> None:
    """A compensation that begins with a reconcile writes COMPENSATING (and the steps' outcomes) before it asks."""
    store = MemoryStore()
    admin = SagaAdmin(store)
    seen: list[tuple[str, str]] = []
    registry = ToolRegistry()

    @registry.tool
    class Pay:
        async def execute(self, amount: int) -> dict[str, Any]:
            await anyio.sleep(10)
            return {"tx": "never"}

        async def compensate(self, result: Any) -> None:
            pass

        async def reconcile(self, amount: int, ctx: StepContext) -> Any:
            stored = await admin.get_saga(ctx.saga_id)
            assert stored is not None
            seen.append((stored.status.value, stored.step("pay").status.value))
            return {"tx": "half"}

    @registry.tool
    class Fail:
        async def execute(self) -> None:
            await anyio.sleep(0.01)
            raise RuntimeError("declined")

    plan = [[{"id": "pay", "tool": "Pay", "args": {"amount": 5}}, {"tool": "Fail"}]]
    result = await SagaExecutor(registry, store).run(plan)
    assert result.status is SagaStatus.COMPENSATED
    assert seen == [("COMPENSATING", "CANCELLED")]
