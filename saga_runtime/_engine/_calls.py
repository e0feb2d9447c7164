"""The driver a dynamic saga feeds one call group at a time, and a saga function's code run over its record.

The same engine steps as a plan's groups (`drive_plan`): adopt, hold, run, compensate, finish. Its code decides the
next call from the last result, so it drives; the engine runs each group, records it, and ends the saga.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any

import anyio

from saga_runtime._engine import _journal
from saga_runtime._engine._cancellation import CANCELLED, WorkerStopped
from saga_runtime._engine._config import EngineConfig
from saga_runtime._engine._journal import asleep, noted, returned, sleeps_of, slept
from saga_runtime._engine._notices import changed
from saga_runtime._engine._saga import SagaEngine
from saga_runtime._exceptions import SagaError, SagaFailedError, describe
from saga_runtime._records import SagaResult, SagaRow, SagaStatus, StepRow, StepStatus, now, result_from_rows
from saga_runtime._storage import cancel_requested, has, messages_for, messages_of
from saga_runtime._tools import ToolSpec

__all__ = ["CallBody", "CallDriver", "Released", "awaited_topic", "drive_calls", "due", "due_with", "receive", "send"]

logger = logging.getLogger("saga_runtime")


class Released(BaseException):
    """Raised into a saga function's code where the saga was released to wait (it resumes from its record)."""


# A saga function's code, run over its record: given the driver (and the engine it drives), it feeds it call groups
# and returns the function's return value (a JSON value).
CallBody = Callable[["CallDriver", SagaEngine], Awaitable[Any]]
_UNKNOWN = (StepStatus.PENDING, StepStatus.RUNNING, StepStatus.CANCELLED)
# Statuses read for every saga, as module constants: Python 3.11 reads an enum class's attribute through
# EnumType.__getattr__'s slow hook, a module global at a fraction of its cost.
_COMPENSATION_FAILED, _DECIDING = StepStatus.COMPENSATION_FAILED, (StepStatus.WAITING, StepStatus.REJECTED)
_SAGA_SUCCESS = SagaStatus.SUCCESS
_status_of = attrgetter("status")
_NO_OUTPUT: Any = object()


class CallDriver:
    """The driver a dynamic saga feeds one call group at a time, and ends once its code is done."""

    __slots__ = ("calls", "cancellation", "defers", "diverged", "engine", "groups", "requests", "waiting")

    def __init__(self, engine: SagaEngine, *, defers: bool = False) -> None:
        self.engine = engine
        self.groups = engine.groups  # its group runner, fed a new call itself (as the plan driver feeds a group)
        # What a new call's id is looked up in, read: the saga's calls and decision requests by step id, and its
        # cancellation (`halted`: an operator's cancel stopped it). The engine's own, never replaced while it runs.
        self.calls, self.requests, self.cancellation = engine.rows, engine.gate.rows, engine.verdict.cancellation
        # A saga function's driver: a call's success is written with the saga's next write (the next call's intent,
        # a wait, a publication, its end), not on its own; see `feed`.
        self.defers = defers
        self.waiting: SagaResult | None = None  # set once a call waits for a person's decision (the saga WAITs)
        self.diverged: BaseException | None = None  # code that left its record: the saga fails, whatever it does

    async def feed(
        self, rows: Sequence[StepRow], *, join: str, needed: int | None, gated: Sequence[StepRow], keep_going: bool
    ) -> tuple[bool, list[StepRow]]:
        """Run one group of calls (rows not yet in the saga are added); return (whether it held, its refused calls).

        `gated`: its calls that need a person's decision (held first: when one is undecided the saga WAITs, and
        `waiting` says so); `keep_going`: a refused call does not stop the others (the code sees each outcome).
        """
        engine = self.engine
        if engine.shelters is not None and engine.shelters.stopping:
            await engine.flush()  # its worker stops: what ran is recorded, and nothing more starts
            raise WorkerStopped
        known = engine.rows
        for row in rows:
            if row.step_id not in known:
                engine.add_step(row)
        registry = engine.config.registry
        failed_live = join == "all" and any(
            row.status is StepStatus.FAILED and registry.get(row.tool_name).retry_scope == "saga" for row in rows
        )
        refused = [row for row in rows if row.status is StepStatus.REJECTED]
        if gated:
            waiting, rejected = await engine.hold(gated)
            if waiting:
                self.waiting = await engine.wait_for_decisions()
                return False, []
            refused += rejected
        if refused and not keep_going:
            # Refused as a whole: the other calls are recorded as never run.
            engine.not_run(rows, f"not run: call {refused[0].step_id!r} of its group was rejected")
            await engine.flush()
            return False, refused
        runnable = [row for row in rows if row not in refused]
        ok = True
        if failed_live:
            # Failed live and died mid-undo: finish undoing, run nothing again.
            await engine.compensate_unknown(rows)
            await engine.flush()
        elif join != "all" or any(row.status in _UNKNOWN for row in runnable):
            ok = await engine.run_group(runnable, join=join, needed=needed)
            engine.forgive()  # the calling code decides whether a failure ends the saga
            await engine.compensate_unknown(rows, successes=join != "all" and not ok)
            if not (self.defers and ok and all(row.status is StepStatus.SUCCESS for row in runnable)):
                await engine.flush()  # durable before the caller sees a result
            # A saga function's successes are not written on their own: the code that sees them is run again over
            # the record, and nothing it does is lasting before the saga's next write, which carries them (the next
            # call's intent, a wait, a publication, its end). A crash before it leaves the calls RUNNING in the
            # record: run again under their keys, as any call of unknown outcome.
        return ok, refused

    def run_new(self, row: StepRow, kwargs: dict[str, Any], spec: ToolSpec) -> Coroutine[Any, Any, bool]:
        """Run a call new to the saga that needs no decision, `kwargs` its arguments validated (`spec` its tool's,
        the registry's), as a group of its own: `feed((row,), join="all")` without what only a group, a recorded
        call or a decision needs. Return its group's run (await it: whether the call held), then await `ran_new`
        unless the call is done with: held, and a saga function's success (`defers`: written with the saga's next
        write, see `feed`).

        (Its parts apart, the caller awaiting the group runner itself: a coroutine layer less a call.)
        """
        engine = self.engine
        if engine.shelters is not None and engine.shelters.stopping:
            return self._stopped()
        engine.journal.add_step(row)  # (`engine.add_step` and `run_group`, written out: no pass-through frames)
        return self.groups.run_new(row, kwargs, spec)

    async def ran_new(self, row: StepRow) -> None:
        """End a new call `run_new` ran that is not done with (see there): its failure forgiven (the calling code
        decides whether it ends the saga), an unknown outcome compensated, all of it written before the caller sees
        it."""
        engine = self.engine
        engine.verdict.forgive()
        await engine.compensate_unknown((row,))
        await engine.flush()  # durable before the caller sees a result

    async def _stopped(self) -> bool:
        await self.engine.flush()  # its worker stops: what ran is recorded, and nothing more starts
        raise WorkerStopped

    async def settle(self) -> None:
        """Write what the saga's code has seen and the store has not (a saga function's last successes) before a
        wait in this process: the wait is not spent on calls whose outcome a crash would lose."""
        await self.engine.flush()

    async def sleep_until(self, position: int, seconds: float) -> datetime:
        """Return when the saga's sleep at `position` (among its sleeps) ends: recorded, or now + `seconds`,
        recorded (durable before the wait starts)."""
        engine = self.engine
        wakes = sleeps_of(engine.saga)
        if position < len(wakes):
            return wakes[position]
        wake = now() + timedelta(seconds=seconds)
        slept(engine.saga, position, wake)
        engine.journal.touch_saga()
        await engine.flush()
        return wake

    async def publish(self, position: int, entry: dict[str, Any]) -> dict[str, Any] | None:
        """Record an event or stream entry at `position` among the saga's publications, once: return the entry
        recorded there before (a resumed saga: nothing written), else None once `entry` is written."""
        engine = self.engine
        for recorded in engine.saga.history:
            if recorded.get("kind") in _PUBLISHED and recorded.get("position") == position:
                return recorded
        noted(engine.saga, {**entry, "position": position})
        engine.journal.touch_saga()
        await engine.flush()
        changed(engine.journal.store, engine.saga.saga_id)  # readers in this process wake now
        if entry["kind"] == "event":
            engine.emit("saga_event_set", topic=entry["key"])
        return None

    async def release(self) -> None:
        """Release the saga to wait (WAITING, no lease): what its code recorded stays; nothing more is written.

        On a store that keeps no waits (it declares no "waits": nothing would find the saga WAITING again), the
        saga is not released: this returns and the wait goes on in this process, under the lease.
        """
        engine = self.engine
        if not has(engine.config.store, "waits"):
            return
        self.waiting = await engine.wait()
        # A message (or a cancel) stored after the saga last looked but before its wait was written found it still
        # running, so it did not make it due: looked for once more, now that it waits.
        store, saga_id = engine.config.store, engine.saga.saga_id
        try:
            if await due(store, engine.saga):
                await _journal.wake(store, saga_id, now())
        except Exception as exc:  # an operator's look, or the next message's wakeup, finds it
            logger.warning("saga %s: could not look for its messages once waiting: %s", saga_id, exc)
        raise Released

    async def end(
        self, error: BaseException | None = None, *, what: str = "the saga block", output: Any = _NO_OUTPUT
    ) -> SagaResult | None:
        """End the saga once its code is done: SUCCESS (with `output`, a saga function's return value), or
        compensated when `error` left the code, it diverged from its record, or an effect could not be undone.

        None when nothing more is this executor's to write (the lease was lost, or the worker stopped it).
        """
        engine = self.engine
        if self.waiting is not None:
            return self.waiting
        if engine.fenced:
            return None
        if self.diverged is not None:
            engine.fail(f"{what} left its record: {describe(self.diverged)}", self.diverged)
        elif error is not None:
            engine.fail(
                "the saga was cancelled by its caller"
                if isinstance(error, CANCELLED)
                else f"{what} raised {describe(error)}",
                error,
            )
        elif engine.verdict.halted is not None:
            pass  # an operator's cancel stopped it (its code caught the cut call's error): its reason stands
        else:
            rows = engine.rows.values()
            if _COMPENSATION_FAILED not in map(_status_of, rows):  # (the calls' statuses looked at in C)
                if output is not _NO_OUTPUT and output is not None:
                    returned(engine.saga, output)
                    engine.journal.touch_saga()  # sealed with the saga row's end
                return await engine.finish(_SAGA_SUCCESS)
            # An effect that could not be undone must not end in SUCCESS.
            stuck = next(row for row in rows if row.status == _COMPENSATION_FAILED)
            engine.fail(f"call {stuck.step_id!r} ({stuck.tool_name}) has an effect that could not be undone")
        return await engine.compensate()


async def drive_calls(engine: SagaEngine, body: CallBody, *, what: str) -> SagaResult:
    """Run (or resume) a saga function: its code over its record, to a terminal status or a wait.

    Calls recorded are served, the first one not recorded goes live; an exception leaving the code compensates.
    """
    try:
        if engine.compensating:
            return await engine.compensate()  # died while being undone: finish that, never forward
        rows = engine.rows.values()
        registry = engine.config.registry
        if rows and any(  # (a saga run from its start has no record to look at)
            row.status in _DECIDING or ((spec := registry.find(row.tool_name)) is not None and spec.approval)
            for row in rows
        ):
            await engine.gate.load()  # its requests, decided in an earlier run or not
        driver = CallDriver(engine, defers=True)
        result: SagaResult | None
        try:
            output = await body(driver, engine)
        except CANCELLED as exc:
            if engine.fenced or engine.detached:
                engine.stop()  # another executor owns it, or its worker stops: driven on from its records
                raise
            logger.warning("saga %s: cancelled by its caller, compensating", engine.saga.saga_id)
            await driver.end(exc, what=what)
            raise
        except Released:
            result = driver.waiting  # WAITING: resumed over its record when due
        except Exception as exc:
            result = await driver.end(exc, what=what)
        else:
            result = await driver.end(what=what, output=output)
        return result if result is not None else result_from_rows(engine.saga, list(engine.rows.values()))
    finally:
        # Each error's traceback holds the engine: let go of them, so refcounting frees it, not the GC.
        engine.verdict.errors.clear()


# How often a wait in the process looks for a message (and for an operator's cancel).
WAIT_POLL = 0.1
# What a saga publishes for readers, in its history: events, stream values and stream ends.
_PUBLISHED = frozenset({"event", "stream", "stream_closed"})


async def receive(driver: CallDriver, position: int, topic: str, seconds: float | None, *, releasable: bool) -> Any:
    """Return the message a saga's recv at `position` receives: recorded, else the oldest on `topic` not yet
    received (recorded at that position), or None once `seconds` passed (None: no limit; recorded too).

    `releasable` (a saga function): a wait longer than the executor's `wait_threshold` releases the saga.
    """
    engine = driver.engine
    saga, store = engine.saga, engine.config.store
    messages_of(store)  # a store that keeps no messages: StoreError now, not a wait for what `send` refuses
    begun = done = None
    for entry in saga.history:
        if entry.get("position") == position and entry.get("kind") in ("recv", "received"):
            begun, done = (entry, done) if entry["kind"] == "recv" else (begun, entry)
    if done is not None:
        return done.get("value")
    if begun is None:
        deadline = None if seconds is None else now() + timedelta(seconds=seconds)
        when = None if deadline is None else deadline.isoformat()
        noted(saga, {"kind": "recv", "position": position, "topic": topic, "deadline": when})
        engine.journal.touch_saga()
        await engine.flush()  # the deadline is durable before the wait starts
    else:
        deadline = None if begun.get("deadline") is None else datetime.fromisoformat(begun["deadline"])
    while True:
        if engine.verdict.halted is not None:  # an operator's cancel, taken in meanwhile, ends the wait
            raise SagaFailedError(
                f"saga {saga.saga_id!r} was cancelled ({engine.verdict.halted}) while it waited for {topic!r}",
                saga_id=saga.saga_id,
                status=saga.status.value,
            )
        read, engine.messages = engine.messages, None  # read as it was found due: looked at once
        message = None if read is None else _first_unreceived(saga, read, topic, deadline)
        if message is None:
            message = await _unreceived(store, saga, topic, deadline)
        remaining = None if deadline is None else (deadline - now()).total_seconds()
        if message is not None or (remaining is not None and remaining <= 0):
            message_id, value = message if message is not None else (None, None)
            noted(saga, {"kind": "received", "position": position, "message_id": message_id, "value": value})
            # Written with the saga's next write, which comes before anything the code does next takes effect (a
            # call's intent, a wait, its end). Lost with a crash before it, the recv is run again and takes the same
            # message: the oldest on its topic not received, sent by its deadline, all of it stored already.
            engine.journal.touch_saga()
            if message_id is not None:
                engine.emit("message_received", topic=topic)
            return value
        if releasable and (remaining is None or remaining > engine.config.wait_threshold):
            await driver.release()  # WAITING until a message arrives or the timeout passes
        await driver.settle()  # a wait in this process: what the code has seen is written first (nothing if all is)
        await anyio.sleep(WAIT_POLL if remaining is None else min(WAIT_POLL, remaining))


async def _unreceived(
    store: Any, saga: SagaRow, topic: str, deadline: datetime | None = None
) -> tuple[str, Any] | None:
    """Return the oldest message on `topic` this saga has not received, as (id, value); one sent after the recv's
    `deadline` is for a later recv (the timed-out one returns None, whenever its worker looks)."""
    return _first_unreceived(saga, await messages_for(store, saga.saga_id), topic, deadline)


def _first_unreceived(
    saga: SagaRow, messages: Sequence[tuple[str, str, Any, datetime]], topic: str, deadline: datetime | None = None
) -> tuple[str, Any] | None:
    # Read after the messages were loaded: two recvs of one saga waiting at once never take the same message.
    taken = {entry.get("message_id") for entry in saga.history if entry.get("kind") == "received"}
    for message_id, on, value, sent_at in messages:
        if on == topic and message_id not in taken and (deadline is None or sent_at <= deadline):
            return message_id, value
    return None


async def due(store: Any, saga: SagaRow) -> bool:
    """Tell whether a WAITING saga function may go on: not asleep, nor waiting for a message that has not come
    before its recv's deadline."""
    if await cancel_requested(store, saga.saga_id) is not None:
        return True  # cancelled: it goes on to compensate, whatever it waits for
    return due_with(saga, await _awaited(store, saga))


def awaited_topic(saga: SagaRow) -> str | None:
    """Return the topic a saga function's pending recv waits on (None: no recv pending, or its deadline passed)."""
    received = {entry.get("position") for entry in saga.history if entry.get("kind") == "received"}
    waiting = [e for e in saga.history if e.get("kind") == "recv" and e.get("position") not in received]
    if not waiting:
        return None
    begun = waiting[-1]
    if begun.get("deadline") is not None and datetime.fromisoformat(begun["deadline"]) <= now():
        return None
    return str(begun.get("topic"))


async def _awaited(store: Any, saga: SagaRow) -> Sequence[tuple[str, str, Any, datetime]]:
    """Return the saga's messages if it waits in a recv (else nothing is read)."""
    return [] if awaited_topic(saga) is None else await messages_for(store, saga.saga_id)


def due_with(saga: SagaRow, messages: Sequence[tuple[str, str, Any, datetime]]) -> bool:
    """Tell whether a WAITING saga function (not cancelled) may go on, given its stored `messages`: not asleep,
    nor in a recv whose message has not come before its deadline."""
    if asleep(saga, now()):
        return False
    topic = awaited_topic(saga)
    return topic is None or _first_unreceived(saga, messages, topic) is not None


async def send(config: EngineConfig, saga_id: str, topic: str, message: Any, key: str | None) -> bool:
    """Store a message for a live saga (QUEUED, RUNNING or WAITING); return whether it was stored (a key used
    before stores nothing). An unknown or finished saga raises `SagaError`, nothing stored."""
    store = config.store
    stored = await store.load_saga(saga_id)
    if stored is None:
        raise SagaError(f"no saga {saga_id!r} in {store.url}: a message needs a saga to receive it")
    status = stored[0].status
    if status not in (SagaStatus.QUEUED, SagaStatus.RUNNING, SagaStatus.WAITING):
        raise SagaError(f"saga {saga_id!r} is {status.value}: it receives no more messages")
    posted = await _journal.post(store, saga_id, key or uuid.uuid4().hex, topic, message, now())
    if posted:
        changed(store, saga_id)  # a waiting child's parent in this process looks at once
    return posted
