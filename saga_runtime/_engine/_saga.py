"""The saga engine: one running saga, fed group by group by a front door (a plan, or a dynamic saga).

It composes its collaborators — the Journal (rows and writes), the Invoker (tool calls), the StepRunner
(attempts) and the Compensator (undo) — around one Verdict (what fails the saga: the group runner folds each
step's StepOutcome into it) and one Cancellation (what runs now, and an operator's halt). A group's steps run
concurrently (`Siblings`, forward and undo alike), their intents committed in one write first; how the group ends
is its join: `all` (a failure cancels the siblings and fails the saga), `first` (the first success wins, the others
are cancelled and compensated), `quorum`/`any` (every step runs; too few successes fail the saga).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any

from saga_runtime._engine import _journal
from saga_runtime._engine._approvals import Gate
from saga_runtime._engine._budget import Account, Budget
from saga_runtime._engine._cancellation import Cancellation, Shelters, shielded
from saga_runtime._engine._compensator import Compensator
from saga_runtime._engine._config import EngineConfig
from saga_runtime._engine._ending import write_end
from saga_runtime._engine._groups import RUNNABLE, GroupRunner, succeeded
from saga_runtime._engine._invoker import Invoker
from saga_runtime._engine._journal import Journal
from saga_runtime._engine._steps import StepRunner
from saga_runtime._engine._verdict import Verdict
from saga_runtime._exceptions import ResultValidationError
from saga_runtime._records import (
    SagaResult,
    SagaRow,
    SagaStatus,
    StepRow,
    StepStatus,
    now,
    result_from_rows,
)
from saga_runtime._storage import approvals_of

__all__ = ["RUNNABLE", "EngineConfig", "SagaEngine"]

logger = logging.getLogger("saga_runtime")


class SagaEngine:
    """Run one saga: groups of steps forward, then, if it cannot finish, compensations in reverse."""

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
        self.journal = journal = Journal(config, saga, steps, announced=announced, owner=owner)
        self.cancellation = cancellation = Cancellation()  # what runs now, and an operator's halt
        self.verdict = verdict = Verdict(cancellation)
        self.account = Account(saga.saga_id, Budget.from_json(saga.budget), _charges(journal))
        invoker = Invoker(
            config.thread_limiter, config.call_limiter, self.account.charge, config.keyring, config.resources
        )
        self.compensator = compensator = Compensator(
            journal, invoker, verdict, cancellation, config.registry, config.compensation_timeout
        )
        runner = StepRunner(journal, invoker, compensator, verdict)
        self._groups = GroupRunner(journal, verdict, cancellation, runner, compensator, config.registry, config.keyring)
        # validated(row, kwargs): note that `kwargs` are `row`'s current arguments validated; the step will not
        # validate them again. (The group runner's own, called for each step of a plan: no layer of the engine's.)
        self.validated: Callable[[StepRow, dict[str, Any]], None] = self._groups.validated
        self.gate = Gate(journal)
        # A saga function's messages as read when it was found due (its first recv looks there first), or None.
        self.messages: Sequence[tuple[str, str, Any, datetime]] | None = None
        journal.on_cancel = verdict.halt  # a write the store refused for a cancel request (see Journal.flush)
        # True for a saga recovery drives: no caller waits on it, so a cancellation (the worker shutting down)
        # stops it without compensating; the next recovery resumes it.
        self.detached = False
        self.shelters: Shelters | None = None  # a worker's (detached): its stop ends the saga between groups

    @property
    def groups(self) -> GroupRunner:
        """Return the runner of the saga's groups (the plan driver feeds it a plan's groups)."""
        return self._groups

    # -- what front doors read -----------------------------------------------------------------------------------------

    @property
    def saga(self) -> SagaRow:
        """Return the saga's row (read it; the engine changes it)."""
        return self.journal.saga

    @property
    def rows(self) -> dict[str, StepRow]:
        """Return the saga's step rows by step id (read them; the engine changes them)."""
        return self.journal.rows

    @property
    def failed(self) -> bool:
        """Tell whether a step failed in a way that fails the saga."""
        return self.verdict.failed

    @property
    def fenced(self) -> bool:
        """Tell whether the engine is fenced: it writes nothing more (its lease is lost, or it was stopped)."""
        return self.journal.fenced

    @property
    def lease_lost(self) -> bool:
        """Tell whether the lease was lost: another executor may own the saga now."""
        return self.journal.lease_lost

    def stop(self) -> None:
        """Stop for good, writing nothing more (a worker shutting down leaves the saga to the next recovery)."""
        self.journal.fence()

    def emit(self, kind: Any, row: StepRow | None = None, **fields: Any) -> None:
        """Tell the executor's hooks what just happened."""
        self.journal.emit(kind, row, **fields)

    def result_for(self, step_id: str) -> Any:
        """Return the stored result of a SUCCESS step; raise `LookupError` saying why there is none."""
        row = self.rows.get(step_id)
        if row is None:
            raise LookupError(f"no step {step_id!r} in saga {self.saga.saga_id!r}")
        if row.status is not StepStatus.SUCCESS:
            raise LookupError(f"step {step_id!r} ended {row.status.value} and has no result")
        return row.result

    succeeded = staticmethod(succeeded)

    def group_result(self, rows: Sequence[StepRow], join: str) -> Any:
        """Return what a `$ref` to a group gets: a `first` group's winner's result, else the list of successes."""
        wins = [row.result for row in sorted(rows, key=lambda r: r.seq) if self.succeeded(row)]
        if join == "first":
            if not wins:
                raise LookupError("the group has no winner")
            return wins[0]
        return wins

    # -- what front doors tell it --------------------------------------------------------------------------------------

    def fail(self, reason: str, cause: BaseException | None = None) -> None:
        """Fail the saga for a reason of the front door's (the first reason stands); `cause`: the exception."""
        self.verdict.fail_with(reason, cause)

    def cancel(self, request: str) -> None:
        """Honour an operator's cancel request (its stored note): record it, cut the running calls, fail the saga.

        Recorded with what came of it (see `Journal.cancelled`): only a RUNNING saga is stopped.
        """
        reason = self.journal.cancelled(request)
        if reason is not None:
            self.verdict.halt(reason)

    def adopt(self, rows: Sequence[StepRow], join: str = "all") -> None:
        """Take in recorded outcomes of a resumed saga: a recorded FAILED step of scope "saga" fails it.

        In a `first`, `quorum` or `any` group a failed member is part of the race, not a failure of the saga. A
        step whose refused result could not be undone fails it in any group (see StepRunner._on_failure).
        """
        for row in rows:
            if row.status is StepStatus.COMPENSATION_FAILED and row.error_type == ResultValidationError.__name__:
                self.verdict.fail(row, f"{row.error}; the effect of its refused result could not be undone")
            elif row.status is StepStatus.REJECTED:
                self.verdict.fail(row, f"step {row.step_id!r} ({row.tool_name}) was {row.error or 'rejected'}")
        if join != "all":
            return
        for row in rows:
            if row.status is StepStatus.FAILED and self.config.registry.get(row.tool_name).retry_scope == "saga":
                self.verdict.fail(row, row.error or "failed")

    def set_args(self, row: StepRow, args: Any) -> None:
        """Give a step that has not started its arguments (a plan's `$ref`s resolved)."""
        self.journal.set_args(row, args)

    def fail_before_start(self, row: StepRow, exc: BaseException) -> None:
        """Record that a step could not start (its arguments could not be prepared); it never ran."""
        self._groups.fail_before_start(row, exc)

    def not_run(self, rows: Sequence[StepRow], why: str) -> None:
        """Record that those of `rows` that never started will not run (FAILED: they have no effect)."""
        for row in rows:
            if row.status is StepStatus.PENDING:
                self.journal.finish_step(row, StepStatus.FAILED, error=why, error_type="NotRun")

    def add_step(self, row: StepRow) -> None:
        """Add a step to the saga (a dynamic saga's call); it is written with the next flush."""
        self.journal.add_step(row)

    @property
    def compensating(self) -> bool:
        """Tell whether the saga was being compensated (a resumed saga goes on undoing, never forward)."""
        return self.saga.status is SagaStatus.COMPENSATING

    def record(self, *, metadata: dict[str, Any] | None = None, budget: dict[str, Any] | None = None) -> None:
        """Replace the saga's metadata or budget record (JSON-able); written with the next flush."""
        self.journal.record(metadata=metadata, budget=budget)

    def forgive(self) -> None:
        """Forget a failure: in a dynamic saga, the calling code decides whether a failed call ends it."""
        self.verdict.forgive()

    async def flush(self) -> None:
        """Commit every change not yet written; return once it is durable."""
        await self.journal.flush()

    def reopen_compensation(self) -> None:
        """Make a COMPENSATION_FAILED saga's failed compensations due again (written by `compensate()`)."""
        self.compensator.reopen()

    async def compensate(self) -> SagaResult:
        """Undo every step that succeeded or whose outcome is unknown, groups in reverse; record the end."""
        return await self.compensator.compensate_all()

    async def compensate_unknown(self, rows: Sequence[StepRow], *, successes: bool = False) -> None:
        """Compensate at once the given steps whose outcome is unknown (and, if asked, the successes)."""
        await self.compensator.compensate_unknown(rows, successes=successes)

    def finish(self, status: SagaStatus, *, handed: bool = False) -> Coroutine[Any, Any, SagaResult]:
        """Record the saga's terminal status and return its result (await it: the coroutine of the write, no layer
        of its own); the record is written even if the caller leaves.

        `handed`: nothing paused since the last group run ended (see `run_group`): its reading of the clock, if it
        has one, is the end's time.
        """
        at = self._groups.ended_at if handed else None
        end = write_end(self.journal, status, self.verdict.reason, self.verdict.cause, at)
        return end if self.journal.writes_inline else shielded(end)  # see write_end

    def run_group(
        self, rows: Sequence[StepRow], *, join: str = "all", needed: int | None = None, handed: bool = False
    ) -> Coroutine[Any, Any, bool]:
        """Run the steps of one group concurrently; return whether the saga can go on (await it; see
        `GroupRunner.run`: its coroutine, no layer of its own, and its `handed`)."""
        return self._groups.run(rows, join=join, needed=needed, handed=handed)

    # -- approvals -----------------------------------------------------------------------------------------------------

    async def hold(self, gated: Sequence[StepRow]) -> tuple[bool, list[StepRow]]:
        """Record the approval requests of a group's `gated` steps; return (waiting, rejected) (see `Gate.hold`)."""
        return await self.gate.hold(gated)

    async def wait_for_decisions(self) -> SagaResult:
        """Record the saga WAITING for decisions (as `wait`); if every request was decided meanwhile (before the
        wait was written, so the decision found the saga still running), make it due at once."""
        result = await self.wait()
        store = self.config.store
        saga_id = self.saga.saga_id
        try:
            if all(row.decision is not None for row in await approvals_of(store, saga_id)):
                await _journal.wake(store, saga_id, now())
        except Exception as exc:  # its decision's own wakeup, or an operator's look, finds it
            logger.warning("saga %s: could not check its decisions once waiting: %s", saga_id, exc)
        return result

    async def wait(self) -> SagaResult:
        """Record the saga WAITING for decisions, its lease given up; return its result. Nothing more is written."""
        journal = self.journal
        journal.check_fence()
        journal.wait()
        await shielded(journal.flush())
        journal.fence()  # the saga is nobody's now: whoever claims it next goes on
        if self.verdict.halted:
            # An operator's cancel, taken in by this very write: its requests are rejected, as cancel() does for a
            # WAITING saga, so the next worker to claim it compensates it.
            await shielded(self.gate.reject_undecided("cancel", self.verdict.halted))
        logger.info("saga %s: waits for approval", self.saga.saga_id)
        return result_from_rows(self.saga, list(self.rows.values()), journal.approvals)

    async def resume(self) -> None:
        """Run a WAITING saga claimed by this executor again (RUNNING), written at once."""
        self.journal.saga_to(SagaStatus.RUNNING)
        await self.journal.flush()

    def judge(self, rows: Sequence[StepRow], join: str, needed: int | None) -> bool:
        """Decide whether a finished group lets the saga go on; fail the saga if not."""
        return self._groups.judge(rows, join, needed)


def _charges(journal: Journal) -> Callable[[float, int], tuple[float, int]]:
    """Return what adds a charge to the saga and tells the hooks, in the event loop (a sync tool charges from its
    thread). It holds the journal only: the engine is freed without a cycle.
    """
    loop: asyncio.AbstractEventLoop | None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # built outside a loop: charges come from it, or never
        loop = None

    def charged(cost: float, tokens: int) -> tuple[float, int]:
        spent = journal.charge(cost, tokens)
        if journal.config.hooks and (cost or tokens):
            tell = functools.partial(journal.emit, "charged", cost=cost, tokens=tokens)
            if loop is None or _in_loop(loop):
                tell()
            else:
                loop.call_soon_threadsafe(tell)
        return spent

    return charged


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Tell whether this thread runs `loop`."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
