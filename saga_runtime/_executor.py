"""SagaExecutor: the front door users call, `await executor.run(plan)`."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import anyio

from saga_runtime._dynamic import DynamicSaga
from saga_runtime._engine import RUNNABLE, Budget, EngineConfig, LeaseKeeper, SagaEngine
from saga_runtime._exceptions import (
    IdempotencyConflictError,
    LeaseLostError,
    PlanValidationError,
    ReplayDivergenceError,
    ResultNotStorableError,
    SagaInProgressError,
)
from saga_runtime._planning import Plan, PlanPolicy, RefError, build_plan, check_plan_record, has_refs, resolve_refs
from saga_runtime._records import (
    SagaResult,
    SagaRow,
    SagaStatus,
    StepRow,
    StepStatus,
    idempotency_key,
    now,
    result_from_rows,
    seal_all,
    to_json_value,
)
from saga_runtime._storage import MemoryStore, SagaStore
from saga_runtime._tools import ToolRegistry

__all__ = ["SagaExecutor"]

logger = logging.getLogger("saga_runtime")

# asyncio-native: the caller leaving is asyncio.CancelledError (anyio raises the same on this backend).
_CANCELLED = asyncio.CancelledError


def _check_positive(name: str, value: float | None, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def _valid_id(value: object) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        return len(value.encode()) <= 200
    except UnicodeEncodeError:  # a lone surrogate: no database can store it
        return False


class SagaExecutor:
    """Run sagas of the tools in `registry`, recording every step in `store` (a private memory store by default).

    `compensation_timeout` (seconds, default 300) bounds the compensation of one saga, also when its caller was
    cancelled: compensation runs shielded from the cancellation, then the cancellation goes on.
    `max_concurrency` caps how many tool calls (execute or compensate) run at once in this executor;
    `max_threads` caps the worker threads sync tools run in.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        store: SagaStore | None = None,
        *,
        executor_id: str | None = None,
        lease_timeout: float = 30.0,
        max_concurrency: int | None = None,
        compensation_timeout: float = 300.0,
        max_threads: int = 40,
    ) -> None:
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry must be a ToolRegistry, got {type(registry).__name__}")
        _check_positive("lease_timeout", lease_timeout)
        _check_positive("compensation_timeout", compensation_timeout)
        for name, limit in (("max_concurrency", max_concurrency), ("max_threads", max_threads)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
                raise ValueError(f"{name} must be a positive int, got {limit!r}")
        self.registry = registry
        self.store: SagaStore = store if store is not None else MemoryStore()
        self.executor_id = executor_id or f"executor-{uuid.uuid4().hex[:12]}"
        self.lease_timeout = float(lease_timeout)
        self.compensation_timeout = float(compensation_timeout)
        self.max_concurrency = max_concurrency
        self._active: set[str] = set()  # sagas this executor is running right now
        self._config = EngineConfig(
            registry=registry,
            store=self.store,
            executor_id=self.executor_id,
            lease_timeout=self.lease_timeout,
            compensation_timeout=self.compensation_timeout,
            thread_limiter=anyio.CapacityLimiter(max_threads),
            call_limiter=None if max_concurrency is None else anyio.CapacityLimiter(max_concurrency),
        )

    def __repr__(self) -> str:
        return f"SagaExecutor(id={self.executor_id!r}, store={self.store.url!r}, tools={self.registry.names()!r})"

    async def run(
        self,
        plan: Sequence[Any],
        *,
        saga_id: str | None = None,
        budget: Budget | None = None,
        policy: PlanPolicy | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SagaResult:
        """Validate `plan`, run it group by group, compensate in reverse if it cannot finish; return the result.

        A tool failure never raises: read `result.status` or call `result.raise_for_status()`. A refused plan
        raises `PlanValidationError` and nothing is stored. `saga_id` is the saga's idempotency key: a finished
        saga's id returns its stored result without calling a tool; the same id with another plan raises
        `IdempotencyConflictError`; an id that is running right now raises `SagaInProgressError`.
        """
        planned = build_plan(plan, self.registry, policy=policy)
        saga, steps = self._new_saga(planned, saga_id, budget, metadata)
        # The first group's intent (RUNNING, attempt 1) is committed with the saga itself: one write less.
        first = [row for row in steps if row.group == 0]
        for row in first:
            row.status, row.attempts, row.started_at = StepStatus.RUNNING, 1, saga.created_at
        seal_all(steps, self.store.signing_key)
        existing = await self.store.create_saga(saga.copy(), [row.copy() for row in steps])
        if existing is None:
            logger.debug("saga %s: started by %s, %d steps", saga.saga_id, self.executor_id, len(steps))
            engine = SagaEngine(self._config, saga, steps, announced=first)
        else:
            stored, rows = existing
            finished = self._existing(saga, stored, rows)
            if finished is not None:
                return finished
            await self._resume_or_refuse(stored)
            logger.info("saga %s: resuming where its previous owner %r left it", saga.saga_id, stored.owner)
            engine = self._engine_for(stored, rows)
        self._active.add(engine.saga.saga_id)
        try:
            return await self._leased(engine, lambda: self._drive(engine, planned))
        finally:
            self._active.discard(engine.saga.saga_id)

    async def _leased(self, engine: SagaEngine, work: Callable[[], Awaitable[SagaResult]]) -> SagaResult:
        """Run `work` while its lease is renewed; raise `LeaseLostError` if another executor took the saga over."""
        with anyio.CancelScope() as fence:
            keeper = LeaseKeeper(engine, fence.cancel).start()
            try:
                return await work()
            except _CANCELLED:
                if not engine.fenced:
                    raise
            finally:
                await keeper.stop()
        raise LeaseLostError(
            f"saga {engine.saga.saga_id!r} was taken over by another executor while this one ran it (its lease "
            "expired); it stopped here without compensating, and goes on under its new owner",
            saga_id=engine.saga.saga_id,
        )

    def saga(
        self,
        saga_id: str | None = None,
        *,
        budget: Budget | None = None,
        metadata: Mapping[str, Any] | None = None,
        replay: bool = False,
    ) -> DynamicSaga:
        """Return a dynamic saga to use as `async with executor.saga(saga_id=...) as saga:`.

        `saga.call(tool, **args)` and `saga.group([(tool, args), ...])` run calls as they come; an exception
        leaving the block compensates every completed call in reverse, then goes on. Re-entering the id of a
        saga that did not finish (its process died) serves the calls already made from the record, without
        calling the tools, and continues live. With `replay=True`, or for a finished saga, every call is served
        from the record and a call the record does not hold raises `ReplayDivergenceError`; nothing is written.
        """
        problems, stored_metadata = self._check_saga_options(saga_id, budget, metadata)
        if problems:
            raise PlanValidationError(problems, saga_id=saga_id)
        return DynamicSaga(
            self, saga_id or uuid.uuid4().hex, budget=budget, metadata=stored_metadata, replay=bool(replay)
        )

    async def replay(self, saga_id: str) -> SagaResult:
        """Rebuild a recorded saga from its records, calling no tool; raise `ReplayDivergenceError` if they disagree.

        For a plan saga, every step that ran must have run with its plan's arguments, each `$ref` resolved from
        the recorded results. The stored saga is never changed.
        """
        stored = await self.store.load_saga(saga_id)
        if stored is None:
            raise ReplayDivergenceError(f"saga {saga_id!r} is not in {self.store.url}", saga_id=saga_id)
        saga, rows = stored
        if saga.kind == "plan":
            check_plan_record(saga, rows)
        return result_from_rows(saga, rows)

    def _engine_for(self, saga: SagaRow, steps: list[StepRow]) -> SagaEngine:
        return SagaEngine(self._config, saga, steps)

    async def _claim(self, saga: SagaRow) -> bool:
        """Take over a live saga whose owner is gone (or is this executor, restarted); return whether it did."""
        if saga.saga_id in self._active:
            return False
        started = now()
        expires = started + timedelta(seconds=self.lease_timeout)
        if not await self.store.claim_saga(saga.saga_id, self.executor_id, expires, started):
            return False
        saga.owner, saga.lease_expires_at = self.executor_id, expires
        return True

    def _new_saga(
        self,
        planned: Plan,
        saga_id: str | None,
        budget: Budget | None,
        metadata: Mapping[str, Any] | None,
    ) -> tuple[SagaRow, list[StepRow]]:
        problems, stored_metadata = self._check_saga_options(saga_id, budget, metadata)
        if problems:
            raise PlanValidationError(problems, saga_id=saga_id)
        saga_id = saga_id or uuid.uuid4().hex
        started = now()
        saga = SagaRow(
            saga_id=saga_id,
            kind="plan",
            plan=planned.to_json(),
            plan_hash=planned.digest,
            status=SagaStatus.RUNNING,
            created_at=started,
            updated_at=started,
            owner=self.executor_id,
            lease_expires_at=started + timedelta(seconds=self.lease_timeout),
            budget=None if budget is None else {**budget.to_json(), "charges": 0},
            metadata=stored_metadata,
        )
        steps = [
            StepRow(
                saga_id=saga_id,
                seq=seq,
                step_id=step.step_id,
                group=step.group,
                tool_name=step.tool_name,
                args=step.args,
                idempotency_key=idempotency_key(saga_id, step.step_id),
            )
            for seq, step in enumerate(planned.steps)
        ]
        return saga, steps

    @staticmethod
    def _check_saga_options(
        saga_id: str | None, budget: Budget | None, metadata: Mapping[str, Any] | None
    ) -> tuple[list[str], dict[str, Any]]:
        problems = []
        if saga_id is not None and not _valid_id(saga_id):
            problems.append(f"saga_id must be non-empty Unicode text of at most 200 bytes in UTF-8, got {saga_id!r}")
        given: object = budget  # callers outside mypy's reach pass anything
        if not isinstance(given, Budget | None):
            problems.append(f"budget must be a Budget, got {type(budget).__name__}")
        stored_metadata: dict[str, Any] = {}
        if metadata is not None:
            try:
                stored_metadata = dict(to_json_value(dict(metadata), what="the metadata", tool_name="(saga)"))
            except (ResultNotStorableError, TypeError, ValueError) as exc:
                problems.append(f"metadata must be a JSON-like mapping: {exc}")
        return problems, stored_metadata

    def _existing(self, attempted: SagaRow, saga: SagaRow, steps: list[StepRow]) -> SagaResult | None:
        """Return a finished saga's stored result; None when this executor may resume it; raise otherwise."""
        if saga.kind != attempted.kind or saga.plan_hash != attempted.plan_hash:
            raise IdempotencyConflictError(
                f"saga {saga.saga_id!r} already exists with a different plan; a saga id names one plan, so use a "
                "new saga_id for this one",
                saga_id=saga.saga_id,
            )
        if saga.status.is_terminal:
            logger.debug("saga %s: already finished %s, returning the stored result", saga.saga_id, saga.status)
            return result_from_rows(saga, steps)
        return None

    async def _resume_or_refuse(self, saga: SagaRow) -> None:
        if await self._claim(saga):
            return
        raise SagaInProgressError(
            f"saga {saga.saga_id!r} is {saga.status.value} under executor {saga.owner!r}; wait for it and read "
            "its result with store.get_saga(), or run it again once it has finished",
            saga_id=saga.saga_id,
            owner=saga.owner,
        )

    async def _drive(self, engine: SagaEngine, plan: Plan) -> SagaResult:
        """Run (or resume) a plan saga from wherever its rows stand, to a terminal status."""
        if engine.saga.status is SagaStatus.COMPENSATING:
            return await engine.compensate()
        try:
            for group in plan.groups:
                recorded = [engine.rows[step.step_id] for step in group]
                engine.adopt(recorded)
                if engine.failed:
                    break
                rows = []
                for step in group:
                    row = engine.rows[step.step_id]
                    if row.status not in RUNNABLE:
                        continue
                    if has_refs(step):
                        try:
                            row.args = resolve_refs(step.args, engine.result_for)
                        except (RefError, LookupError) as exc:
                            engine.fail_before_start(row, exc)
                            continue
                    rows.append(row)
                if rows and not await engine.run_group(rows):
                    break
        except _CANCELLED:
            if engine.fenced:
                raise  # another executor owns the saga now: it must not be compensated from here
            logger.warning("saga %s: cancelled by its caller, compensating", engine.saga.saga_id)
            await engine.compensate()
            raise
        if engine.failed:
            return await engine.compensate()
        return await engine.finish(SagaStatus.SUCCESS)
