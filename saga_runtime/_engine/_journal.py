"""The Journal: the one owner of a saga's record (saga row, step rows, approval decisions).

Nothing else assigns a record's field (tests/engine/test_journal.py holds that). Its methods are intents, each
checked against the transition table, changing the fields and marking what must be written. It writes the rows
ahead through the store, which seals them (each step row carries its link, `prev_hash`, fixed at its creation):
owner-conditionally under the lease, never again once fenced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from time import monotonic
from typing import Any

from saga_runtime._engine._cancellation import CancelTaken, Fence
from saga_runtime._engine._clock import LeaseClock
from saga_runtime._engine._config import EngineConfig
from saga_runtime._engine._events import EventKind, emit, event_of
from saga_runtime._engine._journal_rows import ended, note_cancel, rejection_of
from saga_runtime._engine._transitions import saga_to, step_to
from saga_runtime._exceptions import LeaseLostError, StoreError
from saga_runtime._records import (
    ApprovalRow,
    SagaRow,
    SagaStatus,
    StepRow,
    StepStatus,
    extend_head,
    identity_hash,
    now,
)
from saga_runtime._storage import inline_store

__all__ = ["EngineConfig", "Journal", "seq_of"]

logger = logging.getLogger("saga_runtime")

# A step's intent write extends the lease when less than this share of `lease_timeout` is left.
_LEASE_MARGIN = 0.25
# No tool starts on less than this share left by this process's clock: the lease is confirmed first.
_INVOKE_MARGIN = 0.1
# A step's outcome that counts as progress (CANCELLED: its outcome is unknown).
_KNOWN = frozenset({StepStatus.SUCCESS, StepStatus.FAILED})


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
        # A store that links the rows it seals (the memory store, sealing when a saga is read) gets them unlinked.
        inline = inline_store(self.store)
        self._links: dict[int, str] | None = None if inline is not None and inline.links_rows else {}
        self._by_seq: dict[int, StepRow] = {} if self._links is None else {row.seq: row for row in steps}
        # Steps whose first attempt was committed RUNNING with the saga itself (write-ahead done).
        self.announced = {row.step_id for row in announced}
        for row in announced:  # new rows, written RUNNING with the saga itself: no move
            row.status, row.attempts, row.started_at = StepStatus.RUNNING, 1, saga.created_at
        self._dirty: dict[str, StepRow] = {}
        # The saga row to write: a sealed field changed (dirty), or only its lease or recovery count (touched).
        self._saga_dirty = False
        self._saga_touched = False
        self._seal_known = False  # the saga row's seal is the one this journal's last write stored
        # asyncio.Lock: it does not yield to the loop when nobody holds it. A store whose write never pauses
        # (`writes_inline`: the memory store) is written in the calling code, without it.
        self._write_lock = asyncio.Lock()
        self._write_now = inline.write if inline is not None and inline.writes_inline else None
        self.guard = Fence(saga.saga_id)
        self.lease = LeaseClock(config.lease_timeout, saga.lease_expires_at if owner is not None else None)
        self._keep_margin = config.lease_timeout * _LEASE_MARGIN
        self._invoke_margin = config.lease_timeout * _INVOKE_MARGIN
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
        step_to(row, StepStatus.RUNNING)
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
        self.finish_step(row, StepStatus.SUCCESS)

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
        if status in _KNOWN:
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

    def add_step(self, row: StepRow) -> None:
        """Add a step to the saga (dynamic sagas add them as they go); it is written with the next flush."""
        self.rows[row.step_id] = row
        if self._links is not None:
            self._by_seq[row.seq] = row
        self.saga.plan_hash = extend_head(self.saga.plan_hash, row)  # the chain head seals the list of calls
        self._saga_dirty = True
        self._dirty[row.step_id] = row

    # -- undo intents ------------------------------------------------------------------------------------------------

    def begin_undo(self, row: StepRow) -> None:
        """Count a compensation attempt of a step (written ahead of it)."""
        row.compensation_attempts += 1
        self._dirty[row.step_id] = row

    def undone(self, row: StepRow) -> None:
        """Record a step compensated."""
        step_to(row, StepStatus.COMPENSATED)
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

    def touch_saga(self) -> None:
        """Note that the saga row must be written, sealed again, with the next flush (its history changed)."""
        self._saga_dirty = True

    def saga_to(self, status: SagaStatus) -> None:
        """Move the saga to `status` (checked against the transition table)."""
        saga_to(self.saga, status)
        self._saga_dirty = True

    def begin_compensation(self, reason: str) -> None:
        """Make the saga COMPENSATING; its error says why (written now, so a resumed undo still says it)."""
        self.saga_to(SagaStatus.COMPENSATING)
        if self.saga.error is None:
            self.saga.error = reason

    def give_up(self, reason: str) -> None:
        """Say why an operator gave up on the saga (its error), written with the next flush."""
        self.saga.error = reason
        self._saga_dirty = True

    def end(self, status: SagaStatus, error: str | None, cause: str | None = None) -> None:
        """Make the saga terminal (`error`: why it did not succeed; `cause`: the class name of what failed it, see
        `ended`); no step of it reads RUNNING or WAITING after."""
        self.saga_to(status)
        for row in self.rows.values() if status is not SagaStatus.SUCCESS else ():
            if row.status is StepStatus.RUNNING:
                self.finish_step(
                    row,
                    StepStatus.CANCELLED,
                    error="its outcome is unknown: nothing could undo it",
                    error_type="Unknown",
                )
            elif row.status is StepStatus.WAITING:
                why = rejection_of(self.approvals, row.step_id)  # rejected (by a cancel, say): REJECTED (API.md §9)
                if why is None:
                    self.approved(row)  # back to PENDING: it never ran
                else:
                    self.finish_step(row, StepStatus.REJECTED, error=why, error_type="ApprovalRejected")
        saga = self.saga
        if status is not SagaStatus.SUCCESS:
            if saga.error is None:
                saga.error = error or "the saga was cancelled by its caller"
            ended(saga, status, self.rows.values(), cause)
        saga.finished_at = now()
        saga.lease_expires_at = None

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
                async with self._write_lock:
                    batch = self._batch()
                    if batch is not None:
                        try:
                            await self.store.save(batch[0], batch[1], owner=self.owner, reseal=batch[3])
                        except BaseException:
                            self._unwritten(batch)
                            raise
                        self._written(batch)
                    return
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
        links = self._links
        steps = []
        for row in dirty.values():
            if row.hash is not None:
                row.hash = None  # the store seals it afresh (and links it, unless linked here)
            if links is not None:
                row.prev_hash = links.get(row.seq) or self._link(row)
            steps.append(row.copy())
        saga = None
        sent = 0.0
        if saga_dirty or self._saga_touched:
            saga = self.saga.copy()
            saga.updated_at = at = now()
            if saga.status is SagaStatus.RUNNING or saga.status is SagaStatus.COMPENSATING:
                saga.lease_expires_at = at + self._lease_span
                sent = monotonic()
        write = self._write_now
        assert write is not None
        write(saga, steps, self.owner, saga_dirty or not self._seal_known)
        dirty.clear()
        if saga is not None:
            self._saga_dirty = self._saga_touched = False
            mine = self.saga
            mine.updated_at, mine.lease_expires_at, mine.seal = saga.updated_at, saga.lease_expires_at, saga.seal
            self._seal_known = True
            if sent and self.owner is not None:
                self.lease.confirmed(sent)

    def _batch(self) -> tuple[SagaRow | None, list[StepRow], float, bool] | None:
        """Take what is to write: (saga row copy or None, step row copies, lease mark, reseal); None: nothing."""
        self.guard.check()
        if not self._dirty and not self._saga_dirty and not self._saga_touched:
            return None
        links = self._links
        steps = []
        for row in self._dirty.values():
            if row.hash is not None:
                row.hash = None  # the store seals it afresh (and links it, unless linked here)
            if links is not None:
                row.prev_hash = links.get(row.seq) or self._link(row)
            steps.append(row.copy())
        self._dirty.clear()
        saga = None
        sent = 0.0
        reseal = self._saga_dirty or not self._seal_known
        if self._saga_dirty or self._saga_touched:
            # The new lease goes on the copy; believed only once stored.
            saga = self.saga.copy()
            saga.updated_at = now()
            if saga.status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
                saga.lease_expires_at = saga.updated_at + self._lease_span
                sent = self.lease.mark()
            self._saga_dirty = self._saga_touched = False
        return saga, steps, sent, reseal

    def _written(self, batch: tuple[SagaRow | None, list[StepRow], float, bool]) -> None:
        saga, _, sent, _ = batch
        if saga is not None:
            self.saga.updated_at, self.saga.lease_expires_at = saga.updated_at, saga.lease_expires_at
            self.saga.seal, self._seal_known = saga.seal, True
            if sent and self.owner is not None:
                self.lease.confirmed(sent)

    def _unwritten(self, batch: tuple[SagaRow | None, list[StepRow], float, bool]) -> None:
        """Keep the rows of a write that failed dirty."""
        saga, steps, _, reseal = batch
        for row in steps:
            self._dirty.setdefault(row.step_id, self.rows[row.step_id])
        if saga is not None:
            self._saga_touched, self._saga_dirty = True, self._saga_dirty or reseal

    async def _took_cancel(self) -> bool:
        """Take in the cancel request that made the store refuse a write, if that is why; tell whether it was."""
        if self.on_cancel is None or self.owner is None:
            return False
        request = await self.store.take_cancel(self.saga.saga_id, self.owner)
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
        self.guard.check()

    def keep_lease(self) -> None:
        """Make the next (owner-conditional) write extend the lease when too little is left to start a step on."""
        until = self.lease.until  # (None: no lease held, nothing to keep)
        if self.owner is not None and until is not None and until - monotonic() < self._keep_margin:
            self._saga_touched = True  # flush() writes the saga row with a fresh lease_expires_at

    def lease_short(self) -> bool:
        """Tell whether too little of the lease is known to be left to invoke a tool on (see `confirm_lease`)."""
        until = self.lease.until
        return self.owner is not None and until is not None and until - monotonic() <= self._invoke_margin

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


def seq_of(row: StepRow) -> int:
    """Return a row's position in its saga (a sort key)."""
    return row.seq
