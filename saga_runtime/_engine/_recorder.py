"""The Recorder: one saga's rows, and the only piece that writes them while the saga runs.

It keeps the rows, the set of those changed since the last write, seals them (the hash chain) and writes them
ahead through the store (durability invariants 1 and 2 of DESIGN.md): owner-conditionally while the engine holds
the saga's lease, and never again once fenced (the lease is lost). Every status change goes through it, checked
against the transition table; it tells the hooks what happened, and records the saga's end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from saga_runtime._engine._clock import LeaseClock
from saga_runtime._engine._config import EngineConfig
from saga_runtime._engine._events import EventKind, SagaEvent, emit
from saga_runtime._engine._transitions import saga_to, step_to
from saga_runtime._exceptions import LeaseLostError, StoreError
from saga_runtime._records import (
    ApprovalRow,
    SagaRow,
    SagaStatus,
    Sealer,
    StepRow,
    StepStatus,
    extend_head,
    identity_hash,
    now,
)

__all__ = ["EngineConfig", "Recorder", "seq_of"]

logger = logging.getLogger("saga_runtime")

# A step starts only on a lease with at least this share of `lease_timeout` left; with less (renewals late or
# failing), the intent write that announces the step extends the lease (owner-conditionally) first.
_LEASE_MARGIN = 0.25
# No tool is invoked on less than this share of `lease_timeout` left by this process's own clock: the lease is
# confirmed (extended, owner-conditionally) first. See `confirm_lease`.
_INVOKE_MARGIN = 0.1


class Recorder:
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
        # The executor id holding the saga's lease, when the engine holds one: every write is then conditional on
        # the store still naming it the owner (a stalled worker must not write after another took the saga over).
        self.owner = owner
        # Called when the recorder learns that the lease is lost (set by the LeaseKeeper): stops the saga's work.
        self.on_lost: Callable[[], None] | None = None
        self.rows: dict[str, StepRow] = {row.step_id: row for row in steps}
        self._by_seq: dict[int, StepRow] = {row.seq: row for row in steps}
        self._links: dict[int, str] = {}
        self._sealer = Sealer(config.store.signing_key)
        # A store that seals rows itself before anyone reads them (memory) is written unsealed rows: a row changes
        # three or four times as its step runs, and is sealed once there instead of at every change.
        self._sealing = not config.store.seals_on_read
        # Steps whose first attempt was already committed RUNNING with the saga itself (write-ahead done).
        self.announced = {row.step_id for row in announced}
        self._dirty: dict[str, StepRow] = {}
        self._saga_dirty = False
        # asyncio.Lock, not anyio.Lock: it does not yield to the loop when nobody holds it (the common case).
        self._write_lock = asyncio.Lock()
        self.fenced = False
        self.lease_lost = False
        self.lease = LeaseClock(config.lease_timeout, saga.lease_expires_at if owner is not None else None)
        # The saga's approval requests, as the engine last knew them (kept by the Gate; part of its result).
        self.approvals: list[ApprovalRow] = []

    # -- changes -------------------------------------------------------------------------------------------------------

    def mark(self, row: StepRow) -> None:
        """Note that a row changed; it is written with the next flush."""
        self._dirty[row.step_id] = row

    def touch_saga(self) -> None:
        """Note that the saga row changed (metadata, budget, cost); it is written with the next flush."""
        self._saga_dirty = True

    def step_to(self, row: StepRow, status: StepStatus) -> None:
        """Move a step to `status` (checked against the transition table); it is written with the next flush."""
        step_to(row, status)
        self._dirty[row.step_id] = row

    def saga_to(self, status: SagaStatus) -> None:
        """Move the saga to `status` (checked against the transition table); written with the next flush."""
        saga_to(self.saga, status)
        self._saga_dirty = True

    def finish_step(
        self, row: StepRow, status: StepStatus, *, error: str | None = None, error_type: str | None = None
    ) -> None:
        """Record how a step's run ended, and tell the hooks."""
        step_to(row, status)
        row.error = error
        row.error_type = error_type
        row.finished_at = now()
        self._dirty[row.step_id] = row
        if self.config.hooks:
            self.emit("step_finished", row, error=error)

    def restore(self, row: StepRow, status: StepStatus, attempts: int, started_at: Any) -> None:
        """Put back a step's state from before an intent that was never written (its step never ran)."""
        row.status, row.attempts, row.started_at = status, attempts, started_at

    def add_step(self, row: StepRow) -> None:
        """Add a step to the saga (dynamic sagas add them as they go); it is written with the next flush."""
        self.rows[row.step_id] = row
        self._by_seq[row.seq] = row
        self.saga.plan_hash = extend_head(self.saga.plan_hash, row)  # the chain head seals the list of calls
        self._saga_dirty = True
        self._dirty[row.step_id] = row

    def emit(self, kind: EventKind, row: StepRow | None = None, **fields: Any) -> None:
        """Tell the executor's hooks what just happened (nothing to do without hooks)."""
        if not self.config.hooks:
            return
        if row is None:
            event = SagaEvent(kind, self.saga.saga_id, status=self.saga.status.value, **fields)
        else:
            event = SagaEvent(
                kind,
                self.saga.saga_id,
                step_id=row.step_id,
                tool_name=row.tool_name,
                group=row.group,
                idempotency_key=row.idempotency_key,
                **{"status": row.status.value, "attempt": row.attempts, **fields},
            )
        emit(self.config.hooks, event)

    # -- writing -------------------------------------------------------------------------------------------------------

    def _link(self, row: StepRow) -> str:
        """Return the identity hash of the row before `row`: what `row` links to in the chain (cached)."""
        link = self._links.get(row.seq)
        if link is None:
            link = self._links[row.seq] = identity_hash(self._by_seq.get(row.seq - 1), row.saga_id)
        return link

    def seal_all(self) -> None:
        """Link and seal every row, in order (before the saga's first write)."""
        if not self._sealing:
            return
        seal, link = self._sealer.seal, self._link
        for row in sorted(self.rows.values(), key=seq_of):
            seal(row, link(row))

    async def flush(self) -> None:
        """Commit every changed row in one store write; return once it is durable.

        A fenced recorder writes nothing and raises `LeaseLostError`. One holding the lease writes only while the
        store still names it the owner; a store refusing the write (another executor took the saga over) fences
        it, and the `LeaseLostError` goes on.
        """
        async with self._write_lock:
            self.check_fence()
            if not self._dirty and not self._saga_dirty:
                return
            if self._sealing:
                seal, link = self._sealer.seal, self._link
                steps = []
                for row in self._dirty.values():
                    seal(row, link(row))
                    steps.append(row.copy())
            else:
                steps = [row.copy() for row in self._dirty.values()]
                for copy in steps:
                    copy.hash = None  # changed since it was sealed, if ever: the store seals it afresh
            self._dirty.clear()
            saga = None
            sent = 0.0
            if self._saga_dirty:
                # The new lease goes on the copy written; the recorder believes it only once it is stored (the lease
                # keeper fences a saga whose lease ran out while the store was unreachable).
                saga = self.saga.copy()
                saga.updated_at = now()
                if saga.status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
                    saga.lease_expires_at = saga.updated_at + timedelta(seconds=self.config.lease_timeout)
                    sent = self.lease.mark()
                self._saga_dirty = False
            try:
                await self.store.save(saga, steps, owner=self.owner)
                if saga is not None:
                    self.saga.updated_at, self.saga.lease_expires_at = saga.updated_at, saga.lease_expires_at
                    if sent and self.owner is not None:
                        self.lease.confirmed(sent)
            except BaseException as exc:
                # Not written: keep the rows dirty, so the next flush (or recovery's reading) is not misled.
                for row in steps:
                    self._dirty.setdefault(row.step_id, self.rows[row.step_id])
                if saga is not None:
                    self._saga_dirty = True
                if isinstance(exc, LeaseLostError) and self.owner is not None:
                    logger.error(
                        "saga %s: the store refused a write, another executor owns the saga now; stopping here",
                        self.saga.saga_id,
                    )
                    self.fence(lost=True)
                raise

    # -- the lease and fencing -----------------------------------------------------------------------------------------

    def fence(self, *, lost: bool = False) -> None:
        """Stop writing for good. `lost`: another executor may own the saga now (its work is stopped too)."""
        self.fenced = True
        if lost and not self.lease_lost:
            self.lease_lost = True
            if self.on_lost is not None:
                self.on_lost()

    def is_fenced(self) -> bool:
        """Tell whether the recorder is fenced now (a call, not the attribute: it changes across every await)."""
        return self.fenced

    def lost_error(self) -> LeaseLostError:
        """Return the error a fenced recorder raises instead of writing."""
        return LeaseLostError(
            f"saga {self.saga.saga_id!r} was taken over by another executor (this one lost its lease); "
            "it goes on there",
            saga_id=self.saga.saga_id,
        )

    def check_fence(self) -> None:
        """Raise `LeaseLostError` if fenced: nothing more may start or be written from here."""
        if self.fenced:
            raise self.lost_error()

    def keep_lease(self) -> None:
        """Make the next write extend the lease when too little of it is left to start a step on.

        Only for a recorder holding the lease: its writes are owner-conditional, so the extension is refused (and
        the recorder fenced) if another executor took the saga over meanwhile.
        """
        if self.owner is not None and self.lease.left() < self.config.lease_timeout * _LEASE_MARGIN:
            self._saga_dirty = True  # flush() writes the saga row with a fresh lease_expires_at

    def lease_short(self) -> bool:
        """Tell whether too little of the lease is known to be left to invoke a tool on (see `confirm_lease`)."""
        return self.owner is not None and self.lease.left() <= self.config.lease_timeout * _INVOKE_MARGIN

    async def confirm_lease(self) -> None:
        """Make sure, by this process's own clock, that the lease is good before a tool is invoked.

        A lease last confirmed too long ago (this process was frozen, or the store unreachable) is extended first by
        an owner-conditional write of the saga row: if another executor took the saga over meanwhile, the store
        refuses it, this recorder is fenced and `LeaseLostError` says so; if nobody did, the saga is this
        executor's again and the tool may run.
        """
        if not self.lease_short():
            return
        self._saga_dirty = True
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
