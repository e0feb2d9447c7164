"""How the SQLite store's trips to aiosqlite's thread come back: through an eventfd of its own where it can."""

from __future__ import annotations

import asyncio
import gc
import os
import sqlite3
from pathlib import Path

import aiosqlite
import pytest

from saga_runtime import open_store
from saga_runtime._storage import _sqlite
from saga_runtime._storage._sqlstore import SQLStore

from .conftest import make_saga, make_steps

# The eventfd serves Linux with the aiosqlite versions whose answering was read; elsewhere aiosqlite's own path does.
linux = pytest.mark.skipif(
    not _sqlite._HOPS_ANSWERED,
    reason=f"the store's eventfd serves Linux with aiosqlite 0.20 to 0.22 (here: aiosqlite {aiosqlite.__version__})",
)


def test_only_aiosqlite_versions_read_answer_through_the_stores_eventfd() -> None:
    """The versions whose answers were read in their source (0.20 to 0.22) take the eventfd; any other does not."""
    answers = _sqlite._aiosqlite_answers_through_loop
    assert [answers(version) for version in ("0.20.0", "0.21.0", "0.22.1")] == [True, True, True]
    assert [answers(version) for version in ("0.19.1", "0.23.0", "1.0.0", "dev")] == [False, False, False, False]


def test_the_installed_aiosqlite_answers_through_the_stores_eventfd_on_linux() -> None:
    """On Linux, an aiosqlite whose answering was read (0.20 to 0.22) has its trips come back through the eventfd."""
    if not hasattr(os, "eventfd"):
        pytest.skip("an eventfd is Linux's")
    version = aiosqlite.__version__
    if not _sqlite._aiosqlite_answers_through_loop(version):
        pytest.skip(f"aiosqlite {version} was not read: the store takes aiosqlite's own path (read it to add it)")
    assert _sqlite._HOPS_ANSWERED, version


@linux
async def test_a_stores_trips_come_back_through_its_eventfd(tmp_path: Path) -> None:
    """Writes, reads and errors of a store come back on the loop watching its eventfd, which its close lets go."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert isinstance(store, SQLStore)
        await store.create_saga(make_saga("one"), make_steps("one", 2))
        hops = store.dialect._hops  # type: ignore[attr-defined]
        assert hops._loop is asyncio.get_running_loop()
        assert await store.load_saga("one") is not None
        async with store.dialect.transaction(begin=False) as tx:
            with pytest.raises(sqlite3.OperationalError, match="no such table"):  # the driver's, mapped at the end
                await tx.fetch("SELECT * FROM no_such_table")
            assert await tx.fetch("SELECT COUNT(*) FROM steps") == [(2,)]
        assert not hops._answered
    assert hops._loop is None


@linux
async def test_a_write_whose_caller_was_cancelled_still_lands_and_the_next_trips_come_back(tmp_path: Path) -> None:
    """A caller cancelled while its write runs leaves it to finish; the answer it no longer awaits is dropped."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert isinstance(store, SQLStore)
        dialect = store.dialect
        release = asyncio.Event()
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def blocked(conn: sqlite3.Connection) -> int:
            loop.call_soon_threadsafe(started.set)
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
            return conn.execute("INSERT INTO holds (saga_id, reason, held_at) VALUES ('h', 'x', 'y')").rowcount

        async def waiting() -> int:
            async with dialect.transaction(begin=False) as tx:
                return await tx.call(blocked)  # type: ignore[attr-defined,no-any-return]

        task = asyncio.create_task(waiting())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        async with dialect.transaction(begin=False) as tx:
            assert await tx.fetch("SELECT reason FROM holds") == [("x",)]


def test_a_store_goes_on_in_the_next_event_loop_and_beside_another_open_one(tmp_path: Path) -> None:
    """A store used from a second loop while the first is open, then from a third, still has every trip answered."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    first = asyncio.new_event_loop()
    second = asyncio.new_event_loop()
    try:
        store = first.run_until_complete(open_store(url))
        first.run_until_complete(store.create_saga(make_saga("one"), make_steps("one", 1)))
        loaded = second.run_until_complete(store.load_saga("one"))  # the first still open: aiosqlite's own answer
        assert loaded is not None
        first.close()
        assert asyncio.run(store.load_saga("one")) == loaded  # the first closed: the eventfd, in a loop of its own
        asyncio.run(store.close())
    finally:
        first.close()
        second.close()


@linux
async def test_a_closed_stores_eventfd_is_closed_once_the_store_is_gone(tmp_path: Path) -> None:
    """The eventfd of a closed store is closed with the last reference to it: no descriptor left open per store."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        await store.create_saga(make_saga("one", full=False), [])
        fd = store.dialect._hops._fd  # type: ignore[attr-defined]
        assert os.fstat(fd)
    del store
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)
