"""Queue control on the memory store: an operator's pause or drain, the limits workers serve with, counts.

One loop owns the store, so no lock; a change of state, a decision or an unpark wakes the workers of this store
at once (the `queue_wakeups` they are inside).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from saga_runtime._records import (
    ACTIVE,
    DECISION_WAKE,
    DRAINING,
    PAUSED,
    Queue,
    QueueEntry,
    QueueInfo,
    QueueStanding,
    QueueState,
    SagaRow,
    SagaStatus,
    StepRow,
    now,
)

__all__ = ["MemoryQueueControl"]

_COUNTED = {
    SagaStatus.QUEUED: "queued",
    SagaStatus.RUNNING: "running",
    SagaStatus.COMPENSATING: "running",
    SagaStatus.WAITING: "waiting",
}


class MemoryQueueControl:
    """The queue control primitives of MemoryStore."""

    # MemoryStore's state.
    _sagas: dict[str, SagaRow]
    _queued: dict[str, QueueEntry]
    _wakers: list[Callable[[str], None]]
    _steps: dict[str, dict[str, StepRow]]
    _started: dict[str, datetime]  # when each saga started from its queue (the rate windows count them)
    # queue name -> {"state", "changed_at", limits...}: what the SQL stores keep in `queue_states`.
    _queue_rows: dict[str, dict[str, Any]]

    def _check_open(self) -> None:
        raise NotImplementedError

    def _held_back(self, queue: str) -> bool:
        """Tell whether an operator paused or is draining `queue` (a claim starts nothing)."""
        row = self._queue_rows.get(queue)
        return row is not None and row["state"] in (PAUSED, DRAINING)

    async def set_queue_state(self, name: str, state: QueueState, at: datetime) -> None:
        """Store `state` for queue `name` (active, paused, draining) and wake this store's workers."""
        self._check_open()
        self._queue_rows.setdefault(name, {"state": ACTIVE}).update(state=state, changed_at=at)
        await self.notify_workers(name)

    async def queue_state(self, name: str) -> QueueState:
        """Return the state an operator set for queue `name` ("active" if none)."""
        self._check_open()
        state: QueueState = self._queue_rows.get(name, {}).get("state", ACTIVE)
        return state

    async def saga_queue_states(self, saga_ids: Sequence[str]) -> dict[str, QueueStanding]:
        """Return where each saga of `saga_ids` submitted to a queue stands there, by id (those not queued left out)."""
        self._check_open()
        found = {}
        for saga_id in saga_ids:
            standing = await self._queue_standing(saga_id)
            if standing is not None:
                found[saga_id] = standing
        return found

    async def _queue_standing(self, saga_id: str) -> QueueStanding | None:
        entry = self._queued.get(saga_id)
        if entry is None:
            return None
        row = self._queue_rows.get(entry.queue, {})
        running = key_running = recent = 0
        rate, per = row.get("rate_limit"), row.get("rate_per")
        since = None if rate is None or per is None else now() - timedelta(seconds=per)
        for other_id, other in self._queued.items():
            if other.queue != entry.queue:
                continue
            saga = self._sagas.get(other_id)
            if saga is not None and saga.status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
                running += 1
                key_running += entry.key is not None and other.key == entry.key
            started = self._started.get(other_id)
            recent += since is not None and started is not None and started > since
        return QueueStanding(
            entry.queue,
            await self.queue_state(entry.queue),
            entry.key,
            row.get("concurrency"),
            row.get("key_concurrency"),
            rate,
            per,
            running,
            key_running,
            recent,
            entry.not_before,
        )

    async def note_queue_limits(self, queue: Queue, at: datetime) -> None:
        """Record the limits a worker serves `queue` with (its state unchanged)."""
        self._check_open()
        rate = queue.rate_limit
        self._queue_rows.setdefault(queue.name, {"state": ACTIVE}).update(
            concurrency=queue.concurrency,
            key_concurrency=queue.key_concurrency,
            rate_limit=None if rate is None else rate.limit,
            rate_per=None if rate is None else float(rate.per),
        )

    async def queue_infos(self) -> list[QueueInfo]:
        """Return every queue that holds a non-terminal saga or has a stored state, by name."""
        self._check_open()
        found: dict[str, dict[str, Any]] = {}
        for saga_id, entry in self._queued.items():
            saga = self._sagas.get(saga_id)
            field = None if saga is None else _COUNTED.get(saga.status)
            if saga is None or field is None:
                continue
            info = found.setdefault(entry.queue, {"name": entry.queue})
            info[field] = info.get(field, 0) + 1
            if field == "queued" and (info.get("oldest_queued_at") or saga.created_at) >= saga.created_at:
                info["oldest_queued_at"] = saga.created_at
        for name, row in self._queue_rows.items():
            info = found.setdefault(name, {"name": name})
            info.update(
                paused=row["state"] == PAUSED,
                draining=row["state"] == DRAINING,
                state_changed_at=row.get("changed_at"),
                concurrency=row.get("concurrency"),
                key_concurrency=row.get("key_concurrency"),
                rate_limit=row.get("rate_limit"),
                rate_per=row.get("rate_per"),
            )
        return [QueueInfo(**found[name]) for name in sorted(found)]

    async def list_queue_rows(
        self, queue: str, status: SagaStatus | None, limit: int, offset: int
    ) -> list[tuple[SagaRow, int]]:
        """Return the rows of the sagas submitted to `queue`, newest first, each with its count of step rows."""
        self._check_open()
        rows = [
            self._sagas[saga_id]
            for saga_id, entry in self._queued.items()
            if entry.queue == queue
            and saga_id in self._sagas
            and (status is None or self._sagas[saga_id].status is status)
        ]
        rows.sort(key=lambda row: (row.created_at, row.saga_id), reverse=True)
        return [(row.copy(), len(self._steps.get(row.saga_id, {}))) for row in rows[offset : offset + limit]]

    async def notify_workers(self, queue: str = "") -> None:
        """Wake this store's workers: of `queue`, or every one with "" (a decision, an unpark, a message)."""
        self._check_open()
        for wake in list(self._wakers):
            wake(queue or DECISION_WAKE)
