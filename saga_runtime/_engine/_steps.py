"""The StepRunner: run one step with its retry policy, check its result (return annotation, `validate()`), undo a
refused result at once with the value in hand, and record how the step ended.
"""

from __future__ import annotations

import inspect
import logging
from time import monotonic
from typing import Any

import anyio
import pydantic

from saga_runtime._engine._cancellation import CANCELLED, CancelTaken, Siblings
from saga_runtime._engine._compensator import Compensator
from saga_runtime._engine._events import heard
from saga_runtime._engine._invoker import AttemptTimeout, Invoker
from saga_runtime._engine._journal import Journal
from saga_runtime._engine._reconcile import reconcile
from saga_runtime._engine._verdict import DONE, ReconcileOutcome, StepOutcome, Verdict
from saga_runtime._exceptions import (
    BudgetExceededError,
    OutcomeUnknownError,
    ResultNotStorableError,
    ResultValidationError,
    describe,
)
from saga_runtime._records import (
    IMMUTABLE_VALUES,
    MAX_JSON_INT,
    MIN_JSON_INT,
    StepRow,
    StepStatus,
    own_values,
    to_json_value,
)
from saga_runtime._tools import ToolSpec

__all__ = ["StepRunner"]

logger = logging.getLogger("saga_runtime")

_NOTHING: Any = object()
# Statuses read for a failed step, as module constants: Python 3.11 reads an enum class's attribute through
# EnumType.__getattr__'s slow hook, a module global at a fraction of its cost.
_CANCELLED, _FAILED = StepStatus.CANCELLED, StepStatus.FAILED


class _StepFailed:
    """Internal: a step's attempts are exhausted; carries the error that ends it.

    Returned, not raised: a raised one would keep the error in the frame its traceback holds, a reference cycle
    that leaves the saga's whole engine to the garbage collector.
    """

    __slots__ = ("attempts", "error", "stuck", "timed_out")

    def __init__(self, error: Exception, *, timed_out: bool, attempts: int, stuck: bool = False) -> None:
        self.error = error
        self.timed_out = timed_out
        self.attempts = attempts
        self.stuck = stuck  # a refused attempt's effect could not be undone (the compensator's `STUCK`)


class _Raised:
    """Internal: what the first attempt, run by `StepRunner.run`, raised (handed to `_attempts`)."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class _WriteFailed(Exception):
    """Internal: a write-ahead record could not be written, so the attempt it announced must not run."""


class StepRunner:
    """Run one step to its outcome (see the module docstring)."""

    __slots__ = ("_compensator", "_debug", "_invoker", "_journal", "_verdict")

    def __init__(self, journal: Journal, invoker: Invoker, compensator: Compensator, verdict: Verdict) -> None:
        self._journal = journal
        self._invoker = invoker
        self._compensator = compensator
        self._verdict = verdict
        self._debug = logger.isEnabledFor(logging.DEBUG)  # asked once a saga: a step's success logs nothing else

    async def run(
        self, row: StepRow, spec: ToolSpec, kwargs: dict[str, Any], join: str = "all", siblings: Siblings | None = None
    ) -> StepOutcome:
        """Run a step announced RUNNING to its end, recorded; return what it came to for the saga (see StepOutcome).

        `siblings`: the group whose task runs the step, told how it ended here, as it ends (`Siblings.start_each`).
        """
        journal = self._journal
        try:
            try:
                if (
                    spec.execute_is_async
                    and not spec.execute_ctx_params
                    and spec.timeout is None
                    and self._invoker.direct_ok
                    and not journal.config.hooks
                    # (`not journal.lease_short()`, written out: a frame less a step)
                    and (
                        (until := journal.lease.until) is None
                        or until - monotonic() > journal.invoke_margin
                        or journal.owner is None
                    )
                ):
                    # The first attempt of a tool awaited as it is, in this coroutine (no layer of `_attempts`): what
                    # `_attempts` does for it; anything else about it (a failure, a result to check) goes on there.
                    # (`own_values(kwargs)`, written out: flat arguments, the common case, are handed as they are.)
                    given = kwargs
                    for item in kwargs.values():
                        if type(item) not in IMMUTABLE_VALUES:
                            given = own_values(kwargs)
                            break
                    try:
                        raw = await spec.execute(**given)
                    except Exception as exc:
                        value = await self._attempts(row, spec, kwargs, _Raised(exc))
                    else:
                        if spec.validate_result is None and (
                            spec.result_adapter is None or type(raw) is spec.result_exact
                        ):
                            value = raw
                        else:
                            value = await self._attempts(row, spec, kwargs, raw)
                else:
                    value = await self._attempts(row, spec, kwargs)
            except CANCELLED:
                if row.status is StepStatus.RUNNING:
                    why = self._verdict.why_cancelled(row)
                    journal.finish_step(
                        row, StepStatus.CANCELLED, error=f"cancelled while running: {why}", error_type="CancelledError"
                    )
                raise
            except _WriteFailed as exc:
                journal.finish_step(row, StepStatus.FAILED, error=f"not retried: {exc}", error_type="StoreError")
                outcome = StepOutcome(row, store_error=exc.__cause__)
            else:
                if type(value) is _StepFailed:
                    try:
                        outcome = await self._on_failure(row, spec, value, join)
                    finally:
                        del value  # its error's traceback may hold this frame (the first attempt ran here): no cycle
                else:
                    try:
                        # (`to_json_value`'s common case written out: nothing, a flag or an int JSON holds as it is.)
                        kind = type(value)
                        if value is None or kind is bool or (kind is int and MIN_JSON_INT <= value <= MAX_JSON_INT):
                            result = value
                        else:
                            result = to_json_value(value, what="the result", tool_name=spec.name)
                    except ResultNotStorableError as exc:
                        # The effect happened but cannot be recorded: undo it now, with the value in hand.
                        journal.finish_step(row, StepStatus.FAILED, error=str(exc), error_type=type(exc).__name__)
                        await self._compensator.compensate_now(row, value, known=True)
                        failed = spec.retry_scope == "saga" and join == "all"
                        outcome = StepOutcome(row, fails=str(exc)) if failed else DONE
                    else:
                        journal.succeed(row, result)
                        if self._debug:
                            logger.debug("saga %s: step %s (%s) succeeded", row.saga_id, row.step_id, row.tool_name)
                        outcome = StepOutcome(row, won=True) if join == "first" else DONE
        except BaseException as exc:
            if siblings is None:
                raise
            goes_on = siblings.raised(exc)
            siblings = None  # (this frame, which the error's traceback holds, keeps no group: no cycle)
            if goes_on:
                raise
            return DONE  # (the task's result: nobody reads it; the group raises the error)
        if siblings is not None:
            siblings.ended(outcome)
        try:
            return outcome
        finally:
            del outcome  # its error's traceback may hold this frame: no cycle

    async def reconcile(self, row: StepRow, spec: ToolSpec) -> ReconcileOutcome:
        """Settle a step of unknown outcome by its tool's `reconcile` (see saga_runtime._engine._reconcile)."""
        return await reconcile(self._journal, self._invoker, spec, row)

    async def _attempts(self, row: StepRow, spec: ToolSpec, kwargs: dict[str, Any], first: Any = _NOTHING) -> Any:
        # The retry policy counts row.attempts, every attempt recorded for the step, this one included: its budget
        # spans recoveries. A step resumed with an unknown outcome (recorded RUNNING) always runs once more with
        # its key, even past max_attempts: that run is how its outcome is learned; it is not retried beyond it.
        # `first`: how the first attempt, run by `run` already, ended (its raw result, or `_Raised`).
        journal = self._journal
        direct = self._invoker.direct(spec.execute_is_async, spec.execute_ctx_params, spec)
        failed: _StepFailed | None = None
        while True:
            if failed is not None:
                journal.retry(row)
                try:
                    await journal.flush(ahead=True)
                    journal.check_fence()  # fenced while the attempt was being written: it does not start
                except CancelTaken:
                    # An operator's cancel: this attempt was never written and never runs; the step ends with the
                    # last one's failure. (Deleted from the frame its error's traceback holds: no cycle.)
                    journal.restore(row, row.status, row.attempts - 1, row.started_at)
                    try:
                        return failed
                    finally:
                        del failed
                except Exception as exc:
                    raise _WriteFailed(f"attempt {row.attempts} could not be recorded: {describe(exc)}") from exc
                failed = None
            if first is not _NOTHING:
                pass  # the first attempt ran (see `run`): its outcome is taken below
            elif journal.lease_short():
                # This process was frozen, or cut off from the store, since the intent was written: no tool starts
                # before the store confirms the saga is still this executor's.
                try:
                    await journal.confirm_lease()
                except Exception as exc:
                    raise _WriteFailed(f"attempt {row.attempts} could not confirm the lease: {describe(exc)}") from exc
            attempt = row.attempts
            if journal.config.hooks and first is _NOTHING:
                journal.emit("attempt_started", row)
            raw: Any = _NOTHING
            try:
                if first is not _NOTHING:
                    raw, first = first, _NOTHING
                    if type(raw) is _Raised:
                        error, raw = raw.error, _NOTHING
                        try:
                            raise error
                        finally:
                            del error  # (no cycle through this frame: see _StepFailed)
                    return await self._checked(row, spec, raw)
                given = own_values(kwargs)  # each attempt gets arguments of its own, never the record's objects
                if direct:
                    raw = await spec.execute(**given)
                else:
                    raw = await self._invoker.execute(spec, row, given)
                if spec.validate_result is None and (spec.result_adapter is None or type(raw) is spec.result_exact):
                    return raw  # nothing to check (see _checked)
                return await self._checked(row, spec, raw)
            except Exception as exc:
                stuck = False
                if raw is not _NOTHING:
                    # The attempt had its effect, but its result was refused: undo it now, with the value in hand.
                    try:
                        stuck = (await self._compensator.undo_refused(row, spec, raw)).stuck
                    except CANCELLED:
                        # Cancelled while the undo ran (shielded: to its end). The step ends with this attempt's
                        # failure, its effect undone (or left standing: recorded), not in doubt: a step recorded
                        # CANCELLED would be undone again.
                        if row.status is StepStatus.RUNNING and not journal.fenced:
                            standing = row.compensation_error is not None  # (`refused_undo_failed`: STUCK)
                            journal.finish_step(
                                row,
                                StepStatus.COMPENSATION_FAILED if standing else StepStatus.FAILED,
                                error=f"{describe(exc)} (then cancelled)",
                                error_type=type(exc).__name__,
                            )
                        raise
                # A refused effect that could not be undone ends the step: another attempt would only pile a new
                # effect on one still out, and the saga fails for it anyway (see _on_failure).
                retry = not stuck and not isinstance(exc, BudgetExceededError) and spec.retry.should_retry(exc, attempt)
                if journal.config.hooks:
                    journal.emit("attempt_failed", row, error=describe(exc), will_retry=retry)
                if retry:
                    logger.info(
                        "saga %s: step %s (%s) attempt %d failed, retrying: %s",
                        row.saga_id,
                        row.step_id,
                        row.tool_name,
                        attempt,
                        describe(exc),
                    )
                    await anyio.sleep(spec.retry.delay(attempt))
                    unknown = isinstance(exc, AttemptTimeout | OutcomeUnknownError)
                    failed = _StepFailed(exc, timed_out=unknown, attempts=attempt)
                    continue
                # A tool that lost sight of its effect: unknown, as a timed-out attempt.
                unknown = isinstance(exc, AttemptTimeout | OutcomeUnknownError)
                return _StepFailed(exc, timed_out=unknown, attempts=row.attempts, stuck=stuck)

    async def _checked(self, row: StepRow, spec: ToolSpec, value: Any) -> Any:
        """Return the result as execute's return annotation validates it; raise `ResultValidationError` if refused."""
        if spec.result_adapter is not None and type(value) is not spec.result_exact:
            try:
                value = spec.result_adapter.validate_python(value)
            except pydantic.ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in error['loc']) or 'result'}: {error['msg']}"
                    for error in exc.errors(include_url=False)
                )
                raise ResultValidationError(
                    f"{spec.name} returned a result its return annotation refuses ({problems})",
                    tool_name=spec.name,
                    step_id=row.step_id,
                ) from None
        if spec.validate_result is not None:
            try:
                verdict = spec.validate_result(value)
                if spec.validate_is_async or inspect.isawaitable(verdict):
                    await verdict
            except Exception as exc:
                raise ResultValidationError(
                    f"{spec.name}.validate() refused the result: {describe(exc)}",
                    tool_name=spec.name,
                    step_id=row.step_id,
                ) from exc
        return value

    async def _on_failure(self, row: StepRow, spec: ToolSpec, failure: _StepFailed, join: str) -> StepOutcome:
        exc, timed_out, attempts, stuck = failure.error, failure.timed_out, failure.attempts, failure.stuck
        error = f"{describe(exc)} (after {attempts} attempt{'s' if attempts != 1 else ''})"
        error_type = type(exc).__name__
        # A timed-out attempt may have had its effect: its outcome is unknown (CANCELLED), not FAILED.
        status = _CANCELLED if timed_out else _FAILED
        if stuck:
            # A refused result whose undo failed left an effect behind (no attempt followed it): COMPENSATION_FAILED,
            # and the saga fails whatever the step's scope or group, so it compensates the rest and ends
            # COMPENSATION_FAILED, where operators look (list_sagas, retry_compensation), not SUCCESS.
            status = StepStatus.COMPENSATION_FAILED
        self._journal.finish_step(row, status, error=error, error_type=error_type)
        if heard(logger, logging.WARNING):  # (a record built for nobody costs more than the rest of the failure)
            logger.warning("saga %s: step %s (%s) failed: %s", row.saga_id, row.step_id, row.tool_name, error)
        if timed_out and not stuck and spec.reconcile is not None:
            done = (await self.reconcile(row, spec)).done
            if done:  # the effect happened after all: the step succeeded
                return StepOutcome(row, won=True) if join == "first" else DONE
            timed_out = done is None  # not done: nothing to undo
        if stuck:
            return StepOutcome(row, fails=f"{error}; the effect of its refused result could not be undone", error=exc)
        if spec.retry_scope == "step" or join != "all":
            # Scope "step", or a member of a race or quorum: recorded, and the group (not this step) decides.
            if timed_out:
                await self._compensator.compensate_now(row, None, known=True)
            return StepOutcome(row, error=exc)
        return StepOutcome(row, fails=error, error=exc)
