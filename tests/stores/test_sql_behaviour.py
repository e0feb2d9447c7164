"""Behaviour of the SQL stores beyond the contract: locking, cancellation, values JSON cannot hold, leaks."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from saga_runtime._exceptions import StoreBusyError, StoreError
from saga_runtime._records import StepStatus, idempotency_key
from saga_runtime._storage import open_store

from .conftest import Stores, make_saga, make_steps, sqlite_file


async def test_sqlite_write_lock_held_elsewhere_is_busy_then_recovers(tmp_path: Path) -> None:
    """Another process holding the write lock past busy_timeout: StoreBusyError; once released, writes work."""
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    async with open_store(url, busy_timeout=0.05) as store:
        await store.create_saga(make_saga("b"), make_steps("b", 1))
        other = sqlite3.connect(sqlite_file(url), isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreBusyError, match="busy_timeout"):
                await store.save(make_saga("b"), [])
            assert await store.load_saga("b") is not None  # WAL: reads go on while another process writes
            other.execute("ROLLBACK")
        finally:
            other.close()
        await store.save(make_saga("c"), make_steps("c", 2))
        assert await store.load_saga("c") is not None


async def test_opening_a_new_sqlite_file_another_process_writes_waits_for_its_write(tmp_path: Path) -> None:
    """A file another process is writing in rollback-journal mode: opening waits for the write, not failing at once."""
    path = tmp_path / "shared.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("CREATE TABLE other_app (x)")
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO other_app VALUES (1)")
        with pytest.raises(StoreBusyError, match="busy_timeout"):
            await open_store(f"sqlite:///{path}", busy_timeout=0.05)
        ends = threading.Timer(0.3, other.execute, ("COMMIT",))
        ends.start()
        async with open_store(f"sqlite:///{path}", busy_timeout=5) as store:
            await store.create_saga(make_saga("w"), make_steps("w", 1))
            assert await store.load_saga("w") is not None
        ends.join()
    finally:
        other.close()


async def test_cancelled_saves_leave_the_store_usable(stores: Stores, sql_kind: str) -> None:
    """Saves cancelled at any point roll back or commit whole, and the store keeps working afterwards."""
    store = await stores.open(sql_kind, wipe=True)
    saga, steps = make_saga("cx", full=False), make_steps("cx", 4, full=False)
    await store.create_saga(saga, steps)
    for attempt in range(16):
        for row in steps:
            row.attempts = attempt
            row.status = StepStatus.RUNNING
        if attempt % 2:
            # anyio's cancellation is level-triggered: every await in the scope is cancelled, cleanup included.
            with anyio.move_on_after(attempt * 0.0005):
                await store.save(saga, steps)
        else:
            task = asyncio.ensure_future(store.save(saga, steps))
            await asyncio.sleep(attempt * 0.0005)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        loaded = await store.load_saga("cx")
        assert loaded is not None
        # All or nothing: every step shows the same attempt.
        assert len({row.attempts for row in loaded[1]}) == 1
    steps[0].result = {"after": "cancellations"}
    await store.save(None, steps)
    loaded = await store.load_saga("cx")
    assert loaded is not None
    assert loaded[1][0].result == {"after": "cancellations"}


async def test_values_json_cannot_hold_are_refused(stores: Stores, sql_kind: str) -> None:
    """A NaN or an object in a JSON column is a StoreError naming the step, and nothing is written."""
    store = await stores.open(sql_kind, wipe=True)
    steps = make_steps("nan", 1)
    steps[0].result = float("nan")
    with pytest.raises(StoreError, match="step-0"):
        await store.create_saga(make_saga("nan"), steps)
    steps[0].result = object()
    with pytest.raises(StoreError, match="result of step"):
        await store.save(None, steps)
    assert await store.load_saga("nan") is None


async def test_a_store_never_closed_warns(stores: Stores, sql_kind: str) -> None:
    """A SQL store garbage-collected unclosed raises a ResourceWarning (aiosqlite style)."""
    store = await stores.open(sql_kind)
    with pytest.warns(ResourceWarning, match="never closed"):
        store.__del__()  # type: ignore[attr-defined]


async def test_a_batch_breaking_a_constraint_writes_nothing(stores: Stores, sql_kind: str) -> None:
    """A save whose second step reuses another step's idempotency key fails whole; the first is not written."""
    store = await stores.open(sql_kind, wipe=True)
    await store.create_saga(make_saga("k"), make_steps("k", 2))
    fresh, thief = make_steps("k", 4)[2:]
    thief.idempotency_key = idempotency_key("k", "step-0")
    with pytest.raises(StoreError):
        await store.save(None, [fresh, thief])
    loaded = await store.load_saga("k")
    assert loaded is not None
    assert [row.step_id for row in loaded[1]] == ["step-0", "step-1"]
    assert loaded[1][0] == make_steps("k", 1)[0]
