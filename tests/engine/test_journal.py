"""The Journal is the one owner of a saga's record: nothing else in the library assigns a record's field."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from saga_runtime._records import ApprovalRow, SagaRow, StepRow

PACKAGE = Path(__file__).resolve().parents[2] / "saga_runtime"
FIELDS = frozenset(f.name for row in (SagaRow, StepRow, ApprovalRow) for f in dataclasses.fields(row))
# The journal, the transition table it applies, and the records layer that defines, seals and codes rows.
OWNERS = ("_engine/_journal.py", "_engine/_journal_rows.py", "_engine/_transitions.py", "_records/")
# The stores write rows they are handed; their own code is guarded by the store contract tests.
EXEMPT = ("_storage/",)


def _assignments(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = [
                t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])
            ]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr in FIELDS
                and not (isinstance(target.value, ast.Name) and target.value.id in ("self", "cls"))
            ):
                found.append((target.lineno, ast.unparse(target)))
    return found


def test_no_record_field_is_assigned_outside_the_journal() -> None:
    """Only the journal (and the records layer's row code) assigns a field of a saga, step or approval row."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name.startswith(OWNERS) or name.startswith(EXEMPT):
            continue
        for line, target in _assignments(ast.parse(path.read_text())):
            offenders.append(f"{name}:{line}: {target} = ...")
    assert offenders == []


def test_the_guard_sees_a_record_assignment() -> None:
    """The guard is not blind: an assignment such as the old engine's `row.attempts += 1` is found."""
    tree = ast.parse("row.attempts += 1\nsaga.owner, saga.lease_expires_at = None, None\nself.status = 1\n")
    assert [target for _, target in _assignments(tree)] == ["row.attempts", "saga.owner", "saga.lease_expires_at"]
