"""Approvals: steps that wait for a person's decision before they run, and the decisions themselves.

The `Gate` holds one saga's requests. When the saga reaches a group holding steps that need a decision, it records
the requests of every such step (each with the step's exact arguments and their digest) before any step of the
group starts; the saga then WAITs, its lease given up. Once every request of the group is decided, the group goes
on: approved steps are PENDING again and run through the normal write-ahead path (written RUNNING before they
run, so a crash after the decision re-runs nothing twice); a refused step is REJECTED and fails the group.

`Decisions` records one decision for any executor: one conditional update in the store, so of two decisions at
once exactly one is recorded, sealed into the saga's record, and told to the hooks once it is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from saga_runtime._engine import _journal
from saga_runtime._engine._events import SagaEvent, emit
from saga_runtime._engine._journal import EngineConfig, Journal, decided
from saga_runtime._exceptions import ApprovalError, ReplayDivergenceError
from saga_runtime._records import (
    DEADLINE,
    REJECTED,
    ApprovalRequest,
    ApprovalRow,
    SagaRow,
    StepRow,
    StepStatus,
    approval_request,
    args_digest,
    identity_hash,
    mask_secrets,
    now,
)
from saga_runtime._storage import SagaStore, approvals_of, has, waits_of

__all__ = ["HOLDABLE", "Decisions", "Gate", "decided"]

logger = logging.getLogger("saga_runtime")

#: Steps a gate may hold: never started (PENDING), or waiting for their decision.
HOLDABLE = frozenset({StepStatus.PENDING, StepStatus.WAITING})


def rejection(request: ApprovalRow) -> str:
    """Return the words a refused step is recorded with: who refused it, and why."""
    why = f": {request.note}" if request.note else ""
    if request.decided_by == DEADLINE:
        return f"rejected: its approval deadline passed{why}"
    return f"rejected by {request.decided_by}{why}"


class Gate:
    """One saga's approval requests: recorded when a group needs them, read when the saga goes on."""

    __slots__ = ("_journal", "_loaded", "rows")

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._loaded = False
        self.rows: dict[str, ApprovalRow] = {}

    async def load(self) -> None:
        """Read the saga's requests from the store (once; a saga that was never held has none)."""
        if self._loaded:
            return
        journal = self._journal
        self._keep(await approvals_of(journal.store, journal.saga.saga_id))

    def known(self, rows: Sequence[ApprovalRow]) -> None:
        """Take the saga's requests as just read from the store (`load` then reads nothing)."""
        self._keep(rows)

    def _keep(self, rows: Sequence[ApprovalRow]) -> None:
        self._loaded = True
        self.rows.update((row.step_id, row) for row in rows)
        self._journal.approvals = sorted(self.rows.values(), key=lambda row: row.seq)

    def request_of(self, step_id: str) -> ApprovalRow | None:
        """Return the request of a step, if it has one."""
        return self.rows.get(step_id)

    async def hold(self, gated: Sequence[StepRow]) -> tuple[bool, list[StepRow]]:
        """Decide whether the group of the `gated` steps (those needing a decision) may start.

        Records the requests not recorded yet, and rejects those whose deadline passed. Returns (waiting,
        rejected): waiting when a request is undecided (the gated steps are WAITING then); else the approved
        steps are PENDING again, to run as any step, and the refused ones REJECTED.
        """
        journal = self._journal
        await self.load()
        saga_id = journal.saga.saga_id
        started = now()
        new = []
        for row in gated:
            request = self.rows.get(row.step_id)
            # Over the arguments as a person sees them (a secret as "**********"): an encrypted value differs at
            # each encryption, and a digest of the plain secret would be one more place it could be guessed from.
            digest = args_digest(mask_secrets(row.args))
            if request is not None:
                if request.args_digest != digest:
                    raise ReplayDivergenceError(
                        f"saga {saga_id!r} step {row.step_id!r}: its approval request is for other arguments "
                        f"(digest {request.args_digest}, the call's is {digest}); a decision binds one call",
                        saga_id=saga_id,
                    )
                continue
            timeout = journal.config.registry.get(row.tool_name).approval_timeout
            request = ApprovalRow(
                saga_id,
                row.step_id,
                row.seq,
                row.tool_name,
                row.args,
                digest,
                started,
                None if timeout is None else started + timedelta(seconds=timeout),
                prev_hash=identity_hash(row, saga_id),  # linked to its step; the store seals it
            )
            new.append(request)
        if new:
            await journal.flush()  # the steps are stored before the requests that name them
            added = set(await _journal.request_approvals(journal.store, new))
            self._keep([request for request in new if request.step_id in added])
            if len(added) < len(new):  # another executor recorded some meanwhile: theirs stand
                self._loaded = False
                await self.load()
            for row in gated:
                if row.step_id in added:
                    journal.emit("approval_requested", row)
                    logger.info("saga %s: step %s (%s) waits for approval", saga_id, row.step_id, row.tool_name)
        for row in gated:
            request = self.rows[row.step_id]
            if request.decision is None and request.deadline is not None and request.deadline <= started:
                await self._expire(request)
        for row in gated:
            if row.status is StepStatus.PENDING:
                journal.hold(row)
        if any(self.rows[row.step_id].decision is None for row in gated):
            return True, []
        rejected = []
        for row in gated:
            request = self.rows[row.step_id]
            if request.decision == REJECTED:
                journal.finish_step(row, StepStatus.REJECTED, error=rejection(request), error_type="ApprovalRejected")
                rejected.append(row)
            else:
                journal.approved(row)
        return False, rejected

    async def reject_undecided(self, by: str, note: str) -> None:
        """Reject every undecided request of the saga (a cancel taken in as it began to wait); a decision made
        first stands. A worker then goes on with the saga, which compensates."""
        store = self._journal.store
        for request in [row for row in self.rows.values() if row.decision is None]:
            row = decided(request, REJECTED, by, note)
            if await _journal.decide(store, row):
                self._keep([row])
                tell(self._journal.config, self._journal.saga, row)

    async def _expire(self, request: ApprovalRow) -> None:
        """Reject a request whose deadline passed (one conditional update; a decision made first stands)."""
        store = self._journal.store
        row = decided(request, REJECTED, DEADLINE, None)
        if await _journal.decide(store, row, by_deadline=True):
            self._keep([row])
            tell(self._journal.config, self._journal.saga, row)
            return
        self._loaded = False
        await self.load()


def tell(config: EngineConfig, saga: SagaRow, request: ApprovalRow) -> None:
    """Tell the hooks that a decision is stored."""
    if config.hooks:
        emit(
            config.hooks,
            SagaEvent(
                "approval_decided",
                saga.saga_id,
                step_id=request.step_id,
                tool_name=request.tool_name,
                status=saga.status.value,
                decision=request.decision,
                decided_by=request.decided_by,
            ),
        )


class Decisions:
    """Record decisions on approval requests, for any saga of the store (see the module docstring)."""

    __slots__ = ("_config",)

    def __init__(self, config: EngineConfig) -> None:
        self._config = config

    async def decide(
        self,
        saga_id: str,
        step_id: str,
        decision: str,
        *,
        by: str,
        note: str | None = None,
        digest: str | None = None,
    ) -> tuple[SagaRow, list[ApprovalRow]]:
        """Record a person's decision on one request; return the saga and its requests; raise `ApprovalError`."""
        store = self._config.store
        if not isinstance(by, str) or not by.strip():
            raise ApprovalError("`by` must name who decides (a non-empty string)", saga_id=saga_id, step_id=step_id)
        if note is not None and not isinstance(note, str):
            raise ApprovalError("`note` must be a string or None", saga_id=saga_id, step_id=step_id)
        loaded = await store.load_saga(saga_id)
        if loaded is None:
            raise ApprovalError(f"no saga {saga_id!r} in {store.url}", saga_id=saga_id, step_id=step_id)
        saga = loaded[0]
        requests = await approvals_of(store, saga_id)
        request = next((row for row in requests if row.step_id == step_id), None)
        if request is None:
            waiting = [row.step_id for row in requests if row.decision is None]
            raise ApprovalError(
                f"step {step_id!r} of saga {saga_id!r} waits for no decision "
                f"({'steps waiting: ' + ', '.join(waiting) if waiting else 'no step of it waits'})",
                saga_id=saga_id,
                step_id=step_id,
            )
        if request.decision is not None:
            raise self._decided_already(request)
        if saga.status.is_terminal:
            raise ApprovalError(
                f"saga {saga_id!r} ended {saga.status.value}: its requests wait for nothing now",
                saga_id=saga_id,
                step_id=step_id,
            )
        if digest is not None and digest != request.args_digest:
            raise ApprovalError(
                f"step {step_id!r} of saga {saga_id!r} asks to run {request.tool_name} with arguments of digest "
                f"{request.args_digest}, not {digest}: look at the request again (pending_approvals) before deciding",
                saga_id=saga_id,
                step_id=step_id,
            )
        row = decided(request, decision, by, note)
        if request.deadline is not None and request.deadline <= (row.decided_at or now()):
            raise self._too_late(request)
        if not await _journal.decide(store, row):
            stored = next((r for r in await approvals_of(store, saga_id) if r.step_id == step_id), request)
            if stored.decision is None:
                raise self._too_late(request)
            raise self._decided_already(stored)
        logger.info("saga %s: step %s %s by %s", saga_id, step_id, decision, by)
        tell(self._config, saga, row)
        return saga, [row if r.step_id == step_id else r for r in requests]

    async def expire_due(self, limit: int = 100) -> int:
        """Reject every waiting request whose deadline passed (decided_by "deadline"); return how many it did."""
        store = self._config.store
        done = 0
        for request in await due_approvals(store, limit):
            row = decided(request, REJECTED, DEADLINE, None)
            if await _journal.decide(store, row, by_deadline=True):
                done += 1
                logger.info("saga %s: step %s rejected, its deadline passed", row.saga_id, row.step_id)
                loaded = await store.load_saga(row.saga_id)
                if loaded is not None:
                    tell(self._config, loaded[0], row)
        return done

    async def pending(self, limit: int = 100) -> list[ApprovalRequest]:
        """Return the undecided requests of waiting sagas, oldest first."""
        store = self._config.store
        pending = await waits_of(store).list_approvals(limit=limit) if has(store, "waits") else []
        return [approval_request(row) for row in pending]

    @staticmethod
    def _decided_already(request: ApprovalRow) -> ApprovalError:
        when = "" if request.decided_at is None else f" at {request.decided_at.isoformat(timespec='seconds')}"
        return ApprovalError(
            f"step {request.step_id!r} of saga {request.saga_id!r} was {request.decision} by {request.decided_by}"
            f"{when} already; a request is decided once",
            saga_id=request.saga_id,
            step_id=request.step_id,
            decision=request.decision,
            decided_by=request.decided_by,
        )

    @staticmethod
    def _too_late(request: ApprovalRow) -> ApprovalError:
        deadline = "" if request.deadline is None else request.deadline.isoformat(timespec="seconds")
        return ApprovalError(
            f"the approval deadline of step {request.step_id!r} of saga {request.saga_id!r} passed ({deadline}): "
            "it is rejected; nothing was recorded",
            saga_id=request.saga_id,
            step_id=request.step_id,
        )


async def due_approvals(store: SagaStore, limit: int) -> list[ApprovalRow]:
    """Return the undecided requests whose deadline passed (none on a store that keeps no waits)."""
    return await waits_of(store).list_approvals(due=now(), limit=limit) if has(store, "waits") else []
