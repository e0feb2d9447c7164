"""The engine's core: one saga's state and its records.

It keeps the saga's rows and writes them ahead through the store (durability invariants 1 and 2 of DESIGN.md),
owner-conditionally while it holds the saga's lease; it is fenced (writes nothing more) once the lease is lost,
extends the lease before a step starts on too little of it, and records the saga's end. The engine's other parts
build on it, one concept per module: tool calls (`_calls`), compensation (`_compensation`), a step's attempts
(`_attempts`), and groups of steps (`_saga`, where `SagaEngine` is).
"""

from __future__ import annotations

import asyncio
import logging
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio

from saga_runtime._engine._budget import Account, Budget
from saga_runtime._engine._events import EventKind, SagaEvent, SagaHook, emit
from saga_runtime._engine._shield import shielded
from saga_runtime._exceptions import LeaseLostError, StoreError
from saga_runtime._records import (
    SagaResult,
    SagaRow,
    SagaStatus,
    Sealer,
    SecretKeyring,
    StepRow,
    StepStatus,
    extend_head,
    identity_hash,
    now,
    result_from_rows,
)
from saga_runtime._storage import SagaStore
from saga_runtime._tools import ToolRegistry

__all__ = ["CANCELLED", "RUNNABLE", "UNKNOWN", "EngineConfig", "EngineCore", "final_write_bound", "seq_of"]

logger = logging.getLogger("saga_runtime")

#: Steps whose outcome is unknown: started, and never recorded as ended (a crash, a cancellation, a timeout).
UNKNOWN = frozenset({StepStatus.RUNNING, StepStatus.CANCELLED})
#: Steps a forward run (first or resumed) executes: never started, or started with an unknown outcome.
RUNNABLE = frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.CANCELLED})
# asyncio-native: the caller leaving is asyncio.CancelledError (anyio raises the same on this backend).
CANCELLED = asyncio.CancelledError
# How long the engine may spend recording a saga's end, beyond the store's own retry window (`retry_for`): a
# store retrying a lost connection must be allowed its whole window, then one last try, before the end is given up.
_FINAL_WRITE_MARGIN = 10.0
# A step starts only on a lease with at least this share of `lease_timeout` left; with less (renewals late or
# failing), the intent write that announces the step extends the lease (owner-conditionally) first.
_LEASE_MARGIN = 0.25


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What every saga of one executor shares."""

    registry: ToolRegistry
    store: SagaStore
    executor_id: str
    lease_timeout: float
    compensation_timeout: float
    thread_limiter: anyio.CapacityLimiter
    call_limiter: anyio.CapacityLimiter | None
    hooks: tuple[SagaHook, ...] = ()
    keyring: SecretKeyring | None = None  # opens secret arguments for the tools (SagaExecutor's secret_key)


def _saga_marker(engine: EngineCore) -> Callable[[], None]:
    """Return a callback marking `engine`'s saga row changed, holding the engine only weakly (no cycle)."""
    ref = weakref.ref(engine)

    def mark() -> None:
        alive = ref()
        if alive is not None:
            alive._saga_dirty = True

    return mark


class EngineCore:
    """One saga's rows and how they are recorded; the base of `SagaEngine` (see the module docstring)."""

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
        self.saga = saga
        # The executor id holding the saga's lease, when this engine holds one: every write is then conditional on
        # the store still naming it the owner (a stalled worker must not write after another took the saga over).
        self.owner = owner
        # Called when the engine learns that its lease is lost (set by the LeaseKeeper): stops the saga's work.
        self.on_lost: Callable[[], None] | None = None
        self.rows: dict[str, StepRow] = {row.step_id: row for row in steps}
        self._by_seq: dict[int, StepRow] = {row.seq: row for row in steps}
        self._links: dict[int, str] = {}
        self._sealer = Sealer(config.store.signing_key)
        # Arguments validated when the plan was, by step: (the args they were validated from, the kwargs).
        self._validated: dict[str, tuple[Any, dict[str, Any]]] = {}
        # Steps whose first attempt was already committed RUNNING with the saga itself (write-ahead done).
        self._announced = {row.step_id for row in announced}
        self.failure: str | None = None
        # The exception that ended each failed step in this process (the record keeps its type and message).
        self.errors: dict[str, BaseException] = {}
        self._failed_step: str | None = None
        self._dirty: dict[str, StepRow] = {}
        self._saga_dirty = False
        # asyncio.Lock, not anyio.Lock: it does not yield to the loop when nobody holds it (the common case).
        self._write_lock = asyncio.Lock()
        self._store_error: BaseException | None = None
        self.fenced = False
        self.lease_lost = False
        self._undo_failed: set[str] = set()  # steps whose refused result could not be undone
        self._winners: dict[int, str] = {}  # group -> the step that won a `first` race in this process
        # True for a saga recovery drives: no caller waits on it, so a cancellation (the worker shutting down)
        # stops it without compensating; the next recovery resumes it.
        self.detached = False
        # Not `self._mark_saga`: a bound method would make engine -> account -> engine a reference cycle, and every
        # finished saga (its rows, seals, arguments and results) would wait for a full cyclic GC instead of being
        # freed when run() returns: ~21 KiB per saga, ~15 MiB of peak RSS at 50 concurrent sagas.
        self.account = Account(saga, Budget.from_json(saga.budget), _saga_marker(self))

    # -- recording -----------------------------------------------------------------------------------------------------

    def _mark_saga(self) -> None:
        self._saga_dirty = True

    def _link(self, row: StepRow) -> str:
        """Return the identity hash of the row before `row`: what `row` links to in the chain (cached)."""
        link = self._links.get(row.seq)
        if link is None:
            link = self._links[row.seq] = identity_hash(self._by_seq.get(row.seq - 1), row.saga_id)
        return link

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

    def add_dirty(self, row: StepRow) -> None:
        """Note that a row changed outside the engine (an operator reset it); it is written with the next flush."""
        self._mark(row)

    def touch_saga(self) -> None:
        """Note that the saga row changed (metadata, budget); it is written with the next flush."""
        self._saga_dirty = True

    def _mark(self, row: StepRow) -> None:
        self._dirty[row.step_id] = row

    def seal_all(self) -> None:
        """Link and seal every row, in order (before the saga's first write)."""
        seal, link = self._sealer.seal, self._link
        for row in sorted(self.rows.values(), key=seq_of):
            seal(row, link(row))

    def validated(self, row: StepRow, kwargs: dict[str, Any]) -> None:
        """Note that `kwargs` are `row`'s current arguments validated; the step will not validate them again."""
        self._validated[row.step_id] = (row.args, kwargs)

    def add_step(self, row: StepRow) -> None:
        """Add a step to the saga (dynamic sagas add them as they go); it is written with the next flush."""
        self.rows[row.step_id] = row
        self._by_seq[row.seq] = row
        self.saga.plan_hash = extend_head(self.saga.plan_hash, row)  # the chain head seals the list of calls
        self._saga_dirty = True
        self._mark(row)

    async def flush(self) -> None:
        """Commit every changed row in one store write; return once it is durable.

        A fenced engine writes nothing and raises `LeaseLostError`. An engine holding the lease writes only while
        the store still names it the owner; a store refusing the write (another executor took the saga over)
        fences the engine, and the `LeaseLostError` goes on.
        """
        async with self._write_lock:
            self._check_fence()
            if not self._dirty and not self._saga_dirty:
                return
            seal, link = self._sealer.seal, self._link
            steps = []
            for row in self._dirty.values():
                seal(row, link(row))
                steps.append(row.copy())
            self._dirty.clear()
            saga = None
            if self._saga_dirty:
                # The new lease goes on the copy written; the engine believes it only once it is stored (the lease
                # keeper fences a saga whose lease ran out while the store was unreachable).
                saga = self.saga.copy()
                saga.updated_at = now()
                if saga.status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
                    saga.lease_expires_at = saga.updated_at + timedelta(seconds=self.config.lease_timeout)
                self._saga_dirty = False
            try:
                await self.config.store.save(saga, steps, owner=self.owner)
                if saga is not None:
                    self.saga.updated_at, self.saga.lease_expires_at = saga.updated_at, saga.lease_expires_at
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

    def _finish(
        self, row: StepRow, status: StepStatus, *, error: str | None = None, error_type: str | None = None
    ) -> None:
        row.status = status
        row.error = error
        row.error_type = error_type
        row.finished_at = now()
        self._mark(row)
        if self.config.hooks:
            self.emit("step_finished", row, error=error)

    # -- the lease and fencing -----------------------------------------------------------------------------------------

    def fence(self, *, lost: bool = False) -> None:
        """Stop this engine for good: nothing more is written. `lost`: another executor may own the saga now."""
        self.fenced = True
        if lost and not self.lease_lost:
            self.lease_lost = True
            if self.on_lost is not None:
                self.on_lost()

    def is_fenced(self) -> bool:
        """Tell whether the engine is fenced now (a call, not the attribute: it changes across every await)."""
        return self.fenced

    def lost_error(self) -> LeaseLostError:
        """Return the error a fenced engine raises instead of writing."""
        return LeaseLostError(
            f"saga {self.saga.saga_id!r} was taken over by another executor (this one lost its lease); "
            "it goes on there",
            saga_id=self.saga.saga_id,
        )

    def _check_fence(self) -> None:
        if self.fenced:
            raise self.lost_error()

    def keep_lease(self) -> None:
        """Make the next write extend the lease when too little of it is left to start a step on.

        Only for an engine holding the lease: its writes are owner-conditional, so the extension is refused (and
        the engine fenced) if another executor took the saga over meanwhile.
        """
        expires = self.saga.lease_expires_at
        if self.owner is None or expires is None:
            return
        if (expires - now()).total_seconds() < self.config.lease_timeout * _LEASE_MARGIN:
            self._saga_dirty = True  # flush() writes the saga row with a fresh lease_expires_at

    # -- failure -------------------------------------------------------------------------------------------------------

    @property
    def failed(self) -> bool:
        """Tell whether a step failed in a way that fails the saga."""
        return self.failure is not None

    def _fail_saga(self, row: StepRow, error: str) -> None:
        if self.failure is None:
            self.failure = f"step {row.step_id!r} ({row.tool_name}) failed: {error}"
            self._failed_step = row.step_id

    # -- the end -------------------------------------------------------------------------------------------------------

    async def finish(self, status: SagaStatus) -> SagaResult:
        """Record the saga's terminal status and return its result; the record is written even if the caller leaves."""
        return await shielded(self._record_end(status))

    async def _record_end(self, status: SagaStatus) -> SagaResult:
        self._check_fence()  # another executor owns the saga: its end is not ours to record
        self.saga.status = status
        if status is not SagaStatus.SUCCESS and self.saga.error is None:
            self.saga.error = self.failure or "the saga was cancelled by its caller"
        self.saga.finished_at = now()
        self.saga.lease_expires_at = None
        self._mark_saga()
        bound = final_write_bound(self.config.store)
        with anyio.move_on_after(bound) as scope:
            await self.flush()
        if scope.cancelled_caught:
            raise StoreError(
                f"saga {self.saga.saga_id!r} ended {status.value} but the store did not record it within "
                f"{bound:g}s ({self.config.store.url}); check the database: recovery will finish it"
            )
        self.emit("saga_finished", error=self.saga.error)
        log = logger.info if status is SagaStatus.SUCCESS else logger.warning
        log("saga %s ended %s%s", self.saga.saga_id, status.value, f": {self.saga.error}" if self.saga.error else "")
        return result_from_rows(self.saga, list(self.rows.values()))


def seq_of(row: StepRow) -> int:
    """Return a row's position in its saga (a sort key)."""
    return row.seq


def final_write_bound(store: SagaStore) -> float:
    """Return the seconds the write of a saga's end may take: the store's retry window (`retry_for`) and a margin."""
    retry_for = getattr(store, "retry_for", None)  # SQL stores retry a lost connection that long; memory: none
    window = 0.0
    if isinstance(retry_for, int | float) and not isinstance(retry_for, bool) and math.isfinite(retry_for):
        window = max(0.0, float(retry_for))
    return window + _FINAL_WRITE_MARGIN
