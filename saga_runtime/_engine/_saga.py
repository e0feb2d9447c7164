"""The saga engine: one running saga, fed group by group by a front door (a plan, or a dynamic saga).

The engine keeps the saga's rows, writes them ahead through the store (durability invariants 1 and 2 of
DESIGN.md), runs a group's steps in one task group with retries and timeouts, cancels siblings when a step
fails, and compensates in reverse, shielded from the caller's cancellation and bounded in time.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import anyio
import pydantic

from saga_runtime._engine._budget import Account, Budget
from saga_runtime._engine._events import EventKind, SagaEvent, SagaHook, emit
from saga_runtime._engine._shield import shielded
from saga_runtime._engine._siblings import Siblings
from saga_runtime._exceptions import (
    BudgetExceededError,
    LeaseLostError,
    ResultNotStorableError,
    ResultValidationError,
    StoreError,
    describe,
)
from saga_runtime._records import (
    SagaResult,
    SagaRow,
    SagaStatus,
    Sealer,
    StepRow,
    StepStatus,
    extend_head,
    identity_hash,
    now,
    result_from_rows,
    step_succeeded,
    to_json_value,
)
from saga_runtime._storage import SagaStore
from saga_runtime._tools import StepContext, ToolRegistry, ToolSpec

__all__ = ["RUNNABLE", "EngineConfig", "SagaEngine"]

logger = logging.getLogger("saga_runtime")

_UNKNOWN = frozenset({StepStatus.RUNNING, StepStatus.CANCELLED})
#: Steps a forward run (first or resumed) executes: never started, or started with an unknown outcome.
RUNNABLE = frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.CANCELLED})
# asyncio-native: the caller leaving is asyncio.CancelledError (anyio raises the same on this backend).
_CANCELLED = asyncio.CancelledError
# How long the engine may spend recording a saga's end after its compensation budget ran out.
_FINAL_WRITE_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What every saga of one executor shares."""

    registry: ToolRegistry
    store: SagaStore
    executor_id: str
    lease_timeout: float
    compensation_timeout: float
    thread_limiter: anyio.CapacityLimiter
    call_limiter: anyio.CapacityLimiter | None
    hooks: tuple[SagaHook, ...] = ()


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


def _saga_marker(engine: SagaEngine) -> Callable[[], None]:
    """Return a callback marking `engine`'s saga row changed, holding the engine only weakly (no cycle)."""
    ref = weakref.ref(engine)

    def mark() -> None:
        alive = ref()
        if alive is not None:
            alive._saga_dirty = True

    return mark


class SagaEngine:
    """Run one saga: groups of steps forward, then, if it cannot finish, compensations in reverse."""

    def __init__(
        self,
        config: EngineConfig,
        saga: SagaRow,
        steps: Sequence[StepRow],
        *,
        announced: Sequence[StepRow] = (),
    ) -> None:
        self.config = config
        self.saga = saga
        self.rows: dict[str, StepRow] = {row.step_id: row for row in steps}
        self._by_seq: dict[int, StepRow] = {row.seq: row for row in steps}
        self._links: dict[int, str] = {}
        self._sealer = Sealer(config.store.signing_key)
        # Arguments validated when the plan was, by step: (the args they were validated from, the kwargs).
        self._validated: dict[str, tuple[Any, dict[str, Any]]] = {}
        # Steps whose first attempt was already committed RUNNING with the saga itself (write-ahead done).
        self._announced = {row.step_id for row in announced}
        self.failure: str | None = None
        # The exception that ended each failed step in this process (the record keeps its type and message).
        self.errors: dict[str, BaseException] = {}
        self._failed_step: str | None = None
        self._dirty: dict[str, StepRow] = {}
        self._saga_dirty = False
        # asyncio.Lock, not anyio.Lock: it does not yield to the loop when nobody holds it (the common case).
        self._write_lock = asyncio.Lock()
        self._store_error: BaseException | None = None
        self.fenced = False
        self.lease_lost = False
        self._undo_failed: set[str] = set()  # steps whose refused result could not be undone
        self._winners: dict[int, str] = {}  # group -> the step that won a `first` race in this process
        # True for a saga recovery drives: no caller waits on it, so a cancellation (the worker shutting down)
        # stops it without compensating; the next recovery resumes it.
        self.detached = False
        # Not `self._mark_saga`: a bound method would make engine -> account -> engine a reference cycle, and every
        # finished saga (its rows, seals, arguments and results) would wait for a full cyclic GC instead of being
        # freed when run() returns: ~21 KiB per saga, ~15 MiB of peak RSS at 50 concurrent sagas.
        self.account = Account(saga, Budget.from_json(saga.budget), _saga_marker(self))

    # -- recording ---------------------------------------------------------------------------------------------

    def _mark_saga(self) -> None:
        self._saga_dirty = True

    def _link(self, row: StepRow) -> str:
        """Return the identity hash of the row before `row`: what `row` links to in the chain (cached)."""
        link = self._links.get(row.seq)
        if link is None:
            link = self._links[row.seq] = identity_hash(self._by_seq.get(row.seq - 1), row.saga_id)
        return link

    def emit(self, kind: EventKind, row: StepRow | None = None, **fields: Any) -> None:
        """Tell the executor's hooks what just happened (nothing to do without hooks)."""
        if not self.config.hooks:
            return
        if row is None:
            event = SagaEvent(kind, self.saga.saga_id, status=self.saga.status.value, **fields)
        else:
            event = SagaEvent(
                kind,
                self.saga.saga_id,
                step_id=row.step_id,
                tool_name=row.tool_name,
                group=row.group,
                idempotency_key=row.idempotency_key,
                **{"status": row.status.value, "attempt": row.attempts, **fields},
            )
        emit(self.config.hooks, event)

    def fence(self, *, lost: bool = False) -> None:
        """Stop this engine for good: nothing more is written. `lost`: another executor may own the saga now."""
        self.fenced = True
        self.lease_lost = self.lease_lost or lost

    def add_dirty(self, row: StepRow) -> None:
        """Note that a row changed outside the engine (an operator reset it); it is written with the next flush."""
        self._mark(row)

    def touch_saga(self) -> None:
        """Note that the saga row changed (metadata, budget); it is written with the next flush."""
        self._saga_dirty = True

    def _mark(self, row: StepRow) -> None:
        self._dirty[row.step_id] = row

    def seal_all(self) -> None:
        """Link and seal every row, in order (before the saga's first write)."""
        seal, link = self._sealer.seal, self._link
        for row in sorted(self.rows.values(), key=_seq):
            seal(row, link(row))

    def validated(self, row: StepRow, kwargs: dict[str, Any]) -> None:
        """Note that `kwargs` are `row`'s current arguments validated; the step will not validate them again."""
        self._validated[row.step_id] = (row.args, kwargs)

    def add_step(self, row: StepRow) -> None:
        """Add a step to the saga (dynamic sagas add them as they go); it is written with the next flush."""
        self.rows[row.step_id] = row
        self._by_seq[row.seq] = row
        self.saga.plan_hash = extend_head(self.saga.plan_hash, row)  # the chain head seals the list of calls
        self._saga_dirty = True
        self._mark(row)

    async def flush(self) -> None:
        """Commit every changed row in one store write; return once it is durable."""
        async with self._write_lock:
            if not self._dirty and not self._saga_dirty:
                return
            if self.fenced:
                raise LeaseLostError(
                    f"saga {self.saga.saga_id!r} was taken over by another executor (this one lost its lease); "
                    "it goes on there",
                    saga_id=self.saga.saga_id,
                )
            seal, link = self._sealer.seal, self._link
            steps = []
            for row in self._dirty.values():
                seal(row, link(row))
                steps.append(row.copy())
            self._dirty.clear()
            saga = None
            if self._saga_dirty:
                self.saga.updated_at = now()
                if self.saga.status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
                    self.saga.lease_expires_at = self.saga.updated_at + timedelta(seconds=self.config.lease_timeout)
                saga = self.saga.copy()
                self._saga_dirty = False
            try:
                await self.config.store.save(saga, steps)
            except BaseException:
                # Not written: keep the rows dirty, so the next flush (or recovery's reading) is not misled.
                for row in steps:
                    self._dirty.setdefault(row.step_id, self.rows[row.step_id])
                if saga is not None:
                    self._saga_dirty = True
                raise

    # -- forward -----------------------------------------------------------------------------------------------

    @property
    def failed(self) -> bool:
        """Tell whether a step failed in a way that fails the saga."""
        return self.failure is not None

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

        In a `first`, `quorum` or `any` group a failed member is part of the race, not a failure of the saga.
        """
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

    def _fail_saga(self, row: StepRow, error: str) -> None:
        if self.failure is None:
            self.failure = f"step {row.step_id!r} ({row.tool_name}) failed: {error}"
            self._failed_step = row.step_id

    def _prepare(self, row: StepRow) -> tuple[StepRow, ToolSpec, dict[str, Any]] | None:
        spec = self.config.registry.get(row.tool_name)
        known = self._validated.pop(row.step_id, None) if self._validated else None
        if known is not None and known[0] is row.args:
            return row, spec, known[1]
        try:
            kwargs = spec.validate_args(row.args)
        except pydantic.ValidationError as exc:
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
            return True
        undoing = [row for row in rows if row.status in _UNKNOWN and row.compensation_attempts > 0]
        if undoing:
            # Their compensation had begun (written ahead) when the process died: finish it, never run forward.
            await self.compensate_unknown(undoing)
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
        try:
            await self.flush()
        except BaseException:
            for (row, _, _), (status, attempts, started_at) in zip(calls, before, strict=True):
                row.status, row.attempts, row.started_at = status, attempts, started_at  # never ran
            raise
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

    def judge(self, rows: Sequence[StepRow], join: str, needed: int | None) -> bool:
        """Decide whether a finished group lets the saga go on; fail the saga if not."""
        if join == "all":
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
            row for row in rows if row is not winner and (row.status is StepStatus.SUCCESS or row.status in _UNKNOWN)
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
        except _CANCELLED:
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
        attempt = 1  # of this run, for the retry policy; row.attempts counts every attempt ever made
        direct = self._direct(spec.execute_is_async, spec.execute_ctx_params, spec)
        while True:
            if attempt > 1:
                row.attempts += 1
                self._mark(row)
                try:
                    await self.flush()
                except Exception as exc:
                    raise _WriteFailed(f"attempt {row.attempts} could not be recorded: {describe(exc)}") from exc
            raw: Any = _NOTHING
            try:
                if direct:
                    raw = await spec.execute(**kwargs)
                else:
                    ctx = self._context(row, row.attempts, "execute") if spec.execute_ctx_params else None
                    raw = await self._invoke(
                        spec, spec.execute, spec.execute_is_async, (), kwargs, spec.execute_ctx_params, ctx
                    )
                if spec.result_adapter is None and spec.validate_result is None:
                    return raw
                return await self._checked(row, spec, raw)
            except Exception as exc:
                if raw is not _NOTHING:
                    # The attempt had its effect, but its result was refused: undo it now, with the value in hand.
                    await self._undo_attempt(row, spec, raw)
                timed_out = isinstance(exc, _AttemptTimeout)
                retry = not isinstance(exc, BudgetExceededError) and spec.retry.should_retry(exc, attempt)
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
                    attempt += 1
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
            while True:
                attempt += 1
                row.compensation_attempts += 1
                self._mark(row)
                try:
                    await self.flush()  # write ahead, as for every compensation
                    ctx = self._context(row, attempt, "compensate") if spec.compensate_ctx_params else None
                    await self._invoke(
                        spec, compensate, spec.compensate_is_async, (value,), {}, spec.compensate_ctx_params, ctx
                    )
                except Exception as exc:
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
                self._undo_failed.discard(row.step_id)
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
        # A timed-out attempt may have had its effect: its outcome is unknown (CANCELLED), not FAILED. A refused
        # result whose undo failed left an effect behind: COMPENSATION_FAILED, so the saga says so.
        status = StepStatus.CANCELLED if timed_out else StepStatus.FAILED
        if row.step_id in self._undo_failed:
            status = StepStatus.COMPENSATION_FAILED
        self._finish(row, status, error=error, error_type=error_type)
        logger.warning("saga %s: step %s (%s) failed: %s", row.saga_id, row.step_id, row.tool_name, error)
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

    def _finish(
        self, row: StepRow, status: StepStatus, *, error: str | None = None, error_type: str | None = None
    ) -> None:
        row.status = status
        row.error = error
        row.error_type = error_type
        row.finished_at = now()
        self._mark(row)
        if self.config.hooks:
            self.emit("step_finished", row, error=error)

    def _direct(self, is_async: bool, ctx_params: tuple[str, ...], spec: ToolSpec) -> bool:
        """Tell whether a tool method can be awaited as it is: what `_invoke` would do, without its layers."""
        return is_async and not ctx_params and spec.timeout is None and self.config.call_limiter is None

    def _context(self, row: StepRow, attempt: int, phase: Any) -> StepContext:
        return StepContext(
            saga_id=row.saga_id,
            step_id=row.step_id,
            tool_name=row.tool_name,
            args=row.args,
            attempt=attempt,
            idempotency_key=row.idempotency_key,
            phase=phase,
            _charge=self.account.charge,
        )

    async def _invoke(
        self,
        spec: ToolSpec,
        fn: Callable[..., Any],
        is_async: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        ctx_params: tuple[str, ...],
        ctx: StepContext | None,
    ) -> Any:
        if ctx_params:
            kwargs = {**kwargs, **dict.fromkeys(ctx_params, ctx)}
        limiter = self.config.call_limiter
        if limiter is not None:
            async with limiter:
                return await self._timed(spec, fn, is_async, args, kwargs)
        return await self._timed(spec, fn, is_async, args, kwargs)

    async def _timed(
        self,
        spec: ToolSpec,
        fn: Callable[..., Any],
        is_async: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if spec.timeout is None:
            return await self._call(fn, is_async, args, kwargs)
        with anyio.move_on_after(spec.timeout):
            return await self._call(fn, is_async, args, kwargs)
        raise _AttemptTimeout(f"{spec.name} did not finish within its timeout of {spec.timeout:g}s")

    async def _call(self, fn: Callable[..., Any], is_async: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if is_async:
            return await fn(*args, **kwargs)
        # A sync tool runs in a worker thread; on cancellation or timeout the thread is abandoned, not stopped.
        value = await anyio.to_thread.run_sync(
            partial(fn, *args, **kwargs), abandon_on_cancel=True, limiter=self.config.thread_limiter
        )
        if inspect.isawaitable(value):  # a sync wrapper around a coroutine function
            return await value
        return value

    # -- backward ----------------------------------------------------------------------------------------------

    def _needs_compensation(self, row: StepRow) -> bool:
        return (row.status is StepStatus.SUCCESS or row.status in _UNKNOWN) and self.config.registry.get(
            row.tool_name
        ).has_compensate

    async def compensate(self) -> SagaResult:
        """Undo every step that succeeded or whose outcome is unknown, groups in reverse; record the saga's end.

        Runs to its end even if the caller is cancelled meanwhile (the cancellation goes on afterwards), and is
        bounded by the executor's `compensation_timeout`.
        """
        return await shielded(self._compensate())

    async def _compensate(self) -> SagaResult:
        with anyio.move_on_after(self.config.compensation_timeout) as scope:
            self.saga.status = SagaStatus.COMPENSATING
            if self.saga.error is None:
                # Written now, not at the end: a compensation resumed after a crash still says why it began.
                self.saga.error = self.failure or "the saga was cancelled by its caller"
            self._mark_saga()
            await self.flush()
            todo = [row for row in self.rows.values() if self._needs_compensation(row)]
            groups: dict[int, list[StepRow]] = {}
            for row in sorted(todo, key=_seq):
                groups.setdefault(row.group, []).append(row)
            for group in sorted(groups, reverse=True):
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
        wanted = (*_UNKNOWN, StepStatus.SUCCESS) if successes else _UNKNOWN
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
        while True:
            attempt += 1
            row.compensation_attempts += 1
            self._mark(row)
            try:
                await self.flush()  # write ahead: the compensation attempt is recorded before it runs
                if self.config.hooks:
                    self.emit("compensation_started", row, attempt=row.compensation_attempts)
                if direct:
                    await spec.compensate(result)
                else:
                    ctx = self._context(row, attempt, "compensate") if spec.compensate_ctx_params else None
                    await self._invoke(
                        spec,
                        spec.compensate,
                        spec.compensate_is_async,
                        (result,),
                        {},
                        spec.compensate_ctx_params,
                        ctx,
                    )
            except _CANCELLED:
                row.status = StepStatus.COMPENSATION_FAILED
                row.compensation_error = "interrupted before it finished: compensation_timeout ran out"
                self._mark(row)
                self.emit("compensation_finished", row, attempt=row.compensation_attempts, error=row.compensation_error)
                raise
            except Exception as exc:
                if policy.should_retry(exc, attempt):
                    try:
                        await anyio.sleep(policy.delay(attempt))
                    except _CANCELLED:  # the time ran out between two attempts: the effect is still there
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

    # -- the end -----------------------------------------------------------------------------------------------

    async def finish(self, status: SagaStatus) -> SagaResult:
        """Record the saga's terminal status and return its result; the record is written even if the caller leaves."""
        return await shielded(self._record_end(status))

    async def _record_end(self, status: SagaStatus) -> SagaResult:
        self.saga.status = status
        if status is not SagaStatus.SUCCESS and self.saga.error is None:
            self.saga.error = self.failure or "the saga was cancelled by its caller"
        self.saga.finished_at = now()
        self.saga.lease_expires_at = None
        self._mark_saga()
        with anyio.move_on_after(_FINAL_WRITE_TIMEOUT) as scope:
            await self.flush()
        if scope.cancelled_caught:
            raise StoreError(
                f"saga {self.saga.saga_id!r} ended {status.value} but the store did not record it within "
                f"{_FINAL_WRITE_TIMEOUT:g}s ({self.config.store.url}); check the database: recovery will finish it"
            )
        self.emit("saga_finished", error=self.saga.error)
        log = logger.info if status is SagaStatus.SUCCESS else logger.warning
        log("saga %s ended %s%s", self.saga.saga_id, status.value, f": {self.saga.error}" if self.saga.error else "")
        return result_from_rows(self.saga, list(self.rows.values()))


def _seq(row: StepRow) -> int:
    return row.seq


class _AttemptTimeout(TimeoutError):
    """Internal: an attempt ran past the tool's timeout (a TimeoutError, so retry policies see one)."""

    def __str__(self) -> str:
        return self.args[0] if self.args else ""


# Recorded and logged under the documented name: users match on TimeoutError, not on an internal class.
_AttemptTimeout.__name__ = _AttemptTimeout.__qualname__ = "TimeoutError"
