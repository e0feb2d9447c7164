"""Queue control on the SQL stores: an operator's pause or drain, the limits workers serve with, per-queue counts.

A queue's state is a row of `queue_states` (no row: active), read by every claim of the queue in its own
transaction (`held_back`), so a pause reaches every worker at its next claim. PostgreSQL workers LISTEN on the
submits' channel: a change of state, a decision, an unpark or a message sent is notified on it too, so an idle
worker acts at once (others poll: within `interval`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from saga_runtime._records import (
    ACTIVE,
    DRAINING,
    PAUSED,
    Queue,
    QueueInfo,
    QueueStanding,
    QueueState,
    SagaRow,
    SagaStatus,
    now,
)
from saga_runtime._storage._codec import SAGA_COLUMNS, RowCodec
from saga_runtime._storage._dialect import Dialect
from saga_runtime._storage._flavour import Flavour
from saga_runtime._storage._sql import _placeholders, ids_param, in_list
from saga_runtime._storage._sqlwrite import Transaction

__all__ = ["SQLQueueControl", "held_back"]

_T = TypeVar("_T")

# The statuses `queue_infos` counts, in its parameters' order.
_COUNTED = (
    SagaStatus.QUEUED.value,
    SagaStatus.RUNNING.value,
    SagaStatus.COMPENSATING.value,
    SagaStatus.WAITING.value,
)
_LIVE = (SagaStatus.RUNNING.value, SagaStatus.COMPENSATING.value)
# Ids a statement lists at most (as the store's lease renewals).
_IN_CHUNK = 500
_LIMITS = ("concurrency", "key_concurrency", "rate_limit", "rate_per", "limits_at")


class QueueControlQueries:
    """The queue control statements of one dialect."""

    def __init__(self, dialect: Flavour) -> None:
        q = _placeholders

        def upsert(columns: Sequence[str]) -> str:
            return dialect.upsert("name", columns)

        self.state = q(dialect, "SELECT state FROM queue_states WHERE name = ?")
        # Queued sagas' queues, their states and noted limits, and what they count now (on the queue index).
        live = "r.status IN (?, ?)"
        self._saga_states = (
            "SELECT s.saga_id, s.queue, q.state, s.queue_key, q.concurrency, q.key_concurrency, q.rate_limit, "
            f"q.rate_per, (SELECT COUNT(*) FROM sagas r WHERE r.queue = s.queue AND {live}), "
            f"(SELECT COUNT(*) FROM sagas r WHERE r.queue = s.queue AND r.queue_key = s.queue_key AND {live}), "
            "s.not_before "
            "FROM sagas s LEFT JOIN queue_states q ON q.name = s.queue WHERE s.saga_id IN (*) AND s.queue IS NOT NULL"
        )
        self._dialect = dialect
        self.clock = dialect.clock_sql
        # The starts in a rate window, counted up to the limit, on the (queue, started_at) index (as a claim does).
        self.started = q(
            dialect,
            "SELECT COUNT(*) FROM (SELECT 1 FROM sagas WHERE queue = ? AND started_at > ? "
            "ORDER BY started_at DESC LIMIT ?) recent",
        )
        self.set_state = q(
            dialect,
            "INSERT INTO queue_states (name, state, changed_at) VALUES (?, ?, ?) " + upsert(("state", "changed_at")),
        )
        marks = ", ".join("?" * len(_LIMITS))
        self.set_limits = q(
            dialect,
            f"INSERT INTO queue_states (name, state, {', '.join(_LIMITS)}) VALUES (?, ?, {marks}) " + upsert(_LIMITS),
        )
        self.states = (
            "SELECT name, state, changed_at, concurrency, key_concurrency, rate_limit, rate_per FROM queue_states"
        )
        # On the (status, lease_expires_at) index: only the non-terminal sagas are read, however long the history.
        self.counts = q(
            dialect,
            "SELECT queue, status, COUNT(*), MIN(created_at) FROM sagas WHERE status IN (?, ?, ?, ?) "
            "AND queue IS NOT NULL GROUP BY queue, status",
        )
        saga_cols = ", ".join(f"s.{c}" for c in SAGA_COLUMNS)
        count = "(SELECT COUNT(*) FROM steps st WHERE st.saga_id = s.saga_id)"
        listed = f"SELECT {saga_cols}, {count} FROM sagas s WHERE s.queue = ?"
        order = "ORDER BY s.created_at DESC, s.saga_id DESC LIMIT ? OFFSET ?"
        self.listed = (q(dialect, f"{listed} {order}"), q(dialect, f"{listed} AND s.status = ? {order}"))
        notices = dialect.notices
        self.notify = q(dialect, notices.queued) if notices is not None else None
        self.notify_decided = notices.decided if notices is not None else None

    def saga_states(self, count: int) -> str:
        """Return the read of where `count` sagas stand in their queues (params: live, live, ids...)."""
        return in_list(self._dialect, self._saga_states, count)


# Built once per dialect (by its flavour), at its first use: the hot path only sends them.
_QUERIES: dict[Flavour, QueueControlQueries] = {}


def _of(dialect: Flavour) -> QueueControlQueries:
    found = _QUERIES.get(dialect)
    if found is None:
        found = _QUERIES[dialect] = QueueControlQueries(dialect)
    return found


def _queries(store: SQLQueueControl) -> QueueControlQueries:
    return _of(store._dialect.flavour)


async def held_back(tx: Transaction, dialect: Flavour, queue: str) -> bool:
    """Tell, inside a claim's transaction, whether an operator paused or is draining `queue` (start nothing)."""
    records = await tx.fetch(_of(dialect).state, (queue,))
    return bool(records) and records[0][0] in (PAUSED, DRAINING)


class SQLQueueControl:
    """The queue control primitives of a SQL store."""

    # Provided by SQLStore.
    _dialect: Dialect
    _codec: RowCodec

    def _check_open(self) -> None:
        raise NotImplementedError

    def _transaction(self, *, begin: bool) -> AbstractAsyncContextManager[Transaction]:
        raise NotImplementedError

    async def _retrying(self, what: str, operation: Callable[[], Awaitable[_T]]) -> _T:
        raise NotImplementedError

    async def _fetch(self, what: str, sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
        raise NotImplementedError

    async def set_queue_state(self, name: str, state: QueueState, at: datetime) -> None:
        """Store `state` for queue `name` (active, paused, draining) and wake the workers that listen."""
        self._check_open()
        qc, time_in = _queries(self), self._codec.time_in

        async def once() -> None:
            async with self._transaction(begin=False) as tx:
                await tx.execute(qc.set_state, (name, state, time_in(at)))

        await self._retrying("set_queue_state", once)
        await self.notify_workers(name)

    async def queue_state(self, name: str) -> QueueState:
        """Return the state an operator set for queue `name` ("active" if none)."""
        self._check_open()
        records = await self._fetch("queue_state", _queries(self).state, (name,))
        state = str(records[0][0]) if records else ACTIVE
        return PAUSED if state == PAUSED else DRAINING if state == DRAINING else ACTIVE

    async def saga_queue_states(self, saga_ids: Sequence[str]) -> dict[str, QueueStanding]:
        """Return where each saga of `saga_ids` submitted to a queue stands there, by id (those not queued left out):
        one read of every saga, and one count of each rate-limited queue's window."""
        self._check_open()
        qc, codec, flavour = _queries(self), self._codec, self._dialect.flavour
        ids = list(dict.fromkeys(saga_ids))
        records: list[Sequence[Any]] = []
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start : start + _IN_CHUNK]
            params = (*_LIVE, *_LIVE, *ids_param(flavour, chunk))
            records.extend(await self._fetch("saga_queue_state", qc.saga_states(len(chunk)), params))
        # The claim's window, on the database's clock: counted once a queue.
        recent: dict[str, int] = {}
        clock: datetime | None = None
        for record in records:
            name, rate, per = str(record[1]), record[6], record[7]
            if rate is None or per is None or name in recent:
                continue
            if clock is None:
                clock = now() if qc.clock is None else codec.time_out((await self._fetch("clock", qc.clock, ()))[0][0])
                assert clock is not None
            since = codec.time_in(clock - timedelta(seconds=float(per)))
            recent[name] = int((await self._fetch("saga_queue_state", qc.started, (name, since, int(rate))))[0][0])
        found = {}
        for saga_id, name, state, key, concurrency, per_key, rate, per, running, key_running, not_before in records:
            found[codec.id_out(saga_id)] = QueueStanding(
                str(name),
                PAUSED if state == PAUSED else DRAINING if state == DRAINING else ACTIVE,
                None if key is None else str(key),
                None if concurrency is None else int(concurrency),
                None if per_key is None else int(per_key),
                None if rate is None else int(rate),
                None if per is None else float(per),
                int(running),
                int(key_running),
                recent.get(str(name), 0),
                codec.time_out(not_before),
            )
        return found

    async def note_queue_limits(self, queue: Queue, at: datetime) -> None:
        """Record the limits a worker serves `queue` with (its state unchanged)."""
        self._check_open()
        rate = queue.rate_limit
        params = (
            queue.name,
            ACTIVE,
            queue.concurrency,
            queue.key_concurrency,
            None if rate is None else rate.limit,
            None if rate is None else float(rate.per),
            self._codec.time_in(at),
        )

        async def once() -> None:
            async with self._transaction(begin=False) as tx:
                await tx.execute(_queries(self).set_limits, params)

        await self._retrying("note_queue_limits", once)

    async def queue_infos(self) -> list[QueueInfo]:
        """Return every queue that holds a non-terminal saga or has a stored state, by name."""
        self._check_open()
        qc, codec = _queries(self), self._codec
        found: dict[str, dict[str, Any]] = {}
        for name, status, count, oldest in await self._fetch("queue_infos", qc.counts, _COUNTED):
            info = found.setdefault(str(name), {"name": str(name)})
            field = {"QUEUED": "queued", "WAITING": "waiting"}.get(str(status), "running")
            info[field] = info.get(field, 0) + int(count)
            if str(status) == SagaStatus.QUEUED.value:
                info["oldest_queued_at"] = codec.time_out(oldest)
        for name, state, changed, concurrency, per_key, rate, per in await self._fetch("queue_infos", qc.states, ()):
            info = found.setdefault(str(name), {"name": str(name)})
            info.update(
                paused=state == PAUSED,
                draining=state == DRAINING,
                state_changed_at=codec.time_out(changed),
                concurrency=concurrency,
                key_concurrency=per_key,
                rate_limit=rate,
                rate_per=None if per is None else float(per),
            )
        return [QueueInfo(**found[name]) for name in sorted(found)]

    async def list_queue_rows(
        self, queue: str, status: SagaStatus | None, limit: int, offset: int
    ) -> list[tuple[SagaRow, int]]:
        """Return the rows of the sagas submitted to `queue`, newest first, each with its count of step rows."""
        self._check_open()
        sql = _queries(self).listed[status is not None]
        params = (queue, *([] if status is None else [status.value]), int(limit), int(offset))
        n = len(SAGA_COLUMNS)
        return [(self._codec.saga_row(r), int(r[n])) for r in await self._fetch("list_sagas", sql, params)]

    async def notify_workers(self, queue: str = "") -> None:
        """Wake the idle workers that listen (PostgreSQL): of `queue`, or every one with "" (a decision, an unpark,
        a message); other databases' workers poll, so this does nothing there."""
        self._check_open()
        qc = _queries(self)
        sql, params = (qc.notify, (queue,)) if queue else (qc.notify_decided, ())
        if sql is None:
            return

        async def once() -> None:
            async with self._transaction(begin=False) as tx:
                await tx.fetch(sql, params)

        await self._retrying("notify_workers", once)
