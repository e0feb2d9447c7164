"""The one claim-and-drive context manager: claim a saga, re-read it, drive it under its lease, let it go.

`Drives` owns the set of sagas this executor drives right now, so two paths of one executor (a `run()` resuming,
a `recover()`, an approval going on, a re-entered dynamic saga) never both take the same one. Every front door
drives a saga through `async with drives.claim(...) as held:`; nothing else touches that set.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Literal

from saga_runtime._engine._cancellation import Shelters
from saga_runtime._engine._config import EngineConfig
from saga_runtime._engine._journal import ClaimKind, take_over, took_over
from saga_runtime._engine._saga import SagaEngine
from saga_runtime._engine._session import Claims, Session
from saga_runtime._exceptions import SagaInProgressError
from saga_runtime._records import SagaKind, SagaResult, SagaRow, SagaStatus, StepRow, now

__all__ = ["DRIVING", "Claim", "Drives", "Take"]

# How a saga is taken: just created by this executor ("new", nothing to ask), its owner gone ("orphan": a
# takeover, recorded in its history), started from its queue ("queued"), its decisions made ("waiting"), or its
# failed compensations reopened ("reopen").
Take = Literal["new", "orphan", "queued", "waiting", "reopen"]


#: The drives of the saga being driven (set by `Claim.start`, in the task that drives it): a child saga's step
#: runs and undoes its child through them (saga_runtime._engine._children).
DRIVING: ContextVar[Drives | None] = ContextVar("saga_runtime_driving", default=None)


class Drives:
    """The sagas one executor drives right now, and the one way to drive one: `claim()`."""

    __slots__ = ("_driving", "actions", "claims", "config")

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.claims = Claims(config)
        self._driving: set[str] = set()
        self.actions: Any = None  # the Actions delegating to these drives (a child saga's step runs through them)

    def __contains__(self, saga_id: object) -> bool:
        return saga_id in self._driving

    def new_saga(self, saga_id: str | None, kind: SagaKind, **fields: Any) -> SagaRow:
        """Return the row of a new saga, RUNNING under this executor's lease (not yet stored)."""
        return self.claims.new_saga(saga_id, kind, **fields)

    def claim(
        self,
        saga: SagaRow,
        rows: Sequence[StepRow] = (),
        *,
        take: Take,
        reread: Collection[SagaStatus] = (),
    ) -> Claim:
        """Return the context manager that takes `saga` as `take` says (see `Take`) and drives it.

        With `reread`, the saga is read again once claimed, and held only if it is still this executor's and in
        one of those statuses (what was read before the claim may predate another executor's run).
        """
        return Claim(self, saga, list(rows), take, reread)

    def claim_waiting(self, saga_id: str) -> Claim:
        """Return the context manager that takes the WAITING saga `saga_id` (read as the store claims it: one round
        trip on PostgreSQL) and drives it; entering yields None when it is not WAITING or is held elsewhere."""
        return Claim(self, saga_id, [], "waiting", ())


class Claim:
    """Claim → re-read → session with lease heartbeat and fence → drive → release: one saga, held once.

    Entering yields the claim, or None when the saga is not this executor's to drive (taken, or busy here).
    `start()` opens the session the saga is driven in; leaving closes it (raising `LeaseLostError` if the lease
    was lost) and lets the saga go from the set of sagas driven.
    """

    __slots__ = ("_drives", "_held", "_reread", "_saga_id", "_take", "rows", "saga", "session")

    def __init__(
        self, drives: Drives, saga: SagaRow | str, rows: list[StepRow], take: Take, reread: Collection[SagaStatus]
    ) -> None:
        self._drives = drives
        self._take = take
        self._reread = reread
        # A saga given by id only (a WAITING one) is read as the store claims it.
        if isinstance(saga, str):
            self._saga_id = saga
        else:
            self._saga_id, self.saga = saga.saga_id, saga
        self.rows = rows
        self.session: Session | None = None
        self._held = False  # this claim put the saga in the set: only then does it take it out

    async def __aenter__(self) -> Claim | None:
        drives, saga_id = self._drives, self._saga_id
        driving = drives._driving
        if saga_id in driving:
            return None
        driving.add(saga_id)  # before the store is asked: no other path of this executor takes it meanwhile
        self._held = True
        try:
            if not hasattr(self, "saga"):  # given by id: claimed and read at once, as the claim left it
                claimed = await drives.claims.take_waiting(saga_id)
                if claimed is None:
                    self._let_go()
                    return None
                self.saga, self.rows = claimed
                return self
        except BaseException:
            self._let_go()
            raise
        before = self.saga.owner
        try:
            if self._take != "new" and not await drives.claims.take(self.saga, self._claim_kind()):
                self._let_go()
                return None
            if self._reread:
                stored = await drives.config.store.load_saga(saga_id)
                if (
                    stored is None
                    or stored[0].owner != drives.config.executor_id
                    or stored[0].status not in self._reread
                ):
                    self._let_go()
                    return None
                # The stored expiry is on the database's clock: the lease clock counts from this claim's.
                expires = self.saga.lease_expires_at
                self.saga, self.rows = stored
                if expires is not None:
                    take_over(self.saga, drives.config.executor_id, expires)
        except BaseException:
            self._let_go()
            raise
        if self._take == "orphan":
            took_over(self.saga, drives.config.executor_id, before, now())
        return self

    def _let_go(self) -> None:
        if self._held:
            self._held = False
            self._drives._driving.discard(self._saga_id)

    def _claim_kind(self) -> ClaimKind:
        if self._take in ("orphan", "queued"):
            return "live"
        return "waiting" if self._take == "waiting" else "reopen"

    def start(
        self,
        engine: SagaEngine | None = None,
        *,
        detached: bool = False,
        shelters: Shelters | None = None,
        where: str = "while this one ran it",
    ) -> SagaEngine:
        """Open the session the saga is driven in, on `engine` (else one over the claimed rows); return the engine.

        `detached`: no caller waits on it (recovery): a cancellation stops it without compensating; `shelters`:
        the serving worker's, whose stop ends it between groups.
        """
        if engine is None:
            engine = self._drives.claims.engine(self.saga, self.rows, detached=detached)
        if detached:
            engine.shelters = shelters
        if self._take == "orphan":
            engine.journal.touch_saga()  # the takeover is written (sealed) with the first flush
        DRIVING.set(self._drives)  # in the task that drives it: a child saga's step runs through these drives
        self.session = Session(self._drives.claims, engine, where=where)
        self.session.enter()
        return engine

    def in_progress(self, then: str) -> SagaInProgressError:
        """Return the error of a saga this claim did not get: QUEUED for a worker, or driven by another owner."""
        saga = self.saga
        if saga.status is SagaStatus.QUEUED:
            return SagaInProgressError(
                f"saga {saga.saga_id!r} is QUEUED: a worker serving its queue starts it; wait for it with "
                "executor.handle(saga_id).result()",
                saga_id=saga.saga_id,
            )
        return SagaInProgressError(
            f"saga {saga.saga_id!r} is {saga.status.value} under executor {saga.owner!r}; {then}",
            saga_id=saga.saga_id,
            owner=saga.owner,
            lease_expires_at=saga.lease_expires_at,
        )

    @property
    def taken_over(self) -> bool:
        """Tell whether this claim took the saga over from another owner (not a queued start)."""
        return self._take == "orphan"

    @property
    def may_have_a_cancel(self) -> bool:
        """Tell whether an operator's cancel may wait for it in the store: taken over, or started from a queue
        (a cancel made between its start and its first lease renewal)."""
        return self._take in ("orphan", "queued")

    async def release(self) -> None:
        """Give the claimed saga up undriven, so another executor can take it."""
        await self._drives.claims.release(self.saga, owner=self._drives.config.executor_id)

    async def park(self, why: str) -> SagaResult | None:
        """Park the claimed saga for an operator, undriven; None if another executor took it over meanwhile."""
        return await self._drives.claims.park(self.saga, self.rows, why)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.session is not None:
                await self.session.exit(exc)
        finally:
            self._let_go()

    async def close(self, exc: BaseException | None = None) -> None:
        """Leave the claim by hand (a dynamic saga's block spans two methods); as leaving `async with`."""
        await self.__aexit__(None if exc is None else type(exc), exc, None if exc is None else exc.__traceback__)

    def __repr__(self) -> str:
        return f"Claim({self.saga.saga_id!r}, session={self.session is not None})"
