"""What the SQLite store sends per saga: the statements a durable 10-step saga costs, counted at the driver."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from saga_runtime import LeaseLostError, SagaExecutor, ToolRegistry, open_store
from saga_runtime._storage import _sqlite
from saga_runtime._storage._sqlite import SQLiteDialect
from saga_runtime._storage._sqlstore import SQLStore

from .conftest import T0, make_saga, make_steps

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


def _trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count, from now on, the functions SQLite stores send to their aiosqlite thread (each a trip there and back)."""
    sent = _sqlite._Hops.run
    count = [0]

    def counted(hops: Any, conn: Any, function: Any, *args: Any) -> Any:
        count[0] += 1
        return sent(hops, conn, function, *args)

    monkeypatch.setattr(_sqlite._Hops, "run", counted)
    return count


async def test_a_claim_sends_each_statement_in_one_trip_with_begin_in_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovery claim takes one trip to SQLite's thread per statement: BEGIN IMMEDIATE goes with the first."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert isinstance(store, SQLStore)
        await store.create_saga(make_saga("orphan", full=False), make_steps("orphan", 2))
        await store.claim_saga("orphan", "dead", T0, T0)  # a lease long expired
        seen: list[str] = []
        await _traced(store, seen)
        trips = _trips(monkeypatch)
        taken = await store.claim_expired("me", T0 + timedelta(days=2), T0 + timedelta(days=1))
        assert [saga.saga_id for saga, _ in taken] == ["orphan"]
        assert (seen[0], seen[-1]) == ("BEGIN IMMEDIATE", "COMMIT"), seen
        assert trips[0] == len(seen) - 1, seen
        loaded = await store.load_saga("orphan")
        assert loaded is not None
        assert loaded[0].owner == "me"


async def test_a_failed_transaction_writes_nothing_and_one_without_statements_sends_none(tmp_path: Path) -> None:
    """A transaction failing after a write rolls it back; one failing before its first statement sends nothing."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert isinstance(store, SQLStore)
        dialect = store.dialect
        hold = "INSERT INTO holds (saga_id, reason, held_at) VALUES (?, ?, ?)"

        async def failing(write: bool) -> None:
            async with dialect.transaction(begin=True) as tx:
                if write:
                    assert await tx.execute(hold, ("h", "why", "2024-05-17")) == 1
                raise RuntimeError("the transaction's caller failed")

        with pytest.raises(RuntimeError):
            await failing(write=True)
        seen: list[str] = []
        await _traced(store, seen)
        with pytest.raises(RuntimeError):
            await failing(write=False)
        assert seen == []
        async with dialect.transaction(begin=False) as tx:
            assert await tx.fetch("SELECT COUNT(*) FROM holds") == [(0,)]
        async with dialect.transaction(begin=True) as tx:
            assert await tx.execute(hold, ("h", "why", "2024-05-17")) == 1
        assert seen[-2].startswith("INSERT INTO holds"), seen
        assert seen[-1] == "COMMIT", seen
        assert seen.count("BEGIN IMMEDIATE") == 1, seen


async def test_a_transaction_whose_begin_failed_writes_nothing_though_its_body_goes_on(tmp_path: Path) -> None:
    """A body that swallows its first statement's error (BEGIN refused: the database busy) writes nothing after it."""
    import sqlite3

    path = tmp_path / "s.db"
    async with open_store(f"sqlite:///{path}", busy_timeout=0.2) as store:
        assert isinstance(store, SQLStore)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        hold = "INSERT INTO holds (saga_id, reason, held_at) VALUES (?, ?, ?)"

        async def swallowing() -> None:
            async with store.dialect.transaction(begin=True) as tx:
                with pytest.raises(sqlite3.OperationalError):
                    await tx.fetch("SELECT 1")  # BEGIN IMMEDIATE rides with it, and fails
                other.execute("ROLLBACK")  # the lock free now: a statement would commit on its own
                await tx.execute(hold, ("a", "held", "2026-01-01"))

        with pytest.raises(Exception, match="not open"):
            await swallowing()
        other.close()
        async with store.dialect.transaction(begin=False) as tx:
            assert (await tx.fetch("SELECT COUNT(*) FROM holds"))[0][0] == 0
