"""Retention on the SQL stores: the statements of a purge and of holds, over the store's transactions.

A batch is one transaction: the oldest candidates are selected and locked (`FOR UPDATE SKIP LOCKED` on PostgreSQL
and MySQL/MariaDB, so two purges at once take different sagas; SQLite's `BEGIN IMMEDIATE` lets one writer in),
archived, then their steps and approvals deleted and their rows made tombstones. A hold locks the saga's row as
it is written, so it waits for a purge that holds it and is seen by the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from saga_runtime._records import SagaHold, SagaRow, SagaStatus, StepRow, export_rows
from saga_runtime._storage._approval_sql import APPROVAL_COLUMNS, approval_row
from saga_runtime._storage._codec import SAGA_COLUMNS, DialectName
from saga_runtime._storage._retention import Archive, tombstone
from saga_runtime._storage._sql import _placeholders

if TYPE_CHECKING:
    from saga_runtime._storage._sqlstore import SQLStore

__all__ = ["SQLRetention"]

_LOCK: dict[DialectName, str] = {
    "sqlite": "",
    "postgresql": " FOR UPDATE OF s SKIP LOCKED",
    "mysql": " FOR UPDATE SKIP LOCKED",
}


def _in(count: int) -> str:
    return "(" + ", ".join("?" * count) + ")"


class _Statements:
    """The retention statements of one dialect."""

    def __init__(self, dialect: DialectName) -> None:
        self.dialect = dialect
        q = _placeholders
        saga_cols = ", ".join(f"s.{c}" for c in SAGA_COLUMNS)
        self._candidates = (
            f"SELECT {saga_cols} FROM sagas s WHERE s.status IN (*) AND s.purged_at IS NULL AND s.finished_at < ? "
            "AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.saga_id = s.saga_id) "
            "ORDER BY s.finished_at, s.saga_id LIMIT ?"
        )
        self.tombstone = q(
            dialect,
            "UPDATE sagas SET plan = ?, budget = ?, metadata = ?, error = ?, owner = NULL, lease_expires_at = NULL, "
            "cancel_request = NULL, purged_at = ?, seal = ? WHERE saga_id = ? AND purged_at IS NULL",
        )
        self.exists = q(
            dialect, "SELECT saga_id FROM sagas WHERE saga_id = ?" + ("" if dialect == "sqlite" else " FOR UPDATE")
        )
        upsert = (
            "ON DUPLICATE KEY UPDATE reason = VALUES(reason), held_at = VALUES(held_at)"
            if dialect == "mysql"
            else "ON CONFLICT (saga_id) DO UPDATE SET reason = excluded.reason, held_at = excluded.held_at"
        )
        self.hold = q(dialect, f"INSERT INTO holds (saga_id, reason, held_at) VALUES (?, ?, ?) {upsert}")
        self.unhold = q(dialect, "DELETE FROM holds WHERE saga_id = ?")
        self.holds = "SELECT saga_id, reason, held_at FROM holds ORDER BY held_at, saga_id"

    def candidates(self, statuses: int, *, locked: bool, offset: bool = False) -> str:
        """Return the scan for purgeable sagas (params: statuses..., cutoff, limit[, offset])."""
        sql = self._candidates.replace("(*)", _in(statuses)) + (" OFFSET ?" if offset else "")
        return _placeholders(self.dialect, sql + (_LOCK[self.dialect] if locked else ""))

    def delete(self, table: str, count: int) -> str:
        """Return the DELETE of a table's rows of `count` sagas."""
        return _placeholders(self.dialect, f"DELETE FROM {table} WHERE saga_id IN {_in(count)}")

    def approvals(self, count: int) -> str:
        """Return the read of the approval rows of `count` sagas."""
        columns = ", ".join(APPROVAL_COLUMNS)
        return _placeholders(
            self.dialect, f"SELECT {columns} FROM approvals WHERE saga_id IN {_in(count)} ORDER BY saga_id, seq"
        )


class SQLRetention:
    """The retention primitives of a SQL store (see saga_runtime._storage._retention.RetentionStore)."""

    #: Sagas per purge transaction: a few hundred, so writers beside it wait at most a moment.
    purge_batch_size = 200

    async def purge_candidates(
        self, cutoff: datetime, statuses: Sequence[SagaStatus], limit: int, offset: int
    ) -> list[str]:
        """Return the ids a purge would remove now, oldest finished first."""
        store = cast("SQLStore", self)
        store._check_open()
        st, codec = _statements(store), store._codec
        params = (*(s.value for s in statuses), codec.time_in(cutoff), int(limit), int(offset))
        records = await store._fetch("purge", st.candidates(len(statuses), locked=False, offset=True), params)
        return [codec.id_out(record[0]) for record in records]

    async def purge_batch(
        self,
        cutoff: datetime,
        statuses: Sequence[SagaStatus],
        limit: int,
        archive: Archive | None,
        at: datetime,
    ) -> tuple[list[str], Exception | None]:
        """Purge up to `limit` sagas in one transaction, archived first; return their ids and an archive error."""
        store = cast("SQLStore", self)
        store._check_open()
        st, codec, q = _statements(store), store._codec, store._queries
        params = (*(s.value for s in statuses), codec.time_in(cutoff), int(limit))

        async def once() -> tuple[list[str], Exception | None]:
            async with store._claim_transaction() as tx:
                records = await tx.fetch(st.candidates(len(statuses), locked=True), params)
                sagas = [codec.saga_row(record) for record in records]
                error = None
                if archive is not None and sagas:
                    ids = [saga.saga_id for saga in sagas]
                    loaded = codec.rows_of_load_many(await tx.fetch(q.load_many(len(ids)), ids))
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
                await _remove(store, tx, sagas, at)
                return [saga.saga_id for saga in sagas], error

        return await store._retrying("purge", once)

    async def hold_saga(self, saga_id: str, reason: str, at: datetime) -> bool:
        """Hold a stored saga (its row locked meanwhile); return False if no saga has the id."""
        store = cast("SQLStore", self)
        store._check_open()
        st = _statements(store)

        async def once() -> bool:
            async with store._transaction(begin=True) as tx:
                if not await tx.fetch(st.exists, (saga_id,)):
                    return False
                await tx.execute(st.hold, (saga_id, reason, store._codec.time_in(at)))
                return True

        return await store._retrying("hold", once)

    async def unhold_saga(self, saga_id: str) -> bool:
        """Release a saga's hold; return whether it was held."""
        store = cast("SQLStore", self)
        store._check_open()
        st = _statements(store)

        async def once() -> bool:
            async with store._transaction(begin=False) as tx:
                return await tx.execute(st.unhold, (saga_id,)) > 0

        return await store._retrying("unhold", once)

    async def list_holds(self) -> list[SagaHold]:
        """Return every hold, oldest first."""
        store = cast("SQLStore", self)
        store._check_open()
        codec = store._codec
        records = await store._fetch("holds", _statements(store).holds, ())
        holds = []
        for saga_id, reason, held_at in records:
            when = codec.time_out(held_at)
            assert when is not None
            holds.append(SagaHold(codec.id_out(saga_id), str(reason), when))
        return holds


async def _remove(store: SQLStore, tx: Any, sagas: Sequence[SagaRow], at: datetime) -> None:
    """Delete the steps and approvals of `sagas` and make their rows tombstones, in the caller's transaction."""
    if not sagas:
        return
    st, codec = _statements(store), store._codec
    ids = [saga.saga_id for saga in sagas]
    await tx.execute(st.delete("steps", len(ids)), ids)
    await tx.execute(st.delete("approvals", len(ids)), ids)
    empty = codec.json_in({}, "an empty metadata")
    for saga in sagas:
        kept = tombstone(saga, at, store.signing_key)
        await tx.execute(st.tombstone, (None, None, empty, None, codec.time_in(at), kept.seal, saga.saga_id))


_CACHE: dict[DialectName, _Statements] = {}


def _statements(store: SQLStore) -> _Statements:
    found = _CACHE.get(store.dialect)
    if found is None:
        found = _CACHE[store.dialect] = _Statements(store.dialect)
    return found
