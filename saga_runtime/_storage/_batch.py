"""Group commit: concurrent writes of many sagas share one transaction; every caller waits for its own commit.

A write arriving at an idle store is written at once, in its caller's task: nothing waits for company. Writes
arriving while others are being written enter a queue, their callers waiting on futures. Flushers, tasks the store
owns, take every ready write (up to a limit) as one batch, hand it to the store's flush coroutine (one transaction,
or one statement), and resolve each caller's future with that write's own outcome once the batch committed. The
busier the store, the larger the batches and the fewer the commits per write. The flush is the batcher's one way
into the store: it returns each write's outcome (or its own error), and an error it raises goes to every caller.

Rules the batcher keeps:

- At most `slots` batches at once (1 for SQLite's single writer, more for a server's connection pool). With more
  than one slot, a queue of many writes found by the only flusher goes as two batches at once (`SPLIT_AT`).
- With more than one slot, a flusher whose batch committed lets its callers run before it takes the next batch
  (their next writes join it), and a few writes queued while many are being written wait for the next batch of a
  flusher whose batch ends instead of taking a slot of their own (`SPLIT_AT`): under load, every batch costs the
  client and the database alike, and the writes of a saga out of step with the others would otherwise go as batches
  of one, write after write.
- No two writes of the same saga in one batch or in two batches at once, and the writes of a saga keep their order:
  a statement may touch a row once, and a later write of a saga must land after an earlier one.
- A caller cancelled while waiting leaves alone: a write not yet taken is dropped, one being written goes on for the
  others of its batch (its outcome is then unknown to the caller, as for any interrupted write).
- A batch that fails as a whole for one write's sake is the flush's to write again write by write (each caller
  then gets its own outcome); what the flush raises goes to every caller of the batch.
- `close(error)` refuses new writes and fails those still queued with `error`, and waits (bounded) for the batches
  being written.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from saga_runtime._exceptions import LeaseLostError

__all__ = ["Batcher", "Outcome", "Write", "lease_lost"]

# Writes and bytes (of JSON, in UTF-8) per batch: the statement of a batch stays well under every driver's limits
# (parameters, packet size: MariaDB's max_allowed_packet is 16 MiB by default, and MySQL may escape each byte into
# two). A larger write still goes, alone (the MySQL store splits it into statements of one row).
MAX_BATCH = 100
# Writes queued from which a lone batch is split in two (see `Batcher._take`); with at least as many as twice this
# being written, fewer queued than this wait for a batch to end (see `Batcher._wake`).
SPLIT_AT = 8
# How long, at most, a few writes wait for a batch to end while many are being written (see `Batcher._gathering`):
# a few commits' time on a server.
GATHER_SECONDS = 0.025
MAX_BATCH_BYTES = 4 << 20
_CLOSE_SECONDS = 5.0


class Outcome(enum.Enum):
    """What became of one write of a batch that committed."""

    WRITTEN = "written"
    LOST = "lost"  # an owner-conditional write found another owner (or no saga): nothing of it was written
    TAKEN = "taken"  # a create found its saga id taken: nothing of it was written


@dataclass(slots=True, eq=False)
class Write:
    """One caller's write, its values already converted to the driver's parameters."""

    what: str  # the operation, for logs: "save", "create_saga", "import_saga"
    saga_id: str
    saga: tuple[Any, ...] | None  # the saga row's parameters (SAGA_COLUMNS order), or None
    steps: list[tuple[Any, ...]]  # step rows' parameters (STEP_COLUMNS order)
    owner: str | None = None  # write only if the stored saga's owner is this
    create: bool = False  # insert the saga (and its steps) only if its id is free
    keep_lease: bool = False  # an owner-conditional update of the saga row leaving its stored lease as it is
    keys: frozenset[str] = frozenset()  # the saga ids the write touches
    size: int = 0  # about how many bytes its values take (a batch is kept under MAX_BATCH_BYTES)
    tries: int = 0  # attempts that included this write (a retry may find its own lost commit)
    future: asyncio.Future[Outcome] | None = field(default=None, repr=False)


Flush = Callable[[Sequence[Write]], Awaitable[Sequence[Outcome | Exception]]]


class Batcher:
    """Queue writes and commit them in shared batches through `flush`, at most `slots` batches at a time."""

    def __init__(self, flush: Flush, *, slots: int, alone: Flush | None = None) -> None:
        self._flush = flush
        # What writes a batch of one write in its caller's task (`flush` unless told): a flush's retry of each
        # write alone is nothing to a batch of one, which may then skip it.
        self._flush_alone = flush if alone is None else alone
        self._slots = max(1, slots)
        self._closed_error: Exception | None = None  # what refuses writes once closed
        self._queue: deque[Write] = deque()
        self._busy: set[str] = set()  # saga ids of the writes being written
        self._writing = 0  # writes in the batches the flushers are writing
        self._gather_timer: asyncio.TimerHandle | None = None  # set while queued writes wait for a batch to end
        self._gather_until = 0.0  # (loop time) when they stop waiting
        self._flushers: set[asyncio.Task[None]] = set()
        self._idle = 0  # flushers about to take a batch (started, or letting their last batch's callers run first)
        self._direct = 0  # writes written alone in their callers' tasks (a slot each)
        self._direct_done: asyncio.Future[None] | None = None  # made by close(): set when the last of them ends

    async def submit(self, write: Write) -> Outcome:
        """Queue `write` and return its outcome once its batch committed; raise what failed it."""
        if self.alone(write):
            # Written alone in the caller's own task (see `alone`). Cancelled, the caller only interrupts its own
            # write.
            try:
                try:
                    outcome: Outcome | Exception = (await self._flush_alone([write]))[0]
                except Exception as exc:
                    outcome = exc
            finally:
                self.alone_done(write)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        write.future = future
        self._queue.append(write)
        self._wake()
        # Cancelled here, the future is cancelled: a flusher drops the write, or ignores its outcome.
        return await future

    def alone(self, write: Write) -> bool:
        """Take a slot for `write` to be written alone in its caller's task, if nothing else is being written; tell
        whether it was taken (False: `submit` it). Raise the close's error once closed.

        Nothing else being written, no flusher is needed: the write takes a slot like a batch, so writes arriving
        meanwhile queue up (and gather) behind it. Whoever took the slot writes `write` as one batch of its own,
        then calls `alone_done` whatever came of it. (The store's hot path takes it without a coroutine of ours.)
        """
        if self._closed_error is not None:
            raise self._closed_error
        if self._queue or self._flushers or self._direct:
            return False
        self._direct += 1
        self._busy |= write.keys
        return True

    def alone_done(self, write: Write) -> None:
        """Give back the slot `alone` took for `write` (written, failed or interrupted)."""
        self._busy -= write.keys
        self._direct -= 1
        if self._queue or self._closed_error is not None:  # (else `_direct_ended` has nothing to do)
            self._direct_ended()

    def _direct_ended(self) -> None:
        """After a write in its caller's task: wake a flusher for the writes queued meanwhile, or tell `close`."""
        if self._closed_error is None:
            if self._queue:
                self._wake()
        elif not self._direct and self._direct_done is not None and not self._direct_done.done():
            self._direct_done.set_result(None)

    def _wake(self) -> None:
        """Start a flusher if a write is ready, no flusher is about to take it, and a slot is free.

        Not for a few writes while many are being written: the flusher of one of those batches takes them with the
        writes its callers make next (see `_flusher`), in one batch rather than a batch of their own each. (50 sagas
        at a time on PostgreSQL: a saga out of step with the others no longer goes as batches of one; a third fewer
        batches.)
        """
        if self._gathering():
            return
        if not self._idle and len(self._flushers) + self._direct < self._slots and self._ready():
            self._idle += 1
            # A context of its own: a flusher writes for every caller, so it carries none's context variables.
            flusher = asyncio.get_running_loop().create_task(self._flusher(), context=contextvars.Context())
            self._flushers.add(flusher)

    def _gathering(self) -> bool:
        """Tell whether the queued writes are few while many are being written: they wait for a batch to end.

        Never longer than `GATHER_SECONDS` from the first of them: a batch that does not end (a row lock held
        elsewhere, a slow statement, a connection gone quiet) must not hold up other sagas' writes while a slot is
        free. A timer wakes the batcher then; the wait is over once a flusher took the queue.
        """
        if not (self._queue and self._slots > 1 and self._writing >= 2 * SPLIT_AT and len(self._queue) < SPLIT_AT):
            return False
        loop = asyncio.get_running_loop()
        if self._gather_timer is None:
            self._gather_until = loop.time() + GATHER_SECONDS
            self._gather_timer = loop.call_later(GATHER_SECONDS, self._wake)
            return True
        return loop.time() < self._gather_until

    def _gathered(self) -> None:
        """End the writes' wait for a batch to end (a flusher took the queue, or the batcher closes)."""
        if self._gather_timer is not None:
            self._gather_timer.cancel()
            self._gather_timer = None

    def _ready(self) -> bool:
        """Tell whether a queued write could go into a batch now (its sagas are not being written)."""
        blocked: set[str] = set()
        for write in self._queue:
            assert write.future is not None
            if write.future.done():
                continue
            if write.keys.isdisjoint(blocked) and write.keys.isdisjoint(self._busy):
                return True
            blocked |= write.keys
        return False

    def _take(self) -> list[Write]:
        """Remove and return the next batch: ready writes in order, one per saga, none of a saga being written."""
        batch: list[Write] = []
        size = 0
        limit = MAX_BATCH
        if self._slots > 1 and len(self._flushers) == 1 and len(self._queue) >= 2 * SPLIT_AT:
            # The only flusher (this one) takes half the queue and leaves the rest to a second slot: while one batch
            # is on the database, the callers of the other go on (their next writes queue up), instead of every caller
            # waiting for one large batch, then the database for all of them. (50 sagas at a time on PostgreSQL: 10%
            # less time a saga; more batches at once cost the client more than they save.)
            limit = min(MAX_BATCH, (len(self._queue) + 1) // 2)
        blocked: set[str] = set()  # a write left behind holds back the later writes of its sagas
        kept: deque[Write] = deque()
        while self._queue:
            write = self._queue.popleft()
            assert write.future is not None
            if write.future.done():  # its caller left before it was taken
                continue
            full = batch and (len(batch) >= limit or size + write.size > MAX_BATCH_BYTES)
            if full or not write.keys.isdisjoint(blocked) or not write.keys.isdisjoint(self._busy):
                blocked |= write.keys
                kept.append(write)
                continue
            batch.append(write)
            size += write.size
            blocked |= write.keys
            self._busy |= write.keys
        self._queue = kept
        return batch

    async def _flusher(self) -> None:
        idle = True
        try:
            while self._closed_error is None:
                # A few writes while many are being written: left to the flusher of a batch that ends (a flusher
                # always takes the queue after its batch unless others are still writing many).
                batch = [] if self._gathering() else self._take()
                if batch:
                    self._gathered()
                if idle:
                    self._idle -= 1
                    idle = False
                if not batch:
                    return
                # Writes left in the queue (a full batch, a saga being written) may go to another slot now.
                self._wake()
                self._writing += len(batch)
                try:
                    await self._commit(batch)
                finally:
                    self._writing -= len(batch)
                    for write in batch:
                        self._busy -= write.keys
                if self._slots > 1 and (len(batch) >= 2 * SPLIT_AT or self._writing >= 2 * SPLIT_AT):
                    # Under load (a batch of many, or many being written), the batch's callers run first (their
                    # futures' callbacks are ahead of this one in the loop's queue): the writes they make next go in
                    # this flusher's next batch, with those waiting for it (see `_wake`), not in one of a flusher
                    # started for the first of them. Meanwhile this flusher counts as about to take a batch. (A few
                    # callers, and few writes elsewhere: the first of their next writes may go alone at once.)
                    idle = True
                    self._idle += 1
                    await asyncio.sleep(0)
        finally:
            if idle:
                self._idle -= 1
            # Out of the set now, not in a done callback: a write queued before that callback ran would find
            # every slot taken by flushers that are over.
            task = asyncio.current_task()
            assert task is not None
            self._flushers.discard(task)
            if self._closed_error is None:
                self._wake()

    async def _commit(self, batch: list[Write]) -> None:
        """Write one batch and resolve its callers' futures."""
        try:
            outcomes = await self._outcomes(batch)
        except BaseException as exc:
            # Cancelled (the store closed and stopped waiting): the writes' fate is unknown to their callers.
            error = self._closed_error or exc
            for write in batch:
                _resolve(write, error)
            raise
        for write, outcome in zip(batch, outcomes, strict=True):
            _resolve(write, outcome)

    async def _outcomes(self, batch: list[Write]) -> Sequence[Outcome | Exception]:
        try:
            return await self._flush(batch)
        except Exception as exc:
            return [exc] * len(batch)

    async def close(self, error: Exception) -> None:
        """Refuse new writes, fail the queued ones with `error`, and wait (bounded) for the batches being written."""
        self._closed_error = error
        self._gathered()
        while self._queue:
            _resolve(self._queue.popleft(), error)
        writing: list[asyncio.Future[Any]] = [*self._flushers]
        if self._direct:
            if self._direct_done is None:
                self._direct_done = asyncio.get_running_loop().create_future()
            writing.append(self._direct_done)
        if not writing:
            return
        _, pending = await asyncio.wait(writing, timeout=_CLOSE_SECONDS)
        # Flushers still writing are stopped (their callers get an error); a write in a caller's task is the
        # caller's to stop.
        stuck = [task for task in self._flushers if task in pending]
        for task in stuck:
            task.cancel()
        if stuck:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait(stuck, timeout=_CLOSE_SECONDS)


def _resolve(write: Write, outcome: Outcome | BaseException) -> None:
    future = write.future
    if future is None or future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def lease_lost(saga_id: str, owner: str | None, where: str) -> LeaseLostError:
    """Return the error of an owner-conditional write that found another owner: nothing of it was written."""
    return LeaseLostError(
        f"saga {saga_id!r} is owned by another executor now (or is not stored), not by {owner!r}: this executor's "
        f"lease on it was lost, and nothing of this write was stored in {where}; the new owner drives the saga on",
        saga_id=saga_id,
    )
