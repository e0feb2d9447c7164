"""Retention on the memory store: purge to tombstones, holds, and the `keep` bound.

One loop owns the store, so no lock; across the archive's wait the batch is set aside from other purges and
each saga is checked again before it goes (a hold or a reopen meanwhile keeps it).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from saga_runtime._records import (
    ApprovalRow,
    QueueEntry,
    SagaHold,
    SagaRow,
    SagaStatus,
    StepRow,
    canonical_json,
    export_rows,
    now,
)
from saga_runtime._storage._archive import Archive
from saga_runtime._storage._retention import DEFAULT_PURGE_STATUSES, keeps_child, tombstone

__all__ = ["MemoryRetention", "keep_option"]


def keep_option(keep: int | str | None) -> int | None:
    """Return the bound on finished sagas; raise ValueError unless an int >= 0 or None."""
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
    """The retention primitives of MemoryStore (`RetentionStore`)."""

    #: No transaction to keep short.
    purge_batch_size = 5000

    # MemoryStore's state and reads.
    _sagas: dict[str, SagaRow]
    _steps: dict[str, dict[str, StepRow]]
    _keys: dict[str, StepRow]
    _approvals: dict[str, dict[str, ApprovalRow]]
    _unsealed: set[str]
    _unsealed_sagas: set[str]
    _imported: dict[str, dict[str, StepRow]]
    _queued: dict[str, QueueEntry]
    _started: dict[str, datetime]
    _woken: dict[str, datetime]
    _cancels: dict[str, str]
    _cancel_seen: dict[str, str]
    _holds: dict[str, SagaHold]
    _messages: dict[str, dict[str, tuple[str, Any, datetime]]]
    _purging: set[str]
    _finished: dict[str, None]
    _keep: int | None
    _signing_key: bytes | None

    def _check_open(self) -> None:
        raise NotImplementedError

    def _snapshot(self, saga_id: str) -> tuple[SagaRow, list[StepRow]] | None:
        raise NotImplementedError

    def _approval_rows(self, saga_id: str) -> list[ApprovalRow]:
        raise NotImplementedError

    def _purgeable(self, cutoff: datetime, statuses: Sequence[SagaStatus]) -> list[SagaRow]:
        return [
            saga
            for saga in self._sagas.values()
            if saga.status in statuses
            and saga.purged_at is None
            and saga.finished_at is not None
            and saga.finished_at < cutoff
            and saga.saga_id not in self._holds
            and saga.saga_id not in self._purging
            and not keeps_child(self._sagas.get(saga.parent_id) if saga.parent_id else None)
        ]

    async def purge_candidates(
        self, cutoff: datetime, statuses: Sequence[SagaStatus], limit: int, offset: int
    ) -> list[str]:
        """Return the ids a purge would remove now, oldest finished first."""
        self._check_open()
        found = heapq.nsmallest(offset + limit, self._purgeable(cutoff, statuses), key=_age)
        return [saga.saga_id for saga in found[offset:]]

    async def purge_batch(
        self,
        cutoff: datetime,
        statuses: Sequence[SagaStatus],
        limit: int,
        archive: Archive | None,
        at: datetime,
    ) -> tuple[list[str], Exception | None]:
        """Purge up to `limit` sagas, archived first; return ids and any archive error."""
        self._check_open()
        sagas = heapq.nsmallest(limit, self._purgeable(cutoff, statuses), key=_age)
        error = None
        if archive is not None and sagas:
            taken = {saga.saga_id for saga in sagas}
            self._purging |= taken
            try:
                documents = []
                for saga in sagas:
                    snapshot = self._snapshot(saga.saga_id)
                    assert snapshot is not None
                    documents.append(export_rows(*snapshot, self._approval_rows(saga.saga_id)))
                done, error = await archive.put(documents)
            finally:
                self._purging -= taken
            sagas = sagas[:done]
        purged = []
        for saga in sagas:
            current = self._sagas.get(saga.saga_id)
            if current is None or current.status not in statuses or current.purged_at is not None:
                continue
            if saga.saga_id in self._holds:
                continue
            self._bury(current, at)
            purged.append(saga.saga_id)
        return purged, error

    def _bury(self, saga: SagaRow, at: datetime) -> None:
        """Replace a saga by its tombstone, forgetting all else of it."""
        saga_id = saga.saga_id
        self._sagas[saga_id] = tombstone(saga, at, self._signing_key)
        for row in self._steps.pop(saga_id, {}).values():
            holder = self._keys.get(row.idempotency_key)
            if holder is not None and holder.saga_id == saga_id and holder.step_id == row.step_id:
                del self._keys[row.idempotency_key]
        tables = (self._approvals, self._imported, self._queued, self._started, self._cancels, self._cancel_seen)
        for table in (*tables, self._messages, self._woken):
            table.pop(saga_id, None)
        self._finished.pop(saga_id, None)
        self._unsealed.discard(saga_id)
        self._unsealed_sagas.discard(saga_id)

    def _ended(self, saga: SagaRow) -> None:
        """Count a finished saga toward `keep`; purge the oldest past it."""
        if self._keep is None or saga.status not in DEFAULT_PURGE_STATUSES:
            return
        self._finished[saga.saga_id] = None
        while len(self._finished) > self._keep:
            oldest = next(iter(self._finished))
            del self._finished[oldest]
            current = self._sagas.get(oldest)
            if current is None or current.purged_at is not None or current.status not in DEFAULT_PURGE_STATUSES:
                continue
            if oldest in self._holds or oldest in self._purging:
                continue  # stays whole, no longer counted
            self._bury(current, now())

    async def put_message(self, saga_id: str, message_id: str, topic: str, body: Any, sent_at: datetime) -> bool:
        """Store a message (a JSON value) for a saga unless its id is taken; return whether it was stored."""
        self._check_open()
        messages = self._messages.setdefault(saga_id, {})
        if message_id in messages:
            return False
        messages[message_id] = (topic, json.loads(canonical_json(body)), sent_at)  # its own copy, as stored
        saga = self._sagas.get(saga_id)
        if saga is not None and saga.status is SagaStatus.WAITING:
            self._woken[saga_id] = sent_at  # due at once
        return True

    async def load_messages(self, saga_id: str) -> list[tuple[str, str, Any, datetime]]:
        """Return a saga's messages (id, topic, body, sent_at), oldest first."""
        self._check_open()
        found = [(mid, topic, body, at) for mid, (topic, body, at) in self._messages.get(saga_id, {}).items()]
        return sorted(found, key=lambda message: (message[3], message[0]))

    async def hold_saga(self, saga_id: str, reason: str, at: datetime) -> bool:
        """Hold a stored saga (again: replace the reason); return False if unknown."""
        self._check_open()
        if saga_id not in self._sagas:
            return False
        self._holds[saga_id] = SagaHold(saga_id, reason, at)
        return True

    async def unhold_saga(self, saga_id: str) -> bool:
        """Release a saga's hold; return whether it was held."""
        self._check_open()
        return self._holds.pop(saga_id, None) is not None

    async def list_holds(self) -> list[SagaHold]:
        """Return every hold, oldest first."""
        self._check_open()
        return sorted(self._holds.values(), key=lambda hold: (hold.held_at, hold.saga_id))


def _age(saga: SagaRow) -> tuple[datetime, str]:
    assert saga.finished_at is not None
    return saga.finished_at, saga.saga_id
