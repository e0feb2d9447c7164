"""What front doors ask of the engine: run a plan, decide an approval, unpark, retry a compensation, recover.

`SagaExecutor` and `SagaAdmin` both delegate here, so each action behaves the same from either. An action that
needs tools this executor lacks records what it can and leaves the rest for a worker that has them.
"""

from __future__ import annotations

import logging

from saga_runtime._engine import _journal
from saga_runtime._engine._approvals import Decisions
from saga_runtime._engine._calls import CallBody
from saga_runtime._engine._claim import Drives
from saga_runtime._engine._driver import Planner, PlanShape, drive
from saga_runtime._engine._events import SagaEvent, emit
from saga_runtime._engine._notices import changed
from saga_runtime._engine._queueing import Queues
from saga_runtime._engine._recovery import Recovery
from saga_runtime._exceptions import (
    ApprovalError,
    IdempotencyConflictError,
    SagaError,
    SagaInProgressError,
    SagaNotFoundError,
)
from saga_runtime._records import (
    REJECTED,
    ApprovalRequest,
    ApprovalRow,
    SagaResult,
    SagaRow,
    SagaStatus,
    StepRow,
    cancel_entry,
    cancel_note,
    function_of,
    gated_steps,
    now,
    read_note,
    result_from_rows,
    same_work,
    snapshots,
)
from saga_runtime._storage import approvals_of

__all__ = ["Actions"]

logger = logging.getLogger("saga_runtime")


class Actions:
    """The engine's side of every front door's action on sagas (see the module docstring)."""

    __slots__ = ("_decisions", "_drives", "_planner", "queues", "recovery")

    def __init__(
        self, drives: Drives, planner: Planner, *, max_recovery_attempts: int, recovery_concurrency: int
    ) -> None:
        self._drives = drives
        self._planner = planner
        self._decisions = Decisions(drives.config)
        self.recovery = Recovery(drives, planner, max_attempts=max_recovery_attempts, concurrency=recovery_concurrency)
        self.queues = Queues(drives, self.recovery)
        drives.actions = self  # a child saga's step runs its child through them (saga_runtime._engine._children)

    @property
    def drives(self) -> Drives:
        """Return the drives these actions go through."""
        return self._drives

    @property
    def planner(self) -> Planner:
        """Return the planner the front door handed down."""
        return self._planner

    async def run(
        self,
        work: PlanShape | CallBody,
        saga: SagaRow,
        steps: list[StepRow],
        *,
        announce: bool,
        args_shown_as_is: bool = False,
    ) -> SagaResult:
        """Store a new saga and drive it (`work`: its plan, or a saga function's code); an existing one is returned
        finished, or resumed if its owner is gone. `announce`: the first group's intent is written with the saga.
        `args_shown_as_is`: no step's arguments hold a secret to mask (`Plan.args_shown_as_is`).
        """
        drives = self._drives
        store = drives.config.store
        engine = drives.claims.start_plan(saga, steps, announce=announce)
        engine.journal.args_shown_as_is = args_shown_as_is  # (a resumed saga's engine checks them)
        # Only the first group's intents go with the saga: a step's row is first written at its intent.
        announced = engine.journal.announced
        created = saga.copy()
        existing = await _journal.create(store, created, snapshots(steps, announced))
        if existing is None:
            engine.journal.stored_as(created)
            logger.debug("saga %s: started by %s, %d steps", saga.saga_id, drives.config.executor_id, len(steps))
            claim = drives.claim(saga, take="new")
        else:
            stored, rows = existing
            if self._finished(saga, stored, rows) or stored.status is SagaStatus.WAITING:
                # Finished, or waiting for a decision: the stored result, and no tool called.
                return result_from_rows(stored, rows, await self.approvals_of(stored))
            if stored.parent_id is not None and stored.parent_id != saga.parent_id:
                # A live child is driven through its parent only (saga_runtime._engine._children).
                raise SagaInProgressError(
                    f"saga {saga.saga_id!r} is a child of saga {stored.parent_id!r}, driven through its parent only: "
                    "run its parent, or wait for it",
                    saga_id=saga.saga_id,
                    owner=stored.owner,
                    lease_expires_at=stored.lease_expires_at,
                )
            previous = stored.owner  # (before the claim: a claim makes the stored row this executor's)
            claim = drives.claim(stored, rows, take="orphan")
        async with claim as held:
            if held is None:
                raise claim.in_progress(
                    "wait for it and read its result with store.get_saga(), or run it again once it has finished"
                )
            if existing is not None:
                left = "its last owner, who released it," if previous is None else f"its previous owner {previous!r}"
                logger.info("saga %s: resuming where %s left it", saga.saga_id, left)
            engine = held.start(engine if existing is None else None)
            engine.emit("saga_started")
            return await drive(engine, work, self._planner, resumed=existing is not None)

    @staticmethod
    def _finished(attempted: SagaRow, saga: SagaRow, steps: list[StepRow]) -> bool:
        """Tell whether a stored saga of the same id is finished; raise if it holds another plan."""
        if not same_work(saga, attempted):
            raise IdempotencyConflictError(
                f"saga {saga.saga_id!r} already exists with a different plan (or saga function "
                "arguments); a saga id names one piece of work, so use a new saga_id for this one",
                saga_id=saga.saga_id,
            )
        if saga.status.is_terminal:
            logger.debug("saga %s: already finished %s, returning the stored result", saga.saga_id, saga.status)
            return True
        return False

    async def approvals_of(self, saga: SagaRow) -> list[ApprovalRow]:
        """Return a stored saga's approval rows (none to read for a plan without a step needing approval)."""
        if saga.kind == "plan" and not gated_steps(saga.plan):
            return []
        return await approvals_of(self._drives.config.store, saga.saga_id)

    async def pending(self, limit: int) -> list[ApprovalRequest]:
        """Return the undecided approval requests of waiting sagas, oldest first."""
        return await self._decisions.pending(limit)

    async def decide(
        self,
        saga_id: str,
        step_id: str,
        decision: str,
        *,
        by: str,
        note: str | None,
        digest: str | None,
        resume: bool,
    ) -> SagaResult:
        """Record a decision; with `resume`, go on with a decided plan saga here; return the saga as it stands."""
        saga, requests = await self._decisions.decide(saga_id, step_id, decision, by=by, note=note, digest=digest)
        changed(self._drives.config.store, saga_id)  # a waiting child's parent in this process looks at once
        resumable = saga.kind == "plan" or function_of(saga.plan) is not None  # (a saga function resumes too)
        if resume and resumable and all(request.decision is not None for request in requests):
            result = await self.recovery.go_on(saga_id, look=False)
            if result is not None:
                return result
        await self.recovery.wake_workers(saga_id)  # not gone on here: a worker does, at once
        return await self._stored_result(saga_id)

    async def cancel(self, saga_id: str, reason: str | None, by: str | None = None) -> SagaResult:
        """Cancel a saga (QUEUED: at once; running, waiting: asked to compensate; else unchanged); `by` is recorded."""
        config = self._drives.config
        store = config.store
        stored = await store.load_saga(saga_id)
        if stored is None:
            raise SagaNotFoundError(f"no saga {saga_id!r} in {store.url}", saga_id=saga_id)
        why = "cancelled" + (f": {reason}" if reason else "")
        saga = stored[0]
        asked = now()
        note = cancel_note(asked, by or config.executor_id, reason)
        if saga.status is SagaStatus.QUEUED and await _journal.cancel_queued(
            store, saga, f"{why} (before it started)", asked, cancel_entry(read_note(note, at=asked), "cancelled")
        ):
            self._told(saga, why)
            return await self._stored_result(saga_id)
        status = (await self._stored_result(saga_id)).status
        if status.is_terminal or status is SagaStatus.PARKED:
            return await self._stored_result(saga_id)
        if await _journal.ask_cancel(store, saga_id, note):
            self._told(stored[0], why)
            changed(store, saga_id)  # a waiting child's parent in this process looks at once
        if status is SagaStatus.WAITING:
            undecided = [row for row in await approvals_of(store, saga_id) if row.decision is None]
            for index, request in enumerate(undecided):
                try:
                    await self.decide(
                        saga_id,
                        request.step_id,
                        REJECTED,
                        by="cancel",
                        note=why,
                        digest=None,
                        resume=index == len(undecided) - 1,
                    )
                except ApprovalError:
                    continue  # decided meanwhile
        return await self._stored_result(saga_id)

    def _told(self, saga: SagaRow, why: str) -> None:
        hooks = self._drives.config.hooks
        if hooks:
            emit(hooks, SagaEvent("saga_cancel_requested", saga.saga_id, status=saga.status.value, error=why))

    async def _stored_result(self, saga_id: str) -> SagaResult:
        store = self._drives.config.store
        stored = await store.load_saga(saga_id)
        assert stored is not None  # sagas are never deleted
        return result_from_rows(*stored, await approvals_of(store, saga_id))

    async def unpark(self, saga_id: str, *, compensate: bool, tools: bool = True) -> SagaResult | None:
        """Make a PARKED saga live again, or compensating; compensate it here if this executor has its tools.

        With `compensate`, a live saga whose owner is gone and whose tools this executor lacks (stuck waiting for
        them) is compensated here with the tools it has; `tools`: this front door was given tools at all.
        """
        store = self._drives.config.store
        stored = await store.load_saga(saga_id)
        if stored is None:
            raise KeyError(f"no saga {saga_id!r} in {store.url}")
        missing = self.recovery.missing_tools(*stored)
        if compensate and missing and stored[0].status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
            if not tools:
                raise SagaInProgressError(
                    f"saga {saga_id!r} waits for the tools {', '.join(missing)}: to give up on it, unpark it with "
                    "a registry of the tools that are present (--tools), which compensate what they can",
                    saga_id=saga_id,
                )
            return await self._give_up(saga_id, missing)
        # One conditional change in the store: of two operators unparking at once, one gets the error below.
        if stored[0].status is not SagaStatus.PARKED or not await _journal.unpark(
            store, stored[0], compensate=compensate, at=now()
        ):
            stored = await store.load_saga(saga_id)
            status = "gone" if stored is None else stored[0].status.value
            raise SagaInProgressError(f"saga {saga_id!r} is {status}, not PARKED", saga_id=saga_id)
        if not compensate:
            return None
        stored = await store.load_saga(saga_id)
        if stored is None:
            return None
        missing = self.recovery.missing_tools(*stored)
        if missing:
            logger.warning("saga %s: to be compensated by an executor that has the tools %s", saga_id, missing)
            return None
        async with self._drives.claim(*stored, take="orphan") as held:
            if held is None:
                return None  # another executor's recovery took it first: it compensates it
            engine = held.start()
            engine.emit("saga_started")
            return await engine.compensate()

    async def _give_up(self, saga_id: str, missing: list[str]) -> SagaResult:
        """Compensate a live saga stuck for lack of its tools, with those present; what none can undo stays failed."""
        store = self._drives.config.store
        stored = await store.load_saga(saga_id)
        assert stored is not None  # sagas are never deleted
        claim = self._drives.claim(*stored, take="orphan", reread={SagaStatus.RUNNING, SagaStatus.COMPENSATING})
        async with claim as held:
            if held is None:
                raise SagaInProgressError(
                    f"saga {saga_id!r} is {claim.saga.status.value} under executor {claim.saga.owner!r}; only a saga "
                    "whose owner is gone can be given up on",
                    saga_id=saga_id,
                    owner=claim.saga.owner,
                    lease_expires_at=claim.saga.lease_expires_at,
                )
            engine = held.start()
            reason = f"an operator chose to compensate it while it waited for the tool(s) {', '.join(missing)}"
            logger.warning("saga %s: %s", saga_id, reason)
            engine.journal.give_up(reason)
            engine.emit("saga_started")
            return await engine.compensate()

    async def retry_compensation(self, saga_id: str) -> SagaResult:
        """Reopen a COMPENSATION_FAILED saga's compensations; run them here if this executor has its tools."""
        drives = self._drives
        store = drives.config.store
        stored = await store.load_saga(saga_id)
        if stored is None:
            raise KeyError(f"no saga {saga_id!r} in {store.url}")
        if saga_id in drives:
            raise SagaInProgressError(f"saga {saga_id!r} is being compensated by this executor", saga_id=saga_id)
        if stored[0].purged_at is not None:  # a tombstone: its steps are gone, and it never runs again (API.md §14)
            raise SagaError(
                f"saga {saga_id!r} was purged at {stored[0].purged_at.isoformat()}: its compensations cannot be "
                "retried from a tombstone (its steps are in the purge's archive, if one was kept)"
            )
        if stored[0].status is not SagaStatus.COMPENSATION_FAILED:
            raise SagaInProgressError(
                f"saga {saga_id!r} is {stored[0].status.value}; only a COMPENSATION_FAILED saga has compensations "
                "to retry",
                saga_id=saga_id,
            )
        # The claim: of two callers at once, only one reopens the saga; the re-read sees what the other did.
        claim = drives.claim(stored[0], take="reopen", reread={SagaStatus.COMPENSATING})
        async with claim as held:
            if held is None:
                raise SagaInProgressError(
                    f"saga {saga_id!r} is no longer COMPENSATION_FAILED: another caller is retrying its compensations",
                    saga_id=saga_id,
                )
            missing = self.recovery.missing_tools(held.saga, held.rows)
            if missing:
                # Reopened and let go: the next recover() of an executor with the tools compensates it.
                engine = drives.claims.engine(held.saga, held.rows)
                engine.reopen_compensation()
                await engine.flush()
                await held.release()
                logger.warning("saga %s: to be compensated by an executor that has the tools %s", saga_id, missing)
                await self.recovery.wake_workers()
                return result_from_rows(held.saga, list(engine.rows.values()))
            engine = held.start()
            engine.reopen_compensation()  # its failed compensations are due again; none done is redone
            engine.emit("saga_started")
            return await engine.compensate()
