"""Compensation: undo every step that succeeded or whose outcome is unknown, groups in reverse, shielded from the
caller's cancellation and bounded in time; or one step at once (a race loser, a timed-out step, a result that
cannot be stored). Each compensation attempt is written ahead; a fenced engine starts none and retries none.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio

from saga_runtime._engine._calls import ToolCalls
from saga_runtime._engine._core import CANCELLED, UNKNOWN, seq_of
from saga_runtime._engine._shield import shielded
from saga_runtime._exceptions import describe
from saga_runtime._records import SagaResult, SagaStatus, StepRow, StepStatus, now, own_copy
from saga_runtime._tools import ToolSpec

__all__ = ["Compensator"]

logger = logging.getLogger("saga_runtime")


class Compensator(ToolCalls):
    """Compensate a saga's steps (see the module docstring)."""

    def _needs_compensation(self, row: StepRow) -> bool:
        return (row.status is StepStatus.SUCCESS or row.status in UNKNOWN) and self.config.registry.get(
            row.tool_name
        ).has_compensate

    async def compensate(self) -> SagaResult:
        """Undo every step that succeeded or whose outcome is unknown, groups in reverse; record the saga's end.

        Runs to its end even if the caller is cancelled meanwhile (the cancellation goes on afterwards), and is
        bounded by the executor's `compensation_timeout`.
        """
        return await shielded(self._compensate())

    async def _compensate(self) -> SagaResult:
        self._check_fence()
        with anyio.move_on_after(self.config.compensation_timeout) as scope:
            self.saga.status = SagaStatus.COMPENSATING
            if self.saga.error is None:
                # Written now, not at the end: a compensation resumed after a crash still says why it began.
                self.saga.error = self.failure or "the saga was cancelled by its caller"
            self._mark_saga()
            await self.flush()
            todo = [row for row in self.rows.values() if self._needs_compensation(row)]
            groups: dict[int, list[StepRow]] = {}
            for row in sorted(todo, key=seq_of):
                groups.setdefault(row.group, []).append(row)
            for group in sorted(groups, reverse=True):
                self._check_fence()  # a compensation stopped by the fence: the saga's end is not ours to record
                members = groups[group]
                if len(members) == 1:  # nothing to run concurrently: no task group (the sequential case)
                    row = members[0]
                    result = row.result if row.status is StepStatus.SUCCESS else None
                    await self._compensate_step(row, self.config.registry.get(row.tool_name), result)
                    continue
                async with anyio.create_task_group() as tg:
                    for row in members:
                        result = row.result if row.status is StepStatus.SUCCESS else None
                        tg.start_soon(self._compensate_step, row, self.config.registry.get(row.tool_name), result)
        self._check_fence()
        if scope.cancelled_caught:
            logger.error(
                "saga %s: compensation did not finish within compensation_timeout=%gs",
                self.saga.saga_id,
                self.config.compensation_timeout,
            )
        failed = any(row.status is StepStatus.COMPENSATION_FAILED for row in self.rows.values())
        leftover = [row for row in self.rows.values() if self._needs_compensation(row)]
        for row in leftover:
            row.status = StepStatus.COMPENSATION_FAILED
            row.compensation_error = (
                f"compensation did not run: compensation_timeout ({self.config.compensation_timeout:g}s) ran out"
            )
            self._mark(row)
        status = SagaStatus.COMPENSATION_FAILED if failed or leftover else SagaStatus.COMPENSATED
        return await self._record_end(status)

    async def compensate_unknown(self, rows: Sequence[StepRow], *, successes: bool = False) -> None:
        """Compensate at once, concurrently, the given steps whose outcome is unknown (and, if asked, successes)."""
        wanted = (*UNKNOWN, StepStatus.SUCCESS) if successes else UNKNOWN
        todo = [row for row in rows if row.status in wanted and self._needs_compensation(row)]
        if not todo:
            return
        async with anyio.create_task_group() as tg:
            for row in todo:
                value = row.result if row.status is StepStatus.SUCCESS else None
                tg.start_soon(self._compensate_now, row, self.config.registry.get(row.tool_name), value)

    async def _compensate_now(self, row: StepRow, spec: ToolSpec, result: Any) -> None:
        """Compensate one step at once (its effect is in doubt or unrecordable), whoever cancels meanwhile."""
        await shielded(self._compensate_bounded(row, spec, result))

    async def _compensate_bounded(self, row: StepRow, spec: ToolSpec, result: Any) -> None:
        with anyio.move_on_after(self.config.compensation_timeout):
            await self._compensate_step(row, spec, result)

    async def _compensate_step(self, row: StepRow, spec: ToolSpec, result: Any) -> None:
        if spec.compensate is None:
            return
        policy = spec.compensation_retry
        direct = self._direct(spec.compensate_is_async, spec.compensate_ctx_params, spec)
        attempt = 0
        # Fenced: another executor owns the saga now; no compensation starts from here, none is retried, and no
        # failure is recorded for one that was not run (the new owner compensates from the records).
        while not self.fenced:
            attempt += 1
            row.compensation_attempts += 1
            self._mark(row)
            try:
                self.keep_lease()
                await self.flush()  # write ahead: the compensation attempt is recorded before it runs
                self._check_fence()  # fenced meanwhile (the flush may have waited): it does not start
                if self.config.hooks:
                    self.emit("compensation_started", row, attempt=row.compensation_attempts)
                if direct:
                    await spec.compensate(own_copy(result))
                else:
                    ctx = self._context(row, attempt, "compensate") if spec.compensate_ctx_params else None
                    await self._invoke(
                        spec,
                        spec.compensate,
                        spec.compensate_is_async,
                        (own_copy(result),),
                        {},
                        spec.compensate_ctx_params,
                        ctx,
                    )
            except CANCELLED:
                row.status = StepStatus.COMPENSATION_FAILED
                row.compensation_error = "interrupted before it finished: compensation_timeout ran out"
                self._mark(row)
                self.emit("compensation_finished", row, attempt=row.compensation_attempts, error=row.compensation_error)
                raise
            except Exception as exc:
                if self.is_fenced():
                    return
                if policy.should_retry(exc, attempt):
                    try:
                        await anyio.sleep(policy.delay(attempt))
                    except CANCELLED:  # the time ran out between two attempts: the effect is still there
                        row.status = StepStatus.COMPENSATION_FAILED
                        row.compensation_error = f"{describe(exc)}; then compensation_timeout ran out before a retry"
                        self._mark(row)
                        raise
                    continue
                row.status = StepStatus.COMPENSATION_FAILED
                row.compensation_error = f"{describe(exc)} (after {attempt} attempt{'s' if attempt != 1 else ''})"
                self._mark(row)
                self.emit("compensation_finished", row, attempt=row.compensation_attempts, error=row.compensation_error)
                logger.error(
                    "saga %s: compensation of step %s (%s) failed, its effect was NOT undone: %s",
                    row.saga_id,
                    row.step_id,
                    row.tool_name,
                    row.compensation_error,
                )
                return
            row.status = StepStatus.COMPENSATED
            row.compensated_at = now()
            row.compensation_error = None
            self._mark(row)
            if self.config.hooks:
                self.emit("compensation_finished", row, attempt=row.compensation_attempts)
            logger.debug("saga %s: step %s (%s) compensated", row.saga_id, row.step_id, row.tool_name)
            return
