"""How the SQLite store writes: the text of its times, and what an owner's update of a saga row leaves alone."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from saga_runtime import LeaseLostError, SagaStatus, open_store
from saga_runtime._records import _times
from saga_runtime._storage import _sqlite
from saga_runtime._storage._sqlstore import SQLStore

from .conftest import make_saga, make_steps


def test_a_time_is_written_as_isoformat_writes_it() -> None:
    """The SQLite store's time text is isoformat(" ", "microseconds") of the UTC time, for any time of any year."""
    pick = random.Random(7)
    span = (datetime.max.replace(tzinfo=UTC) - datetime.min.replace(tzinfo=UTC)) // timedelta(microseconds=1)
    times = [datetime.min.replace(tzinfo=UTC) + timedelta(microseconds=pick.randrange(span)) for _ in range(5000)]
    times += [value.replace(second=0, microsecond=0) for value in times[:100]]
    times += [datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC), datetime(2024, 5, 17, tzinfo=UTC)]
    for value in times:
        assert _sqlite._time_text(value) == value.isoformat(" ", "microseconds")


class _Stamp(datetime):
    """A datetime subclass whose own isoformat writes other text."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return "stamp:" + super().isoformat(sep, timespec)


def test_a_subclassed_time_is_written_as_the_base_text() -> None:
    """A datetime subclass's own isoformat is not asked: the column holds the base text, which sorts as time does."""
    value = _Stamp(2024, 5, 17, 9, 30, 15, 7, tzinfo=UTC)
    assert _sqlite._time_text(value) == "2024-05-17 09:30:15.000007+00:00"


def test_the_kept_minutes_stay_bounded() -> None:
    """The minutes' texts kept for formatting times never grow past their bound, however many minutes pass."""
    start = datetime(2030, 1, 1, tzinfo=UTC)
    for minute in range(3 * _times._MINUTES_KEPT):
        value = start + timedelta(minutes=minute, seconds=minute % 60, microseconds=minute)
        assert _sqlite._time_text(value) == value.isoformat(" ", "microseconds")
        assert len(_times._MINUTES) <= _times._MINUTES_KEPT


def test_the_kept_written_times_stay_bounded_and_exact() -> None:
    """Times written again come back with their own text, and the times kept by identity never pass their bound."""
    start = datetime(2031, 6, 1, tzinfo=UTC)
    values = [start + timedelta(seconds=n, microseconds=n % 2) for n in range(2 * _sqlite._WRITTEN_KEPT)]
    for value in values + values[::-1]:
        assert _sqlite._time_text(value) == value.isoformat(" ", "microseconds")
        assert len(_sqlite._WRITTEN) <= _sqlite._WRITTEN_KEPT


async def _owned_save(tmp_path: Path, *, later: timedelta, lease: bool) -> list[str]:
    """Create a saga owned by "me", save it again under that owner, created `later`; return the statements run."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert isinstance(store, SQLStore)
        saga = make_saga("one")
        saga.owner = "me"
        await store.create_saga(saga, [])
        saga.status, saga.created_at = SagaStatus.SUCCESS, saga.created_at + later
        seen: list[str] = []
        await store.dialect._tx.call(lambda conn: conn.set_trace_callback(seen.append))  # type: ignore[attr-defined]
        await store.save(saga, [], owner="me", lease=lease)
        loaded = await store.load_saga("one")
        assert loaded is not None
        assert loaded[0] == saga
        assert await store.verify_saga("one")
    return seen


@pytest.mark.parametrize("lease", [True, False])
async def test_an_owners_update_leaves_the_unchanged_creation_time_alone(tmp_path: Path, lease: bool) -> None:
    """An owner's update of a saga row does not assign created_at (its index entry stays): one UPDATE, no other."""
    seen = await _owned_save(tmp_path, later=timedelta(0), lease=lease)
    updates = [sql for sql in seen if sql.startswith("UPDATE")]
    assert len(updates) == 1, seen
    assert "created_at =" not in updates[0].split(" WHERE ")[0]


@pytest.mark.parametrize("lease", [True, False])
async def test_an_owners_update_still_writes_a_changed_creation_time(tmp_path: Path, lease: bool) -> None:
    """An owner's update of a saga row whose created_at changed stores the new one (and the seal still verifies)."""
    seen = await _owned_save(tmp_path, later=timedelta(hours=1), lease=lease)
    assert len([sql for sql in seen if sql.startswith("UPDATE")]) == 2, seen


async def test_an_owners_update_by_another_owner_writes_nothing(tmp_path: Path) -> None:
    """An update under an owner the saga does not name is lost, creation time unchanged or not, and writes nothing."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        saga = make_saga("one")
        saga.owner = "me"
        await store.create_saga(saga, [])
        before = await store.load_saga("one")
        assert before is not None
        for later in (timedelta(0), timedelta(hours=1)):
            changed = before[0].copy()
            changed.status, changed.created_at = SagaStatus.SUCCESS, changed.created_at + later
            with pytest.raises(LeaseLostError):
                await store.save(changed, [], owner="someone else")
        assert await store.load_saga("one") == before


@pytest.mark.parametrize("count", [1, 2, 3])
async def test_a_lone_write_of_step_rows_lands_only_under_the_sagas_owner(tmp_path: Path, count: int) -> None:
    """Step rows written alone under an owner the saga does not name are lost whole; under its owner they land."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        saga = make_saga("one")
        saga.owner = "me"
        await store.create_saga(saga, [])
        steps = make_steps("one", count)
        with pytest.raises(LeaseLostError):
            await store.save(None, steps, owner="someone else")
        loaded = await store.load_saga("one")
        assert loaded is not None
        assert loaded[1] == []
        await store.save(None, steps, owner="me")
        await store.save(None, steps, owner="me")  # again: the stored rows updated in place
        loaded = await store.load_saga("one")
        assert loaded is not None
        assert loaded[1] == steps


@pytest.mark.parametrize("count", [1, 2, 3])
async def test_a_written_none_is_stored_as_null(tmp_path: Path, count: int) -> None:
    """Every None of a saga row and of step rows (alone, in pairs, in a batch) is stored as NULL, never as a number."""
    path = tmp_path / "s.db"
    async with open_store(f"sqlite:///{path}") as store:
        saga = make_saga("one", full=False)
        saga.owner = "me"
        await store.create_saga(saga, make_steps("one", count, full=False))
        await store.save(None, make_steps("one", count, full=False), owner="me")
        steps = make_steps("one", count, full=False)
        await store.save(saga, steps, owner="me")
        assert await store.load_saga("one") == (saga, steps)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for table in ("sagas", "steps"):
            for (column,) in conn.execute(f"SELECT name FROM pragma_table_info('{table}') WHERE name != 'cost'"):
                kinds = {kind for (kind,) in conn.execute(f"SELECT typeof({column}) FROM {table}")}
                assert "real" not in kinds, (table, column)
        assert conn.execute("SELECT COUNT(*) FROM steps WHERE result IS NULL AND error IS NULL").fetchone() == (count,)
        assert conn.execute("SELECT typeof(cost) FROM sagas").fetchone() == ("real",)  # a float stays a float


async def test_opening_a_store_leaves_sqlite3s_adapters_as_they_were(tmp_path: Path) -> None:
    """The SQLite store registers no sqlite3 adapter (the registry is the whole process's), None's included."""
    before = dict(sqlite3.adapters)
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        await store.create_saga(make_saga("one", full=False), make_steps("one", 2, full=False))
    assert sqlite3.adapters == before
    assert (type(None), sqlite3.PrepareProtocol) not in sqlite3.adapters


async def test_a_float_adapter_registered_by_other_code_leaves_nulls_stored_as_null(tmp_path: Path) -> None:
    """With a float adapter registered after the store opened (other code's), every None is still stored as NULL."""
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        saga = make_saga("one", full=False)
        saga.owner = "me"
        sqlite3.register_adapter(float, repr)  # a float as its text (a REAL column converts a number back)
        try:
            await store.create_saga(saga, make_steps("one", 2, full=False))
            steps = make_steps("one", 2, full=False)
            await store.save(saga, steps, owner="me")
            assert await store.load_saga("one") == (saga, steps)
        finally:
            del sqlite3.adapters[(float, sqlite3.PrepareProtocol)]
