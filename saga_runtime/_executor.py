"""SagaExecutor: the front door users call, `await executor.run(plan)`."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, cast

import anyio

from saga_runtime._dynamic import DynamicSaga
from saga_runtime._engine import Actions, Budget, Drives, EngineConfig, Looks, SagaHook, Shelters, send
from saga_runtime._exceptions import PlanValidationError, StoreError
from saga_runtime._handle import SagaHandle
from saga_runtime._planner import RegistryPlanner, replay
from saga_runtime._planning import PlanPolicy, build_plan
from saga_runtime._published import get_event, read_stream
from saga_runtime._records import (
    APPROVED,
    KEY_ENV,
    REJECTED,
    ApprovalRequest,
    Queue,
    SagaResult,
    Schedule,
    SecretKeyring,
)
from saga_runtime._schedules import Schedules
from saga_runtime._starting import (
    check_saga_options,
    checked_json,
    function_saga,
    new_plan_saga,
    queue_entry,
    served_queues,
    target,
)
from saga_runtime._storage import MemoryStore, SagaStore, Store, waiting_counts
from saga_runtime._tools import Resources, ToolRegistry

__all__ = ["SagaExecutor"]

logger = logging.getLogger("saga_runtime")

# Seconds between two samples of the waiting sagas for a metrics hook (a read of up to a few pages of rows).
_WAITING_SAMPLE = 15.0


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
    `wait_threshold` (seconds, default 5): a saga function's `sleep` longer than this releases the saga (WAITING,
    no lease, no worker slot) until `serve()` resumes it; shorter ones wait in the process, under the lease.
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
        wait_threshold: float = 5.0,
    ) -> None:
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry must be a ToolRegistry, got {type(registry).__name__}")
        _check_positive("lease_timeout", lease_timeout)
        _check_positive("compensation_timeout", compensation_timeout)
        given: object = wait_threshold
        if isinstance(given, bool) or not isinstance(given, int | float) or not math.isfinite(given) or given < 0:
            raise ValueError(f"wait_threshold must be a number of seconds >= 0, got {wait_threshold!r}")
        limits = (("max_concurrency", max_concurrency), ("max_threads", max_threads))
        for name, limit in (*limits, ("recovery_concurrency", recovery_concurrency)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
                raise ValueError(f"{name} must be a positive int, got {limit!r}")
        self.registry = registry
        # Every built-in store (and one built on StoreBase) also offers the conveniences users call on it.
        self.store: Store = cast("Store", store) if store is not None else MemoryStore()
        self.executor_id = executor_id or f"executor-{uuid.uuid4().hex[:12]}"
        self._stable_id = bool(executor_id)
        self.lease_timeout = float(lease_timeout)
        self.compensation_timeout = float(compensation_timeout)
        self.max_concurrency = max_concurrency
        self.max_recovery_attempts = max_recovery_attempts
        self.recovery_concurrency = recovery_concurrency
        self._resources = Resources(registry.lifespan_function)
        self.hooks: tuple[SagaHook, ...] = tuple(hooks)  # read by front doors with events of their own (LLMRunner)
        config = EngineConfig(
            registry=registry,
            store=self.store,
            executor_id=self.executor_id,
            lease_timeout=self.lease_timeout,
            compensation_timeout=self.compensation_timeout,
            thread_limiter=anyio.CapacityLimiter(max_threads),
            call_limiter=None if max_concurrency is None else anyio.CapacityLimiter(max_concurrency),
            hooks=self.hooks,
            keyring=SecretKeyring.configured(secret_key if secret_key is not None else os.environ.get(KEY_ENV)),
            resources=self._resources,
            wait_threshold=float(wait_threshold),
        )
        self._drives = Drives(config)
        self._taking_back: asyncio.Task[None] | None = None  # see __aenter__
        self._planner = RegistryPlanner(registry, config.keyring)
        self._actions = Actions(
            self._drives,
            self._planner,
            max_recovery_attempts=max_recovery_attempts,
            recovery_concurrency=recovery_concurrency,
        )
        self._schedules = Schedules(self.store, registry, config.keyring, self.submit)

    async def __aenter__(self) -> SagaExecutor:
        """Enter the registry's lifespan now (else it is entered before the first tool call).

        With a given `executor_id`, then take over at once, in the background, the live sagas it still owns (a
        restart of the same process identity), without waiting for their leases to run out.
        """
        await self._resources.enter()
        # A generated id is new: it owns nothing yet.
        if self._stable_id and (self._taking_back is None or self._taking_back.done()):
            self._taking_back = asyncio.get_running_loop().create_task(self._take_back())
        return self

    async def _take_back(self) -> None:
        try:
            await self._actions.recovery.take_back()
        except Exception as exc:  # what is left is recovered once its leases run out
            logger.error("%s: taking back its sagas after a restart failed: %s", self.executor_id, exc)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the sagas taken back on entry (as a stopped worker), then leave the registry's lifespan."""
        task, self._taking_back = self._taking_back, None
        if task is not None and not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait([task])
        await self._resources.exit()

    def __repr__(self) -> str:
        return f"SagaExecutor(id={self.executor_id!r}, store={self.store.url!r}, tools={self.registry.names()!r})"

    async def run(
        self,
        plan: Sequence[Any] | Callable[..., Any] | str,
        *,
        args: Mapping[str, Any] | None = None,
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

        `plan` may be a saga function (`@registry.saga`) or its name, called with `args`: its calls are the
        saga's steps, its return value `result.output`; an exception leaving it compensates every call made.
        """
        function = target(self.registry, plan, args)
        if function is not None:
            fn_saga = function_saga(self._drives, function, args, saga_id, budget, metadata)
            if not self._resources.entered:  # (entered, or none to enter: no coroutine to ask)
                await self._resources.enter()
            body = self._planner.body(fn_saga)
            assert body is not None  # a saga function's saga
            return await self._actions.run(body, fn_saga, [], announce=False)
        planned = build_plan(plan, self.registry, policy=policy, keyring=self._drives.config.keyring)
        if not self._resources.entered:  # before anything is stored: a lifespan that fails runs nothing
            await self._resources.enter()
        saga, steps = new_plan_saga(self._drives, planned, saga_id, budget, metadata)
        # The first group's intent (RUNNING, attempt 1) is committed with the saga itself: one write less (unless a
        # step of it waits for a person's decision first).
        return await self._actions.run(
            planned, saga, steps, announce=not planned.first_held, args_shown_as_is=planned.args_shown_as_is
        )

    async def submit(
        self,
        plan: Sequence[Any] | Callable[..., Any] | str,
        *,
        args: Mapping[str, Any] | None = None,
        saga_id: str | None = None,
        queue: str = "default",
        key: str | None = None,
        priority: int = 0,
        not_before: datetime | float | None = None,
        budget: Budget | None = None,
        policy: PlanPolicy | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SagaHandle:
        """Validate `plan` as `run()` does and store it QUEUED for a worker serving `queue`; return its handle.

        Nothing runs here. `key` groups sagas for a queue's `key_concurrency`; a lower `priority` starts first,
        then the earlier submit; `not_before` (an aware datetime, or seconds from now) delays the start. The id
        of a stored saga with the same plan returns its handle and stores nothing; with another plan,
        `IdempotencyConflictError`. `plan` may be a saga function or its name, called with `args` (as `run()`).
        """
        entry = queue_entry(queue, key, priority, not_before)
        function = target(self.registry, plan, args)
        if function is not None:
            fn_saga = function_saga(self._drives, function, args, saga_id, budget, metadata, queued=True)
            await self._actions.queues.submit(fn_saga, [], entry)
            return SagaHandle(self.store, fn_saga.saga_id)
        planned = build_plan(plan, self.registry, policy=policy, keyring=self._drives.config.keyring)
        saga, steps = new_plan_saga(self._drives, planned, saga_id, budget, metadata, queued=True)
        await self._actions.queues.submit(saga, steps, entry)
        return SagaHandle(self.store, saga.saga_id)

    async def send(self, saga_id: str, topic: str, message: Any, *, idempotency_key: str | None = None) -> None:
        """Store a message for the saga `saga_id` on `topic`; its `saga.recv(topic)` receives it, once.

        The saga may be QUEUED, RUNNING or WAITING (a message sent before it waits is kept for it); a saga
        function WAITING for it is resumed by a worker within its `interval`. With `idempotency_key`, a key used
        before for this saga stores nothing. An unknown or finished saga raises `SagaError`, and a message that
        is not a JSON value raises `TypeError` naming the part that is not; nothing is stored.
        """
        if not isinstance(saga_id, str):
            raise TypeError(f"saga_id must be a str, got {type(saga_id).__name__}")
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic must be a non-empty str, got {topic!r}")
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not idempotency_key or len(idempotency_key.encode()) > 255
        ):
            raise ValueError(f"idempotency_key must be non-empty text of at most 255 bytes, got {idempotency_key!r}")
        await send(self._drives.config, saga_id, topic, checked_json(message), idempotency_key)

    async def get_event(self, saga_id: str, key: str, *, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """Return the latest value the saga `saga_id` set for the event `key` (`saga.set_event`), waiting up to
        `timeout` seconds for a first one; None if there is none. An unknown saga raises `SagaNotFoundError`."""
        return await get_event(self.store, saga_id, key, timeout)

    def read_stream(self, saga_id: str, name: str, *, start: int = 0) -> AsyncIterator[Any]:
        """Return an async iterator of the values of the saga's stream `name` (`saga.write_stream`) from offset
        `start`, in order, each once, waiting for more until the stream is closed or the saga has ended."""
        return read_stream(self.store, saga_id, name, start)

    def handle(self, saga_id: str) -> SagaHandle:
        """Return a handle to the saga `saga_id` (its status and, once it ends, its result)."""
        if not isinstance(saga_id, str):
            raise TypeError(f"saga_id must be a str, got {type(saga_id).__name__}")
        return SagaHandle(self.store, saga_id)

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
        problems, stored_metadata = check_saga_options(saga_id, budget, metadata)
        if problems:
            raise PlanValidationError(problems, saga_id=saga_id)
        return DynamicSaga(
            self._drives,
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
        return await replay(self.store, saga_id)

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
        return await self._actions.recovery.recover(limit)

    # -- approvals ---------------------------------------------------------------------------------------------

    async def pending_approvals(self, *, limit: int = 100) -> list[ApprovalRequest]:
        """Return the undecided approval requests of waiting sagas in the store, oldest first, across sagas."""
        return await self._actions.pending(limit)

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
        return await self._actions.decide(
            saga_id, step_id, APPROVED, by=by, note=note, digest=args_digest, resume=resume
        )

    async def reject(
        self, saga_id: str, step_id: str, *, by: str, note: str | None = None, resume: bool = True
    ) -> SagaResult:
        """Refuse a waiting step: it ends REJECTED, never runs, and fails its saga, which compensates what it did.

        Recorded once (raise `ApprovalError` otherwise); `resume` as for `approve`.
        """
        return await self._actions.decide(saga_id, step_id, REJECTED, by=by, note=note, digest=None, resume=resume)

    async def unpark(self, saga_id: str, *, compensate: bool = False) -> SagaResult | None:
        """Make a PARKED saga live again (recovery attempts reset); the next `recover()` takes it over.

        With `compensate=True` the operator gives up on the saga instead: it becomes COMPENSATING, and every step
        that succeeded or whose outcome is unknown is undone, groups in reverse — at once when this executor has
        the saga's tools (its result is returned), else by the next `recover()` of an executor that has them. A
        live saga whose owner is gone and whose tools this executor lacks (its error says it waits for them) is
        given up on the same way: compensated here with the tools present, each step of a missing tool recorded
        COMPENSATION_FAILED (the saga ends COMPENSATION_FAILED, for a person).
        """
        await self._resources.enter()
        return await self._actions.unpark(saga_id, compensate=compensate)

    async def cancel(self, saga_id: str, *, reason: str | None = None, by: str | None = None) -> SagaResult:
        """Cancel a saga: a QUEUED one ends COMPENSATED at once, no tool called, its error saying why.

        A RUNNING one is asked to stop: its owner notices within `lease_timeout / 3` and compensates; a WAITING
        one's undecided requests are rejected (`decided_by="cancel"`) and it compensates; a terminal one is
        returned unchanged. Returns the saga as it stands; an unknown id raises `SagaNotFoundError` (a KeyError).
        `by` (who asks: a person, an operator) is recorded as the cancel's `by`; this executor's id when None.
        """
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"reason must be a str or None, got {type(reason).__name__}")
        if by is not None and (not isinstance(by, str) or not by.strip()):
            raise ValueError(f"by must be a non-empty str or None (who asks), got {by!r}")
        return await self._actions.cancel(saga_id, reason, None if by is None else by.strip())

    async def retry_compensation(self, saga_id: str) -> SagaResult:
        """Run again the compensations of a COMPENSATION_FAILED saga that gave up; return its new result.

        Steps already COMPENSATED are never compensated again. Use it once the cause is fixed (the service that
        refused the refund is back); `store.list_sagas(status="COMPENSATION_FAILED")` lists the candidates.
        Without the saga's tools in this executor's registry, its compensations are reopened (COMPENSATING) and
        left to the next `recover()` of an executor that has them.
        """
        await self._resources.enter()
        return await self._actions.retry_compensation(saga_id)

    async def serve(
        self,
        *,
        queues: Sequence[Queue | str] | None = None,
        concurrency: int | None = None,
        interval: float | None = None,
        limit: int = 100,
    ) -> None:
        """The worker loop: start queued sagas of `queues`, and recover sagas whose owner is gone, until cancelled.

        It also submits the due ticks of the store's schedules (`schedule()`), each once across every worker,
        looking every `interval` seconds (default 0.5).

        `queues` (`Queue` objects or names; default `["default"]`): their sagas start in priority order, then
        submit order, once `not_before` passed, within each queue's limits, at most `concurrency` at once here.
        An idle worker looks for queued sagas every `interval` seconds (default 0.5); recovery rounds run every
        `interval` too when given, else every half lease. Run it in a task, and cancel the task to stop: the
        sagas it drives are not compensated, they stop once their running calls return and are released for
        another worker. A round that failed (a store that cannot be reached) is logged and tried again.
        """
        served = served_queues(queues)
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ValueError(f"concurrency must be a positive int or None, got {concurrency!r}")
        _check_positive("interval", interval, allow_none=True)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        await self._resources.enter()
        samplers: list[Any] = [getattr(hook, "observe_queue_depth", None) for hook in self.hooks]
        samplers = [sample for sample in samplers if callable(sample)]  # e.g. metrics.PrometheusHook

        def on_depth(queue: str, depth: int) -> None:
            for sample in samplers:
                sample(queue, depth)

        shelters = Shelters()  # this serve's own: another serve() of this executor is not stopped with it
        every = 0.5 if interval is None else interval
        # One look at the store each `every` tells the idle loops below which would find something (one query
        # instead of one per loop: 4 idle workers cost the database a few transactions a second in all).
        looks = Looks(self.store, [queue.name for queue in served], every)
        async with anyio.create_task_group() as tg:
            pause = self.lease_timeout / 2 if interval is None else interval
            tg.start_soon(looks.run)
            tg.start_soon(self._recover_rounds, pause, limit, shelters, looks)
            tg.start_soon(self._schedules.serve, every, looks)
            waiting = [getattr(hook, "observe_waiting", None) for hook in self.hooks]
            if any(callable(sample) for sample in waiting):
                tg.start_soon(self._sample_waiting, [sample for sample in waiting if callable(sample)])
            # Waiting saga functions go on once due: told of a message at once (PostgreSQL), else within the
            # interval (half a second by default, not the recovery rounds' half lease).
            told = _Told()  # sagas a message was sent to, as the store tells (PostgreSQL)
            tg.start_soon(
                self._wake_rounds, 0.5 if interval is None and pause > 0.5 else None, limit, shelters, told, looks
            )
            tg.start_soon(
                partial(
                    self._actions.queues.serve,
                    served,
                    concurrency=concurrency,
                    interval=every,
                    limit=limit,
                    task_group=tg,
                    shelters=shelters,
                    on_depth=on_depth if samplers else None,
                    on_message=told.tell,
                    looks=looks,
                )
            )
            try:
                # The loops run in child tasks, so no timeout of theirs lands in this task together with the
                # caller's cancel: anyio then takes the caller's cancel for its own and serve() would return.
                await anyio.sleep_forever()
            finally:
                # A stop: the sagas it drives stop once their running calls return (bounded), then are released.
                shelters.stop(self.compensation_timeout)

    # -- schedules (saga_runtime._schedules) -------------------------------------------------------------------

    async def schedule(
        self,
        name: str,
        fn_or_plan: Any,
        *,
        cron: str | None = None,
        every: float | None = None,
        args: Mapping[str, Any] | None = None,
        queue: str = "default",
        timezone: str = "UTC",
    ) -> Schedule:
        """Store a schedule: `serve()` submits `fn_or_plan` to `queue` at each tick, once across every worker.

        Give exactly one of `cron` (a cron expression, read in `timezone`; needs the `cron` extra) or `every`
        (seconds). The target is a plan (validated now: every problem at once) or a saga function or its name,
        called with `args`. Each tick's saga id is `<name>@<tick, ISO 8601 UTC>`. A schedule of the same name is
        replaced. Bad input raises (ValueError, TypeError, PlanValidationError) and stores nothing.
        """
        return await self._schedules.put(
            name, fn_or_plan, cron=cron, every=every, args=args, queue=queue, timezone=timezone
        )

    async def schedules(self) -> list[Schedule]:
        """Return every stored schedule, by name."""
        return await self._schedules.all()

    async def pause_schedule(self, name: str) -> Schedule:
        """Pause a schedule: no tick is submitted until it is resumed. An unknown name raises KeyError."""
        return await self._schedules.pause(name)

    async def resume_schedule(self, name: str) -> Schedule:
        """Resume a paused schedule from its next tick to come; ticks missed while paused are not submitted."""
        return await self._schedules.resume(name)

    async def delete_schedule(self, name: str) -> None:
        """Delete a schedule (the sagas it submitted stay). An unknown name raises KeyError."""
        await self._schedules.delete(name)

    async def _sample_waiting(self, samplers: list[Any]) -> None:
        """Tell the hooks that keep a gauge of waiting sagas how many wait for what, every `_WAITING_SAMPLE` seconds."""
        while True:
            try:
                counts = await waiting_counts(self.store)
            except Exception as exc:  # a metric never stops a worker
                logger.warning("could not sample the waiting sagas: %s", exc)
            else:
                for sample in samplers:
                    sample(counts)
            await anyio.sleep(_WAITING_SAMPLE)

    async def _wake_rounds(
        self, pause: float | None, limit: int, shelters: Shelters, told: _Told, looks: Looks
    ) -> None:
        """Go on with waiting sagas: those a message was sent to (`told`, as the queue loop hears it) at once, and
        every due one each `pause` (None: the recovery rounds do) once `looks` finds one (or a deadline passed)."""
        recovery = self._actions.recovery
        if pause is not None:
            looks.listen("waiting", told.poke)
            looks.listen("approvals", told.poke)
            pause = looks.wait_for(pause)
        while True:
            with anyio.move_on_after(math.inf if pause is None else pause):
                await told.heard.wait()
            saga_ids = told.take()
            try:
                for saga_id in saga_ids:
                    await recovery.go_on(saga_id, detached=True, shelters=shelters, look=False)
                if not saga_ids and pause is not None:
                    await recovery.go_on_waiting(limit, shelters)
            except Exception as exc:  # the next round tries again
                logger.warning("going on with waiting sagas failed: %s", exc)

    async def _recover_rounds(self, pause: float, limit: int, shelters: Shelters, looks: Looks) -> None:
        """Recover every `pause` (or when nudged: a decision, unpark or retry heard, API.md §19); a round the last
        look found nothing for (no orphan, no waiting saga due, no deadline passed) asks the store nothing."""
        recovery = self._actions.recovery
        nudged = True
        while True:
            try:
                await self._resources.enter()
                if nudged or not looks.quiet(("orphans", "waiting", "approvals")):
                    await recovery.recover(limit, shelters)
            except StoreError as exc:
                logger.warning("recovery round failed, trying again in %gs: %s", pause, exc)
            except Exception:
                logger.exception("recovery round failed unexpectedly, trying again in %gs", pause)
            nudged = await recovery.rest(pause)


class _Told:
    """The sagas a worker was told a message was sent to, and the event that wakes its wake rounds."""

    __slots__ = ("heard", "saga_ids")

    def __init__(self) -> None:
        self.saga_ids: list[str] = []
        self.heard = anyio.Event()

    def tell(self, saga_id: str) -> None:
        self.saga_ids.append(saga_id)
        self.heard.set()

    def poke(self) -> None:
        """Wake the wake rounds with no saga named: they look for every due one."""
        self.heard.set()

    def take(self) -> list[str]:
        """Return the sagas told of since the last take, each once, and wait anew."""
        saga_ids, self.saga_ids, self.heard = list(dict.fromkeys(self.saga_ids)), [], anyio.Event()
        return saga_ids
