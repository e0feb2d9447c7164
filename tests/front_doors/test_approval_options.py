"""How a step comes to need approval: the tool's option, the policy, or the plan itself; and what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from saga_runtime import PlanPolicy, PlanValidationError, SagaExecutor, SagaStatus, Step, StepStatus, ToolRegistry

registry = ToolRegistry()
RAN: list[str] = []


@registry.tool
class Note:
    async def execute(self, text: str) -> str:
        RAN.append(text)
        return text


async def test_a_plan_step_marked_approval_waits_and_the_stored_plan_says_so() -> None:
    """`"approval": True` on a step dict (or Step) gates that step alone; the plan as stored keeps the mark."""
    RAN.clear()
    executor = SagaExecutor(registry)
    plan: list[Any] = [
        Step(tool="Note", args={"text": "a"}, id="a", approval=True),
        {"tool": "Note", "args": {"text": "b"}, "id": "b"},
    ]
    result = await executor.run(plan, saga_id="marked")
    assert result.status is SagaStatus.WAITING
    assert [s.status for s in result.steps] == [StepStatus.WAITING, StepStatus.PENDING]
    assert result.steps[0].attempts == 0  # a first group that waits is not written ahead as started
    assert RAN == []
    stored = await executor.store.load_saga("marked")
    assert stored is not None
    assert stored[0].plan == [
        [{"id": "a", "tool": "Note", "args": {"text": "a"}, "approval": True}],
        [{"id": "b", "tool": "Note", "args": {"text": "b"}}],
    ]
    assert (await executor.approve("marked", "a", by="ann")).status is SagaStatus.SUCCESS
    assert RAN == ["a", "b"]


async def test_approval_must_be_a_boolean_and_options_are_checked() -> None:
    """A non-boolean `approval`, a bad approval_timeout and a string approval_required are refused up front."""
    executor = SagaExecutor(registry)
    with pytest.raises(PlanValidationError, match="'approval' must be true or false"):
        await executor.run([{"tool": "Note", "args": {"text": "a"}, "approval": "yes"}])
    with pytest.raises(ValueError, match="approval_timeout"):
        registry.register(Note(), name="Note2", approval=True, approval_timeout=-1)
    with pytest.raises(TypeError, match="approval_required"):
        PlanPolicy(approval_required="Note")
    with pytest.raises(TypeError, match="approval_required"):
        executor.saga(approval_required="Note")
    assert registry.get("Note").approval is False
