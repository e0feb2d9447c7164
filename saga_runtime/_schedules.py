"""Schedules (API.md §18): a saga submitted at each tick of a cron expression or an interval, once fleet-wide.

A schedule is a row of the store (name, target, timing, next tick, paused). Every worker's `serve()` looks for due
schedules; for each it submits the tick's saga under the id `<name>@<tick, ISO 8601 UTC>`, then moves `next_tick`
on with one conditional update. Two workers at the same tick submit the same id: the second submit is the
idempotent case of `submit()` (the saga is stored once), and only one of them moves the schedule on. After
downtime, only the latest missed tick is submitted; a paused schedule submits nothing, and resuming it starts
from the next tick to come.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import anyio

from saga_runtime._engine import Looks, journal
from saga_runtime._exceptions import IdempotencyConflictError, PlanValidationError, ResultNotStorableError, StoreError
from saga_runtime._planning import MAX_ID_BYTES, build_plan, valid_id
from saga_runtime._records import Queue, Schedule, SecretKeyring, Timing, now, tick_id, to_json_value
from saga_runtime._storage import SagaStore, schedules_of
from saga_runtime._tools import ToolRegistry

__all__ = ["Schedules"]

logger = logging.getLogger("saga_runtime")

# Room left in a saga id for "@" and the tick ("2026-03-29T01:30:00.250000Z").
_TICK_BYTES = 28

Submit = Callable[..., Awaitable[object]]


class Schedules:
    """The schedules of `store`: stored, listed, paused, resumed, deleted; and, with a registry and a submit
    function (an executor's), the due ticks submitted."""

    def __init__(
        self,
        store: SagaStore,
        registry: ToolRegistry | None = None,
        keyring: SecretKeyring | None = None,
        submit: Submit | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.keyring = keyring
        self.submit = submit
        # Schedule -> the tick last logged as not submittable here: logged once, and not let to crowd out others.
        self._warned: dict[str, datetime] = {}

    async def put(
        self,
        name: str,
        target: Any,
        *,
        cron: str | None,
        every: float | None,
        args: Mapping[str, Any] | None,
        queue: str,
        timezone: str,
    ) -> Schedule:
        """Validate a schedule and store it (replacing one of that name); return it. Nothing is stored on bad input."""
        if not isinstance(name, str) or not valid_id(name) or len(name.encode()) > MAX_ID_BYTES - _TICK_BYTES:
            raise ValueError(
                f"a schedule name must be non-empty text without NUL, of at most {MAX_ID_BYTES - _TICK_BYTES} bytes "
                f"in UTF-8, got {name!r}"
            )
        Queue(queue)  # raises on a bad queue name
        timing = Timing(cron, every, timezone)
        plan, function, stored_args = self._target(target, args)
        schedule = Schedule(
            name=name,
            plan=plan,
            function=function,
            args=stored_args,
            cron=timing.cron,
            every=timing.every,
            timezone=timezone,
            queue=queue,
            next_tick=timing.first_after(now()),
        )
        await journal.put_schedule(self.store, schedule)
        return schedule

    def _target(
        self, target: Any, args: Mapping[str, Any] | None
    ) -> tuple[list[Any] | None, str | None, dict[str, Any] | None]:
        """Return the stored form of a target: a validated plan, or a saga function's name and arguments."""
        if isinstance(target, str) or callable(target):
            # A saga function, or its name: submitted as `submit(name, args=...)`, which checks it at each tick too.
            registered = None if self.registry is None else self.registry.function(target)
            function = (
                registered.name
                if registered is not None
                else target
                if isinstance(target, str)
                else getattr(target, "__name__", None)
            )
            if not isinstance(function, str) or not valid_id(function) or len(function.encode()) > 255:
                raise TypeError(f"a schedule's target is a plan, a saga function or its name, got {target!r}")
            if args is not None and not isinstance(args, Mapping):
                raise TypeError(f"args must be a mapping of argument names to JSON values, got {type(args).__name__}")
            try:
                stored = to_json_value(dict(args or {}), what="the args", tool_name=function)
            except (ResultNotStorableError, TypeError, ValueError) as exc:
                raise ValueError(f"args of schedule target {function!r} must be JSON values: {exc}") from None
            if self.registry is not None:  # checked now, as a plan is: a bad target never stores a schedule
                if registered is None:
                    known = ", ".join(self.registry.function_names()) or "none"
                    raise PlanValidationError([f"no saga function {function!r} is registered (registered: {known})"])
                problems = registered.check_args(dict(stored))[0]
                if problems:
                    raise PlanValidationError([f"saga function {function!r}: {problem}" for problem in problems])
            return None, function, dict(stored)
        if isinstance(target, Sequence) and not isinstance(target, bytes | bytearray):
            if args is not None:
                raise TypeError("args= goes with a saga function; a plan carries its own arguments")
            if self.registry is None:
                raise TypeError("storing a schedule of a plan needs the executor's registry")
            planned = build_plan(target, self.registry, keyring=self.keyring)  # every problem at once
            return list(planned.to_json()), None, None
        raise TypeError(f"a schedule's target is a plan, a saga function or its name, got {type(target).__name__}")

    async def all(self) -> list[Schedule]:
        """Return every schedule, by name."""
        return await schedules_of(self.store).load_schedules()

    async def get(self, name: str) -> Schedule:
        """Return the schedule `name`; raise KeyError naming it if there is none."""
        found = await schedules_of(self.store).load_schedules(name)
        if not found:
            raise KeyError(_unknown(name, self.store))
        return found[0]

    async def pause(self, name: str) -> Schedule:
        """Pause a schedule: it submits nothing until resumed. Return it as it stands."""
        if not await journal.pause_schedule(self.store, name):
            raise KeyError(_unknown(name, self.store))
        return await self.get(name)

    async def resume(self, name: str) -> Schedule:
        """Resume a paused schedule from its next tick to come (the ticks missed while paused are not submitted)."""
        schedule = await self.get(name)
        if not await journal.resume_schedule(self.store, name, schedule.timing().first_after(now())):
            raise KeyError(_unknown(name, self.store))
        return await self.get(name)

    async def delete(self, name: str) -> None:
        """Delete a schedule (the sagas it submitted stay)."""
        if not await journal.delete_schedule(self.store, name):
            raise KeyError(_unknown(name, self.store))

    # -- the worker's side -------------------------------------------------------------------------------------

    async def submit_due(self, limit: int = 100) -> list[str]:
        """Submit the saga of each due schedule's latest tick and move the schedule on; return the ids moved on.

        A tick this worker cannot submit (it lacks the plan's tools) is logged once and left for another worker.
        """
        if self.submit is None:
            raise TypeError("submitting due ticks needs an executor's submit()")
        at, due = await schedules_of(self.store).due_schedules(now(), limit + len(self._warned))
        moved: list[str] = []
        for schedule in due:
            try:
                tick, following = schedule.timing().due(schedule.next_tick, at)
            except (ValueError, ImportError) as exc:  # cronsim missing on this worker, or a zone it does not know
                self._warn(schedule, schedule.next_tick, f"cannot compute its ticks here: {exc}")
                continue
            saga_id = tick_id(schedule.name, tick)
            try:
                if schedule.function is not None:
                    await self.submit(schedule.function, args=schedule.args, saga_id=saga_id, queue=schedule.queue)
                else:
                    await self.submit(schedule.plan, saga_id=saga_id, queue=schedule.queue)
            except IdempotencyConflictError:
                pass  # that tick's saga is stored already (the schedule was replaced since): it was submitted
            except (PlanValidationError, TypeError, ValueError) as exc:
                self._warn(schedule, tick, f"cannot submit {saga_id!r} here: {exc}")
                continue
            self._warned.pop(schedule.name, None)
            if await journal.advance_schedule(self.store, schedule.name, schedule.next_tick, following, tick):
                moved.append(saga_id)
        return moved

    def _warn(self, schedule: Schedule, tick: datetime, message: str) -> None:
        if self._warned.get(schedule.name) != tick:
            self._warned[schedule.name] = tick
            logger.warning("schedule %r: %s; left for another worker", schedule.name, message)

    async def serve(self, interval: float, looks: Looks | None = None) -> None:
        """Submit due ticks every `interval` seconds (with `looks`: once they find one due), until cancelled; a round
        that failed is logged and tried again."""
        due = anyio.Event()
        pause = interval
        if looks is not None:

            def looked() -> None:
                due.set()

            looks.listen("schedules", looked)
            pause = looks.wait_for(interval)
        while True:
            try:
                await self.submit_due()
            except StoreError as exc:
                logger.warning("schedules round failed, trying again in %gs: %s", interval, exc)
            except Exception:
                logger.exception("schedules round failed unexpectedly, trying again in %gs", interval)
            with anyio.move_on_after(pause):
                await due.wait()
            due = anyio.Event()


def _unknown(name: str, store: SagaStore) -> str:
    return f"no schedule {name!r} in {store.url}; executor.schedules() (or `saga-runtime schedules`) lists them"
