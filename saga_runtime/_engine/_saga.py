"""The saga engine: one running saga, fed group by group by a front door (a plan, or a dynamic saga).

A group's steps run concurrently (`Siblings`), their intents committed in one write first; how the group ends is its
join: `all` (a failure cancels the siblings and fails the saga), `first` (the first success wins, the others are
cancelled and compensated), `quorum`/`any` (every step runs; too few successes fail the saga). The rest of the
engine is in its bases: `_core` (state, records, fencing, the end), `_calls`, `_compensation` and `_attempts`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
import pydantic

from saga_runtime._engine._attempts import StepRunner
from saga_runtime._engine._core import RUNNABLE, UNKNOWN, EngineConfig
from saga_runtime._engine._siblings import Siblings
from saga_runtime._exceptions import ResultValidationError, SecretKeyError, describe
from saga_runtime._records import StepRow, StepStatus, now, open_args, own_values, step_succeeded
from saga_runtime._tools import ToolSpec

__all__ = ["RUNNABLE", "EngineConfig", "SagaEngine"]

logger = logging.getLogger("saga_runtime")


class SagaEngine(StepRunner):
    """Run one saga: groups of steps forward, then, if it cannot finish, compensations in reverse."""

    def result_for(self, step_id: str) -> Any:
        """Return the stored result of a SUCCESS step; raise `LookupError` saying why there is none."""
        row = self.rows.get(step_id)
        if row is None:
            raise LookupError(f"no step {step_id!r} in saga {self.saga.saga_id!r}")
        if row.status is not StepStatus.SUCCESS:
            raise LookupError(f"step {step_id!r} ended {row.status.value} and has no result")
        return row.result

    def adopt(self, rows: Sequence[StepRow], join: str = "all") -> None:
        """Take in recorded outcomes of a resumed saga: a recorded FAILED step of scope "saga" fails it.

        In a `first`, `quorum` or `any` group a failed member is part of the race, not a failure of the saga. A
        step whose refused result could not be undone fails it in any group (see `_on_failure`).
        """
        for row in rows:
            if row.status is StepStatus.COMPENSATION_FAILED and row.error_type == ResultValidationError.__name__:
                self._fail_saga(row, f"{row.error}; the effect of its refused result could not be undone")
        if join != "all":
            return
        for row in rows:
            if row.status is StepStatus.FAILED and self.config.registry.get(row.tool_name).retry_scope == "saga":
                self._fail_saga(row, row.error or "failed")

    @staticmethod
    def succeeded(row: StepRow) -> bool:
        """Tell whether a step's execute succeeded and counts (also when it was undone later with the saga)."""
        return step_succeeded(row.status, row.error, row.finished_at)

    def group_result(self, rows: Sequence[StepRow], join: str) -> Any:
        """Return what a `$ref` to a group gets: a `first` group's winner's result, else the list of successes."""
        wins = [row.result for row in sorted(rows, key=lambda r: r.seq) if self.succeeded(row)]
        if join == "first":
            if not wins:
                raise LookupError("the group has no winner")
            return wins[0]
        return wins

    def fail_before_start(self, row: StepRow, exc: BaseException) -> None:
        """Record that a step could not start (its arguments could not be prepared); it never ran."""
        spec = self.config.registry.get(row.tool_name)
        row.status = StepStatus.FAILED
        row.error = f"the step could not start: {describe(exc)}"
        row.error_type = type(exc).__name__
        row.finished_at = now()
        self._mark(row)
        if spec.retry_scope == "saga":
            self._fail_saga(row, row.error)

    def _prepare(self, row: StepRow) -> tuple[StepRow, ToolSpec, dict[str, Any]] | None:
        spec = self.config.registry.get(row.tool_name)
        known = self._validated.pop(row.step_id, None) if self._validated else None
        if known is not None and known[0] is row.args:
            return row, spec, known[1]
        try:
            # Never objects of the record (see own_values); secrets in clear (open_args).
            kwargs = spec.validate_args(own_values(open_args(row, spec.secrets, self.config.keyring)))
        except (pydantic.ValidationError, SecretKeyError) as exc:
            self.fail_before_start(row, exc)
            return None
        return row, spec, kwargs

    async def run_group(self, rows: Sequence[StepRow], *, join: str = "all", needed: int | None = None) -> bool:
        """Run the steps of one group concurrently; return whether the saga can go on.

        `rows` are the group's steps; those not yet done (never started, or of unknown outcome) run. They are
        committed RUNNING (attempt n) with the outcomes of earlier groups in one write before any of them starts.
        `join` says how the group ends: `all` (a step failing with scope "saga" cancels its running siblings and
        fails the saga), `first` (the first success wins; its running siblings are cancelled and every loser is
        compensated at once; the group fails only if every step failed), `quorum`/`any` (every step runs to its
        end; the group fails, failing the saga, with fewer than `needed` successes).
        """
        if join == "first" and any(self.succeeded(row) for row in rows):
            await self._settle_first(rows)  # resumed: the recorded winner stands, the rest lose
            return self._nothing_left_out(rows)
        undoing = [row for row in rows if row.status in UNKNOWN and row.compensation_attempts > 0]
        if undoing:
            # Their compensation had begun (written ahead) when the process died: finish it, never run forward.
            await self.compensate_unknown(undoing)
            for row in undoing:
                # Undone, never completed: it cannot count as done. (A refused attempt's undo counts compensation
                # attempts too, so a step whose next attempt was running at the crash lands here: undone, not
                # re-run, and the saga fails rather than going on without it.)
                if row.error is None:
                    row.error, row.error_type = "its outcome was unknown after a crash; it was undone", "Crash"
                    self._mark(row)
                if join == "all" and self.config.registry.get(row.tool_name).retry_scope == "saga":
                    self._fail_saga(row, row.error)
        calls = [
            call
            for call in (self._prepare(row) for row in rows if row.status in RUNNABLE and row not in undoing)
            if call
        ]
        if self.failed:
            await self.flush()
            return False
        if not calls:
            return self.judge(rows, join, needed)
        started = now()
        ready: list[tuple[StepRow, ToolSpec, dict[str, Any]]] = []
        if self._announced:
            waiting: list[tuple[StepRow, ToolSpec, dict[str, Any]]] = []
            for call in calls:
                (ready if call[0].step_id in self._announced else waiting).append(call)
            self._announced.difference_update(call[0].step_id for call in ready)
            calls = waiting
        before = [(row.status, row.attempts, row.started_at) for row, _, _ in calls]
        for row, _, _ in calls:
            # A step resumed after a crash (RUNNING or CANCELLED: outcome unknown) runs again with the same
            # idempotency key; its attempts keep counting.
            row.status = StepStatus.RUNNING
            row.attempts += 1
            row.started_at = row.started_at or started
            self._mark(row)
        if calls:
            self.keep_lease()  # never start on an almost expired lease: extend it in the same write
        try:
            await self.flush()
        except BaseException:
            for (row, _, _), (status, attempts, started_at) in zip(calls, before, strict=True):
                row.status, row.attempts, row.started_at = status, attempts, started_at  # never ran
            raise
        self._check_fence()  # fenced while the intent was being written: no step starts after the fence
        calls += ready
        if self.config.hooks:
            for row, _, _ in calls:
                self.emit("step_started", row)
        if len(calls) == 1 and join == "all":
            # One step needs no task group and has no siblings to cancel: run it inline (the sequential case).
            await self._run_step(*calls[0], None)
        else:
            siblings = Siblings()
            for row, spec, kwargs in calls:
                siblings.start(self._run_step, row, spec, kwargs, siblings, join)
            await siblings.wait()
        if self._store_error is not None:
            raise self._store_error
        if join == "first":
            await self._settle_first(rows)
        return self.judge(rows, join, needed)

    def _nothing_left_out(self, rows: Sequence[StepRow]) -> bool:
        """Fail the saga if a step of the group has an effect its compensation could not undo; tell if it goes on.

        A race loser whose release failed, or a timed-out step (scope "step") whose undo failed, leaves an effect
        out in the world: the saga must not end SUCCESS with it forgotten. It fails, compensates, and ends
        COMPENSATION_FAILED, so `list_sagas(status="COMPENSATION_FAILED")` shows it and `retry_compensation()`
        undoes it once the cause is fixed.
        """
        for row in rows:
            if row.status is StepStatus.COMPENSATION_FAILED:
                self._fail_saga(row, f"its effect could not be undone: {row.compensation_error}")
        return not self.failed

    def judge(self, rows: Sequence[StepRow], join: str, needed: int | None) -> bool:
        """Decide whether a finished group lets the saga go on; fail the saga if not."""
        if not self._nothing_left_out(rows):
            return False
        if join == "all" or self.failed:
            return not self.failed
        wins = sum(1 for row in rows if self.succeeded(row))
        required = 1 if join == "first" else needed or 1
        if wins >= required:
            return True
        if self.failure is None:
            group = rows[0].group if rows else -1
            self.failure = (
                f"every step of 'first' group {group} failed"
                if join == "first"
                else f"{join} group {group}: {wins} of {len(rows)} steps succeeded, {required} needed"
            )
        return False

    async def _settle_first(self, rows: Sequence[StepRow]) -> None:
        """Keep a `first` group's winner (the earliest success); compensate every other step at once."""
        wins = sorted((row for row in rows if self.succeeded(row)), key=lambda r: (r.finished_at or now(), r.seq))
        if not wins:
            return
        winner = wins[0]
        losers = [
            row for row in rows if row is not winner and (row.status is StepStatus.SUCCESS or row.status in UNKNOWN)
        ]
        for row in losers:
            if row.error is None:
                row.error, row.error_type = f"lost the race to step {winner.step_id!r}", "LostRace"
                self._mark(row)
        if losers:
            async with anyio.create_task_group() as tg:
                for row in losers:
                    spec = self.config.registry.get(row.tool_name)
                    if spec.has_compensate:
                        value = row.result if row.status is StepStatus.SUCCESS else None
                        tg.start_soon(self._compensate_now, row, spec, value)
