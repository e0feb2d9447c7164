"""Schedules on the memory store: one dict by name, mirroring the SQL stores' `schedules` table.

One loop owns the store, so each method is atomic: no await between its check and its change.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime

from saga_runtime._records import Schedule

__all__ = ["MemorySchedules"]


class MemorySchedules:
    """The schedule primitives of MemoryStore."""

    _schedules: dict[str, Schedule]

    def _check_open(self) -> None:
        raise NotImplementedError

    async def put_schedule(self, schedule: Schedule) -> None:
        """Store a schedule, replacing the one of the same name whole."""
        self._check_open()
        self._schedules[schedule.name] = _copy(schedule)

    async def load_schedules(self, name: str | None = None) -> list[Schedule]:
        """Return every schedule by name (only `name`'s, if given)."""
        self._check_open()
        if name is not None:
            found = self._schedules.get(name)
            return [] if found is None else [_copy(found)]
        return [_copy(self._schedules[key]) for key in sorted(self._schedules)]

    async def due_schedules(self, now: datetime, limit: int) -> tuple[datetime, list[Schedule]]:
        """Return `now` and the unpaused schedules due at it, earliest first."""
        self._check_open()
        due = [s for s in self._schedules.values() if not s.paused and s.next_tick <= now]
        due.sort(key=lambda s: (s.next_tick, s.name))
        return now, [_copy(s) for s in due[:limit]]

    async def advance_schedule(self, name: str, expected: datetime, next_tick: datetime, last_tick: datetime) -> bool:
        """Move an unpaused schedule's next tick from `expected` on; return whether it did."""
        self._check_open()
        found = self._schedules.get(name)
        if found is None or found.paused or found.next_tick != expected:
            return False
        self._schedules[name] = replace(found, next_tick=next_tick, last_tick=last_tick)
        return True

    async def pause_schedule(self, name: str) -> bool:
        """Pause a schedule; return False if none has the name."""
        self._check_open()
        found = self._schedules.get(name)
        if found is None:
            return False
        self._schedules[name] = replace(found, paused=True)
        return True

    async def resume_schedule(self, name: str, next_tick: datetime) -> bool:
        """Resume a paused schedule from `next_tick`; return False if none has the name."""
        self._check_open()
        found = self._schedules.get(name)
        if found is None:
            return False
        if found.paused:
            self._schedules[name] = replace(found, paused=False, next_tick=next_tick)
        return True

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule; return whether one had the name."""
        self._check_open()
        return self._schedules.pop(name, None) is not None


def _copy(schedule: Schedule) -> Schedule:
    """Return a copy whose plan and arguments the caller may change without changing the stored one."""
    return replace(schedule, plan=copy.deepcopy(schedule.plan), args=copy.deepcopy(schedule.args))
