"""A step's attempts: run it with its retry policy, check its result (return annotation, `validate()`), undo a
refused result at once with the value in hand, and record how the step ended.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import anyio
import pydantic

from saga_runtime._engine._calls import AttemptTimeout
from saga_runtime._engine._compensation import Compensator
from saga_runtime._engine._core import CANCELLED
from saga_runtime._engine._shield import shielded
from saga_runtime._engine._siblings import Siblings
from saga_runtime._exceptions import BudgetExceededError, ResultNotStorableError, ResultValidationError, describe
from saga_runtime._records import StepRow, StepStatus, own_values, to_json_value
from saga_runtime._tools import ToolSpec

__all__ = ["StepRunner"]

logger = logging.getLogger("saga_runtime")

_NOTHING: Any = object()


class _StepFailed(Exception):
    """Internal: a step's attempts are exhausted; carries the error that ends it."""

    def __init__(self, error: Exception, *, timed_out: bool, attempts: int) -> None:
        super().__init__(error)
        self.error = error
        self.timed_out = timed_out
        self.attempts = attempts


class _WriteFailed(Exception):
    """Internal: a write-ahead record could not be written, so the attempt it announced must not run."""


class StepRunner(Compensator):
    """Run one step to its outcome (see the module docstring)."""

    async def _run_step(
        self,
        row: StepRow,
        spec: ToolSpec,
        kwargs: dict[str, Any],
        group_scope: Siblings | None,
        join: str = "all",
    ) -> None:
        try:
            value = await self._attempts(row, spec, kwargs)
        except CANCELLED:
            if row.status is StepStatus.RUNNING:
                if row.group in self._winners:
                    why = f"step {self._winners[row.group]!r} won the race"
                elif self._failed_step:
                    why = f"step {self._failed_step!r} failed"
                else:
                    why = "the caller was cancelled"
                self._finish(
                    row, StepStatus.CANCELLED, error=f"cancelled while running: {why}", error_type="CancelledError"
                )
            raise
        except _StepFailed as failure:
            await self._on_failure(row, spec, failure, group_scope, join)
            return
        except _WriteFailed as exc:
            self._finish(row, StepStatus.FAILED, error=f"not retried: {exc}", error_type="StoreError")
            if self._store_error is None:
                self._store_error = exc.__cause__
            self._cancel(group_scope)
            return
        try:
            row.result = to_json_value(value, what="the result", tool_name=spec.name)
        except ResultNotStorableError as exc:
            # The effect happened but cannot be recorded: undo it now, with the value in hand.
            self._finish(row, StepStatus.FAILED, error=str(exc), error_type=type(exc).__name__)
            await self._compensate_now(row, spec, value)
            if spec.retry_scope == "saga" and join == "all":
                self._fail_saga(row, str(exc))
                self._cancel(group_scope)
            return
        self._finish(row, StepStatus.SUCCESS)
        if join == "first" and row.group not in self._winners:
            self._winners[row.group] = row.step_id
            self._cancel(group_scope)  # the race is won: stop the others
        logger.debug("saga %s: step %s (%s) succeeded", row.saga_id, row.step_id, row.tool_name)

    async def _attempts(self, row: StepRow, spec: ToolSpec, kwargs: dict[str, Any]) -> Any:
        # The retry policy counts row.attempts, every attempt recorded for the step, this one included: its budget
        # spans recoveries. A step resumed with an unknown outcome (recorded RUNNING) always runs once more with
        # its key, even past max_attempts: that run is how its outcome is learned; it is not retried beyond it.
        first = True
        direct = self._direct(spec.execute_is_async, spec.execute_ctx_params, spec)
        while True:
            if not first:
                row.attempts += 1
                self._mark(row)
                self.keep_lease()
                try:
                    await self.flush()
                    self._check_fence()  # fenced while the attempt was being written: it does not start
                except Exception as exc:
                    raise _WriteFailed(f"attempt {row.attempts} could not be recorded: {describe(exc)}") from exc
            first = False
            attempt = row.attempts
            raw: Any = _NOTHING
            given = own_values(kwargs)  # each attempt gets arguments of its own, never the record's objects
            try:
                if direct:
                    raw = await spec.execute(**given)
                else:
                    ctx = self._context(row, row.attempts, "execute") if spec.execute_ctx_params else None
                    raw = await self._invoke(
                        spec, spec.execute, spec.execute_is_async, (), given, spec.execute_ctx_params, ctx
                    )
                if spec.result_adapter is None and spec.validate_result is None:
                    return raw
                return await self._checked(row, spec, raw)
            except Exception as exc:
                if raw is not _NOTHING:
                    # The attempt had its effect, but its result was refused: undo it now, with the value in hand.
                    await self._undo_attempt(row, spec, raw)
                timed_out = isinstance(exc, AttemptTimeout)
                # A refused effect that could not be undone ends the step: another attempt would only pile a new
                # effect on one still out, and the saga fails for it anyway (see _on_failure).
                retry = (
                    row.step_id not in self._undo_failed
                    and not isinstance(exc, BudgetExceededError)
                    and spec.retry.should_retry(exc, attempt)
                )
                if self.config.hooks:
                    self.emit("attempt_failed", row, error=describe(exc), will_retry=retry)
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
                    continue
                raise _StepFailed(exc, timed_out=timed_out, attempts=row.attempts) from exc

    async def _checked(self, row: StepRow, spec: ToolSpec, value: Any) -> Any:
        """Return the result as execute's return annotation validates it; raise `ResultValidationError` if refused."""
        if spec.result_adapter is not None:
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

    async def _undo_attempt(self, row: StepRow, spec: ToolSpec, value: Any) -> None:
        """Compensate one refused attempt's effect with its raw result, shielded and bounded; keep the step going."""
        if spec.compensate is None:
            logger.error("saga %s: step %s (%s) refused a result it cannot undo", row.saga_id, row.step_id, spec.name)
            return
        compensate = spec.compensate

        async def undo() -> None:
            policy = spec.compensation_retry
            attempt = 0
            while not self.fenced:  # fenced: another executor owns the saga, nothing more is undone from here
                attempt += 1
                row.compensation_attempts += 1
                self._mark(row)
                try:
                    self.keep_lease()
                    await self.flush()  # write ahead, as for every compensation
                    self._check_fence()
                    ctx = self._context(row, attempt, "compensate") if spec.compensate_ctx_params else None
                    await self._invoke(
                        spec, compensate, spec.compensate_is_async, (value,), {}, spec.compensate_ctx_params, ctx
                    )
                except Exception as exc:
                    if self.is_fenced():
                        return
                    if policy.should_retry(exc, attempt):
                        await anyio.sleep(policy.delay(attempt))
                        continue
                    row.compensation_error = f"undoing refused attempt {row.attempts}: {describe(exc)}"
                    self._undo_failed.add(row.step_id)
                    logger.error(
                        "saga %s: step %s (%s): %s; its effect was NOT undone",
                        row.saga_id,
                        row.step_id,
                        spec.name,
                        row.compensation_error,
                    )
                    return
                return

        async def bounded() -> None:
            # The bound goes inside the shield: outside, the shield would keep it from ever firing.
            with anyio.move_on_after(self.config.compensation_timeout) as scope:
                await undo()
            if scope.cancelled_caught:
                row.compensation_error = f"undoing refused attempt {row.attempts}: compensation_timeout ran out"
                self._undo_failed.add(row.step_id)
                self._mark(row)

        await shielded(bounded())

    async def _on_failure(
        self,
        row: StepRow,
        spec: ToolSpec,
        failure: _StepFailed,
        group_scope: Siblings | None,
        join: str = "all",
    ) -> None:
        exc, timed_out, attempts = failure.error, failure.timed_out, failure.attempts
        self.errors[row.step_id] = exc
        error = f"{describe(exc)} (after {attempts} attempt{'s' if attempts != 1 else ''})"
        error_type = "TimeoutError" if timed_out else type(exc).__name__
        # A timed-out attempt may have had its effect: its outcome is unknown (CANCELLED), not FAILED.
        status = StepStatus.CANCELLED if timed_out else StepStatus.FAILED
        stuck = row.step_id in self._undo_failed
        if stuck:
            # A refused result whose undo failed left an effect behind (no attempt followed it): COMPENSATION_FAILED,
            # and the saga fails whatever the step's scope or group, so it compensates the rest and ends
            # COMPENSATION_FAILED, where operators look (list_sagas, retry_compensation), not SUCCESS.
            status = StepStatus.COMPENSATION_FAILED
        self._finish(row, status, error=error, error_type=error_type)
        logger.warning("saga %s: step %s (%s) failed: %s", row.saga_id, row.step_id, row.tool_name, error)
        if stuck:
            self._fail_saga(row, f"{error}; the effect of its refused result could not be undone")
            self._cancel(group_scope)
            return
        if spec.retry_scope == "step" or join != "all":
            # Scope "step", or a member of a race or quorum: recorded, and the group (not this step) decides.
            if timed_out:
                await self._compensate_now(row, spec, None)
            return
        self._fail_saga(row, error)
        self._cancel(group_scope)

    @staticmethod
    def _cancel(group_scope: Siblings | None) -> None:
        if group_scope is not None:
            group_scope.cancel()
