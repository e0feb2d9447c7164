"""What the SQLite store sends per saga: the statements a durable 10-step saga costs, counted at the driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from saga_runtime import LeaseLostError, SagaExecutor, ToolRegistry, open_store
from saga_runtime._storage._sqlite import SQLiteDialect
from saga_runtime._storage._sqlstore import SQLStore

from .conftest import make_saga, make_steps

registry = ToolRegistry()


@registry.tool
class Noop:
    """Do nothing."""

    async def execute(self, n: int) -> int:
        return n


PLAN = [{"tool": "Noop", "args": {"n": i}} for i in range(10)]
# Today 17 (issue 23's target: at most 25); generous, so engine changes do not trip it, while 103 did.
BOUND = 30


async def _traced(store: SQLStore, seen: list[str]) -> None:
    """Record every statement the store's connection runs from now on."""
    await store.dialect._tx.call(lambda conn: conn.set_trace_callback(seen.append))


async def test_a_durable_ten_step_saga_takes_few_statements(tmp_path: Path) -> None:
    """A 10-step saga on SQLite runs at most 30 statements, BEGIN and COMMIT included, and no SAVEPOINT."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert isinstance(store, SQLStore)
        assert isinstance(store.dialect, SQLiteDialect)
        executor = SagaExecutor(registry, store=store)
        await executor.run(PLAN)  # warm: nothing but the saga's own statements is counted
        seen: list[str] = []
        await _traced(store, seen)
        result = await executor.run(PLAN)
        assert result.status.value == "SUCCESS"
    assert 0 < len(seen) <= BOUND, seen
    assert not [sql for sql in seen if "SAVEPOINT" in sql or "idempotency_key IS NOT" in sql]
    assert not [sql for sql in seen if sql.startswith("SELECT")], "an owner check is folded into its write"


async def test_a_lone_step_write_is_one_statement(tmp_path: Path) -> None:
    """An owner-conditional save of step rows alone is one autocommitted statement (no BEGIN, no owner SELECT)."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert isinstance(store, SQLStore)
        assert isinstance(store.dialect, SQLiteDialect)
        saga, steps = make_saga("one"), make_steps("one", 2)
        saga.owner = "me"
        await store.create_saga(saga, [])
        seen: list[str] = []
        await _traced(store, seen)
        await store.save(None, steps, owner="me")
        assert len(seen) == 1, seen
        with pytest.raises(LeaseLostError):
            await store.save(None, steps, owner="someone else")
        assert await store.load_saga("one") == (saga, steps)
