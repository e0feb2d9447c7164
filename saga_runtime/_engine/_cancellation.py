"""Cancellation, in one place: shields, sibling cancellation, the fence, and the caller leaving versus a lost lease.

The engine is asyncio-native and uses anyio's cancel scopes for structure; the two meet only here. A caller leaving
is `asyncio.CancelledError` (anyio raises the same on this backend). Compensation and a saga's end run shielded
(`shielded`) and bounded by their caller. A group's steps are `Siblings`, cancelled together; a saga's
`Cancellation` holds what runs now (forward or undo) and the operator's halt that cancels it. A `Fence` stops a
saga's work for good when its lease is lost; `cancel_requests` tells that apart from the caller's own cancel.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import sys
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import anyio

from saga_runtime._exceptions import LeaseLostError

__all__ = [
    "CANCELLED",
    "CancelTaken",
    "Cancellation",
    "Fence",
    "Shelters",
    "Siblings",
    "WorkerStopped",
    "cancel_requests",
    "current_task",
    "deadline",
    "fence_scope",
    "shielded",
    "shielded_inline",
]

T = TypeVar("T")

_NOTHING: Any = object()

if sys.version_info < (3, 12):
    # `asyncio.current_task()` is Python code on 3.11 (a frame a step's end): what it reads, the running loop's
    # entry in asyncio's table of current tasks, read here. (C code from 3.12.)
    _running_loop = asyncio.get_running_loop
    _current_tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[Any]] = asyncio.tasks._current_tasks  # type: ignore[attr-defined]

    def _current_task() -> asyncio.Task[Any] | None:
        return _current_tasks.get(_running_loop())

    _task_in = _current_tasks.get  # the task running now in a loop known to run (no call to find it)
else:
    _current_task = asyncio.current_task
    _task_in = asyncio.current_task
_Task = asyncio.Task
_create_task = asyncio.BaseEventLoop.create_task
# Seconds between two looks at a step in an anyio-shielded section that is to be cancelled: the first soon, then
# twice as long each time up to the longest (a long shielded undo costs a few wake-ups a second, not a busy loop).
_SHIELD_POLL = 0.002
_SHIELD_POLL_LONGEST = 0.05


logger = logging.getLogger("saga_runtime")

try:  # anyio's scope on asyncio itself: `anyio.CancelScope()` asks sniffio which loop runs, at every call
    from anyio._backends._asyncio import CancelScope as _AsyncioScope
except ImportError:  # pragma: no cover - an anyio laid out otherwise: its public scope, the same behaviour
    _AsyncioScope = anyio.CancelScope  # type: ignore[assignment, misc]

#: The caller leaving (asyncio-native; anyio raises the same on this backend).
CANCELLED = asyncio.CancelledError


class CancelTaken(Exception):
    """An operator's cancel, taken in by a write-ahead the store refused for it: nothing of it was written, and
    no step of it may start; the saga compensates."""


class WorkerStopped(asyncio.CancelledError):
    """A stopped worker's saga stops here, between groups, once the calls it ran have returned and been recorded."""


class Shelters:
    """One serving worker's drives (one per `serve()`): shielded from its cancellation, so running calls return
    and are recorded.

    `stop()` asks them to stop at their next group (`WorkerStopped`) and bounds them: each scope is cancelled
    `bound` seconds later (what is still running then is cut short, as any cancellation would).
    """

    __slots__ = ("_names", "_scopes", "stopping")

    def __init__(self) -> None:
        self._scopes: dict[anyio.CancelScope, asyncio.TimerHandle | None] = {}
        self._names: dict[anyio.CancelScope, str] = {}  # the saga each drives
        self.stopping = False

    @contextmanager
    def shelter(self, bound: float, saga_id: str = "") -> Iterator[None]:
        """Drive the block shielded from the worker's cancellation; end it quietly if the worker's stop ended it."""
        scope = anyio.CancelScope(shield=True)
        self._scopes[scope] = None
        self._names[scope] = saga_id
        if self.stopping:
            self._bound(scope, bound)
        try:
            with scope:
                yield
        except WorkerStopped:
            pass
        finally:
            timer = self._scopes.pop(scope, None)
            self._names.pop(scope, None)
            if timer is not None:
                timer.cancel()

    def _bound(self, scope: anyio.CancelScope, bound: float) -> None:
        if self._scopes.get(scope) is None:
            self._scopes[scope] = asyncio.get_running_loop().call_later(bound, self._give_up, scope, bound)

    def _give_up(self, scope: anyio.CancelScope, bound: float) -> None:
        """Cut what still runs of a drive `bound` seconds into the stop, saying so: its outcome is unknown."""
        logger.warning(
            "saga %s: the worker stops, and its running tool code did not return within compensation_timeout=%gs: "
            "cut short (its outcome unknown); the saga is released for the next worker, which settles it",
            self._names.get(scope) or "?",
            bound,
        )
        scope.cancel()

    def stop(self, bound: float) -> None:
        """Ask every sheltered drive to stop at its next group; cancel what still runs `bound` seconds later."""
        self.stopping = True
        for scope in list(self._scopes):
            self._bound(scope, bound)


def cancel_requests() -> int:
    """Return how many cancellations of the current task are pending (`Task.cancelling()`; 0 outside one).

    A fence's scope swallows the cancellation it caused; a caller's cancel landing in the same turn stays counted
    here, so comparing with the count taken before tells a lost lease from the caller leaving.
    """
    task = _current_task()  # (asyncio.current_task's lookup, without its frame on 3.11)
    return 0 if task is None else task.cancelling()


def current_task() -> asyncio.Task[object]:
    """Return the task running now (the engine always runs in one)."""
    task = asyncio.current_task()
    assert task is not None
    return task


async def shielded(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end even if the calling task is cancelled meanwhile; then re-raise that cancellation.

    An anyio shielded scope alone holds off anyio's scopes but not a native `task.cancel()` (a caller's
    `asyncio.timeout`, `wait_for`): so the work runs in its own task, always awaited here. Bound the work itself.
    (The shield is anyio's asyncio scope made directly: the engine always runs on asyncio.)
    """
    loop = asyncio.get_running_loop()
    task = loop.create_task(coro)  # (what `ensure_future` does with a coroutine)
    caught: BaseException | None = None
    with _AsyncioScope(shield=True):
        # What `await asyncio.shield(task)` does, again after each cancel of this task, without its layer of
        # callbacks (two closures, two callbacks): a future of this task's own, woken by the task's end (a cancel
        # of this task cancels that future, never the task).
        while not task.done():
            waiter = loop.create_future()
            task.add_done_callback(partial(_wake, waiter))
            try:
                await waiter
            except asyncio.CancelledError as exc:
                caught = exc
    result = task.result()  # (its error; cancelled: the work itself was, the loop closing)
    if caught is not None:
        raise caught
    return result


def _wake(waiter: asyncio.Future[None], _: object) -> None:
    """Wake the task awaiting `waiter` (the task it waits for ended), unless it was cancelled meanwhile."""
    if not waiter.done():
        waiter.set_result(None)


async def shielded_inline(
    coro: Coroutine[Any, Any, T], rest: Callable[[Coroutine[Any, Any, T]], Coroutine[Any, Any, T]] = shielded
) -> T:
    """Run `coro` as `shielded` does, in the calling task until it first pauses: nothing can cancel it before then.

    Most of the time it ends without pausing (a memory store's write): no task, no shield. If it pauses, what
    is left of it runs as `rest(...)` does (default `shielded`). Only for work that enters no cancel scope before
    it first pauses: that scope would be left in another task.
    """
    try:
        yielded = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    return await rest(_Resumed(coro, yielded).go())


class _Resumed:
    """A coroutine that paused once outside any task, awaited on from where it paused."""

    __slots__ = ("_coro", "_yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self._coro = coro
        self._yielded = yielded

    async def go(self) -> Any:
        return await self

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self._coro, self._yielded
        while True:
            try:
                sent = yield yielded
            except BaseException as exc:  # the task's cancellation (or close) goes to the coroutine
                try:
                    yielded = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as done:
                    return done.value


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark how `task` ended as seen (its error is raised elsewhere: asyncio would log it as never retrieved)."""
    if not task.cancelled():
        task.exception()


def _in_shield(task: asyncio.Task[Any]) -> bool:
    """Tell whether `task` runs inside an anyio-shielded cancel scope now (one a scope's cancel would wait for)."""
    try:  # anyio's record of each task's innermost cancel scope, read (never written) to honour its shields
        from anyio._backends._asyncio import _task_states
    except ImportError:  # pragma: no cover - an anyio without it: no shield is seen (the shield tests fail loudly)
        return False
    state = _task_states.get(task)
    scope = None if state is None else state.cancel_scope
    while scope is not None:
        if scope.shield:
            return True
        scope = scope._parent_scope
    return False


def _not_started(task: asyncio.Task[Any]) -> bool:
    """Tell whether `task`'s coroutine has not run yet (a cancel now would end it before its first line)."""
    coro = task.get_coro()
    return inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED


def deadline(seconds: float) -> anyio.CancelScope:
    """Return a cancel scope that cancels its block `seconds` after it is entered, as `anyio.move_on_after` does
    (shields honoured, a swallowed cancel delivered again, only its own cancel ends at the block; an infinite bound
    sets no timer): anyio's asyncio scope made directly, without asking which event loop runs."""
    if math.isinf(seconds):
        return _AsyncioScope()
    return _AsyncioScope(deadline=asyncio.get_running_loop().time() + seconds)


def fence_scope() -> anyio.CancelScope:
    """Return a new cancel scope for a saga's session (its fence): anyio's, made without asking which event loop
    runs (the engine always runs on asyncio's)."""
    return _AsyncioScope()


class Fence:
    """The end of one saga's work here: once fenced, nothing more is started or written."""

    __slots__ = ("fenced", "lease_lost", "on_lost", "saga_id")

    def __init__(self, saga_id: str) -> None:
        self.saga_id = saga_id
        self.fenced = False
        self.lease_lost = False
        # Called once the lease is known lost (set by the lease keeper): stops the saga's work.
        self.on_lost: Callable[[], None] | None = None

    def close(self, *, lost: bool = False) -> None:
        """Fence for good; `lost`: another executor may own the saga now, so its work stops too."""
        self.fenced = True
        if lost and not self.lease_lost:
            self.lease_lost = True
            if self.on_lost is not None:
                self.on_lost()

    def error(self) -> LeaseLostError:
        """Return the error a fenced saga raises instead of writing."""
        return LeaseLostError(
            f"saga {self.saga_id!r} was taken over by another executor (this one lost its lease); it goes on there",
            saga_id=self.saga_id,
        )

    def check(self) -> None:
        """Raise `LeaseLostError` if fenced."""
        if self.fenced:
            raise self.error()


class Cancellation:
    """What runs one saga's group now, and the operator's halt that cancels it: one per saga, used alike by forward
    groups (`inline`, `together`), a resumed step's reconcile (`inline`) and undo groups (`together`, not halted).

    `halted` says why an operator cancelled the saga (None while not); `running` is what runs now (the task
    running one call inline, or a group's `Siblings`), which `halt` cancels: the calls' outcomes are unknown.
    """

    __slots__ = ("_cut", "halted", "running")

    def __init__(self) -> None:
        self.halted: str | None = None
        self.running: asyncio.Task[Any] | Siblings | None = None
        self._cut = False  # the task running a call inline was cancelled by a halt (not yet taken back)

    def halt(self, reason: str) -> None:
        """Take in an operator's cancel (the first reason stands) and cancel what runs now."""
        self.halted = self.halted or reason
        running = self.running
        if isinstance(running, Siblings):
            running.cancel()
        elif running is not None and not self._cut and running is not _current_task():
            # (Not the task asking: its own refused write told it, and it starts nothing more.)
            self._cut = True
            running.cancel()

    async def inline(self, call: Coroutine[Any, Any, T]) -> T | None:
        """Await `call` in this task as what runs now, and return what it returns: a halt cancels it, and that
        cancel ends here (only it; then None).

        (The sequential case, one step a group, writes this out in its own coroutine: a coroutine layer more costs
        some 8,000 instructions a step.)
        """
        try:
            self.running = _current_task()  # (asyncio's own: the engine always runs in a task)
            if self.halted:
                self.cut_self()
            return await call
        except CANCELLED:
            if not self.taken():
                raise
            return None
        finally:
            self.running = None

    def cut_self(self) -> None:
        """Cancel the current task, what runs now, for a halt taken in before it started (while its intent was
        written): the call is cut at its first wait, as a running one is."""
        if not self._cut:
            self._cut = True
            current_task().cancel()

    def taken(self) -> bool:
        """Take back a halt's cancel of the current task; tell whether it was the only one (else it goes on)."""
        if not self._cut:
            return False
        self._cut = False
        task = _current_task()
        return task is not None and task.uncancel() == 0

    async def together(self, siblings: Siblings, *, halts: bool = True) -> None:
        """Wait for a group's `siblings`, started already; with `halts`, as what runs now (a halt cancels them)."""
        if not halts:
            await siblings.wait()
            return
        self.running = siblings
        try:
            if self.halted:
                siblings.cancel()  # halted while the intents were written
            await siblings.wait()
        finally:
            self.running = None


class Siblings:
    """Run a group's steps as tasks, wait for all, and cancel them all when one asks (or the caller leaves).

    Plain asyncio tasks, cancelled natively (`Task.cancel`), with no cancel scope per step: an anyio scope costs
    more than the rest of a task's start, an anyio task group three times as much again, and `asyncio.TaskGroup`
    would cut short what anyio shields. A step inside an anyio-shielded section (the tool's own, or a shielded
    undo) is cancelled soon after it leaves it (within `_SHIELD_POLL_LONGEST` seconds); a step that swallows a
    cancel is cancelled again at its next wait, as anyio's scopes do; a step cancelled before it started starts all
    the same and is cancelled at its first wait, so it records how it ended. A step that raises (a bug: steps record
    their failures) cancels the others; `wait()` raises the group. Each step's end is noted (and folded) in its own
    task as it ends, and the last one wakes `wait()`: one wake-up for the group, no done callback a step.
    """

    __slots__ = (
        "_done",
        "_errors",
        "_fold",
        "_loop",
        "_next",
        "_pending",
        "_plain",
        "_poll",
        "_running",
        "_skip",
        "cancelled",
    )

    def __init__(self, fold: Callable[[Any, Siblings], None] | None = None, *, skip: object = _NOTHING) -> None:
        self._loop = loop = asyncio.get_running_loop()
        # asyncio's own loop without a task factory: its `create_task` is `Task(coro, loop=loop)`, built here directly.
        self._plain = type(loop).create_task is _create_task and loop.get_task_factory() is None
        self._fold = fold  # given what each step returned, and the group, as it ends (not cancelled, not raising)
        self._skip = skip  # what a step may return that `fold` is not given (it bears on nothing)
        self._running: set[asyncio.Task[Any]] = set()  # the steps' tasks not ended
        self._pending = 0
        self._done: asyncio.Future[None] | None = None
        self._errors: list[BaseException] = []
        self._next: asyncio.Handle | None = None  # the next look `_cut` takes at the steps not yet ended
        self._poll = _SHIELD_POLL  # how long until the next look while only shielded steps are left
        self.cancelled = False

    def start(self, step: Callable[..., Coroutine[Any, Any, object]], *args: Any) -> None:
        """Start `step(*args)` in a task of the group."""
        self._pending += 1
        coro = self._step(step(*args))
        if self._plain:
            self._running.add(_Task(coro, loop=self._loop))
        else:
            self._made(self._loop.create_task(coro))
        if self.cancelled and self._next is None:
            self._cut()  # (at its first wait: see `_cut`)

    def start_each(
        self, step: Callable[..., Coroutine[Any, Any, object]], calls: Iterable[Sequence[Any]], *more: Any
    ) -> None:
        """Start `step(*call, *more, self)` in a task of the group for each of `calls`: a step that tells the group
        how it ended itself, in its own coroutine, as `_step` does for one started by `start` (`ended` when it
        returns, `raised` when it raises): no coroutine around it."""
        loop, running, tail = self._loop, self._running, (*more, self)
        if self._plain and not self.cancelled:
            # The common case written out (asyncio's own tasks, none to cut: nothing in this loop runs a step), the
            # count kept in a local until the last task is made.
            pending, add = self._pending, running.add
            try:
                for call in calls:
                    pending += 1
                    add(_Task(step(*call, *tail), loop=loop))
            finally:
                self._pending = pending
            return
        for call in calls:
            self._pending += 1
            coro = step(*call, *tail)
            if self._plain:
                running.add(_Task(coro, loop=loop))
            else:
                self._made(loop.create_task(coro))
            if self.cancelled and self._next is None:
                self._cut()  # (at its first wait: see `_cut`)

    def _made(self, task: asyncio.Task[Any]) -> None:
        """Keep `task`, made by the loop's own `create_task` or task factory, as running, unless it ended already (an
        eager task factory runs a step that never waits to its end, noted, as it is made)."""
        if not task.done():
            self._running.add(task)

    async def _step(self, step: Coroutine[Any, Any, object]) -> None:
        """Run one step in its task, and note how it ended there, as it ends: what a done callback would do, without
        a callback handle and a loop turn more per step."""
        try:
            outcome = await step
        except BaseException as exc:
            if self.raised(exc.with_traceback(exc.__traceback__.tb_next if exc.__traceback__ else None)):
                raise  # (without this frame, which holds the group that holds the error: no cycle)
            return
        self.ended(outcome)

    def ended(self, outcome: object) -> None:
        """Note that the step of the current task returned `outcome` (fold it, unless it is the one to skip)."""
        self._pending -= 1  # (`_ended`, written out)
        self._running.discard(_task_in(self._loop))
        if outcome is self._skip:
            if not self._pending:
                self._settle()
            return
        try:
            if self._fold is not None:
                self._fold(outcome, self)
        except Exception as exc:  # a bug folding it: the group raises it, as a step's own
            self._errors.append(exc)
            self.cancel()
        finally:
            self._settle()

    def raised(self, exc: BaseException) -> bool:
        """Note that the step of the current task raised `exc`; tell whether it goes on out of the task.

        Cancelled, it goes on. Any other error (a bug: steps record their failures) is the group's, raised by `wait`,
        and cancels the other steps; a `KeyboardInterrupt` or `SystemExit` goes on too (the loop sees it, as from
        any task), any other stays with the group (none is left unretrieved on the task). A task destroyed
        unfinished (its loop closed, `GeneratorExit`) notes nothing.
        """
        if isinstance(exc, CANCELLED):
            self._ended()
            self._settle()
            return True
        if type(exc) is GeneratorExit:
            return True
        self._errors.append(exc)
        task = _task_in(self._loop)
        try:
            self._ended()
            self.cancel()
        finally:
            self._settle()
        if not isinstance(exc, KeyboardInterrupt | SystemExit):
            return False
        if task is not None:
            task.add_done_callback(_retrieved)  # (the group raises it: the task's copy is not left unretrieved)
        return True

    def _ended(self) -> None:
        """Note that the step of the current task ended (it no longer needs cancelling)."""
        self._pending -= 1
        self._running.discard(_task_in(self._loop))

    def _settle(self) -> None:
        """Wake the waiter once every step has ended."""
        if not self._pending and self._done is not None and not self._done.done():
            self._done.set_result(None)

    def cancel(self) -> None:
        """Cancel every step of the group (the one calling, if any, at its next wait)."""
        if not self.cancelled:
            self.cancelled = True
            self._cut()

    def _cut(self) -> None:
        """Cancel each running step, as anyio's scopes deliver it, again every turn until it ends (a step may swallow
        a cancel: Python 3.11's `wait_for` does when what it waits for completes in the same turn): not the step
        asking (at its next wait), nor one not started yet (so it starts, and records how it ended), nor one whose
        cancel is not delivered yet or that is about to resume from what it waited for (those next turn), nor one in
        an anyio-shielded section (looked at again after `_SHIELD_POLL` seconds, then twice as long each time up to
        `_SHIELD_POLL_LONGEST`: no busy loop while a shielded undo runs; it is cancelled within that time once it
        leaves the section)."""
        self._next = None
        self._reap()
        current = _current_task()
        soon = shielded = False
        for task in self._running:
            waiter = getattr(task, "_fut_waiter", None)  # (what anyio reads too)
            if (
                task is current
                or getattr(task, "_must_cancel", False)  # cancelled, not delivered yet
                or (waiter is not None and waiter.done())
                or _not_started(task)
            ):
                soon = True
            elif _in_shield(task):
                shielded = True
            else:
                task.cancel()
                soon = True  # (looked at again next turn: it may swallow the cancel and go on)
        if soon:
            self._next = self._loop.call_soon(self._cut)
        elif shielded:
            self._next = self._loop.call_later(self._poll, self._cut)
            self._poll = min(self._poll * 2, _SHIELD_POLL_LONGEST)

    def _reap(self) -> None:
        """Note the steps whose tasks ended without noting it: cancelled before their first line ran (nothing of them
        ran; a task is cancelled so only in the turn it was made, before its first step: see `wait`)."""
        unnoted = [task for task in self._running if task.done()]
        if unnoted:
            for task in unnoted:
                self._running.discard(task)
                self._pending -= 1
            self._settle()

    async def wait(self) -> None:
        """Return once every step has ended; if the caller is cancelled meanwhile, cancel them, wait, re-raise."""
        caught: BaseException | None = None
        if self._pending:
            self._loop.call_soon(self._reap)  # (after the steps' first turn: any cancelled before it has ended)
        while self._pending:
            self._done = self._loop.create_future()
            try:
                if caught is None:
                    await self._done
                else:
                    # anyio re-delivers a scope's cancellation every turn: wait shielded while the steps finish.
                    with anyio.CancelScope(shield=True):
                        await self._done
            except asyncio.CancelledError as exc:
                caught = caught or exc
                self.cancel()
        if self._errors:
            raise BaseExceptionGroup("unhandled errors in a group of steps", self._errors)
        if caught is not None:
            raise caught
