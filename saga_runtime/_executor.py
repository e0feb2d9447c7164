"""SagaExecutor: the front door users call, `await executor.run(plan)`."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio

from saga_runtime._dynamic import DynamicSaga
from saga_runtime._engine import (
    HOLDABLE,
    RUNNABLE,
    Budget,
    Claims,
    Decisions,
    EngineConfig,
    SagaEngine,
    SagaHook,
    Session,
    take_over,
)
from saga_runtime._exceptions import (
    IdempotencyConflictError,
    LeaseLostError,
    PlanValidationError,
    ReplayDivergenceError,
    ResultNotStorableError,
    SagaInProgressError,
    StoreError,
)
from saga_runtime._planning import (
    MAX_ID_BYTES,
    Plan,
    PlanPolicy,
    RefError,
    build_plan,
    check_plan_record,
    has_refs,
    resolve_refs,
    valid_id,
)
from saga_runtime._records import (
    APPROVED,
    KEY_ENV,
    REJECTED,
    ApprovalRequest,
    ApprovalRow,
    SagaResult,
    SagaRow,
    SagaStatus,
    SecretKeyring,
    StepRow,
    gated_steps,
    idempotency_keys,
    now,
    own_copy,
    result_from_rows,
    to_json_value,
)
from saga_runtime._storage import MemoryStore, SagaStore
from saga_runtime._tools import Resources, ToolRegistry

__all__ = ["SagaExecutor"]

logger = logging.getLogger("saga_runtime")

# asyncio-native: the caller leaving is asyncio.CancelledError (anyio raises the same on this backend).
_CANCELLED = asyncio.CancelledError


def _check_positive(name: str, value: float | None, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


class SagaExecutor:
    """Run sagas of the tools in `registry`, recording every step in `store` (a private memory store by default).

    `compensation_timeout` (seconds, default 300) bounds the compensation of one saga, also when its caller was
    cancelled: compensation runs shielded from the cancellation, then the cancellation goes on.
    `hooks` are told every event of every saga (`SagaEvent`: started, attempt failed, step finished,
    compensation started/finished, saga finished), e.g. `saga_runtime.otel.TracingHook()`.
    `max_concurrency` caps how many tool calls (execute or compensate) run at once in this executor;
    `max_threads` caps the worker threads sync tools run in. `recovery_concurrency` caps how many sagas one
    `recover()` (or `serve()`) drives at once (default 32).
    `secret_key` (else the environment variable SAGA_RUNTIME_SECRET_KEY) encrypts secret arguments at rest: a
    URL-safe base64 key of 32 bytes (`Fernet.generate_key()`), or several, newest first (a list, or joined by
    commas), so keys rotate; needs the `secrets` extra. Without one, a plan holding a secret is refused.
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
        max_recovery_attempts: int = 5,
        recovery_concurrency: int = 32,
        hooks: Sequence[SagaHook] = (),
        secret_key: str | bytes | Sequence[str | bytes] | None = None,
    ) -> None:
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry must be a ToolRegistry, got {type(registry).__name__}")
        _check_positive("lease_timeout", lease_timeout)
        _check_positive("compensation_timeout", compensation_timeout)
        limits = (("max_concurrency", max_concurrency), ("max_threads", max_threads))
        for name, limit in (*limits, ("recovery_concurrency", recovery_concurrency)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
                raise ValueError(f"{name} must be a positive int, got {limit!r}")
        self.registry = registry
        self.store: SagaStore = store if store is not None else MemoryStore()
        self.executor_id = executor_id or f"executor-{uuid.uuid4().hex[:12]}"
        self.lease_timeout = float(lease_timeout)
        self.compensation_timeout = float(compensation_timeout)
        self.max_concurrency = max_concurrency
        self.max_recovery_attempts = max_recovery_attempts
        self.recovery_concurrency = recovery_concurrency
        self._resources = Resources(registry.lifespan_function)
        config = EngineConfig(
            registry=registry,
            store=self.store,
            executor_id=self.executor_id,
            lease_timeout=self.lease_timeout,
            compensation_timeout=self.compensation_timeout,
            thread_limiter=anyio.CapacityLimiter(max_threads),
            call_limiter=None if max_concurrency is None else anyio.CapacityLimiter(max_concurrency),
            hooks=tuple(hooks),
            keyring=SecretKeyring.configured(secret_key if secret_key is not None else os.environ.get(KEY_ENV)),
            resources=self._resources,
        )
        self._claims = Claims(config)
        self._active = self._claims.active  # sagas this executor is running right now
        self._decisions = Decisions(config)

    async def __aenter__(self) -> SagaExecutor:
        """Enter the registry's lifespan now (else it is entered before the first tool call)."""
        await self._resources.enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Leave the registry's lifespan (its cleanup runs); the executor may enter it again later."""
        await self._resources.exit()

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
        planned = build_plan(plan, self.registry, policy=policy, keyring=self._claims.config.keyring)
        await self._resources.enter()  # before anything is stored: a lifespan that fails runs nothing
        saga, steps = self._new_saga(planned, saga_id, budget, metadata)
        # The first group's intent (RUNNING, attempt 1) is committed with the saga itself: one write less (unless a
        # step of it waits for a person's decision first).
        held = bool(planned.groups) and any(step.approval for step in planned.groups[0])
        engine = self._claims.start_plan(saga, steps, announce=not held)
        existing = await self.store.create_saga(saga.copy(), [row.copy() for row in steps])
        if existing is None:
            logger.debug("saga %s: started by %s, %d steps", saga.saga_id, self.executor_id, len(steps))
        else:
            stored, rows = existing
            finished = self._existing(saga, stored, rows)
            if finished is not None or stored.status is SagaStatus.WAITING:
                # Finished, or waiting for a decision: the stored result, and no tool called.
                return result_from_rows(stored, rows, await self._approvals_of(stored))
            await self._resume_or_refuse(stored)
            logger.info("saga %s: resuming where its previous owner %r left it", saga.saga_id, stored.owner)
            engine = self._claims.engine(stored, rows)
        engine.emit("saga_started")
        async with Session(self._claims, engine):
            return await self._drive(engine, planned)

    def saga(
        self,
        saga_id: str | None = None,
        *,
        budget: Budget | None = None,
        metadata: Mapping[str, Any] | None = None,
        replay: bool = False,
        approval_required: Iterable[str] | None = None,
    ) -> DynamicSaga:
        """Return a dynamic saga to use as `async with executor.saga(saga_id=...) as saga:`.

        `saga.call(tool, **args)` and `saga.group([(tool, args), ...])` run calls as they come; an exception
        leaving the block compensates every completed call in reverse, then goes on. Re-entering the id of a
        saga that did not finish (its process died) serves the calls already made from the record, without
        calling the tools, and continues live. With `replay=True`, or for a finished saga, every call is served
        from the record and a call the record does not hold raises `ReplayDivergenceError`; nothing is written.
        A call of a tool registered `approval=True`, or named in `approval_required`, records its request and
        raises `ApprovalPendingError` (the saga WAITs); entered again once decided, it runs, or raises
        `ApprovalRejectedError`.
        """
        if isinstance(approval_required, str):
            raise TypeError("approval_required is a collection of tool names, not one string")
        problems, stored_metadata = self._check_saga_options(saga_id, budget, metadata)
        if problems:
            raise PlanValidationError(problems, saga_id=saga_id)
        return DynamicSaga(
            self._claims,
            saga_id or uuid.uuid4().hex,
            budget=budget,
            metadata=stored_metadata,
            replay=bool(replay),
            approval_required=approval_required,
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

    # -- recovery ----------------------------------------------------------------------------------------------

    async def recover(self, *, limit: int = 100) -> list[SagaResult]:
        """Take over every live saga whose owner is gone (its lease expired); drive each to a terminal state.

        Plan sagas resume forward: SUCCESS steps never run again, steps whose outcome is unknown run again with
        their idempotency key, and the saga compensates if that fails; an interrupted compensation continues
        without undoing a step twice. Dynamic sagas (their code is gone with their process) compensate. A saga
        using tools this executor's registry lacks is left, and logged, for an executor that has them. A saga
        whose recovery failed `max_recovery_attempts` times is PARKED for an operator (`unpark`). Two executors
        recovering at once never take the same saga. Returns the results of the sagas it finished.
        """
        await self._resources.enter()
        results = await self._go_on_waiting(limit)
        passed_over: set[str] = set()
        while True:
            started = now()
            claimed = await self.store.claim_expired(
                self.executor_id, self._claims.lease_until(started), started, limit
            )
            fresh: list[tuple[SagaRow, list[StepRow]]] = []
            for saga, rows in claimed:
                missing = sorted({row.tool_name for row in rows} - set(self.registry.names()))
                if saga.saga_id in passed_over or missing:
                    if saga.saga_id not in passed_over:
                        logger.warning(
                            "saga %s: left for an executor that has the tools %s", saga.saga_id, ", ".join(missing)
                        )
                    passed_over.add(saga.saga_id)
                    await self._claims.release(saga, uncount=True, owner=self.executor_id)
                    continue
                fresh.append((saga, rows))
            results.extend(await self._recover_batch(fresh))
            if not fresh:
                if len(claimed) < limit:
                    return results
                # A full batch of sagas this executor cannot run (their tools are elsewhere) hid the rest:
                # look further rather than starve behind them.
                limit *= 2

    async def _recover_batch(self, batch: list[tuple[SagaRow, list[StepRow]]]) -> list[SagaResult]:
        """Drive a claimed batch of sagas, `recovery_concurrency` at a time; return the results, in batch order."""
        done: list[SagaResult | None] = [None] * len(batch)
        limiter = anyio.CapacityLimiter(self.recovery_concurrency)

        async def drive(index: int, saga: SagaRow, rows: list[StepRow]) -> None:
            async with limiter:
                # The batch was claimed at once, but its sagas wait their turn: by then a saga's lease may have
                # run out and another executor taken it. Claim it again, right before driving it; only if it is
                # still ours (or free) is it driven here.
                if not await self._claims.claim(saga):
                    return
                try:
                    done[index] = await self._recover_one(saga, rows)
                finally:
                    self._active.discard(saga.saga_id)

        async with anyio.create_task_group() as tg:
            for index, (saga, rows) in enumerate(batch):
                tg.start_soon(drive, index, saga, rows)
        return [result for result in done if result is not None]

    async def _recover_one(self, saga: SagaRow, rows: list[StepRow]) -> SagaResult | None:
        if saga.recovery_attempts > self.max_recovery_attempts:
            return await self._claims.park(saga, rows, f"recovery failed {saga.recovery_attempts - 1} times")
        logger.info("saga %s: recovering (attempt %d), left %s", saga.saga_id, saga.recovery_attempts, saga.status)
        # No caller: if this worker stops, the saga stays for the next recovery.
        engine = self._claims.engine(saga, rows, detached=True)
        engine.emit("saga_started")
        try:
            if saga.kind == "plan":
                try:
                    plan = build_plan(saga.plan, self.registry, keyring=self._claims.config.keyring)
                except PlanValidationError as exc:  # the tools changed under the saga: no retry can help
                    return await self._claims.park(saga, rows, f"its plan no longer validates: {exc}")
                async with Session(self._claims, engine):
                    return await self._drive(engine, plan)
            engine.fail("its process stopped in the middle of the saga; recovery compensated it")
            async with Session(self._claims, engine):
                return await engine.compensate()
        except LeaseLostError as exc:
            logger.warning("saga %s: %s", saga.saga_id, exc)
            return None
        except Exception as exc:
            logger.error("saga %s: recovery attempt %d failed: %s", saga.saga_id, saga.recovery_attempts, exc)
            return None

    # -- approvals ---------------------------------------------------------------------------------------------

    async def pending_approvals(self, *, limit: int = 100) -> list[ApprovalRequest]:
        """Return the undecided approval requests of waiting sagas in the store, oldest first, across sagas."""
        return await self._decisions.pending(limit)

    async def approve(
        self,
        saga_id: str,
        step_id: str,
        *,
        by: str,
        note: str | None = None,
        args_digest: str | None = None,
        resume: bool = True,
    ) -> SagaResult:
        """Allow a waiting step to run; record who decided, when, and why (once; raise `ApprovalError` otherwise).

        `args_digest` (the request's, as `pending_approvals` shows it) binds the decision to the arguments seen.
        With `resume`, once every request of the waiting group is decided, the saga goes on under this executor's
        lease as `run()` would, until its next wait or its end, and that result is returned (a plan saga; its
        tools must be in this executor's registry). Otherwise the saga as it stands is returned.
        """
        return await self._decide(saga_id, step_id, APPROVED, by, note, args_digest, resume)

    async def reject(
        self, saga_id: str, step_id: str, *, by: str, note: str | None = None, resume: bool = True
    ) -> SagaResult:
        """Refuse a waiting step: it ends REJECTED, never runs, and fails its saga, which compensates what it did.

        Recorded once (raise `ApprovalError` otherwise); `resume` as for `approve`.
        """
        return await self._decide(saga_id, step_id, REJECTED, by, note, None, resume)

    async def _decide(
        self,
        saga_id: str,
        step_id: str,
        decision: str,
        by: str,
        note: str | None,
        digest: str | None,
        resume: bool,
    ) -> SagaResult:
        saga, requests = await self._decisions.decide(saga_id, step_id, decision, by=by, note=note, digest=digest)
        if resume and saga.kind == "plan" and all(request.decision is not None for request in requests):
            result = await self._go_on(saga_id)
            if result is not None:
                return result
        stored = await self.store.load_saga(saga_id)
        assert stored is not None  # sagas are never deleted
        return result_from_rows(*stored, await self.store.load_approvals(saga_id))

    async def _go_on_waiting(self, limit: int) -> list[SagaResult]:
        """Reject the requests whose deadline passed; go on with each WAITING plan saga whose requests are decided."""
        await self._decisions.expire_due(limit)
        results = []
        for saga_id in await self.store.waiting_sagas(now(), limit):
            try:
                result = await self._go_on(saga_id, detached=True)
            except LeaseLostError as exc:
                logger.warning("saga %s: %s", saga_id, exc)
                continue
            except Exception as exc:
                logger.error("saga %s: going on after its approvals failed: %s", saga_id, exc)
                continue
            if result is not None:
                results.append(result)
        return results

    async def _go_on(self, saga_id: str, *, detached: bool = False) -> SagaResult | None:
        """Drive a WAITING plan saga whose requests are all decided, under this executor's lease, until its next
        wait or its end; None when it is not for this executor (held elsewhere, undecided, tools missing)."""
        await self._resources.enter()
        stored = await self.store.load_saga(saga_id)
        if stored is None or stored[0].status is not SagaStatus.WAITING or stored[0].kind != "plan":
            return None
        missing = sorted({row.tool_name for row in stored[1]} - set(self.registry.names()))
        if missing:
            logger.warning("saga %s: decided, left for an executor that has the tools %s", saga_id, ", ".join(missing))
            return None
        if not await self._claims.claim_waiting(stored[0]):
            return None
        try:
            # Read again now that it is ours: what was read before the claim may predate another executor's run.
            reread = await self.store.load_saga(saga_id)
            requests = await self.store.load_approvals(saga_id)
            if reread is None or reread[0].owner != self.executor_id or reread[0].status is not SagaStatus.WAITING:
                return None
            saga, rows = reread
            if any(request.decision is None for request in requests):
                await self._claims.release(saga, owner=self.executor_id)  # decided meanwhile the other way round
                return None
            try:
                plan = build_plan(saga.plan, self.registry, keyring=self._claims.config.keyring)
            except PlanValidationError as exc:  # other tools, or no key: left for an executor that has them
                await self._claims.release(saga, owner=self.executor_id)
                logger.warning("saga %s: decided, left for an executor that can go on with it: %s", saga_id, exc)
                return None
            engine = self._claims.engine(saga, rows, detached=detached)
            async with Session(self._claims, engine):
                await engine.resume()
                engine.emit("saga_started")
                return await self._drive(engine, plan)
        finally:
            self._active.discard(saga_id)

    async def _approvals_of(self, saga: SagaRow) -> list[ApprovalRow]:
        """Return a stored saga's approval rows (none to read for a plan without a step needing approval)."""
        if saga.kind == "plan" and not gated_steps(saga.plan):
            return []
        return await self.store.load_approvals(saga.saga_id)

    async def unpark(self, saga_id: str, *, compensate: bool = False) -> SagaResult | None:
        """Make a PARKED saga live again (recovery attempts reset); the next `recover()` takes it over.

        With `compensate=True` the operator gives up on the saga instead: it becomes COMPENSATING, and every step
        that succeeded or whose outcome is unknown is undone, groups in reverse — at once when this executor has
        the saga's tools (its result is returned), else by the next `recover()` of an executor that has them.
        """
        await self._resources.enter()
        stored = await self.store.load_saga(saga_id)
        if stored is None:
            raise KeyError(f"no saga {saga_id!r} in {self.store.url}")
        saga, _ = stored
        # One conditional change in the store: of two operators unparking at once, one gets the error below, and a
        # recovery that took the saga over in between is never rewritten from a stale read.
        if saga.status is not SagaStatus.PARKED or not await self.store.unpark_saga(
            saga_id, now(), compensate=compensate
        ):
            stored = await self.store.load_saga(saga_id)
            status = "gone" if stored is None else stored[0].status.value
            raise SagaInProgressError(f"saga {saga_id!r} is {status}, not PARKED", saga_id=saga_id)
        if not compensate:
            return None
        stored = await self.store.load_saga(saga_id)
        if stored is None:
            return None
        saga, rows = stored
        missing = sorted({row.tool_name for row in rows} - set(self.registry.names()))
        if missing:
            logger.warning("saga %s: to be compensated by an executor that has the tools %s", saga_id, missing)
            return None
        if not await self._claims.claim(saga):
            return None  # another executor's recovery took it first: it compensates it
        try:
            engine = self._claims.engine(saga, rows)
            engine.emit("saga_started")
            async with Session(self._claims, engine):
                return await engine.compensate()
        finally:
            self._active.discard(saga_id)

    async def retry_compensation(self, saga_id: str) -> SagaResult:
        """Run again the compensations of a COMPENSATION_FAILED saga that gave up; return its new result.

        Steps already COMPENSATED are never compensated again. Use it once the cause is fixed (the service that
        refused the refund is back); `store.list_sagas(status="COMPENSATION_FAILED")` lists the candidates.
        """
        await self._resources.enter()
        stored = await self.store.load_saga(saga_id)
        if stored is None:
            raise KeyError(f"no saga {saga_id!r} in {self.store.url}")
        saga, rows = stored
        if saga_id in self._active:
            raise SagaInProgressError(f"saga {saga_id!r} is being compensated by this executor", saga_id=saga_id)
        if saga.status is not SagaStatus.COMPENSATION_FAILED:
            raise SagaInProgressError(
                f"saga {saga_id!r} is {saga.status.value}; only a COMPENSATION_FAILED saga has compensations to retry",
                saga_id=saga_id,
            )
        self._active.add(saga_id)
        try:
            started = now()
            expires = self._claims.lease_until(started)
            # The claim: of two callers at once (two operators, two processes), only one reopens the saga.
            if not await self.store.reopen_compensation(saga_id, self.executor_id, expires, started):
                raise SagaInProgressError(
                    f"saga {saga_id!r} is no longer COMPENSATION_FAILED: another caller is retrying its compensations",
                    saga_id=saga_id,
                )
            # Read again now that it is ours: what was read before the claim may predate another caller's retry
            # (a step it compensated meanwhile must not be compensated twice).
            reread = await self.store.load_saga(saga_id)
            if reread is None or reread[0].owner != self.executor_id or reread[0].status is not SagaStatus.COMPENSATING:
                raise SagaInProgressError(f"saga {saga_id!r} was taken by another caller", saga_id=saga_id)
            saga, rows = reread
            take_over(saga, self.executor_id, expires, started)
            engine = self._claims.engine(saga, rows)
            engine.reopen_compensation()  # its failed compensations are due again; none done is redone
            engine.emit("saga_started")
            async with Session(self._claims, engine):
                return await engine.compensate()
        finally:
            self._active.discard(saga_id)

    async def serve(self, *, interval: float | None = None, limit: int = 100) -> None:
        """Recover sagas whose owner is gone, every `interval` seconds (default: half the lease), until cancelled.

        The worker loop of a process that keeps a database's sagas moving: run it in a task, and cancel the task
        to stop. A saga it was driving when stopped is not compensated: it is released for the next recovery.
        A store that cannot be reached is retried at the next round; so is a round that failed in any other way
        (logged with its traceback): a worker loop does not die of one bad round while sagas wait.
        """
        pause = self.lease_timeout / 2 if interval is None else interval
        while True:
            try:
                await self.recover(limit=limit)
            except StoreError as exc:
                logger.warning("recovery round failed, trying again in %gs: %s", pause, exc)
            except Exception:
                logger.exception("recovery round failed unexpectedly, trying again in %gs", pause)
            await anyio.sleep(pause)

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
        saga = self._claims.new_saga(
            saga_id,
            "plan",
            plan=planned.to_json(),
            plan_hash=planned.digest,
            budget=None if budget is None else {**budget.to_json(), "charges": 0},
            metadata=stored_metadata,
        )
        saga_id = saga.saga_id
        planned_steps = planned.steps
        keys = idempotency_keys(saga_id, [step.step_id for step in planned_steps])
        # Positional: saga_id, seq, step_id, group, tool_name, args, idempotency_key (faster, on the hot path).
        steps = [
            StepRow(saga_id, seq, step.step_id, step.group, step.tool_name, step.args, key)
            for seq, (step, key) in enumerate(zip(planned_steps, keys, strict=True))
        ]
        return saga, steps

    @staticmethod
    def _check_saga_options(
        saga_id: str | None, budget: Budget | None, metadata: Mapping[str, Any] | None
    ) -> tuple[list[str], dict[str, Any]]:
        problems = []
        if saga_id is not None and not valid_id(saga_id):
            problems.append(
                f"saga_id must be non-empty Unicode text without NUL, of at most {MAX_ID_BYTES} bytes in UTF-8, "
                f"got {saga_id!r}"
            )
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
        if await self._claims.claim(saga):
            return
        raise SagaInProgressError(
            f"saga {saga.saga_id!r} is {saga.status.value} under executor {saga.owner!r}; wait for it and read "
            "its result with store.get_saga(), or run it again once it has finished",
            saga_id=saga.saga_id,
            owner=saga.owner,
            lease_expires_at=saga.lease_expires_at,
        )

    async def _drive(self, engine: SagaEngine, plan: Plan) -> SagaResult:
        """Run (or resume) a plan saga from wherever its rows stand, to a terminal status."""
        if engine.saga.status is SagaStatus.COMPENSATING:
            # The saga's error names why it compensates; a record without one (written by an older version)
            # gets it from its first failed group.
            for g, group in enumerate(plan.groups):
                if engine.failed or engine.saga.error is not None:
                    break
                join, rows = plan.join_of(g), [engine.rows[step.step_id] for step in group]
                engine.adopt(rows, join.mode)
                if join.mode != "all" and not any(row.status in RUNNABLE for row in rows):
                    engine.judge(rows, join.mode, join.needed)
            return await engine.compensate()
        group_ids = plan.group_ids()

        def lookup(target: str) -> Any:
            if target in group_ids:
                g = group_ids[target]
                return own_copy(
                    engine.group_result([engine.rows[s.step_id] for s in plan.groups[g]], plan.join_of(g).mode)
                )
            return own_copy(engine.result_for(target))  # a copy: the step it is given to may change it

        by_id = engine.rows
        if any(step.approval for step in plan.steps):
            await engine.gate.load()  # its requests are part of its result, decided in an earlier run or not
        try:
            for g, group in enumerate(plan.groups):
                join = plan.join_of(g)
                recorded = [by_id[step.step_id] for step in group]
                engine.adopt(recorded, join.mode)
                if engine.failed:
                    break
                for step, row in zip(group, recorded, strict=True):
                    if row.status not in RUNNABLE:
                        continue
                    if step.kwargs is not None:
                        engine.validated(row, step.kwargs)  # used only if the row runs with the plan's own args
                    elif has_refs(step):
                        try:
                            engine.set_args(row, resolve_refs(step.args, lookup))
                        except (RefError, LookupError) as exc:
                            engine.fail_before_start(row, exc)
                gated = [
                    row for step, row in zip(group, recorded, strict=True) if step.approval and row.status in HOLDABLE
                ]
                if gated and not engine.failed:
                    waiting, rejected = await engine.hold(gated)
                    if waiting:
                        return await engine.wait()  # the saga stops here until every request is decided
                    if rejected:
                        for row in rejected:
                            engine.fail(f"step {row.step_id!r} ({row.tool_name}) was {row.error}")
                        break
                if not await engine.run_group(recorded, join=join.mode, needed=join.needed):
                    break
        except _CANCELLED:
            if engine.fenced or engine.detached:
                # Another executor owns the saga now, or a recovering worker is shutting down: it is not undone
                # from here; its owner (or the next recovery) drives it on from its records.
                engine.stop()
                raise
            logger.warning("saga %s: cancelled by its caller, compensating", engine.saga.saga_id)
            await engine.compensate()
            raise
        if engine.failed:
            return await engine.compensate()
        return await engine.finish(SagaStatus.SUCCESS)
