"""The Journal: the one owner of a saga's record (saga row, step rows, approval decisions).

Nothing else assigns a record's field (tests/engine/test_journal.py holds that). Its methods are intents, each
checked against the transition table, changing the fields and marking what must be written. It writes the rows
ahead through the store, which seals them (each step row carries its link, `prev_hash`, fixed at its creation):
owner-conditionally under the lease, never again once fenced.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from time import monotonic
from typing import Any, Literal

from saga_runtime._engine._cancellation import CancelTaken, Fence
from saga_runtime._engine._clock import LeaseClock
from saga_runtime._engine._config import EngineConfig
from saga_runtime._engine._events import EventKind, emit, event_of
from saga_runtime._engine._transitions import STEP_MOVES, saga_to, step_to
from saga_runtime._exceptions import LeaseLostError, StoreError
from saga_runtime._records import (
    REJECTED,
    ApprovalRow,
    CancelOutcome,
    Queue,
    QueueEntry,
    QueueState,
    SagaRow,
    SagaStatus,
    Schedule,
    StepRow,
    StepStatus,
    TakeoverReason,
    cancel_entry,
    end_entry,
    end_reason_of,
    extend_head,
    gated_steps,
    identity_hash,
    note_reason,
    now,
    output_entry,
    read_note,
    release_entry,
    released_by,
    standing_of,
    takeover_entry,
)
from saga_runtime._storage import (
    InlineWrite,
    SagaStore,
    cancels_of,
    has,
    messages_of,
    queues_of,
    schedules_of,
    waits_of,
)

__all__ = [
    "WAITS_FOR_TOOLS",
    "EngineConfig",
    "Journal",
    "adopted",
    "asleep",
    "cancel_noted",
    "decided",
    "ended",
    "inline_writer",
    "let_go",
    "note_cancel",
    "noted",
    "park",
    "rejection_of",
    "reopened_by_parent",
    "returned",
    "seq_of",
    "sleeps_of",
    "slept",
    "take_over",
    "took_over",
    "waits_for_tools",
]

logger = logging.getLogger("saga_runtime")

# A step's intent write extends the lease when less than this share of `lease_timeout` is left.
_LEASE_MARGIN = 0.25
# No tool starts on less than this share left by this process's clock: the lease is confirmed first.
_INVOKE_MARGIN = 0.1
# A step's outcome that counts as progress (CANCELLED: its outcome is unknown).
_KNOWN = frozenset({StepStatus.SUCCESS, StepStatus.FAILED})
# Statuses read on every step, as module constants: Python 3.11 reads an enum class's attribute through
# EnumType.__getattr__'s slow hook, a module global at a fraction of its cost.
_RUNNING, _SUCCESS, _COMPENSATED = StepStatus.RUNNING, StepStatus.SUCCESS, StepStatus.COMPENSATED
_WAITING, _SAGA_SUCCESS = StepStatus.WAITING, SagaStatus.SUCCESS
_COMPENSATING = SagaStatus.COMPENSATING
# The statuses a saga holds its lease in.
_LIVE = frozenset({SagaStatus.RUNNING, SagaStatus.COMPENSATING})
_clock = datetime.now  # (read as `now()` reads it: in UTC)
_hash_of = attrgetter("hash")


class Journal:
    """One saga's rows and how they are written (see the module docstring)."""

    def __init__(
        self,
        config: EngineConfig,
        saga: SagaRow,
        steps: Sequence[StepRow],
        *,
        announced: Sequence[StepRow] = (),
        owner: str | None = None,
    ) -> None:
        self.config = config
        self.store = config.store
        self.saga = saga
        # The lease holder, when the engine holds one: every write is then owner-conditional.
        self.owner = owner
        self.rows: dict[str, StepRow] = {row.step_id: row for row in steps}
        # A store that writes inline (the memory store) links the rows it seals (when a saga is read): it gets them
        # unlinked.
        inline = inline_writer(self.store)
        self._links: dict[int, str] | None = None if inline is not None else {}
        self._by_seq: dict[int, StepRow] = {} if self._links is None else {row.seq: row for row in steps}
        # Steps whose first attempt was committed RUNNING with the saga itself (write-ahead done).
        self.announced = {row.step_id for row in announced}
        for row in announced:  # new rows, written RUNNING with the saga itself: no move
            row.status, row.attempts, row.started_at = _RUNNING, 1, saga.created_at
        self._dirty: dict[str, StepRow] = {}
        # The saga row to write: a sealed field changed (dirty), or only its lease or recovery count (touched).
        self._saga_dirty = False
        self._saga_touched = False
        self._seal_known = False  # the saga row's seal is the one this journal's last write stored
        # The saga's end is recorded (`end`): its rows change no more, so an inline store may keep them as they are.
        self._ended = False
        # Every step's arguments are shown as they are in the saga's result (no secret to mask: see
        # Plan.args_shown_as_is); set by whoever starts the saga from such a plan.
        self.args_shown_as_is = False
        # The clock's reading of the end (the saga's finished_at), until the write that records it: that write's
        # updated_at (one instant: the end is written at once, nothing happens to the saga in between).
        self._end_at: datetime | None = None
        # One write at a time to a store whose write pauses (a group's steps flush at once): `_writing` while one is
        # under way, the flushes waiting their turn in order (`_wait_turn`). A store whose write never pauses
        # (`writes_inline`: the memory store) is written in the calling code, without turns.
        self._writing = False
        self._turns: deque[asyncio.Future[None]] = deque()
        self._write_now = inline
        self.guard = Fence(saga.saga_id)
        self.lease = LeaseClock(config.lease_timeout, saga.lease_expires_at if owner is not None else None)
        self._keep_margin = config.lease_timeout * _LEASE_MARGIN
        # No tool starts on less lease than this left (seconds; see `lease_short`, which a step's start writes out).
        self.invoke_margin = config.lease_timeout * _INVOKE_MARGIN
        self._lease_span = timedelta(seconds=config.lease_timeout)  # what a write extends the lease by
        # The saga's approval requests as last known (kept by the Gate; part of its result).
        self.approvals: list[ApprovalRow] = []
        # Told why the saga stops, when a write the store refused took in an operator's cancel (see `flush`).
        self.on_cancel: Callable[[str], None] | None = None

    # -- step intents ----------------------------------------------------------------------------------------------

    def hold(self, row: StepRow) -> None:
        """Make a step WAIT for a person's decision (it never ran)."""
        step_to(row, StepStatus.WAITING)
        self._dirty[row.step_id] = row

    def approved(self, row: StepRow) -> None:
        """Make an approved step PENDING again: it runs now, written ahead as any step."""
        step_to(row, StepStatus.PENDING)
        self._dirty[row.step_id] = row

    def start(self, row: StepRow, at: datetime, version: str | None = None) -> None:
        """Start a step's next attempt (a resumed one keeps counting), run by the tool of `version` (recorded)."""
        step_to(row, _RUNNING)
        if version is not None and row.tool_version != version:
            row.tool_version = version
        if row.reconciled:  # found not done, it runs again: this run tells its outcome
            row.reconciled = False
        row.attempts += 1
        row.started_at = row.started_at or at
        self._dirty[row.step_id] = row

    def retry(self, row: StepRow) -> None:
        """Start another attempt of a running step; the write extends a short lease."""
        row.attempts += 1
        self._dirty[row.step_id] = row
        self.keep_lease()

    def restore(self, row: StepRow, status: StepStatus, attempts: int, started_at: Any) -> None:
        """Put back a step's state from before an intent that was never written (its step never ran)."""
        row.status, row.attempts, row.started_at = status, attempts, started_at

    def succeed(self, row: StepRow, result: Any) -> None:
        """Record a step's stored result and its success."""
        row.result = result
        # `finish_step(row, SUCCESS)` written out: every step that succeeds comes here (a frame less each), and
        # `step_to` and `now()` too (the move checked against the same table; a move it refuses goes through
        # `step_to`, which raises).
        if _SUCCESS not in STEP_MOVES[row.status]:
            step_to(row, _SUCCESS)
        row.status = _SUCCESS
        row.error = row.error_type = None
        row.finished_at = _clock(UTC)
        self._dirty[row.step_id] = row
        if self.saga.recovery_attempts:
            self._progressed()
        if self.config.hooks:
            self.emit("step_finished", row, error=None)

    def reconciled(self, row: StepRow, result: Any, *, done: bool) -> None:
        """Record what `reconcile` found of a step of unknown outcome: done (with `result`), or not done."""
        row.reconciled = True
        if done:
            self.succeed(row, result)
        else:
            step_to(row, StepStatus.CANCELLED)  # (from RUNNING, or CANCELLED already)
            row.error, row.error_type, row.finished_at = "reconcile: its effect did not happen", "NotDone", now()
            self._dirty[row.step_id] = row

    def finish_step(
        self, row: StepRow, status: StepStatus, *, error: str | None = None, error_type: str | None = None
    ) -> None:
        """Record how a step's run ended (failed, outcome unknown, ...), and tell the hooks."""
        step_to(row, status)
        row.error = error
        row.error_type = error_type
        row.finished_at = now()
        self._dirty[row.step_id] = row
        if status in _KNOWN and self.saga.recovery_attempts:
            self._progressed()
        if self.config.hooks:
            self.emit("step_finished", row, error=error)

    def not_started(self, row: StepRow, error: str, error_type: str) -> None:
        """Record that a step could not start: FAILED if it never ran, else its outcome stays unknown."""
        if row.status is StepStatus.PENDING:
            step_to(row, StepStatus.FAILED)
        elif row.status is StepStatus.RUNNING:
            step_to(row, StepStatus.CANCELLED)
        row.error, row.error_type, row.finished_at = error, error_type, now()
        self._dirty[row.step_id] = row

    def explain(self, row: StepRow, error: str, error_type: str) -> None:
        """Say why a step is undone, unless its record says so already."""
        if row.error is None:
            row.error, row.error_type = error, error_type
            self._dirty[row.step_id] = row

    def set_args(self, row: StepRow, args: Any) -> None:
        """Give a step that has not started its arguments (a plan's `$ref`s resolved)."""
        row.args = args
        self.args_shown_as_is = False  # (its result checks them)

    def add_step(self, row: StepRow) -> None:
        """Add a step to the saga (dynamic sagas add them as they go); it is written with the next flush."""
        self.rows[row.step_id] = row
        if self._links is not None:
            self._by_seq[row.seq] = row
            # The chain head seals the list of calls: written with the row. (A store that links the rows it seals
            # chains the head over them as it seals them: `writes_inline`.)
            self.saga.plan_hash = extend_head(self.saga.plan_hash, row)
            self._saga_dirty = True
        self._dirty[row.step_id] = row

    # -- undo intents ------------------------------------------------------------------------------------------------

    def begin_undo(self, row: StepRow) -> None:
        """Count a compensation attempt of a step (written ahead of it)."""
        row.compensation_attempts += 1
        self._dirty[row.step_id] = row

    def undone(self, row: StepRow) -> None:
        """Record a step compensated."""
        step_to(row, _COMPENSATED)
        row.compensated_at = now()
        row.compensation_error = None
        self._dirty[row.step_id] = row
        self._progressed()

    def undo_failed(self, row: StepRow, why: str) -> None:
        """Record that a step's effect could not be undone."""
        step_to(row, StepStatus.COMPENSATION_FAILED)
        row.compensation_error = why
        self._dirty[row.step_id] = row
        self._progressed()

    def refused_undo_failed(self, row: StepRow, why: str) -> None:
        """Record that a refused attempt's effect could not be undone (the step goes on)."""
        row.compensation_error = why
        self._dirty[row.step_id] = row

    def reopen_undo(self) -> None:
        """Make a COMPENSATION_FAILED saga's failed compensations due again (an operator's retry)."""
        for row in self.rows.values():
            if row.status is StepStatus.COMPENSATION_FAILED:
                # Back to done (SUCCESS) or unknown; a race loser kept its result and is undone with it.
                done = row.error is None or row.result is not None
                step_to(row, StepStatus.SUCCESS if done else StepStatus.CANCELLED)
                row.compensation_error = None
            self._dirty[row.step_id] = row
        self.saga.finished_at = None
        self._saga_dirty = True

    # -- saga intents ------------------------------------------------------------------------------------------------

    def recovering(self) -> None:
        """Count a recovery attempt: a worker starts driving the saga (written before it does)."""
        self.saga.recovery_attempts += 1
        self._saga_touched = True

    def _progressed(self) -> None:
        # A step's outcome recorded: the recoveries that failed before no longer count against the saga.
        if self.saga.recovery_attempts:
            self.saga.recovery_attempts = 0
            self._saga_touched = True

    @property
    def saga_unwritten(self) -> bool:
        """Tell whether the saga row changed since its last write."""
        return self._saga_dirty

    def touch_saga(self) -> None:
        """Note that the saga row must be written, sealed again, with the next flush (its history changed)."""
        self._saga_dirty = True

    def saga_to(self, status: SagaStatus) -> None:
        """Move the saga to `status` (checked against the transition table)."""
        saga_to(self.saga, status)
        self._saga_dirty = True

    def begin_compensation(self, reason: str) -> None:
        """Make the saga COMPENSATING; its error says why (written now, so a resumed undo still says it)."""
        self.saga_to(_COMPENSATING)
        if self.saga.error is None:
            self.saga.error = reason

    def give_up(self, reason: str) -> None:
        """Say why an operator gave up on the saga (its error), written with the next flush."""
        self.saga.error = reason
        self._saga_dirty = True

    def end(self, status: SagaStatus, error: str | None, cause: str | None = None, at: datetime | None = None) -> None:
        """Make the saga terminal (`error`: why it did not succeed; `cause`: the class name of what failed it, see
        `ended`); no step of it reads RUNNING or WAITING after. `at`: a reading of the clock taken with nothing
        paused since (the last step's end), its end's time; else the clock is read."""
        self.saga_to(status)
        succeeded = status is _SAGA_SUCCESS
        for row in self.rows.values() if not succeeded else ():
            if row.status is _RUNNING:
                self.finish_step(
                    row,
                    StepStatus.CANCELLED,
                    error="its outcome is unknown: nothing could undo it",
                    error_type="Unknown",
                )
            elif row.status is _WAITING:
                why = rejection_of(self.approvals, row.step_id)  # rejected (by a cancel, say): REJECTED (API.md §9)
                if why is None:
                    self.approved(row)  # back to PENDING: it never ran
                else:
                    self.finish_step(row, StepStatus.REJECTED, error=why, error_type="ApprovalRejected")
        saga = self.saga
        if not succeeded:
            if saga.error is None:
                saga.error = error or "the saga was cancelled by its caller"
            ended(saga, status, self.rows.values(), cause)
        saga.finished_at = self._end_at = at or now()
        saga.lease_expires_at = None
        self._ended = True

    def wait(self) -> None:
        """Make the saga WAITING for decisions, its lease given up."""
        self.saga_to(SagaStatus.WAITING)
        self.saga.owner, self.saga.lease_expires_at = None, None

    def record(self, *, metadata: dict[str, Any] | None = None, budget: dict[str, Any] | None = None) -> None:
        """Replace the saga's metadata or budget record (JSON-able)."""
        if metadata is not None:
            self.saga.metadata = metadata
        if budget is not None:
            self.saga.budget = budget
        self._saga_dirty = True

    def charge(self, cost: float, tokens: int) -> tuple[float, int]:
        """Add a charge to the saga; return its cost and tokens so far."""
        saga = self.saga
        if cost or tokens:  # a charge of nothing changes nothing to write
            saga.cost += cost
            saga.tokens += tokens
            self._saga_dirty = True
        return saga.cost, saga.tokens

    def renewed(self, expires: datetime, sent: float) -> None:
        """Note a lease renewal the store confirmed (sent at `sent` on the lease clock)."""
        self.saga.lease_expires_at = expires
        self.lease.confirmed(sent)

    def emit(self, kind: EventKind, row: StepRow | None = None, **fields: Any) -> None:
        """Tell the executor's hooks what just happened (nothing to do without hooks)."""
        if self.config.hooks:
            emit(self.config.hooks, event_of(kind, self.saga, row, fields))

    # -- writing -------------------------------------------------------------------------------------------------------

    def _link(self, row: StepRow) -> str:
        """Return the identity hash of the row before `row`: what `row` links to in the chain (cached)."""
        link = self._links.get(row.seq) if self._links is not None else None
        if link is None:
            link = identity_hash(self._by_seq.get(row.seq - 1), row.saga_id)
            if self._links is not None:
                self._links[row.seq] = link
        return link

    def link_all(self) -> None:
        """Link every row to the one before it, before the saga's first write (unless the store links them)."""
        for row in self.rows.values() if self._links is not None else ():
            row.prev_hash = self._link(row)

    def stored_as(self, saga: SagaRow) -> None:
        """Note the saga row as the store wrote it (its seal), outside `flush` (its creation)."""
        self.saga.seal, self._seal_known = saga.seal, True

    async def flush(self, *, ahead: bool = False) -> None:
        """Commit every changed row in one owner-conditional store write; raise `LeaseLostError` when fenced.

        The store refuses an owner's write while the saga holds a cancel request the owner has not taken in: the
        journal takes it in (`on_cancel`: the engine records and honours it) and writes again. With `ahead` (the
        write-ahead of steps about to start) it raises `CancelTaken` instead: nothing was written, nothing starts.
        """
        take = True
        while True:
            try:
                if self._write_now is not None:
                    self._write_inline()  # the write never pauses: no other write can be under way (no lock)
                    return
                # What `async with asyncio.Lock()` does, without a coroutine (`acquire`) and two calls (`release`)
                # around every write when no other write of the saga is under way (the usual case).
                if self._writing:
                    await self._wait_turn()
                else:
                    self._writing = True
                try:
                    batch = self._batch()
                    if batch is not None:
                        saga, steps, sent, reseal, lease = batch
                        try:
                            await self.store.save(saga, steps, owner=self.owner, reseal=reseal, lease=lease)
                        except BaseException:
                            self._unwritten(batch)
                            raise
                        if saga is not None:  # believed now that it is stored: the row's new lease and seal
                            mine = self.saga
                            mine.updated_at, mine.lease_expires_at, mine.seal = (
                                saga.updated_at,
                                saga.lease_expires_at,
                                saga.seal,
                            )
                            self._seal_known = True
                            if sent and self.owner is not None:
                                self.lease.confirmed(sent)
                    return
                finally:
                    self._hand_on()
            except LeaseLostError:
                if self.owner is None:
                    raise
                if take and await self._took_cancel():
                    if ahead:
                        raise CancelTaken from None
                    take = False
                    continue  # taken in: written again
                logger.error(
                    "saga %s: the store refused a write, another executor owns the saga now; stopping here",
                    self.saga.saga_id,
                )
                self.fence(lost=True)
                raise

    async def _wait_turn(self) -> None:
        """Wait until the write under way (and those waiting before) handed on the turn to write (`_hand_on`)."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._turns.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._hand_on()  # cancelled as the turn came: the next one writes
            raise

    def _hand_on(self) -> None:
        """End this write's turn: the first flush still waiting writes next, else nobody is writing."""
        turns = self._turns
        while turns:
            turn = turns.popleft()
            if not turn.done():  # (done: its waiter was cancelled)
                turn.set_result(None)
                return
        self._writing = False

    @property
    def writes_inline(self) -> bool:
        """Tell whether this journal writes in the calling code, never pausing (its store `writes_inline`)."""
        return self._write_now is not None

    def wrote_now(self) -> bool:
        """Write what changed now, in the calling code, when the store writes inline and takes it; tell whether it did.

        False: `await flush()` must (the store pauses, or it refused the write: `flush` takes a cancel in, or fences).
        A coroutine less for each write of a saga in memory.
        """
        if self._write_now is None:
            return False
        try:
            self._write_inline()
        except LeaseLostError:
            return False  # nothing written: flush() goes over it again, taking a cancel in or fencing
        return True

    def _write_inline(self) -> None:
        """`flush` to a store that writes in the calling code (`writes_inline`): no lock, no await.

        What `_batch`, the write and `_written` do, in one pass: the rows stay dirty until the store took them, so
        a refused write leaves everything to write again (what `_unwritten` puts back).
        """
        guard = self.guard
        if guard.fenced:
            raise guard.error()
        dirty = self._dirty
        saga_dirty = self._saga_dirty
        if not dirty and not saga_dirty and not self._saga_touched:
            return
        # (No links here: a store that writes inline links the rows itself as it seals them; see `__init__`.)
        steps: list[StepRow]
        if self._ended:
            # The end's write hands the store the rows themselves: the engine changes them no more after it (a
            # snapshot for free). Taken in C, each unsealed only if one was sealed (a resumed saga's; a saga run from
            # its start hands the store copies until its end, and its own rows stay unsealed): the store seals them
            # afresh, and must copy what it keeps.
            steps = list(dirty.values())
            if any(map(_hash_of, steps)):
                for row in steps:
                    row.hash = None
        else:
            steps = []
            for row in dirty.values():
                if row.hash is not None:
                    row.hash = None  # the store seals it afresh
                steps.append(row.copy())
        saga = None
        sent = 0.0
        lease = True
        if saga_dirty or self._saga_touched:
            saga = self.saga.copy()
            saga.updated_at = at = self._end_at or now()
            self._end_at = None
            if saga.status in _LIVE:
                lease = not self._lease_kept()
                if lease:
                    saga.lease_expires_at = at + self._lease_span
                    sent = monotonic()
        write = self._write_now
        assert write is not None
        write(saga, steps, self.owner, saga_dirty or not self._seal_known, lease)
        dirty.clear()
        if saga is not None:
            self._saga_dirty = self._saga_touched = False
            mine = self.saga
            mine.updated_at, mine.lease_expires_at, mine.seal = saga.updated_at, saga.lease_expires_at, saga.seal
            self._seal_known = True
            if sent and self.owner is not None:
                self.lease.confirmed(sent)

    def _lease_kept(self) -> bool:
        """Tell whether a write of the live saga's row may leave its stored lease as it is (not moved, not renewed).

        Only while this owner knows a lease is stored (confirmed by the store: a claim, a write, a renewal) with
        more than the margin `keep_lease` extends it at left: the lease loop renews it, and a progress write (a
        saga function's next call, a charge) then changes no indexed column of the row. Otherwise the write
        extends the lease, as every write of the row did before.
        """
        until = self.lease.until
        return (
            self.owner is not None
            and until is not None
            and self.saga.lease_expires_at is not None
            and until - monotonic() >= self._keep_margin
        )

    def _batch(self) -> tuple[SagaRow | None, list[StepRow], float, bool, bool] | None:
        """Take what is to write: (saga row copy or None, step row copies, lease mark, reseal, lease written);
        None: nothing."""
        guard = self.guard
        if guard.fenced:  # (`guard.check()`, without its frame: read at every write)
            raise guard.error()
        dirty = self._dirty
        if not dirty and not self._saga_dirty and not self._saga_touched:
            return None
        links = self._links
        steps = []
        # The end's write hands the store the rows themselves: the engine changes them no more after it (a snapshot
        # for free); the store seals them (hash, link) and must copy what it keeps.
        ended = self._ended
        for row in dirty.values():
            if row.hash is not None:
                row.hash = None  # the store seals it afresh (and links it, unless linked here)
            if links is not None:
                row.prev_hash = links.get(row.seq) or self._link(row)
            steps.append(row if ended else row.copy())
        dirty.clear()
        saga = None
        sent = 0.0
        lease = True
        reseal = self._saga_dirty or not self._seal_known
        if self._saga_dirty or self._saga_touched:
            # The new lease goes on the copy; believed only once stored.
            saga = self.saga.copy()
            saga.updated_at = self._end_at or now()
            self._end_at = None
            if saga.status in _LIVE:
                lease = not self._lease_kept()
                if lease:
                    saga.lease_expires_at = saga.updated_at + self._lease_span
                    sent = self.lease.mark()
            self._saga_dirty = self._saga_touched = False
        return saga, steps, sent, reseal, lease

    def _unwritten(self, batch: tuple[SagaRow | None, list[StepRow], float, bool, bool]) -> None:
        """Keep the rows of a write that failed dirty."""
        saga, steps, _, reseal, _ = batch
        for row in steps:
            self._dirty.setdefault(row.step_id, self.rows[row.step_id])
        if saga is not None:
            self._saga_touched, self._saga_dirty = True, self._saga_dirty or reseal

    async def _took_cancel(self) -> bool:
        """Take in the cancel request that made the store refuse a write, if that is why; tell whether it was."""
        if self.on_cancel is None or self.owner is None or not has(self.store, "cancels"):
            return False
        request = await cancels_of(self.store).take_cancel(self.saga.saga_id, self.owner)
        if request is None:
            return False
        reason = self.cancelled(request)
        if reason is not None:
            self.on_cancel(reason)
        return True

    def cancelled(self, request: str) -> str | None:
        """Record an operator's cancel request and what came of it (see `note_cancel`); return why the saga stops."""
        added, reason = note_cancel(self.saga, request)
        self._saga_dirty = self._saga_dirty or added  # sealed with the saga row's next write
        return reason

    # -- the lease and fencing -----------------------------------------------------------------------------------------

    @property
    def fenced(self) -> bool:
        """Tell whether the journal is fenced now: it writes nothing more."""
        return self.guard.fenced

    @property
    def lease_lost(self) -> bool:
        """Tell whether the lease was lost: another executor may own the saga now."""
        return self.guard.lease_lost

    def fence(self, *, lost: bool = False) -> None:
        """Stop writing for good. `lost`: another executor may own the saga now (its work is stopped too)."""
        self.guard.close(lost=lost)

    def check_fence(self) -> None:
        """Raise `LeaseLostError` if fenced: nothing more may start or be written from here."""
        guard = self.guard
        if guard.fenced:  # (what `guard.check()` does, without its frame: read at every step)
            raise guard.error()

    def keep_lease(self) -> None:
        """Make the next (owner-conditional) write extend the lease when too little is left to start a step on."""
        until = self.lease.until  # (None: no lease held, nothing to keep)
        if self.owner is not None and until is not None and until - monotonic() < self._keep_margin:
            self._saga_touched = True  # flush() writes the saga row with a fresh lease_expires_at

    def lease_short(self) -> bool:
        """Tell whether too little of the lease is known to be left to invoke a tool on (see `confirm_lease`)."""
        until = self.lease.until
        return self.owner is not None and until is not None and until - monotonic() <= self.invoke_margin

    async def confirm_lease(self) -> None:
        """Make sure by this process's clock that the lease is good before a tool runs (else extend it, or fence)."""
        if not self.lease_short():
            return
        self._saga_touched = True
        await self.flush()
        self.check_fence()
        if self.lease_short():
            raise StoreError(
                f"saga {self.saga.saga_id!r}: the store took longer than the lease ({self.config.lease_timeout:g}s) "
                f"to confirm it ({self.store.url}); no tool was started on it: recovery goes on with the saga"
            )


def inline_writer(store: SagaStore) -> InlineWrite | None:
    """Return the function `store` declares it writes with inline (`writes_inline`), or None.

    One bound to another object (a wrapper handing on another store's members) would write past the wrapper, and
    is not used.
    """
    write = store.writes_inline
    return write if write is not None and getattr(write, "__self__", None) is store else None


def seq_of(row: StepRow) -> int:
    """Return a row's position in its saga (a sort key)."""
    return row.seq


# -- the record of a saga no journal holds yet: take over, release, park, history; approval decisions ----------
# Claims use these before (or after) an engine drives the saga; like the Journal, nothing else assigns these fields.

#: How the error of a live saga nobody can drive for lack of its tools begins (cleared when a worker takes it).
WAITS_FOR_TOOLS = "waits for a worker that has its tool(s) "


def adopted(saga: SagaRow, parent_id: str) -> None:
    """Make a new saga (not yet stored) a child of `parent_id`: one step of it (`saga.child()`)."""
    saga.parent_id = parent_id


def reopened_by_parent(saga: SagaRow, owner: str, expires: datetime, why: str) -> None:
    """Move a SUCCESS child saga to COMPENSATING under `owner`'s lease (its parent compensates): a child's move only
    (`_transitions.CHILD_MOVES`); its error says why, and it is no longer finished."""
    saga_to(saga, SagaStatus.COMPENSATING)
    saga.error, saga.finished_at = why, None
    take_over(saga, owner, expires, now())


def take_over(saga: SagaRow, owner: str, expires: datetime, at: datetime | None = None) -> None:
    """Note that `owner` holds the saga's lease until `expires` (the store said so)."""
    saga.owner, saga.lease_expires_at = owner, expires
    saga.waiting_for = None  # it moves now
    if saga.error is not None and saga.error.startswith(WAITS_FOR_TOOLS):
        saga.error = None  # a worker with the tools drives it now
    if at is not None:
        saga.updated_at = at


def let_go(saga: SagaRow, *, uncount: bool = False, by: str | None = None) -> None:
    """Give the saga's lease up (no owner); `uncount` takes back the recovery attempt its claim counted.

    `by`: the executor letting it go stops (a worker's stop), noted in its history: the next takeover names it.
    """
    if by is not None:
        saga.history = [*saga.history, release_entry(now(), by)]
    saga.owner, saga.lease_expires_at = None, None
    if uncount:
        saga.recovery_attempts = max(0, saga.recovery_attempts - 1)
    saga.updated_at = now()


def waits_for_tools(saga: SagaRow, missing: list[str], note: dict[str, Any] | None = None) -> None:
    """Say in the saga's error which tools it waits for, and the operator's way out; `note`: why it waits."""
    saga.waiting_for = note
    saga.error = (
        f"{WAITS_FOR_TOOLS}{', '.join(missing)} (missing or renamed): register them, or give up on it with "
        f"unpark({saga.saga_id!r}, compensate=True)"
    )


def park(saga: SagaRow, why: str) -> None:
    """Make the saga PARKED for an operator, saying why."""
    saga.parked_from = saga.status
    saga_to(saga, SagaStatus.PARKED)
    saga.error = f"parked: {why}; fix the cause, then executor.unpark({saga.saga_id!r})"


def decided(request: ApprovalRow, decision: str, by: str, note: str | None) -> ApprovalRow:
    """Return a copy of `request` holding a decision made now, unsealed (the store seals it as it records it)."""
    row = request.copy()
    row.decision, row.decided_by, row.decided_at, row.note, row.hash = decision, by, now(), note, None
    return row


def took_over(saga: SagaRow, by: str, from_owner: str | None, at: datetime) -> None:
    """Add to the saga's history that `by` took it over from `from_owner` (None: it had been released, by whom its
    history says)."""
    reason: TakeoverReason
    if from_owner is None:
        reason, from_owner = "released", released_by(saga.history)
    else:
        reason = "restart" if from_owner == by else "lease expired"
    saga.history = [*saga.history, takeover_entry(at, by, from_owner, reason)]


def ended(saga: SagaRow, status: SagaStatus, rows: Iterable[StepRow], cause: str | None) -> None:
    """Add to the history of a saga that did not succeed how it ended and which effects stand (decided once).

    `cause`: the class name of the exception that failed it, when known (see saga_runtime._records._outcome).
    """
    rows = list(rows)
    saga.history = [
        *saga.history,
        end_entry(end_reason_of(status, rows, saga.history, cause), standing_of(status, rows)),
    ]


def note_cancel(saga: SagaRow, request: str) -> tuple[bool, str | None]:
    """Record an operator's cancel request (its stored note) in the saga's history with what came of it; return
    whether it was added, and why the saga stops (None: it does not).

    Only a RUNNING (or WAITING) saga stops: a compensating one goes on undoing, and one whose SUCCESS is being
    written ends so, the cancel recorded as ignored.
    """
    note = read_note(request, at=now())
    status = saga.status
    outcome: CancelOutcome = (
        "cancelled"
        if status is SagaStatus.RUNNING or status is SagaStatus.WAITING
        else "ignored"
        if status is SagaStatus.SUCCESS
        else "compensating"
    )
    added = cancel_noted(saga, note, outcome)
    if added:
        logger.warning("saga %s: cancel requested (%s): %s", saga.saga_id, note_reason(note), outcome)
    return added, note_reason(note) if outcome == "cancelled" else None


def rejection_of(approvals: list[ApprovalRow], step_id: str) -> str | None:
    """Return the words a step rejected by a decision is recorded with (who, and why), or None if it was not."""
    for request in approvals:
        if request.step_id == step_id and request.decision == REJECTED:
            return f"rejected by {request.decided_by}" + (f": {request.note}" if request.note else "")
    return None


def cancel_noted(saga: SagaRow, note: dict[str, Any], outcome: CancelOutcome) -> bool:
    """Add an operator's cancel and what came of it to the saga's history, once; return whether it was added."""
    if any(entry.get("kind") == "cancel" for entry in saga.history):
        return False
    saga.history = [*saga.history, cancel_entry(note, outcome)]
    return True


def returned(saga: SagaRow, output: Any) -> None:
    """Add a saga function's return value (a JSON value) to its history; written (sealed) with its end."""
    saga.history = [*saga.history, output_entry(output)]


def slept(saga: SagaRow, position: int, wake_at: datetime) -> None:
    """Add a saga function's sleep to its history, at its position among the saga's waits (sealed with the row)."""
    saga.history = [*saga.history, {"kind": "sleep", "position": position, "wake_at": wake_at.isoformat()}]


def sleeps_of(saga: SagaRow) -> list[datetime]:
    """Return the wake times of a saga's recorded sleeps, by position."""
    return [datetime.fromisoformat(entry["wake_at"]) for entry in saga.history if entry.get("kind") == "sleep"]


def asleep(saga: SagaRow, at: datetime) -> bool:
    """Tell whether a WAITING saga waits for its last sleep to end (rather than for a decision)."""
    wakes = sleeps_of(saga)
    return bool(wakes) and wakes[-1] > at


def noted(saga: SagaRow, entry: dict[str, Any]) -> None:
    """Add an entry (a saga function's wait: a recv begun or received) to the saga's history, sealed with the row."""
    saga.history = [*saga.history, entry]


# -- store writes: the journal module is their only caller (tests/engine/test_journal.py holds that) -------------
# A Journal writes the saga it drives (`flush`); these are the intents on a saga no journal drives yet, or no
# longer: its creation, the claims, a give-back, an operator's unpark, retry or cancel, a decision, a message, and
# the rows beside a saga (queue state, schedules). Each status change goes through the transition table and is one
# conditional write of the store (`change_saga`: the stored status, and owner, as read); nothing else calls a
# store's writes.

#: How a saga is claimed: live (RUNNING or COMPENSATING, its owner gone), WAITING with its decisions made, or
#: COMPENSATION_FAILED reopened for an operator's retry.
ClaimKind = Literal["live", "waiting", "reopen"]


def _keepable(store: SagaStore, saga: SagaRow) -> None:
    """Refuse, before anything is stored, a plan with a step needing approval on a store that keeps no waits: its
    earlier steps' effects would stand, and the approval could never be asked for."""
    if saga.kind == "plan" and not has(store, "waits") and gated_steps(saga.plan):
        waits_of(store)  # raises StoreError, naming the capability the store lacks


async def create(store: SagaStore, saga: SagaRow, steps: Sequence[StepRow]) -> tuple[SagaRow, list[StepRow]] | None:
    """Store a new saga with its first step rows (snapshots); return None, or what is stored under its id."""
    _keepable(store, saga)
    return await store.create_saga(saga, steps)


async def enqueue(
    store: SagaStore, saga: SagaRow, steps: Sequence[StepRow], entry: QueueEntry
) -> tuple[SagaRow, list[StepRow]] | None:
    """Store a new QUEUED saga in `entry`'s queue; return None, or what is stored under its id."""
    _keepable(store, saga)
    return await queues_of(store).enqueue(saga, steps, entry)


async def claim(store: SagaStore, saga: SagaRow, owner: str, expires: datetime, at: datetime, how: ClaimKind) -> bool:
    """Make `owner` hold `saga` until `expires` (see `ClaimKind`); return whether it does. Reopened, the saga is
    COMPENSATING: the transition table's move, written where the stored saga is still COMPENSATION_FAILED."""
    if how == "live":
        return await store.claim_saga(saga.saga_id, owner, expires, at)
    if how == "waiting":
        return has(store, "waits") and await waits_of(store).claim_waiting(saga.saga_id, owner, expires, at) is not None
    row = saga.copy()
    saga_to(row, SagaStatus.COMPENSATING)
    row.finished_at, row.updated_at = None, at
    row.owner, row.lease_expires_at = owner, expires
    return await store.change_saga(row, status=SagaStatus.COMPENSATION_FAILED)


async def claim_waiting(
    store: SagaStore, saga_id: str, owner: str, expires: datetime, at: datetime
) -> tuple[SagaRow, list[StepRow]] | None:
    """Make `owner` hold the WAITING saga `saga_id` until `expires` if nobody else does; return its rows as claimed."""
    return await waits_of(store).claim_waiting(saga_id, owner, expires, at)


async def reopen_child(store: SagaStore, saga: SagaRow, owner: str, expires: datetime, why: str) -> bool:
    """Move a SUCCESS child saga to COMPENSATING under `owner`'s lease (its parent compensates it), written only
    where the stored child is still SUCCESS; return whether it was."""
    reopened_by_parent(saga, owner, expires, why)
    return await store.change_saga(saga.copy(), status=SagaStatus.SUCCESS)


async def wake(store: SagaStore, saga_id: str, at: datetime) -> bool:
    """Make a WAITING saga due at `at` (what it waits for may be there); return whether it waits."""
    return has(store, "waits") and await waits_of(store).wake_saga(saga_id, at)


async def claim_expired(
    store: SagaStore, owner: str, expires: datetime, at: datetime, limit: int
) -> list[tuple[SagaRow, list[StepRow]]]:
    """Take over up to `limit` live sagas whose lease expired; return them as they were before."""
    return await store.claim_expired(owner, expires, at, limit)


async def claim_queued(
    store: SagaStore,
    owner: str,
    expires: datetime,
    at: datetime,
    queue: Queue,
    limit: int,
    fits: Callable[[SagaRow], bool] | None,
) -> list[tuple[SagaRow, list[StepRow]]]:
    """Start up to `limit` QUEUED sagas of `queue` under `owner`'s lease; return them as started."""
    return await queues_of(store).claim_queued(owner, expires, at, queue, limit, fits)


async def renew(store: SagaStore, owner: str, saga_ids: Sequence[str], expires: datetime, at: datetime) -> set[str]:
    """Extend the leases `owner` holds on `saga_ids`; return the ids it still owns."""
    return await store.renew_leases(owner, saga_ids, expires, at)


async def release(store: SagaStore, saga: SagaRow, owner: str | None) -> bool:
    """Write a saga given up (or parked) by `owner` (None: unconditionally); return whether it was written.

    A write refused for a cancel request not taken in is written again once taken in (the next owner takes it in
    anew); refused because another executor owns the saga now, it is left as it is.
    """
    for _ in range(2):
        try:
            await store.save(saga.copy(), [], owner=owner)
            return True
        except LeaseLostError:
            if owner is None or not has(store, "cancels"):
                break
            if await cancels_of(store).take_cancel(saga.saga_id, owner) is None:
                break
    return False


async def take_cancel(store: SagaStore, saga_id: str, owner: str) -> str | None:
    """Take in the cancel request of a saga `owner` holds (its writes pass again); return it, or None."""
    return await cancels_of(store).take_cancel(saga_id, owner) if has(store, "cancels") else None


async def ask_cancel(store: SagaStore, saga_id: str, note: str) -> bool:
    """Record an operator's request to cancel a live or waiting saga (once); return whether it did."""
    return await cancels_of(store).request_cancel(saga_id, note)


async def cancel_queued(store: SagaStore, saga: SagaRow, error: str, at: datetime, entry: dict[str, Any]) -> bool:
    """End a QUEUED saga COMPENSATED before it ran (`entry`, the cancel, in its history); return whether it did."""
    row = saga.copy()
    saga_to(row, SagaStatus.COMPENSATED)
    row.error, row.updated_at, row.finished_at = error, at, at
    row.owner, row.lease_expires_at = None, None
    row.history = [*row.history, entry]
    return await store.change_saga(row, status=SagaStatus.QUEUED)


def unparked_status(saga: SagaRow, compensate: bool) -> tuple[SagaStatus, str | None]:
    """Return the status and error a PARKED saga is unparked with.

    Unparked, it goes on from where it was parked (its error cleared); with `compensate`, an operator gave up on
    it: it is undone from the next owner on, and its error says why it was parked.
    """
    if compensate:
        return SagaStatus.COMPENSATING, f"an operator chose to compensate it after it was parked ({saga.error})"
    return saga.parked_from or SagaStatus.RUNNING, None


async def unpark(store: SagaStore, saga: SagaRow, *, compensate: bool, at: datetime) -> bool:
    """Make a PARKED saga live again (or COMPENSATING), unowned, its recovery attempts back to 0; return whether
    it did: of two operators at once only one does. Idle workers hear of it at once."""
    row = saga.copy()
    status, row.error = unparked_status(saga, compensate)
    saga_to(row, status)
    row.parked_from, row.recovery_attempts = None, 0
    row.owner, row.lease_expires_at, row.updated_at = None, None, at
    if not await store.change_saga(row, status=SagaStatus.PARKED):
        return False
    if has(store, "queues"):
        await queues_of(store).notify_workers()  # live again and unowned: an idle worker's recovery takes it at once
    return True


async def requeue(store: SagaStore, saga: SagaRow, owner: str, at: datetime) -> bool:
    """Put a saga `owner` started from its queue back QUEUED, unowned and not counted as started; return whether it
    did (only while it is RUNNING under `owner`)."""
    row = saga.copy()
    saga_to(row, SagaStatus.QUEUED)
    row.owner, row.lease_expires_at, row.updated_at = None, None, at
    return await store.change_saga(row, status=SagaStatus.RUNNING, owner=owner)


async def note_waiting(store: SagaStore, saga_id: str, note: dict[str, Any]) -> bool:
    """Note on a saga nobody drives why it does not move (unsealed); return whether it did."""
    return has(store, "waits") and await waits_of(store).note_waiting(saga_id, note)


async def request_approvals(store: SagaStore, rows: Sequence[ApprovalRow]) -> list[str]:
    """Record the approval requests not recorded yet; return the step ids recorded."""
    return await waits_of(store).request_approvals(rows)


async def decide(store: SagaStore, row: ApprovalRow, *, by_deadline: bool = False) -> bool:
    """Record the decision `row` holds (see `decided`), once; return whether it was recorded."""
    return await waits_of(store).decide_approval(row, by_deadline=by_deadline)


async def post(store: SagaStore, saga_id: str, message_id: str, topic: str, body: Any, at: datetime) -> bool:
    """Store a message for a saga unless its id is taken there; return whether it was."""
    return await messages_of(store).put_message(saga_id, message_id, topic, body, at)


async def set_queue_state(store: SagaStore, name: str, state: QueueState, at: datetime) -> None:
    """Store an operator's state of queue `name` (active, paused, draining)."""
    await queues_of(store).set_queue_state(name, state, at)


async def note_queue_limits(store: SagaStore, queue: Queue, at: datetime) -> None:
    """Record the limits a worker serves `queue` with."""
    await queues_of(store).note_queue_limits(queue, at)


async def put_schedule(store: SagaStore, schedule: Schedule) -> None:
    """Store a schedule, replacing the one of the same name."""
    await schedules_of(store).put_schedule(schedule)


async def pause_schedule(store: SagaStore, name: str) -> bool:
    """Pause a schedule; return False if none has the name."""
    return await schedules_of(store).pause_schedule(name)


async def resume_schedule(store: SagaStore, name: str, next_tick: datetime) -> bool:
    """Resume a paused schedule from `next_tick`; return False if none has the name."""
    return await schedules_of(store).resume_schedule(name, next_tick)


async def delete_schedule(store: SagaStore, name: str) -> bool:
    """Delete a schedule; return whether one had the name."""
    return await schedules_of(store).delete_schedule(name)


async def advance_schedule(
    store: SagaStore, name: str, expected: datetime, next_tick: datetime, last_tick: datetime
) -> bool:
    """Move a schedule's next tick on from `expected`, once fleet-wide; return whether this call did."""
    return await schedules_of(store).advance_schedule(name, expected, next_tick, last_tick)
