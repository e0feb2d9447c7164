"""The transition table owns every status change: what it allows, and a bug caught at once when it does not."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from shop_tools import boom_tool

from saga_runtime import SagaExecutor, SagaStatus, StepStatus, ToolRegistry
from saga_runtime._engine import TransitionError
from saga_runtime._engine._transitions import SAGA_MOVES, STEP_MOVES, saga_to, step_to
from saga_runtime._records import SagaRow, StepRow

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _step(status: StepStatus) -> StepRow:
    return StepRow("s", 0, "a", 0, "Tool", {}, "key", status=status)


def _saga(status: SagaStatus) -> SagaRow:
    return SagaRow("s", "plan", [], None, status, T0, T0)


def test_every_status_has_a_row_in_the_table() -> None:
    """Each saga and step status says which statuses may follow it."""
    assert set(SAGA_MOVES) == set(SagaStatus)
    assert set(STEP_MOVES) == set(StepStatus)


def test_a_finished_saga_never_moves_except_to_retry_its_compensations() -> None:
    """SUCCESS and COMPENSATED are final; COMPENSATION_FAILED only reopens to COMPENSATING."""
    assert SAGA_MOVES[SagaStatus.SUCCESS] == frozenset()
    assert SAGA_MOVES[SagaStatus.COMPENSATED] == frozenset()
    assert SAGA_MOVES[SagaStatus.COMPENSATION_FAILED] == {SagaStatus.COMPENSATING}


def test_a_compensated_step_is_never_changed_again() -> None:
    """A step recorded COMPENSATED never moves: it is never compensated (or run) twice."""
    assert STEP_MOVES[StepStatus.COMPENSATED] == frozenset()
    with pytest.raises(TransitionError, match="COMPENSATED to RUNNING"):
        step_to(_step(StepStatus.COMPENSATED), StepStatus.RUNNING)


def test_a_successful_step_never_runs_again() -> None:
    """SUCCESS may only be undone (COMPENSATED or COMPENSATION_FAILED), never started again or failed."""
    for status in (StepStatus.RUNNING, StepStatus.FAILED, StepStatus.CANCELLED, StepStatus.PENDING):
        with pytest.raises(TransitionError):
            step_to(_step(StepStatus.SUCCESS), status)


def test_a_disallowed_saga_move_raises_and_changes_nothing() -> None:
    """A saga move the table refuses raises TransitionError and leaves the row as it was."""
    saga = _saga(SagaStatus.SUCCESS)
    with pytest.raises(TransitionError, match="SUCCESS to COMPENSATING"):
        saga_to(saga, SagaStatus.COMPENSATING)
    assert saga.status is SagaStatus.SUCCESS


def test_an_allowed_move_changes_the_status() -> None:
    """A move the table allows is made."""
    row = _step(StepStatus.PENDING)
    step_to(row, StepStatus.RUNNING)
    assert row.status is StepStatus.RUNNING
    saga = _saga(SagaStatus.RUNNING)
    saga_to(saga, SagaStatus.COMPENSATING)
    assert saga.status is SagaStatus.COMPENSATING


async def test_every_move_of_a_real_saga_is_in_the_table() -> None:
    """A saga that runs, fails, retries and compensates makes only moves the table allows (none raises)."""
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self, n: int) -> int:
            return n

        async def compensate(self, result: int | None) -> None:
            return None

    boom_tool(registry)

    executor = SagaExecutor(registry)
    result = await executor.run(
        [[{"tool": "Charge", "args": {"n": 1}}, {"tool": "Charge", "args": {"n": 2}}], {"tool": "Boom"}]
    )
    assert result.status is SagaStatus.COMPENSATED
    assert [step.status for step in result.steps] == [StepStatus.COMPENSATED, StepStatus.COMPENSATED, StepStatus.FAILED]


def test_a_waiting_step_never_runs_before_it_is_approved() -> None:
    """WAITING goes back to PENDING (approved, then written ahead RUNNING) or to REJECTED, never straight to RUNNING;
    REJECTED is final: a refused step is never run nor compensated."""
    assert STEP_MOVES[StepStatus.WAITING] == {StepStatus.PENDING, StepStatus.REJECTED}
    assert STEP_MOVES[StepStatus.REJECTED] == frozenset()
    with pytest.raises(TransitionError, match="WAITING to RUNNING"):
        step_to(_step(StepStatus.WAITING), StepStatus.RUNNING)
    with pytest.raises(TransitionError, match="REJECTED to COMPENSATED"):
        step_to(_step(StepStatus.REJECTED), StepStatus.COMPENSATED)


def test_a_waiting_saga_goes_on_or_compensates_and_never_ends_from_there() -> None:
    """A RUNNING saga may WAIT; a WAITING one runs on or compensates, and never jumps to an end."""
    assert SagaStatus.WAITING in SAGA_MOVES[SagaStatus.RUNNING]
    assert SAGA_MOVES[SagaStatus.WAITING] == {SagaStatus.RUNNING, SagaStatus.COMPENSATING}
    with pytest.raises(TransitionError, match="WAITING to SUCCESS"):
        saga_to(_saga(SagaStatus.WAITING), SagaStatus.SUCCESS)


def test_only_a_child_saga_leaves_success_and_only_to_compensate() -> None:
    """SUCCESS → COMPENSATING is refused for a saga of its own and allowed for one with a parent (its parent undoes
    it as a whole); a child's SUCCESS moves nowhere else."""
    alone = _saga(SagaStatus.SUCCESS)
    with pytest.raises(TransitionError):
        saga_to(alone, SagaStatus.COMPENSATING)
    assert alone.status is SagaStatus.SUCCESS
    child = _saga(SagaStatus.SUCCESS)
    child.parent_id = "parent"
    for refused in (SagaStatus.RUNNING, SagaStatus.COMPENSATED, SagaStatus.WAITING):
        with pytest.raises(TransitionError):
            saga_to(child, refused)
    saga_to(child, SagaStatus.COMPENSATING)
    assert child.status is SagaStatus.COMPENSATING
