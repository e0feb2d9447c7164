"""Retention on the SQL stores: purge and hold statements.

A batch is one transaction: the oldest candidates locked (`SKIP LOCKED`, so concurrent purges take different
sagas; SQLite's `BEGIN IMMEDIATE`), archived, their steps and approvals deleted, their rows made tombstones.
A hold locks the saga's row, so it waits for a purge holding it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar

from saga_runtime._records import SagaHold, SagaRow, SagaStatus, StepRow, canonical_json, export_rows
from saga_runtime._storage._approval_sql import APPROVAL_COLUMNS, approval_row
from saga_runtime._storage._archive import Archive
from saga_runtime._storage._codec import SAGA_COLUMNS, RowCodec
from saga_runtime._storage._dialect import Dialect
from saga_runtime._storage._flavour import Flavour
from saga_runtime._storage._retention import tombstone
from saga_runtime._storage._sql import Queries, _placeholders
from saga_runtime._storage._sqlwrite import Transaction

__all__ = ["SQLRetention"]

_T = TypeVar("_T")


def _in(count: int) -> str:
    return "(" + ", ".join("?" * count) + ")"


class _Statements:
    """The retention statements of one dialect."""

    def __init__(self, dialect: Flavour) -> None:
        self.dialect = dialect
        q = _placeholders
        saga_cols = ", ".join(f"s.{c}" for c in SAGA_COLUMNS)
        self._candidates = (
            f"SELECT {saga_cols} FROM sagas s WHERE s.status IN (*) AND s.purged_at IS NULL AND s.finished_at < ? "
            "AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.saga_id = s.saga_id) "
            # A child saga stays while its parent may still undo it (see `keeps_child`).
            "AND NOT EXISTS (SELECT 1 FROM sagas p WHERE p.saga_id = s.parent_id AND p.purged_at IS NULL "
            "AND NOT (p.status = 'COMPENSATED' OR (p.status = 'SUCCESS' AND p.parent_id IS NULL))) "
            "ORDER BY s.finished_at, s.saga_id LIMIT ?"
        )
        self.exists = q(dialect, "SELECT saga_id FROM sagas WHERE saga_id = ?" + dialect.lock_row)
        upsert = dialect.upsert("saga_id", ("reason", "held_at"))
        self.hold = q(dialect, f"INSERT INTO holds (saga_id, reason, held_at) VALUES (?, ?, ?) {upsert}")
        self.unhold = q(dialect, "DELETE FROM holds WHERE saga_id = ?")
        # Messages (API.md §18): a key used again stores nothing.
        absent = dialect.insert_ignore("saga_id", None)
        put = f"INSERT INTO messages (saga_id, message_id, topic, body, sent_at) VALUES (?, ?, ?, ?, ?) {absent}"
        # A message stored makes its saga due at once if it waits (params: sent_at, saga_id).
        self.wake = q(dialect, "UPDATE sagas SET wake_at = ? WHERE saga_id = ? AND status = 'WAITING'")
        if dialect.notices is not None:  # workers LISTENing are told at once (payload "message:<saga id>")
            put = dialect.notices.message_put(put)
        self.put_message = q(dialect, put)
        self.messages = q(
            dialect,
            "SELECT message_id, topic, body, sent_at FROM messages WHERE saga_id = ? ORDER BY sent_at, message_id",
        )
        self.holds = "SELECT saga_id, reason, held_at FROM holds ORDER BY held_at, saga_id"

    def candidates(self, statuses: int, *, locked: bool, offset: bool = False) -> str:
        """Return the purgeable-saga scan (params: statuses..., cutoff, limit[, offset])."""
        sql = self._candidates.replace("(*)", _in(statuses)) + (" OFFSET ?" if offset else "")
        return _placeholders(self.dialect, sql + (self.dialect.lock_purge_scan if locked else ""))

    def tombstone(self, count: int) -> str:
        """Return the tombstone UPDATE (params: metadata, purged_at, (id, seal)..., ids...)."""
        seals = " ".join(["WHEN ? THEN ?"] * count)
        return _placeholders(
            self.dialect,
            "UPDATE sagas SET plan = NULL, budget = NULL, metadata = ?, error = NULL, owner = NULL, "
            f"lease_expires_at = NULL, cancel_request = NULL, purged_at = ?, seal = CASE saga_id {seals} END "
            f"WHERE saga_id IN {_in(count)} AND purged_at IS NULL",
        )

    def delete(self, table: str, count: int) -> str:
        """Return a DELETE of `count` sagas' rows."""
        return _placeholders(self.dialect, f"DELETE FROM {table} WHERE saga_id IN {_in(count)}")

    def approvals(self, count: int) -> str:
        """Return a read of `count` sagas' approvals."""
        columns = ", ".join(APPROVAL_COLUMNS)
        return _placeholders(
            self.dialect, f"SELECT {columns} FROM approvals WHERE saga_id IN {_in(count)} ORDER BY saga_id, seq"
        )


class SQLRetention:
    """The retention primitives of a SQL store (`RetentionStore`)."""

    #: Sagas per purge transaction: small, so writers wait a moment at most.
    purge_batch_size = 200

    # Provided by SQLStore.
    _dialect: Dialect
    _codec: RowCodec
    _queries: Queries
    _signing_key: bytes | None

    def _check_open(self) -> None:
        raise NotImplementedError

    def _transaction(self, *, begin: bool) -> AbstractAsyncContextManager[Transaction]:
        raise NotImplementedError

    async def _retrying(self, what: str, operation: Callable[[], Awaitable[_T]]) -> _T:
        raise NotImplementedError

    async def _fetch(self, what: str, sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
        raise NotImplementedError

    async def purge_candidates(
        self, cutoff: datetime, statuses: Sequence[SagaStatus], limit: int, offset: int
    ) -> list[str]:
        """Return the ids a purge would remove now, oldest finished first."""
        self._check_open()
        st, codec = _statements(self), self._codec
        params = (*(s.value for s in statuses), codec.time_in(cutoff), int(limit), int(offset))
        records = await self._fetch("purge", st.candidates(len(statuses), locked=False, offset=True), params)
        return [codec.id_out(record[0]) for record in records]

    async def purge_batch(
        self,
        cutoff: datetime,
        statuses: Sequence[SagaStatus],
        limit: int,
        archive: Archive | None,
        at: datetime,
    ) -> tuple[list[str], Exception | None]:
        """Purge up to `limit` sagas in one transaction, archived first; return ids and any archive error."""
        self._check_open()
        st, codec, q = _statements(self), self._codec, self._queries
        params = (*(s.value for s in statuses), codec.time_in(cutoff), int(limit))

        async def once() -> tuple[list[str], Exception | None]:
            async with self._dialect.claim_transaction() as tx:
                records = await tx.fetch(st.candidates(len(statuses), locked=True), params)
                sagas = [codec.saga_row(record) for record in records]
                error = None
                if archive is not None and sagas:
                    ids = [saga.saga_id for saga in sagas]
                    loaded = codec.rows_of_load_many(await tx.fetch(q.load_many(len(ids)), q.ids(ids)))
                    steps: dict[str, list[StepRow]] = {saga.saga_id: rows for saga, rows in loaded}
                    approvals: dict[str, list[Any]] = {}
                    for record in await tx.fetch(st.approvals(len(ids)), ids):
                        row = approval_row(codec, record)
                        approvals.setdefault(row.saga_id, []).append(row)
                    documents = [
                        export_rows(saga, steps.get(saga.saga_id, []), approvals.get(saga.saga_id, ()))
                        for saga in sagas
                    ]
                    done, error = await archive.put(documents)
                    sagas = sagas[:done]
                await _remove(self, tx, sagas, at)
                return [saga.saga_id for saga in sagas], error

        return await self._retrying("purge", once)

    async def hold_saga(self, saga_id: str, reason: str, at: datetime) -> bool:
        """Hold a stored saga, its row locked; return False if unknown."""
        self._check_open()
        st = _statements(self)

        async def once() -> bool:
            async with self._transaction(begin=True) as tx:
                if not await tx.fetch(st.exists, (saga_id,)):
                    return False
                await tx.execute(st.hold, (saga_id, reason, self._codec.time_in(at)))
                return True

        return await self._retrying("hold", once)

    async def unhold_saga(self, saga_id: str) -> bool:
        """Release a saga's hold; return whether it was held."""
        self._check_open()
        st = _statements(self)

        async def once() -> bool:
            async with self._transaction(begin=False) as tx:
                return await tx.execute(st.unhold, (saga_id,)) > 0

        return await self._retrying("unhold", once)

    async def put_message(self, saga_id: str, message_id: str, topic: str, body: Any, sent_at: datetime) -> bool:
        """Store a message (a JSON value) for a saga unless its id is taken; return whether it was stored."""
        self._check_open()
        st, sent = _statements(self), self._codec.time_in(sent_at)
        text = canonical_json(body)

        async def once() -> bool:
            if self._dialect.flavour.notifies:  # one statement stores, wakes and notifies
                async with self._transaction(begin=False) as tx:
                    return bool(await tx.fetch(st.put_message, (saga_id, message_id, topic, text, sent)))
            async with self._transaction(begin=True) as tx:
                if await tx.execute(st.put_message, (saga_id, message_id, topic, text, sent)) > 0:
                    await tx.execute(st.wake, (sent, saga_id))
                    return True
                return False

        return await self._retrying("put_message", once)

    async def load_messages(self, saga_id: str) -> list[tuple[str, str, Any, datetime]]:
        """Return a saga's messages (id, topic, body, sent_at), oldest first."""
        self._check_open()
        st, codec = _statements(self), self._codec
        found = []
        for message_id, topic, body, sent_at in await self._fetch("load_messages", st.messages, (saga_id,)):
            when = codec.time_out(sent_at)
            assert when is not None
            found.append((str(message_id), str(topic), json.loads(body), when))
        return found

    async def list_holds(self) -> list[SagaHold]:
        """Return every hold, oldest first."""
        self._check_open()
        codec = self._codec
        records = await self._fetch("holds", _statements(self).holds, ())
        holds = []
        for saga_id, reason, held_at in records:
            when = codec.time_out(held_at)
            assert when is not None
            holds.append(SagaHold(codec.id_out(saga_id), str(reason), when))
        return holds


async def _remove(store: SQLRetention, tx: Any, sagas: Sequence[SagaRow], at: datetime) -> None:
    """Delete `sagas`' steps, approvals and messages and make tombstones, in the caller's transaction."""
    if not sagas:
        return
    st, codec = _statements(store), store._codec
    ids = [saga.saga_id for saga in sagas]
    await tx.execute(st.delete("steps", len(ids)), ids)
    await tx.execute(st.delete("approvals", len(ids)), ids)
    await tx.execute(st.delete("messages", len(ids)), ids)
    seals: list[Any] = []
    for saga in sagas:
        seals += (saga.saga_id, tombstone(saga, at, store._signing_key).seal)
    params = (codec.json_in({}, "an empty metadata"), codec.time_in(at), *seals, *ids)
    await tx.execute(st.tombstone(len(ids)), params)


_CACHE: dict[Flavour, _Statements] = {}


def _statements(store: SQLRetention) -> _Statements:
    flavour = store._dialect.flavour
    found = _CACHE.get(flavour)
    if found is None:
        found = _CACHE[flavour] = _Statements(flavour)
    return found
