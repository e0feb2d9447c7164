"""Schedules on the SQL stores: the `schedules` table (migration 10) and its statements.

"Due" is judged on the database's clock where machines share it (the flavour's `now_sql`, as leases are), so a
worker whose clock runs ahead submits no tick early. Moving a schedule on is one conditional UPDATE
(`... AND next_tick = ?`): of workers that submitted the same tick, exactly one moves it, and none moves a schedule
paused or replaced.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar

from saga_runtime._records import Schedule
from saga_runtime._storage._codec import RowCodec
from saga_runtime._storage._dialect import Dialect
from saga_runtime._storage._flavour import Flavour
from saga_runtime._storage._sql import _placeholders
from saga_runtime._storage._sqlwrite import Transaction

__all__ = ["SQLSchedules"]

_T = TypeVar("_T")

COLUMNS = (
    "name",
    "plan",
    "fn_name",
    "args",
    "cron",
    "every_seconds",
    "tz",
    "queue",
    "next_tick",
    "last_tick",
    "paused",
)


class _Statements:
    """The schedule statements of one dialect."""

    def __init__(self, dialect: Flavour) -> None:
        q = _placeholders
        columns = ", ".join(COLUMNS)
        marks = ", ".join("?" * len(COLUMNS))
        upsert = dialect.upsert("name", COLUMNS[1:])
        self.put = q(dialect, f"INSERT INTO schedules ({columns}) VALUES ({marks}) {upsert}")
        self.all = f"SELECT {columns} FROM schedules ORDER BY name"
        self.one = q(dialect, f"SELECT {columns} FROM schedules WHERE name = ?")
        clock = dialect.now_sql
        self.due = q(
            dialect,
            f"SELECT {columns}, {clock} FROM schedules WHERE paused = 0 AND next_tick <= {clock} "
            "ORDER BY next_tick, name LIMIT ?",
        )
        self.advance = q(
            dialect,
            "UPDATE schedules SET next_tick = ?, last_tick = ? WHERE name = ? AND next_tick = ? AND paused = 0",
        )
        self.pause = q(dialect, "UPDATE schedules SET paused = 1 WHERE name = ? AND paused = 0")
        self.resume = q(dialect, "UPDATE schedules SET paused = 0, next_tick = ? WHERE name = ? AND paused = 1")
        self.exists = q(dialect, "SELECT COUNT(*) FROM schedules WHERE name = ?")
        self.delete = q(dialect, "DELETE FROM schedules WHERE name = ?")


class SQLSchedules:
    """The schedule primitives of a SQL store."""

    # Provided by SQLStore.
    _dialect: Dialect
    _codec: RowCodec

    def _check_open(self) -> None:
        raise NotImplementedError

    def _transaction(self, *, begin: bool) -> AbstractAsyncContextManager[Transaction]:
        raise NotImplementedError

    async def _retrying(self, what: str, operation: Callable[[], Awaitable[_T]]) -> _T:
        raise NotImplementedError

    async def _fetch(self, what: str, sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
        raise NotImplementedError

    async def put_schedule(self, schedule: Schedule) -> None:
        """Store a schedule, replacing the one of the same name whole."""
        self._check_open()
        codec, what = self._codec, f"schedule {schedule.name!r}"
        params = (
            schedule.name,
            codec.json_in(schedule.plan, f"the plan of {what}"),
            schedule.function,
            codec.json_in(schedule.args, f"the args of {what}"),
            schedule.cron,
            schedule.every,
            schedule.timezone,
            schedule.queue,
            codec.time_in(schedule.next_tick),
            codec.time_in(schedule.last_tick),
            int(schedule.paused),
        )
        await self._schedule_write("put_schedule", _statements(self).put, params)

    async def load_schedules(self, name: str | None = None) -> list[Schedule]:
        """Return every schedule by name (only `name`'s, if given)."""
        self._check_open()
        st = _statements(self)
        records = await (
            self._fetch("schedules", st.all, ()) if name is None else self._fetch("schedule", st.one, (name,))
        )
        return [self._schedule_of(record) for record in records]

    async def due_schedules(self, now: datetime, limit: int) -> tuple[datetime, list[Schedule]]:
        """Return the database's time and the unpaused schedules due at it, earliest first."""
        self._check_open()
        clock = self._codec.now_in(now)
        records = await self._fetch("due_schedules", _statements(self).due, (*clock, *clock, int(limit)))
        if not records:
            return now, []
        at = self._codec.time_out(records[0][len(COLUMNS)])
        assert at is not None
        return at, [self._schedule_of(record) for record in records]

    async def advance_schedule(self, name: str, expected: datetime, next_tick: datetime, last_tick: datetime) -> bool:
        """Move an unpaused schedule's next tick from `expected` on: one conditional UPDATE; return if it did."""
        self._check_open()
        time_in = self._codec.time_in
        params = (time_in(next_tick), time_in(last_tick), name, time_in(expected))
        return await self._schedule_write("advance_schedule", _statements(self).advance, params) > 0

    async def pause_schedule(self, name: str) -> bool:
        """Pause a schedule; return False if none has the name."""
        self._check_open()
        st = _statements(self)
        return await self._schedule_write("pause_schedule", st.pause, (name,)) > 0 or await self._schedule_exists(name)

    async def resume_schedule(self, name: str, next_tick: datetime) -> bool:
        """Resume a paused schedule from `next_tick`; return False if none has the name."""
        self._check_open()
        st = _statements(self)
        params = (self._codec.time_in(next_tick), name)
        return await self._schedule_write("resume_schedule", st.resume, params) > 0 or await self._schedule_exists(name)

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule; return whether one had the name."""
        self._check_open()
        return await self._schedule_write("delete_schedule", _statements(self).delete, (name,)) > 0

    async def _schedule_exists(self, name: str) -> bool:
        records = await self._fetch("schedule", _statements(self).exists, (name,))
        return int(records[0][0]) > 0

    async def _schedule_write(self, what: str, sql: str, params: Sequence[Any]) -> int:
        """Run one statement in its own transaction (retried after a lost connection); return the rows changed."""

        async def once() -> int:
            async with self._transaction(begin=False) as tx:
                return await tx.execute(sql, params)

        return await self._retrying(what, once)

    def _schedule_of(self, record: Sequence[Any]) -> Schedule:
        codec = self._codec
        name, plan, function, args, cron, every, timezone, queue, next_tick, last_tick, paused = record[: len(COLUMNS)]
        when = codec.time_out(next_tick)
        assert when is not None
        return Schedule(
            name=codec.id_out(name),
            plan=codec.json_out(plan),
            function=None if function is None else str(function),
            args=codec.json_out(args),
            cron=None if cron is None else str(cron),
            every=None if every is None else float(every),
            timezone=str(timezone),
            queue=str(queue),
            next_tick=when,
            last_tick=codec.time_out(last_tick),
            paused=bool(paused),
        )


_CACHE: dict[Flavour, _Statements] = {}


def _statements(store: SQLSchedules) -> _Statements:
    flavour = store._dialect.flavour
    found = _CACHE.get(flavour)
    if found is None:
        found = _CACHE[flavour] = _Statements(flavour)
    return found
