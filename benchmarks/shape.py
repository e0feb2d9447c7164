"""The store's shape, counted as its guard tests count it: the members of the core store protocol, and the store
writes called (or handed on) outside the journal.

tests/engine/test_journal.py (the journal is the only caller of a store write) and tests/stores/test_store_protocol.py
(the core is the journal's primitives) guard with these very functions; `python -m benchmarks` prints the two counts
in its targets table (issue 34: at most 16 members, no write call site outside the journal).
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import saga_runtime
from benchmarks._report import Target
from saga_runtime._storage import SagaStore, Store

PACKAGE = Path(saga_runtime.__file__).resolve().parent

# What a store offers that changes nothing stored: reads, and how the store is (the rest of its members write).
STORE_READS = frozenset(
    {
        "url",
        "retry_for",
        "sealed_since",
        "signing_key",
        "capabilities",
        "load_saga",
        "list_rows",
        "load_approvals",
        "list_approvals",
        "waiting_sagas",
        "due_work",
        "load_messages",
        "cancel_request",
        "queue_wakeups",
        "queue_depth",
        "queue_state",
        "saga_queue_states",
        "queue_infos",
        "list_queue_rows",
        "notify_workers",
        "purge_batch_size",
        "purge_candidates",
        "list_holds",
        "load_schedules",
        "due_schedules",
        "close",
    }
)
# Every member of the core protocol and of each capability protocol (Store offers them all), conveniences aside.
MEMBERS = frozenset(
    name
    for protocol in Store.__mro__
    if protocol.__name__.endswith("Store") and protocol is not Store
    for name in vars(protocol)
    if not name.startswith("_")
)
STORE_WRITES = MEMBERS - STORE_READS | {"write"}
# The journal is their one caller; the stores' own functions over their primitives (retention, import) are the stores'.
WRITERS = ("_engine/_journal.py", "_storage/")


def protocol_members(protocol: type) -> set[str]:
    """Return the members a protocol asks of a store (as isinstance() checks them)."""
    return set(typing._get_protocol_attrs(protocol))  # type: ignore[attr-defined]


def core_members() -> int:
    """Return how many members the core store protocol (`SagaStore`) asks of every store."""
    return len(protocol_members(SagaStore))


def store_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """Return each use of a store's write (`<...>store.<write>`, or on a capability of it, `queues_of(store).<write>`:
    called or handed on) in a module's tree."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in STORE_WRITES:
            receiver = ast.unparse(node.value)
            if receiver == "store" or receiver.endswith((".store", "_store", "(store)", ".store)", "_store)")):
                found.append((node.lineno, ast.unparse(node)))
    return found


def writes_outside_the_journal() -> list[str]:
    """Return each store-write call site in the package outside the journal (and the stores), as `module:line: use`."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name.startswith(WRITERS):
            continue
        offenders += [f"{name}:{line}: {use}" for line, use in store_writes(ast.parse(path.read_text()))]
    return offenders


# Issue 34's shape targets, counted from the code when the workload they ride with (in memory overhead) runs.
TARGETS = [
    Target("store shape, members of the core store protocol (SagaStore)", 16, "members", lambda rows: core_members()),
    Target(
        "store shape, store-write call sites outside the journal",
        0,
        "sites",
        lambda rows: len(writes_outside_the_journal()),
    ),
]
