"""Outcomes, not a shared bag: the step runner returns a frozen StepOutcome; only the group runner folds it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from saga_runtime._engine._verdict import DONE, StepOutcome

ENGINE = Path(__file__).resolve().parents[2] / "saga_runtime" / "_engine"

# What changes a saga's fate: the verdict's methods that fail it, and the fields that say why and how.
FOLDING_CALLS = {"fail", "fail_with", "halt", "forgive"}
FATE_FIELDS = {"reason", "failed", "culprit", "errors", "winners", "store_error"}


def _mentions_verdict(node: ast.AST) -> bool:
    return any(
        (isinstance(part, ast.Name) and "verdict" in part.id)
        or (isinstance(part, ast.Attribute) and "verdict" in part.attr)
        for part in ast.walk(node)
    )


def _fate_writes(path: Path) -> list[str]:
    """Return the lines of `path` that fail the saga or write a field of its fate through a verdict."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in FOLDING_CALLS and _mentions_verdict(node.func.value):
                found.append(f"{path.name}:{node.lineno} {node.func.attr}()")
            elif node.func.attr in {"add", "update", "pop", "clear", "setdefault"} and _mentions_verdict(node.func):
                inner = node.func.value
                if isinstance(inner, ast.Attribute) and inner.attr in FATE_FIELDS:
                    found.append(f"{path.name}:{node.lineno} {inner.attr}.{node.func.attr}()")
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            base = target.value if isinstance(target, ast.Subscript) else target
            if isinstance(base, ast.Attribute) and base.attr in FATE_FIELDS and _mentions_verdict(base):
                found.append(f"{path.name}:{node.lineno} {base.attr}")
    return found


def test_a_step_outcome_is_frozen() -> None:
    """A StepOutcome cannot be changed once returned: what a step came to is read, never edited."""
    outcome = StepOutcome(None, fails="boom")
    with pytest.raises(AttributeError):
        outcome.fails = None  # type: ignore[misc]
    assert outcome.stops
    assert not DONE.stops


@pytest.mark.parametrize("module", ["_steps.py", "_reconcile.py", "_compensator.py"])
def test_only_the_group_runner_folds_outcomes_into_the_saga_s_fate(module: str) -> None:
    """The step runner, reconcile and the compensator return what came of a step; they never fail the saga."""
    assert _fate_writes(ENGINE / module) == []


def test_the_guard_sees_a_fate_written_by_the_group_runner() -> None:
    """The guard above finds the group runner's own folding (so it would find it anywhere else too)."""
    writes = _fate_writes(ENGINE / "_groups.py")
    assert any("fail()" in line for line in writes)
    assert any("winners" in line for line in writes)
