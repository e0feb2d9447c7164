"""Outcomes, not a shared bag: the step runner, the compensator and reconcile return frozen outcomes; only the group
runner folds them into the saga's fate."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from saga_runtime._engine._compensator import Compensator
from saga_runtime._engine._reconcile import reconcile
from saga_runtime._engine._steps import StepRunner
from saga_runtime._engine._verdict import (
    DONE,
    NOT_UNDONE,
    RECONCILED_DONE,
    RECONCILED_NOT_DONE,
    STILL_UNKNOWN,
    STUCK,
    UNDONE,
    StepOutcome,
)

ENGINE = Path(__file__).resolve().parents[2] / "saga_runtime" / "_engine"

# What changes a saga's fate: the verdict's methods that fail it, and the fields that say why and how.
FOLDING_CALLS = {"fail", "fail_with", "halt", "forgive"}
FATE_FIELDS = {"reason", "failed", "culprit", "errors", "winners", "store_error", "stuck"}
# Methods that change a collection in place.
MUTATORS = {"add", "update", "pop", "clear", "setdefault", "discard", "remove", "append", "extend"}


def _mentions_verdict(node: ast.AST) -> bool:
    return any(
        (isinstance(part, ast.Name) and "verdict" in part.id)
        or (isinstance(part, ast.Attribute) and "verdict" in part.attr)
        for part in ast.walk(node)
    )


def _fate_writes(path: Path) -> list[str]:
    """Return the lines of `path` that fail the saga or write a field of its fate through a verdict."""
    return _fate_writes_in(path.read_text(), path.name)


def _fate_writes_in(source: str, name: str) -> list[str]:
    """Return the lines of `source` (module `name`) that fail the saga or write a field of its fate."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in FOLDING_CALLS and _mentions_verdict(node.func.value):
                found.append(f"{name}:{node.lineno} {node.func.attr}()")
            elif node.func.attr in MUTATORS and _mentions_verdict(node.func):
                inner = node.func.value
                if isinstance(inner, ast.Attribute) and inner.attr in FATE_FIELDS:
                    found.append(f"{name}:{node.lineno} {inner.attr}.{node.func.attr}()")
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            base = target.value if isinstance(target, ast.Subscript) else target
            if isinstance(base, ast.Attribute) and base.attr in FATE_FIELDS and _mentions_verdict(base):
                found.append(f"{name}:{node.lineno} {base.attr}")
    return found


def test_a_step_outcome_is_frozen() -> None:
    """A StepOutcome cannot be changed once returned: what a step came to is read, never edited."""
    outcome = StepOutcome(None, fails="boom")
    with pytest.raises(AttributeError):
        outcome.fails = None  # type: ignore[misc]
    assert outcome.stops
    assert not DONE.stops


def test_undo_and_reconcile_outcomes_are_frozen() -> None:
    """What an undo or a reconcile came to cannot be changed once returned."""
    with pytest.raises(AttributeError):
        STUCK.stuck = False  # type: ignore[misc]
    with pytest.raises(AttributeError):
        RECONCILED_DONE.done = False  # type: ignore[misc]
    assert (UNDONE.undone, UNDONE.stuck, NOT_UNDONE.undone, NOT_UNDONE.stuck, STUCK.stuck) == (
        True,
        False,
        False,
        False,
        True,
    )
    assert (RECONCILED_DONE.done, RECONCILED_NOT_DONE.done, STILL_UNKNOWN.done) == (True, False, None)


@pytest.mark.parametrize(
    ("function", "outcome"),
    [
        (reconcile, "ReconcileOutcome"),
        (StepRunner.reconcile, "ReconcileOutcome"),
        (StepRunner.run, "StepOutcome"),
        (Compensator.compensate_one, "UndoOutcome"),
        (Compensator.compensate_now, "UndoOutcome"),
        (Compensator.undo_refused, "UndoOutcome"),
    ],
)
def test_the_step_runner_compensator_and_reconcile_return_a_frozen_outcome(function: object, outcome: str) -> None:
    """Each says what came of a step by the frozen outcome it returns (not by a flag left in the verdict)."""
    assert inspect.signature(function).return_annotation == outcome  # type: ignore[arg-type]


@pytest.mark.parametrize("module", ["_steps.py", "_reconcile.py", "_compensator.py"])
def test_only_the_group_runner_folds_outcomes_into_the_saga_s_fate(module: str) -> None:
    """The step runner, reconcile and the compensator return what came of a step; they never fail the saga."""
    assert _fate_writes(ENGINE / module) == []


def test_the_guard_sees_a_fate_written_by_the_group_runner() -> None:
    """The guard above finds the group runner's own folding (so it would find it anywhere else too)."""
    writes = _fate_writes(ENGINE / "_groups.py")
    assert any("fail()" in line for line in writes)
    assert any("winners" in line for line in writes)


def test_the_guard_sees_a_step_marked_stuck_through_the_verdict() -> None:
    """The guard finds a compensator marking a step stuck in the verdict (how the refused undo reported it before)."""
    old = "class C:\n    def f(self, row):\n        self._verdict.stuck.add(row.step_id)\n"
    assert _fate_writes_in(old, "_compensator.py") == ["_compensator.py:3 stuck.add()"]
