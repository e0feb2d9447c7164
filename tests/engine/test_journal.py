"""The Journal is the one owner of a saga's record: nothing else in the library assigns a record's field."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from benchmarks.shape import MEMBERS, STORE_READS, STORE_WRITES, store_writes, writes_outside_the_journal
from saga_runtime._records import ApprovalRow, SagaRow, StepRow

PACKAGE = Path(__file__).resolve().parents[2] / "saga_runtime"
FIELDS = frozenset(f.name for row in (SagaRow, StepRow, ApprovalRow) for f in dataclasses.fields(row))
# The journal, the transition table it applies, and the records layer that defines, seals and codes rows.
OWNERS = ("_engine/_journal.py", "_engine/_transitions.py", "_records/")
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


# -- store writes: the journal module is their only caller --------------------------------------------------------

# What the guard counts (the reads, the writes, the journal as their one caller) is benchmarks/shape.py's, which
# `python -m benchmarks` prints in its targets table: new store read members go into STORE_READS there.


def test_every_store_member_is_a_read_or_a_write() -> None:
    """The guard knows the store protocol: every read it exempts is a member, and the protocol has writes."""
    assert MEMBERS >= STORE_READS, STORE_READS - MEMBERS
    assert {"save", "create_saga", "change_saga", "claim_saga", "enqueue", "decide_approval"} <= STORE_WRITES


def test_only_the_journal_calls_a_store_write() -> None:
    """No module but the journal calls (or hands on) a store's write: every change to what is stored is its intent."""
    offenders = writes_outside_the_journal()
    assert offenders == [], "\n".join(offenders)


def test_the_store_write_guard_sees_a_write() -> None:
    """The guard is not blind: the old front doors' writes are found, called or handed on; reads and others are not."""
    tree = ast.parse(
        "await store.change_saga(row, status=s)\n"
        "await self.store.set_queue_state(n, s, at)\n"
        "await config.store.claim_expired(o, e, at, 10)\n"
        "claim = store.claim_saga\n"
        "await self._store.save(row, [])\n"
        "await queues_of(self.store).set_queue_state(n, s, at)\n"
        "await waits_of(store).decide_approval(row)\n"
        "await store.load_saga(i)\n"
        "journal.hold(row)\n"
        "sys.stdout.write(text)\n"
    )
    assert sorted(use for _, use in store_writes(tree)) == [
        "config.store.claim_expired",
        "queues_of(self.store).set_queue_state",
        "self._store.save",
        "self.store.set_queue_state",
        "store.change_saga",
        "store.claim_saga",
        "waits_of(store).decide_approval",
    ]
