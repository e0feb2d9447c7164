"""The store protocol's shape: declared, never probed; what is built on it written once for every store."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import saga_runtime
from benchmarks.shape import core_members, protocol_members
from saga_runtime._storage import EVERY_CAPABILITY, MemoryStore, SagaStore, Store, has, queues_of
from saga_runtime._storage import _base as base
from saga_runtime._storage._batch import Batcher
from saga_runtime._storage._dialect import Dialect
from saga_runtime._storage._reading import StoreBase
from saga_runtime._storage._sqlstore import SQLStore
from saga_runtime.examples.dict_store import DictStore

PACKAGE = Path(saga_runtime.__file__).parent
BUILT_ON_PRIMITIVES = (
    "get_saga",
    "verify_saga",
    "export_saga",
    "import_saga",
    "list_sagas",
    "purge",
    "hold",
    "unhold",
    "holds",
)


DIALECT_MODULES = {"_sqlite": "SQLiteDialect", "_postgres": "PostgresDialect", "_mysql": "MySQLDialect"}


def _store_classes() -> list[type]:
    """Return every store class of the package, once each SQL dialect's module is imported (if installed)."""
    for module in DIALECT_MODULES:
        pytest.importorskip(f"saga_runtime._storage.{module}")
    return [MemoryStore, SQLStore, *SQLStore.__subclasses__()]


def test_one_sql_store_holds_a_dialect_per_database() -> None:
    """No class extends the SQL store: each database is a Dialect, and the store names no database itself."""
    assert _store_classes() == [MemoryStore, SQLStore]
    assert not inspect.isabstract(SQLStore)
    for module, name in DIALECT_MODULES.items():
        dialect = getattr(importlib.import_module(f"saga_runtime._storage.{module}"), name)
        assert issubclass(dialect, Dialect), name
        assert not inspect.isabstract(dialect), name
    # Every per-database difference is reached through the dialect: the store's code names no database.
    tree = ast.parse((PACKAGE / "_storage" / "_sqlstore.py").read_text())
    names = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert not names & {"sqlite", "postgresql", "postgres", "mysql", "mariadb"}


def test_no_store_attribute_is_reached_by_getattr() -> None:
    """No getattr() or hasattr() in the package takes a store: what a store offers is declared by the protocol."""
    probes = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id in ("getattr", "hasattr") and node.args and "store" in ast.unparse(node.args[0]).lower():
                probes.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    assert not probes, probes


def test_every_store_declares_what_the_engine_reads() -> None:
    """Every store class has retry_for and sealed_since, as the protocol declares them (no sealing switch)."""
    for cls in _store_classes():
        for name in ("retry_for", "sealed_since", "insert_rows", "list_rows", "purge_batch"):
            assert hasattr(cls, name), f"{cls.__name__} lacks {name}"
        assert not hasattr(cls, "seals_on_read"), f"{cls.__name__} still says who seals: the store always does"
    assert MemoryStore.retry_for == 0.0


def test_get_verify_export_import_list_are_written_once() -> None:
    """get/verify/export/import/list_sagas come from StoreBase on every store, never a store's own code."""
    for cls in _store_classes():
        assert issubclass(cls, StoreBase), cls
        for name in BUILT_ON_PRIMITIVES:
            assert getattr(cls, name) is getattr(StoreBase, name), f"{cls.__name__}.{name} is its own"
    for name in BUILT_ON_PRIMITIVES:  # offered by the store type open_store returns, not asked of a store's own code
        assert name in {member for member, _ in inspect.getmembers(Store)}
        assert name not in {member for member, _ in inspect.getmembers(SagaStore)}


#: The capability protocols, by what a store declares to offer each.
CAPABILITY_PROTOCOLS = {
    "queues": base.QueueStore,
    "cancels": base.CancelStore,
    "waits": base.WaitStore,
    "messages": base.MessageStore,
    "retention": base.RetentionStore,
    "schedules": base.ScheduleStore,
    "due_work": base.DueWorkStore,
}


def test_the_core_protocol_is_the_journals_primitives() -> None:
    """SagaStore asks 16 members at most; every other member is a declared capability's, each named once."""
    core = protocol_members(SagaStore)
    assert core_members() == len(core) <= 16, sorted(core)  # the count `python -m benchmarks` prints
    assert set(CAPABILITY_PROTOCOLS) == EVERY_CAPABILITY
    seen = set(core)
    for protocol in CAPABILITY_PROTOCOLS.values():
        assert not protocol_members(protocol) & seen, protocol_members(protocol) & seen
        seen |= protocol_members(protocol)
    assert protocol_members(Store) - seen == set(BUILT_ON_PRIMITIVES)


def test_every_built_in_store_declares_every_capability() -> None:
    """Memory and the SQL store declare every capability and implement each capability's members."""
    for cls in _store_classes():
        assert cls.capabilities == EVERY_CAPABILITY, cls
        for protocol in CAPABILITY_PROTOCOLS.values():
            assert protocol_members(protocol) <= set(dir(cls)), (cls, protocol_members(protocol) - set(dir(cls)))


async def test_a_capability_not_declared_is_refused_by_name() -> None:
    """Asking a store for a capability it does not declare raises StoreError naming it; nothing is probed."""

    class Plain(MemoryStore):
        capabilities = frozenset()

    store = Plain()
    assert not has(store, "queues")
    with pytest.raises(saga_runtime.StoreError, match="does not keep queues"):
        queues_of(store)
    await store.close()


async def test_a_memory_store_is_a_sagastore() -> None:
    """A memory store satisfies the runtime-checkable protocol, its new members included."""
    store = MemoryStore()
    assert isinstance(store, SagaStore)
    assert store.sealed_since is not None
    await store.close()


def test_the_batcher_takes_one_flush_coroutine() -> None:
    """The group commit is given one flush coroutine (and, optionally, its one-try form for a write alone) and its
    slots: no other callback into the store."""
    assert list(inspect.signature(Batcher).parameters) == ["flush", "slots", "alone"]
    assert list(inspect.signature(Batcher.close).parameters) == ["self", "error"]


def test_the_docs_show_the_example_store_the_tests_run() -> None:
    """The custom-store page's code is saga_runtime/examples/dict_store.py, the file the contract suite runs."""
    page = (PACKAGE.parent / "docs" / "how-to" / "custom-store.md").read_text()
    assert (PACKAGE / "examples" / "dict_store.py").read_text() in page


def test_the_example_store_implements_the_primitives_only() -> None:
    """The example store has every core member, declares no capability, and has no capability's own member."""
    store = DictStore()
    assert protocol_members(SagaStore) <= set(dir(store))
    assert isinstance(store, SagaStore)
    assert store.capabilities == frozenset()
    for protocol in CAPABILITY_PROTOCOLS.values():  # StoreBase's queue_wakeups aside (it yields False: no wakeups)
        assert not protocol_members(protocol) & set(dir(store)) - {"queue_wakeups"}, protocol


async def test_a_store_of_your_own_runs_sagas_and_refuses_what_it_does_not_declare() -> None:
    """On the example store a plan runs to SUCCESS (verified) and is compensated on failure; submit needs queues."""
    registry = saga_runtime.ToolRegistry()
    undone: list[str] = []

    @registry.tool
    class Book:
        async def execute(self, what: str) -> str:
            if what == "boom":
                raise RuntimeError("boom")
            return what

        async def compensate(self, result: str) -> None:
            undone.append(result)

    store = DictStore()
    executor = saga_runtime.SagaExecutor(registry, store=store)
    done = await executor.run([{"tool": "Book", "args": {"what": "seat"}}], saga_id="ok")
    assert done.status is saga_runtime.SagaStatus.SUCCESS
    assert await store.verify_saga("ok")
    failed = await executor.run(
        [{"tool": "Book", "args": {"what": "room"}}, {"tool": "Book", "args": {"what": "boom"}}], saga_id="undo"
    )
    assert failed.status is saga_runtime.SagaStatus.COMPENSATED
    assert undone == ["room"]
    with pytest.raises(saga_runtime.StoreError, match="does not keep queues"):
        await executor.submit([{"tool": "Book", "args": {"what": "later"}}], saga_id="queued")
    await store.close()


#: The SQL modules every database shares: they build statements and values from a dialect's flavour.
SHARED_SQL_MODULES = (
    "_sql.py",
    "_sql_retention.py",
    "_sql_schedules.py",
    "_queue_sql.py",
    "_approval_sql.py",
    "_codec.py",
    "_sqlstore.py",
    "_sqlwrite.py",
    "_batch.py",
    "_dialect.py",
    "_flavour.py",
)
DATABASE_NAMES = {"sqlite", "postgresql", "postgres", "mysql", "mariadb"}


def name_branches(tree: ast.AST) -> list[str]:
    """Return each branch on a database's name in a module: a comparison with one, a table keyed by them, or a
    lookup by a dialect's `name` (naming it in a message or a repr is no branch)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Constant) and o.value in DATABASE_NAMES for o in operands):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Dict):
            if any(isinstance(k, ast.Constant) and k.value in DATABASE_NAMES for k in node.keys):
                found.append(ast.unparse(node)[:60])
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Attribute) and node.slice.attr == "name":
            found.append(ast.unparse(node))
    return found


def test_shared_sql_modules_never_branch_on_the_database_name() -> None:
    """Each dialect's flavour declares what its SQL differs in; the shared SQL modules never ask which database."""
    branches = []
    for module in SHARED_SQL_MODULES:
        tree = ast.parse((PACKAGE / "_storage" / module).read_text())
        branches += [f"{module}: {branch}" for branch in name_branches(tree)]
    assert branches == []


# Functions only PostgreSQL has: their statements are its dialect module's (its flavour's `notices`, `unsynced_commit`).
POSTGRESQL_ONLY = ("pg_notify", "set_config")


def postgresql_only_text(source: str) -> list[str]:
    """Return each string literal of a module's source naming a function only PostgreSQL has."""
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and any(f"{name}(" in node.value for name in POSTGRESQL_ONLY)
    ]


def test_shared_sql_modules_hold_no_postgresql_only_statement() -> None:
    """pg_notify and set_config statements live in the PostgreSQL dialect module; the shared SQL modules only place
    what its flavour supplies."""
    found = [
        f"{module}: {text}"
        for module in SHARED_SQL_MODULES
        for text in postgresql_only_text((PACKAGE / "_storage" / module).read_text())
    ]
    assert found == [], found
    assert postgresql_only_text((PACKAGE / "_storage" / "_postgres.py").read_text())


def test_the_postgresql_text_guard_sees_a_statement() -> None:
    """The guard is not blind: the old shared modules' notify and set_config texts are found, f-strings too."""
    source = (
        "notify = f\"SELECT pg_notify('{CHANNEL}', ?)\"\n"
        "quick = \"quick AS (SELECT set_config('synchronous_commit', 'off', true)) \"\n"
        'plain = "SELECT saga_id FROM sagas"\n'
    )
    assert len(postgresql_only_text(source)) == 2


def test_the_name_branch_guard_sees_a_branch() -> None:
    """The guard is not blind: the old shared modules' comparisons, tables and lookups by name are found."""
    tree = ast.parse(
        'x = " ENGINE=InnoDB" if dialect == "mysql" else ""\n'
        'clocks = {"sqlite": None, "postgresql": "SELECT clock_timestamp()"}\n'
        "found = _CACHE[store._dialect.name]\n"
        'if self._dialect.name == "postgresql": pass\n'
        "x = dialect.lock_row\n"
        'log(f"{self._dialect.name} {url}")\n'
    )
    assert len(name_branches(tree)) == 4
