"""Queued sagas: submitted (stored QUEUED, nothing run), then started by a worker serving their queue.

A start is the store's one conditional claim (QUEUED -> RUNNING under this worker's lease, the queue's limits
counted in the same transaction); the started saga is then driven as recovery drives a saga it took over:
detached, so a worker stopped stops it without compensating and lets it go for another worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from saga_runtime._engine import _journal
from saga_runtime._engine._cancellation import Shelters
from saga_runtime._engine._claim import Drives
from saga_runtime._engine._events import SagaEvent, emit
from saga_runtime._engine._journal import Journal
from saga_runtime._engine._looks import Looks
from saga_runtime._engine._recovery import Recovery
from saga_runtime._exceptions import IdempotencyConflictError, StoreError
from saga_runtime._records import (
    DECISION_WAKE,
    SAGA_WAKE,
    Queue,
    QueueEntry,
    SagaRow,
    SagaStatus,
    StepRow,
    WaitingKind,
    now,
    same_work,
)
from saga_runtime._storage import queues_of

__all__ = ["Queues"]

logger = logging.getLogger("saga_runtime")

# At most this many sagas remembered as passed over (then forgotten, and warned about again).
_PASSED_OVER_MAX = 10_000


class Queues:
    """Submit sagas to queues, and start the queued sagas of the queues a worker serves."""

    __slots__ = ("_drives", "_passed_over", "_recovery")

    def __init__(self, drives: Drives, recovery: Recovery) -> None:
        self._drives = drives
        self._recovery = recovery
        self._passed_over: set[str] = set()  # sagas warned about (this worker lacks their tools)

    async def submit(self, saga: SagaRow, steps: list[StepRow], entry: QueueEntry) -> None:
        """Store a new QUEUED saga; the same id with the same plan stores nothing; another plan raises."""
        config = self._drives.config
        Journal(config, saga, steps).link_all()
        existing = await _journal.enqueue(config.store, saga.copy(), [row.copy() for row in steps], entry)
        if existing is None:
            logger.debug("saga %s: queued in %r", saga.saga_id, entry.queue)
            if config.hooks:
                emit(config.hooks, SagaEvent("saga_queued", saga.saga_id, status=SagaStatus.QUEUED.value))
            return
        stored = existing[0]
        if not same_work(stored, saga):
            raise IdempotencyConflictError(
                f"saga {saga.saga_id!r} already exists with a different plan (or saga function "
                "arguments); a saga id names one piece of work, so use a new saga_id for this one",
                saga_id=saga.saga_id,
            )

    async def start(self, queue: Queue, limit: int) -> list[tuple[SagaRow, list[StepRow]]]:
        """Claim up to `limit` queued sagas of `queue` whose tools this worker has (RUNNING under its lease).

        The others are passed over in the store, unwritten (a worker lacking their tools costs them no write), and
        warned about once each.
        """
        drives = self._drives
        lacking: dict[str, list[tuple[WaitingKind, str]]] = {}

        def fits(saga: SagaRow) -> bool:
            lacks = self._recovery.lacking(saga, [])  # a queued saga's steps are its plan's
            if lacks:
                lacking[saga.saga_id] = lacks
            return not lacks

        started = now()
        claimed = await _journal.claim_queued(
            drives.config.store,
            drives.config.executor_id,
            drives.claims.lease_until(started),
            started,
            queue,
            limit,
            fits,
        )
        for saga_id, lacks in lacking.items():
            await self._left(saga_id, lacks)
        return claimed

    async def _left(self, saga_id: str, lacking: list[tuple[WaitingKind, str]]) -> None:
        """Warn of a saga left in its queue for what this worker lacks, and note it on the saga: once each."""
        if saga_id in self._passed_over:
            return
        if len(self._passed_over) >= _PASSED_OVER_MAX:
            self._passed_over.clear()
        self._passed_over.add(saga_id)
        missing = [text for _, text in lacking]
        logger.warning("saga %s: left in its queue, this worker lacks the tool(s) %s", saga_id, missing)
        await self._recovery.note_lacking(saga_id, lacking)

    async def _note_limits(self, queues: Sequence[Queue]) -> None:
        """Record the limits this worker serves each queue with (shown by `SagaAdmin.queues()`)."""
        store = self._drives.config.store
        for queue in queues:
            try:
                await _journal.note_queue_limits(store, queue, now())
            except StoreError as exc:  # shown, not obeyed: never a reason not to serve
                logger.warning("queue %r: could not record its limits: %s", queue.name, exc)

    async def _sample(self, queues: Sequence[Queue], on_depth: Callable[[str, int], None]) -> None:
        store = self._drives.config.store
        for queue in queues:
            try:
                on_depth(queue.name, await queues_of(store).queue_depth(queue.name))
            except Exception as exc:  # a metric never stops a worker
                logger.warning("queue %r: could not sample its depth: %s", queue.name, exc)

    async def serve(
        self,
        queues: Sequence[Queue],
        *,
        concurrency: int | None,
        interval: float,
        limit: int,
        task_group: TaskGroup,
        shelters: Shelters,
        on_depth: Callable[[str, int], None] | None = None,
        on_message: Callable[[str], None] | None = None,
        looks: Looks | None = None,
    ) -> None:
        """Start queued sagas of `queues` (at most `concurrency` driven at once here) until cancelled.

        `shelters`: this serve's (its stop lets the running calls return); `on_depth(queue, depth)` is told how many
        sagas wait in each queue, once per round; `on_message(saga_id)` of each message a store tells of. With `looks`,
        an idle round waits for them to find a queued saga (or a submit heard) instead of looking every `interval`.
        """
        running = 0
        freed = anyio.Event()
        woken = anyio.Event()
        names = {queue.name for queue in queues}

        def wake(queue: str) -> None:
            if queue.startswith(SAGA_WAKE):  # a saga a message or decision made ready: `on_message` is told
                if on_message is not None:
                    on_message(queue.removeprefix(SAGA_WAKE))
                return
            if queue == DECISION_WAKE or not queue:  # recovery's round goes on with what was decided
                self._recovery.nudge()
            if queue != DECISION_WAKE and (not queue or queue in names):
                woken.set()

        async def drive(saga: SagaRow, rows: list[StepRow], queue: str) -> None:
            nonlocal running, freed
            try:
                await self._recovery.drive_claimed(saga, rows, shelters=shelters, queue=queue)
            finally:
                running -= 1
                freed.set()

        task_group.start_soon(self._note_limits, queues)  # shown by queues(); never holds the start up

        def looked() -> None:
            woken.set()

        idle_wait = interval
        async with queues_of(self._drives.config.store).queue_wakeups(wake) as heard:
            if looks is not None:
                idle_wait = looks.wait_for(interval)
                looks.listen("queued", looked)
                if not heard:  # no notifications here: an unparked or orphaned saga is told of by the looks
                    looks.listen("orphans", self._recovery.nudge)
            while True:
                woken = anyio.Event()  # before the claim: a submit made during it still wakes the wait below
                started = 0
                for queue in queues:
                    room = limit if concurrency is None else min(limit, concurrency - running)
                    if room < 1:
                        break
                    try:
                        claimed = await self.start(queue, room)
                    except StoreError as exc:
                        logger.warning(
                            "queue %r: starting sagas failed, trying again in %gs: %s", queue.name, interval, exc
                        )
                        claimed = []
                    for saga, rows in claimed:
                        running += 1
                        started += 1
                        task_group.start_soon(drive, saga, rows, queue.name)
                if on_depth is not None:
                    await self._sample(queues, on_depth)
                if started:
                    await anyio.lowlevel.checkpoint()  # let the started sagas begin before the next claim
                    continue
                freed = anyio.Event()
                with anyio.move_on_after(idle_wait) as idle:
                    if concurrency is not None and running >= concurrency:
                        await freed.wait()
                    else:
                        await woken.wait()  # a submit heard (PostgreSQL, memory), else the interval
                if idle.cancelled_caught and not heard:
                    self._recovery.nudge()  # no notifications here: decisions and unparks are looked for each interval
