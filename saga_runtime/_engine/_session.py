"""Sessions: one executor's hold on the sagas it drives — claiming them, keeping their leases, and letting go.

`Claims` is how one executor takes a saga (a conditional change in the store), gives one up, parks one for an
operator, and starts a new one. `Session` is one saga driven under the lease, so the cancellation rules live in one
place. Both serve `Claim` (`_claim`), the one claim-and-drive context manager, which owns the set of sagas driven.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any

import anyio

from saga_runtime._engine import _journal
from saga_runtime._engine._cancellation import cancel_requests, fence_scope
from saga_runtime._engine._config import EngineConfig
from saga_runtime._engine._journal import ClaimKind, let_go, park, take_over
from saga_runtime._engine._lease import LeaseKeeper, LeaseWheel
from saga_runtime._engine._saga import SagaEngine
from saga_runtime._exceptions import LeaseLostError
from saga_runtime._records import (
    SagaKind,
    SagaResult,
    SagaRow,
    SagaStatus,
    StepRow,
    now,
    result_from_rows,
    with_unstarted,
)

__all__ = ["Claims", "Session"]

logger = logging.getLogger("saga_runtime")

# How long giving a saga up (or parking it) may take, shielded from the caller's cancellation: it is one write.
_RELEASE_BOUND = 10.0
# Statuses read for every saga, as module constants: Python 3.11 reads an enum class's attribute through
# EnumType.__getattr__'s slow hook, a module global at a fraction of its cost.
_QUEUED, _RUNNING, _WAITING = SagaStatus.QUEUED, SagaStatus.RUNNING, SagaStatus.WAITING


class Claims:
    """How one executor takes sagas, starts them, gives them up and parks them."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._wheel: LeaseWheel | None = None
        self._lease_span = timedelta(seconds=config.lease_timeout)  # (the config is frozen: one timedelta for all)

    def lease_wheel(self) -> LeaseWheel:
        """Return the wheel the leases of this executor's sagas are renewed by, on the running loop."""
        loop = asyncio.get_running_loop()
        wheel = self._wheel
        if wheel is None or wheel.loop is not loop:
            wheel = self._wheel = LeaseWheel(loop, self.config.lease_timeout / 3)
        return wheel

    def lease_until(self, start: Any) -> Any:
        """Return when a lease taken at `start` expires."""
        return start + self._lease_span

    def new_saga(
        self,
        saga_id: str | None,
        kind: SagaKind,
        *,
        plan: Any = None,
        plan_hash: str | None = None,
        budget: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        queued: bool = False,
    ) -> SagaRow:
        """Return the row of a new saga, RUNNING under this executor's lease, or QUEUED unowned (not yet stored)."""
        started = now()
        return SagaRow(
            saga_id=saga_id or new_saga_id(),
            kind=kind,
            plan=plan,
            plan_hash=plan_hash,
            status=_QUEUED if queued else _RUNNING,
            created_at=started,
            updated_at=started,
            owner=None if queued else self.config.executor_id,
            lease_expires_at=None if queued else self.lease_until(started),
            budget=budget,
            metadata=metadata if metadata is not None else {},
        )

    def start_plan(self, saga: SagaRow, steps: list[StepRow], *, announce: bool = True) -> SagaEngine:
        """Return the engine of a new plan saga; its first group's intent (RUNNING, attempt 1) is written with it.

        Not with `announce=False`: a first group holding a step that needs approval waits for a decision first.
        """
        first = [row for row in steps if row.group == 0] if announce else []
        engine = SagaEngine(self.config, saga, steps, announced=first, owner=self.config.executor_id)
        engine.journal.link_all()  # linked now: the store seals each row as it writes it
        return engine

    def engine(self, saga: SagaRow, steps: Sequence[StepRow], *, detached: bool = False) -> SagaEngine:
        """Return an engine driving a stored saga under this executor's lease.

        `detached`: no caller waits on it (recovery): a cancellation (the worker shutting down) stops it without
        compensating, and the next recovery resumes it.
        """
        # Steps never started have no row yet: they are read from the plan.
        engine = SagaEngine(self.config, saga, with_unstarted(saga, list(steps)), owner=self.config.executor_id)
        engine.detached = detached
        return engine

    async def take(self, saga: SagaRow, how: ClaimKind) -> bool:
        """Claim the saga (as `how` says) under this executor's lease; say if given."""
        started = now()
        expires = self.lease_until(started)
        if not await _journal.claim(self.config.store, saga, self.config.executor_id, expires, started, how):
            return False
        take_over(saga, self.config.executor_id, expires)
        return True

    async def take_waiting(self, saga_id: str) -> tuple[SagaRow, list[StepRow]] | None:
        """Ask the store for the WAITING saga `saga_id` under this executor's lease; return its rows as claimed."""
        started = now()
        expires = self.lease_until(started)
        claimed = await _journal.claim_waiting(self.config.store, saga_id, self.config.executor_id, expires, started)
        if claimed is None:
            return None
        take_over(claimed[0], self.config.executor_id, expires)  # the lease clock counts from this claim's
        return claimed

    async def release(
        self, saga: SagaRow, *, uncount: bool = False, owner: str | None = None, stopping: bool = False
    ) -> bool:
        """Give up a claimed saga at once (no owner, no lease), so another executor can take it; return if written.

        With `owner` (the claim this executor holds), only while the store still names it the owner: a saga
        another executor took over meanwhile is left as it is. `stopping`: this executor stops driving it (a
        worker's stop), noted in its history so the next takeover names who let it go.
        """
        let_go(saga, uncount=uncount, by=self.config.executor_id if stopping else None)
        return await self._write_release(saga, owner)

    async def give_back(self, saga: SagaRow, owner: str) -> bool:
        """Give a saga claimed from an expired owner back as the claim found it (`saga`: that owner, its lapsed
        lease), unchanged but for its error: the next takeover names who really held it. Return if written."""
        return await self._write_release(saga, owner)

    async def _write_release(self, saga: SagaRow, owner: str | None) -> bool:
        with anyio.move_on_after(_RELEASE_BOUND, shield=True):
            if await _journal.release(self.config.store, saga, owner):
                return True
            logger.info("saga %s: not released, another executor owns it now", saga.saga_id)
        return False

    async def park(self, saga: SagaRow, rows: list[StepRow], why: str) -> SagaResult | None:
        """Set a claimed saga PARKED for an operator; None if another executor took it over meanwhile."""
        park(saga, why)
        if not await self.release(saga, owner=self.config.executor_id):
            return None
        logger.error("saga %s: %s", saga.saga_id, saga.error)
        return result_from_rows(saga, rows)


def new_saga_id() -> str:
    """Return a fresh saga id: what `uuid.uuid4().hex` returns, without building a UUID object."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
    return raw.hex()


class Session:
    """Drive one saga under this executor's lease: `async with Session(claims, engine):`.

    Entering starts renewing the saga's lease. A lease lost (another executor took the saga
    over, or it ran out unrenewed) fences the engine — it writes and starts nothing more — and cancels the work
    inside the block. Leaving stops the renewals and tells the two cancellations apart: the caller's own goes on
    as `CancelledError` (also when it lands in the same turn as the fence); a lost lease becomes `LeaseLostError`,
    unless the saga's end was recorded before it was lost.
    """

    def __init__(self, claims: Claims, engine: SagaEngine, *, where: str = "while this one ran it") -> None:
        self._claims = claims
        self.engine = engine
        self._where = where
        self._fence = fence_scope()
        self._pending = 0
        self.keeper: LeaseKeeper | None = None

    def enter(self) -> None:
        """Start the session in the current task (what `async with` does; for front doors that enter by hand)."""
        self._pending = cancel_requests()
        self._fence.__enter__()
        self.keeper = LeaseKeeper(
            self.engine.journal, self._fence.cancel, on_cancel=self.engine.cancel, wheel=self._claims.lease_wheel()
        ).start()

    async def exit(self, exc: BaseException | None) -> None:
        """Leave the session in the task that entered it; raise what the caller must see (see the class)."""
        engine = self.engine
        try:
            if self.keeper is not None:
                await self.keeper.stop()  # the lease is renewed no more
            saga = engine.saga
            stopped = engine.fenced and not engine.lease_lost and saga.status is not _WAITING
            if engine.detached and stopped and not saga.status.is_terminal:
                # A recovery stopped by a shutdown: let the next worker take the saga now (before the claim
                # lets it go, so no other path of this executor takes it while the release is on its way). A clean
                # stop is no failed recovery: the attempt it counted is taken back.
                await self._claims.release(saga, uncount=True, owner=self._claims.config.executor_id, stopping=True)
        finally:
            self._fence.__exit__(
                type(exc) if exc is not None else None, exc, None if exc is None else exc.__traceback__
            )
        journal = self.engine.journal
        if not journal.lease_lost:
            return
        if cancel_requests() > self._pending:
            # The caller cancelled in the same turn as the fence: its cancellation goes on (the saga is the new
            # owner's either way).
            raise asyncio.CancelledError
        if exc is None and (self.engine.saga.status.is_terminal or self.engine.saga.status is _WAITING):
            return  # its end (or its wait) was recorded while the lease was still ours
        raise LeaseLostError(
            f"saga {self.engine.saga.saga_id!r} was taken over by another executor {self._where} (its lease "
            "expired); it stopped here without compensating, and goes on under its new owner",
            saga_id=self.engine.saga.saga_id,
        ) from exc

    async def __aenter__(self) -> SagaEngine:
        self.enter()
        return self.engine

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.exit(exc)
