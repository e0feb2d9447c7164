"""The Compensator: undo every step that succeeded or whose outcome is unknown, groups in reverse, shielded from the
caller's cancellation and bounded in time; or one step at once (a race loser, a timed-out step, a result that
cannot be stored, a refused attempt). Every path undoes a step through one loop, `compensate_one`: each attempt is
written ahead, retried by the tool's `compensation_retry`, and a fenced engine starts none and retries none.

What undoing a step came to is recorded by the journal and returned as a frozen `UndoOutcome`; the compensator
reads the saga's verdict (why it compensates) and never writes it: a refused attempt's effect left standing
(`STUCK`) reaches the saga's fate through the step runner's outcome, folded by the group runner.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio

from saga_runtime._engine._cancellation import CANCELLED, Cancellation, Siblings, deadline, shielded
from saga_runtime._engine._ending import write_end
from saga_runtime._engine._invoker import Invoker
from saga_runtime._engine._journal import Journal, seq_of
from saga_runtime._engine._reconcile import reconcile
from saga_runtime._engine._verdict import NOT_UNDONE, RECONCILED_NOT_DONE, STUCK, UNDONE, UndoOutcome, Verdict
from saga_runtime._exceptions import describe
from saga_runtime._records import SagaResult, SagaStatus, StepRow, StepStatus, own_copy
from saga_runtime._tools import CHILD_NOT_UNDONE, CHILD_TOOL, ToolRegistry, ToolSpec

__all__ = ["UNKNOWN", "Compensator"]

logger = logging.getLogger("saga_runtime")

#: Steps whose outcome is unknown: started, and never recorded as ended (a crash, a cancellation, a timeout).
UNKNOWN = frozenset({StepStatus.RUNNING, StepStatus.CANCELLED})

# Statuses read on every step (or undo), as module constants: Python 3.11 reads an enum class's attribute through
# EnumType.__getattr__'s slow hook, a module global at a fraction of its cost.
_SUCCESS, _FAILED, _COMPENSATION_FAILED = StepStatus.SUCCESS, StepStatus.FAILED, StepStatus.COMPENSATION_FAILED
_SAGA_COMPENSATED, _SAGA_COMPENSATION_FAILED = SagaStatus.COMPENSATED, SagaStatus.COMPENSATION_FAILED


class Compensator:
    """Compensate a saga's steps (see the module docstring)."""

    __slots__ = ("_cancellation", "_debug", "_invoker", "_journal", "_registry", "_timeout", "_verdict")

    def __init__(
        self,
        journal: Journal,
        invoker: Invoker,
        verdict: Verdict,
        cancellation: Cancellation,
        registry: ToolRegistry,
        timeout: float,
    ) -> None:
        self._journal = journal
        self._cancellation = cancellation  # undo groups run as forward ones do (an operator's halt cuts none)
        self._invoker = invoker
        self._verdict = verdict
        self._registry = registry
        self._timeout = timeout
        self._debug = logger.isEnabledFor(logging.DEBUG)  # asked once a saga: an undo's success logs nothing else

    def needs(self, row: StepRow) -> bool:
        """Tell whether a step must be undone when the saga compensates: done or in doubt, and undoable."""
        if row.status is _FAILED and row.tool_name == CHILD_TOOL and row.error_type == CHILD_NOT_UNDONE:
            return True  # a child saga that failed with effects standing: undone (or said not to be) as a whole
        if not (row.status is _SUCCESS or (row.status in UNKNOWN and not row.reconciled)):
            return False
        spec = self._registry.find(row.tool_name)
        return spec is None or spec.has_compensate  # a missing tool: its effect stays, recorded as such

    # -- the whole saga ------------------------------------------------------------------------------------------------

    async def compensate_all(self) -> SagaResult:
        """Undo every step that succeeded or whose outcome is unknown, groups in reverse; record the saga's end.

        Runs to its end even if the caller is cancelled meanwhile (the cancellation goes on afterwards), and is
        bounded by the executor's `compensation_timeout`.
        """
        return await shielded(self._compensate_all())

    async def _compensate_all(self) -> SagaResult:
        journal = self._journal
        journal.check_fence()
        with deadline(self._timeout) as scope:
            journal.begin_compensation(self._verdict.reason or "the saga was cancelled by its caller")
            groups: dict[int, list[StepRow]] = {}
            in_doubt = False
            for row in sorted((row for row in journal.rows.values() if self.needs(row)), key=seq_of):
                groups.setdefault(row.group, []).append(row)
                in_doubt = in_doubt or row.status in UNKNOWN
            # COMPENSATING (and the steps' outcomes) goes with the first undo's write-ahead, or the end: one commit
            # less. Not when a step is in doubt: its reconcile may run before any write-ahead, so it goes first.
            if in_doubt and not journal.wrote_now():
                await journal.flush()
            for group in sorted(groups, reverse=True):
                journal.check_fence()  # a compensation stopped by the fence: the saga's end is not ours to record
                members = groups[group]
                if len(members) == 1:  # nothing to run concurrently: no task group (the sequential case)
                    await self.compensate_one(members[0])
                    continue
                siblings = Siblings()
                for row in members:
                    siblings.start(self.compensate_one, row)
                await self._cancellation.together(siblings, halts=False)
        journal.check_fence()
        if scope.cancelled_caught:
            logger.error(
                "saga %s: compensation did not finish within compensation_timeout=%gs",
                journal.saga.saga_id,
                self._timeout,
            )
        failed, leftover = False, []
        for row in journal.rows.values():  # (one pass: a step that failed its undo needs none)
            if row.status is _COMPENSATION_FAILED:
                failed = True
            elif self.needs(row):
                leftover.append(row)
        for row in leftover:
            journal.undo_failed(row, f"compensation did not run: compensation_timeout ({self._timeout:g}s) ran out")
        status = _SAGA_COMPENSATION_FAILED if failed or leftover else _SAGA_COMPENSATED
        return await write_end(journal, status, self._verdict.reason, self._verdict.cause)

    def reopen(self) -> None:
        """Make a COMPENSATION_FAILED saga's failed compensations due again (an operator's retry)."""
        self._journal.reopen_undo()

    # -- single steps, at once -----------------------------------------------------------------------------------------

    async def compensate_unknown(self, rows: Sequence[StepRow], *, successes: bool = False) -> None:
        """Compensate at once, concurrently, the given steps whose outcome is unknown (and, if asked, successes)."""
        wanted = (*UNKNOWN, StepStatus.SUCCESS) if successes else UNKNOWN
        todo = [row for row in rows if row.status in wanted and self.needs(row)]
        if not todo:
            return
        siblings = Siblings()
        for row in todo:
            siblings.start(self.compensate_now, row)
        await self._cancellation.together(siblings, halts=False)

    async def compensate_now(self, row: StepRow, value: Any = None, *, known: bool = False) -> UndoOutcome:
        """Compensate one step at once (its effect is in doubt or unrecordable), whoever cancels meanwhile.

        The value undone is the step's stored result when it succeeded, None when its outcome is unknown, or
        `value` when `known` (a result that could not be stored).
        """
        return await shielded(self._bounded(row, value, known))

    async def _bounded(self, row: StepRow, value: Any, known: bool) -> UndoOutcome:
        with deadline(self._timeout):
            return await self.compensate_one(row, value, known=known)
        return NOT_UNDONE  # the bound ran out (recorded by `compensate_one`)

    async def undo_refused(self, row: StepRow, spec: ToolSpec, value: Any) -> UndoOutcome:
        """Compensate one refused attempt's effect with its raw result, shielded and bounded; the step goes on
        unless its effect stands (`STUCK`)."""
        if spec.compensate is None:
            logger.error("saga %s: step %s (%s) refused a result it cannot undo", row.saga_id, row.step_id, spec.name)
            return NOT_UNDONE
        return await shielded(self._bounded_refused(row, value))

    async def _bounded_refused(self, row: StepRow, value: Any) -> UndoOutcome:
        # The bound goes inside the shield: outside, the shield would keep it from ever firing.
        with deadline(self._timeout):
            return await self.compensate_one(row, value, known=True, settle=False)
        why = f"undoing refused attempt {row.attempts}: compensation_timeout ran out"
        self._journal.refused_undo_failed(row, why)
        return STUCK

    # -- the one loop --------------------------------------------------------------------------------------------------

    async def compensate_one(
        self, row: StepRow, value: Any = None, *, known: bool = False, settle: bool = True
    ) -> UndoOutcome:
        """Undo one step's effect with its compensation's retry policy, each attempt written ahead; return what came
        of it (`UNDONE`, `NOT_UNDONE`, or `STUCK`: a refused attempt's effect stands).

        The value handed to `compensate` is `value` when `known`, else the step's stored result if it succeeded
        and None if its outcome is unknown (a copy of its own: the record must not change). `settle`: record the
        step COMPENSATED or COMPENSATION_FAILED; without it (a refused attempt undone while its step goes on),
        only a failure is recorded, and it is `STUCK`. A fenced engine runs nothing and records no
        failure for what it did not run: the new owner compensates from the records.
        """
        spec = self._registry.find(row.tool_name)
        if spec is None or not spec.accepts(row.tool_version):
            # An operator gave up on a saga whose tool is missing (or another version): nothing here can undo it.
            if settle:
                why = "not registered (missing, renamed)" if spec is None else f"of another version ({spec.version!r})"
                self._gave_up(row, f"not compensated: its tool {row.tool_name!r} is {why}")
            return NOT_UNDONE
        if not known and row.status in UNKNOWN and not await self._reconciled(row, spec):
            return NOT_UNDONE  # reconcile says the effect did not happen: nothing to undo
        compensate = spec.compensate
        if compensate is None:
            return NOT_UNDONE
        journal = self._journal
        if not known:
            value = row.result if row.status is _SUCCESS else None
        policy = spec.compensation_retry
        direct = settle and self._invoker.direct(spec.compensate_is_async, spec.compensate_ctx_params, spec)
        attempt = 0
        while not journal.fenced:
            attempt += 1
            journal.begin_undo(row)
            try:
                journal.keep_lease()
                if not journal.wrote_now():  # write ahead: the compensation attempt is recorded before it runs
                    await journal.flush()
                journal.check_fence()  # fenced meanwhile (the flush may have waited): it does not start
                if journal.lease_short():
                    await journal.confirm_lease()  # frozen or cut off since: confirmed (or fenced) first
                if settle and journal.config.hooks:
                    journal.emit("compensation_started", row, attempt=row.compensation_attempts)
                given = own_copy(value) if settle else value  # a refused raw value is the tool's own already
                if direct:
                    await compensate(given)
                else:
                    await self._invoker.compensate(spec, row, attempt, given)
            except CANCELLED:
                if settle:
                    self._gave_up(row, "interrupted before it finished: compensation_timeout ran out")
                raise
            except Exception as exc:
                if journal.guard.fenced:  # changed during the await
                    return NOT_UNDONE
                if policy.should_retry(exc, attempt):
                    try:
                        await anyio.sleep(policy.delay(attempt))
                    except CANCELLED:  # the time ran out between two attempts: the effect is still there
                        if settle:
                            why = f"{describe(exc)}; then compensation_timeout ran out before a retry"
                            self._gave_up(row, why, tell=False)
                        raise
                    continue
                if settle:
                    self._gave_up(row, f"{describe(exc)} (after {attempt} attempt{'s' if attempt != 1 else ''})")
                else:
                    journal.refused_undo_failed(row, f"undoing refused attempt {row.attempts}: {describe(exc)}")
                logger.error(
                    "saga %s: compensation of step %s (%s) failed, its effect was NOT undone: %s",
                    row.saga_id,
                    row.step_id,
                    row.tool_name,
                    row.compensation_error,
                )
                return NOT_UNDONE if settle else STUCK
            if settle:
                journal.undone(row)
                if journal.config.hooks:
                    journal.emit("compensation_finished", row, attempt=row.compensation_attempts)
                if self._debug:
                    logger.debug("saga %s: step %s (%s) compensated", row.saga_id, row.step_id, row.tool_name)
            return UNDONE
        return NOT_UNDONE

    async def _reconciled(self, row: StepRow, spec: ToolSpec) -> bool:
        """Settle an unknown step by its tool's `reconcile` first; tell whether there may be an effect to undo."""
        if spec.reconcile is None:
            return True
        return await reconcile(self._journal, self._invoker, spec, row) is not RECONCILED_NOT_DONE

    def _gave_up(self, row: StepRow, why: str, *, tell: bool = True) -> None:
        self._journal.undo_failed(row, why)
        if tell:
            self._journal.emit("compensation_finished", row, attempt=row.compensation_attempts, error=why)
