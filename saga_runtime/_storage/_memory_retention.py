"""Retention on the memory store: purge to tombstones, holds, and the bound `keep` on finished sagas.

One event loop owns the store, so a batch needs no lock, only care across its one wait (the archive): the sagas
it took are set aside from other purges meanwhile, and each is checked again before it goes (a hold placed, or a
failed compensation reopened, while it was archived keeps it).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, cast

from saga_runtime._records import SagaHold, SagaRow, SagaStatus, export_rows, now
from saga_runtime._storage._retention import DEFAULT_PURGE_STATUSES, Archive, tombstone

if TYPE_CHECKING:
    from saga_runtime._storage._memory import MemoryStore

__all__ = ["MemoryRetention", "keep_option"]


def keep_option(keep: int | str | None) -> int | None:
    """Return the memory store's bound on finished sagas; raise ValueError unless it is an int >= 0 or None."""
    if keep is None:
        return None
    try:
        value = int(keep)
    except (TypeError, ValueError):
        raise ValueError(f"keep must be a whole number of finished sagas >= 0, not {keep!r}") from None
    if isinstance(keep, bool) or value < 0 or (isinstance(keep, float) and keep != value):
        raise ValueError(f"keep must be a whole number of finished sagas >= 0, not {keep!r}")
    return value


class MemoryRetention:
    """The retention primitives of MemoryStore (see saga_runtime._storage._retention.RetentionStore)."""

    #: One batch is one pass in memory: no transaction to keep short.
    purge_batch_size = 5000

    def _purgeable(self, cutoff: datetime, statuses: Sequence[SagaStatus]) -> list[SagaRow]:
        store = cast("MemoryStore", self)
        return [
            saga
            for saga in store._sagas.values()
            if saga.status in statuses
            and saga.purged_at is None
            and saga.finished_at is not None
            and saga.finished_at < cutoff
            and saga.saga_id not in store._holds
            and saga.saga_id not in store._purging
        ]

    async def purge_candidates(
        self, cutoff: datetime, statuses: Sequence[SagaStatus], limit: int, offset: int
    ) -> list[str]:
        """Return the ids a purge would remove now, oldest finished first."""
        store = cast("MemoryStore", self)
        store._check_open()
        found = heapq.nsmallest(offset + limit, store._purgeable(cutoff, statuses), key=_age)
        return [saga.saga_id for saga in found[offset:]]

    async def purge_batch(
        self,
        cutoff: datetime,
        statuses: Sequence[SagaStatus],
        limit: int,
        archive: Archive | None,
        at: datetime,
    ) -> tuple[list[str], Exception | None]:
        """Purge up to `limit` sagas, archived first; return their ids and an archive error."""
        store = cast("MemoryStore", self)
        store._check_open()
        sagas = heapq.nsmallest(limit, store._purgeable(cutoff, statuses), key=_age)
        error = None
        if archive is not None and sagas:
            taken = {saga.saga_id for saga in sagas}
            store._purging |= taken
            try:
                documents = []
                for saga in sagas:
                    snapshot = store._snapshot(saga.saga_id)
                    assert snapshot is not None
                    documents.append(export_rows(*snapshot, store._approval_rows(saga.saga_id)))
                done, error = await archive.put(documents)
            finally:
                store._purging -= taken
            sagas = sagas[:done]
        purged = []
        for saga in sagas:
            current = store._sagas.get(saga.saga_id)
            if current is None or current.status not in statuses or current.purged_at is not None:
                continue
            if saga.saga_id in store._holds:
                continue
            store._bury(current, at)
            purged.append(saga.saga_id)
        return purged, error

    def _bury(self, saga: SagaRow, at: datetime) -> None:
        """Replace a saga by its tombstone, forgetting its steps, keys, approvals and queue entry."""
        store = cast("MemoryStore", self)
        saga_id = saga.saga_id
        store._sagas[saga_id] = tombstone(saga, at, store._signing_key)
        for row in store._steps.pop(saga_id, {}).values():
            if store._keys.get(row.idempotency_key) == (saga_id, row.step_id):
                del store._keys[row.idempotency_key]
        for table in (store._approvals, store._unsealed, store._queued, store._started, store._cancels):
            table.pop(saga_id, None)
        store._finished.pop(saga_id, None)

    def _ended(self, saga: SagaRow) -> None:
        """Count a saga that just finished toward `keep`; purge the oldest finished past it."""
        store = cast("MemoryStore", self)
        if store._keep is None or saga.status not in DEFAULT_PURGE_STATUSES:
            return
        store._finished[saga.saga_id] = None
        while len(store._finished) > store._keep:
            oldest = next(iter(store._finished))
            del store._finished[oldest]
            current = store._sagas.get(oldest)
            if current is None or current.purged_at is not None or current.status not in DEFAULT_PURGE_STATUSES:
                continue
            if oldest in store._holds or oldest in store._purging:
                continue  # held back: it stays whole, and no longer counts
            store._bury(current, now())

    async def hold_saga(self, saga_id: str, reason: str, at: datetime) -> bool:
        """Hold a stored saga (a hold again replaces its reason); return False if no saga has the id."""
        store = cast("MemoryStore", self)
        store._check_open()
        if saga_id not in store._sagas:
            return False
        store._holds[saga_id] = SagaHold(saga_id, reason, at)
        return True

    async def unhold_saga(self, saga_id: str) -> bool:
        """Release a saga's hold; return whether it was held."""
        store = cast("MemoryStore", self)
        store._check_open()
        return store._holds.pop(saga_id, None) is not None

    async def list_holds(self) -> list[SagaHold]:
        """Return every hold, oldest first."""
        store = cast("MemoryStore", self)
        store._check_open()
        return sorted(store._holds.values(), key=lambda hold: (hold.held_at, hold.saga_id))


def _age(saga: SagaRow) -> tuple[datetime, str]:
    assert saga.finished_at is not None
    return saga.finished_at, saga.saga_id
