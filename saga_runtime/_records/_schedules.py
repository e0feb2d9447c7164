"""Schedules (API.md §18): the stored row, and when its ticks fall (cron in a timezone, or every N seconds).

Cron expressions are evaluated by cronsim (the `cron` extra), imported here only: its errors become `ValueError`s
naming the expression at this one boundary, and a missing package says which extra to install.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["Schedule", "Timing", "tick_id"]

CRON_INSTALL_HINT = "pip install 'saga-runtime[cron]'"

# The nicknames Vixie cron takes, written out (cronsim reads five or six fields only).
_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)
_LONGEST = timedelta(days=36_525)
_LONGEST_SECONDS = _LONGEST.total_seconds()


@dataclass(frozen=True, slots=True)
class Schedule:
    """A stored schedule: what it submits at each tick, when its ticks fall, and where it stands.

    The target is a plan (`plan`) or a saga function (`function`, called with `args`). Its ticks follow `cron`
    in `timezone`, or fall `every` seconds apart. `next_tick` is the next tick a worker will submit; `last_tick`
    the latest one submitted (None before the first); a `paused` schedule submits nothing.
    """

    name: str
    plan: list[Any] | None
    function: str | None
    args: dict[str, Any] | None
    cron: str | None
    every: float | None
    timezone: str
    queue: str
    next_tick: datetime
    last_tick: datetime | None = None
    paused: bool = False

    @property
    def target(self) -> str:
        """Return what each tick submits, in a few words: the function's name, or the plan's size."""
        if self.function is not None:
            return self.function
        steps = sum(len(group) if isinstance(group, list) else 1 for group in self.plan or ())
        return f"plan ({steps} step{'' if steps == 1 else 's'})"

    @property
    def when(self) -> str:
        """Return when its ticks fall, in a few words."""
        if self.cron is not None:
            return f"cron {self.cron!r} ({self.timezone})"
        return f"every {self.every:g}s"

    def timing(self) -> Timing:
        """Return the timing of its ticks."""
        return Timing(self.cron, self.every, self.timezone)


def tick_id(name: str, tick: datetime) -> str:
    """Return the saga id of a schedule's tick: `<name>@<tick in ISO 8601, UTC>` (seconds unless finer)."""
    return f"{name}@{tick.astimezone(UTC).replace(tzinfo=None).isoformat()}Z"


class Timing:
    """When a schedule's ticks fall: a cron expression in a timezone, or `every` seconds.

    Build it with the schedule's options; a bad one raises ValueError (TypeError for a wrong type) naming it.
    """

    __slots__ = ("_cron", "cron", "every", "timezone", "zone")

    def __init__(self, cron: str | None, every: float | None, timezone: str) -> None:
        if (cron is None) == (every is None):
            raise ValueError("give exactly one of cron= (a cron expression) or every= (seconds between ticks)")
        if not isinstance(timezone, str) or not timezone:
            raise TypeError(f"timezone must be an IANA timezone name such as 'Europe/Paris', got {timezone!r}")
        try:
            self.zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError(f"unknown timezone {timezone!r}: give an IANA name such as 'Europe/Paris'") from None
        self.timezone = timezone
        self.cron = cron
        self.every = every
        self._cron = ""
        if every is not None:
            if isinstance(every, bool) or not isinstance(every, int | float) or not math.isfinite(every) or every <= 0:
                raise ValueError(f"every must be a positive number of seconds, got {every!r}")
            if not _MICROSECOND <= timedelta(seconds=min(every, _LONGEST_SECONDS)) < _LONGEST:
                raise ValueError(f"every must be between a microsecond and 100 years, got {every!r}")
            self.every = float(every)
            return
        if not isinstance(cron, str):
            raise TypeError(f"cron must be a cron expression (a str), got {type(cron).__name__}")
        if len(cron.encode()) > 255:
            raise ValueError(f"bad cron expression {cron[:40]!r}...: longer than 255 bytes")
        self._cron = _NICKNAMES.get(cron.strip().lower(), cron.strip())
        self.first_after(datetime.now(UTC))  # parses it, and refuses one that never fires

    def first_after(self, at: datetime) -> datetime:
        """Return the first tick strictly after `at` (aware; in UTC)."""
        if self.every is not None:
            tick = at + timedelta(seconds=self.every)
            if self.every == int(self.every) and tick.microsecond:  # whole seconds: ticks on whole seconds
                tick = tick.replace(microsecond=0) + _SECOND
            return tick.astimezone(UTC)
        return self._tick(at, reverse=False)

    def due(self, next_tick: datetime, now: datetime) -> tuple[datetime, datetime]:
        """Return the latest tick at or before `now` (not before `next_tick`, which is due) and the one after it."""
        if self.every is not None:
            step = timedelta(seconds=self.every)
            latest = next_tick + step * ((now - next_tick) // step)
            return latest, latest + step
        latest = self._tick(now.replace(microsecond=0) + _SECOND, reverse=True)
        return max(latest, next_tick), self._tick(now, reverse=False)

    def _tick(self, at: datetime, *, reverse: bool) -> datetime:
        """Return the cron tick after `at` (before it, `reverse`), in UTC; the one boundary with cronsim."""
        try:
            from cronsim import CronSim, CronSimError
        except ImportError:
            raise ImportError(
                f"cron schedules need the cronsim package, which is not installed: run {CRON_INSTALL_HINT}"
            ) from None
        try:
            return next(CronSim(self._cron, at.astimezone(self.zone), reverse=reverse)).astimezone(UTC)
        except (CronSimError, StopIteration) as exc:
            raise ValueError(f"bad cron expression {self.cron!r}: {exc or 'it never fires'}") from None
