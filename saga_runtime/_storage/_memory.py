"""MemoryStore: a private, in-process store; what `SagaExecutor(registry)` uses when given no store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from saga_runtime._exceptions import StoreError
from saga_runtime._records import (
    ApprovalRow,
    DueWork,
    EndReason,
    Queue,
    QueueEntry,
    SagaHold,
    SagaRow,
    SagaStatus,
    Schedule,
    StepRow,
    chain_head,
    end_of,
    now,
    wake_time,
)
from saga_runtime._storage._base import EVERY_CAPABILITY, InlineWrite, key_full, queue_allowance
from saga_runtime._storage._batch import lease_lost
from saga_runtime._storage._keys import signing_key_bytes
from saga_runtime._storage._memory_queues import MemoryQueueControl
from saga_runtime._storage._memory_retention import MemoryRetention, keep_option
from saga_runtime._storage._memory_schedules import MemorySchedules
from saga_runtime._storage._reading import StoreBase
from saga_runtime._storage._sealing import Sealing

__all__ = ["MemoryStore"]

# The statuses a lease is held on (as the SQL stores' LIVE_STATUSES): PARKED and the terminal ones are never claimed.
_LIVE = frozenset({SagaStatus.RUNNING, SagaStatus.COMPENSATING})
_UNDRIVEN = frozenset({SagaStatus.RUNNING, SagaStatus.COMPENSATING, SagaStatus.QUEUED, SagaStatus.WAITING})
_CANCELLABLE = _LIVE | {SagaStatus.WAITING}


class MemoryStore(StoreBase, MemoryRetention, MemorySchedules, MemoryQueueControl):
    """Keep sagas in this process's memory: fast, private to the store object, gone when the process ends.

    Rows are sealed (and step rows linked) when the saga is first read (loaded, verified, exported, claimed,
    listed), not as they are written: a saga in memory is read by nobody but its engine while it runs, and most
    are never read at all, so each row is sealed at most once, from the snapshot the store holds. The seals are
    the ones a store sealing at each write computes: the rows are snapshots nobody changes.

    `keep`: at most that many finished (SUCCESS or COMPENSATED) sagas are kept whole; past it, the oldest is
    purged to its tombstone (API.md §14), so a long-running process does not grow without end.
    """

    #: No connection to lose: nothing is retried.
    retry_for = 0.0
    #: Queues, cancels, waits, messages, retention, schedules and due work: everything the engine may ask.
    capabilities = EVERY_CAPABILITY

    def __init__(self, *, signing_key: bytes | str | None = None, keep: int | None = None) -> None:
        self._sagas: dict[str, SagaRow] = {}
        self._steps: dict[str, dict[str, StepRow]] = {}
        # idempotency key -> the stored row of the step holding it (its saga_id and step_id name the holder): unique,
        # as the SQL stores' constraint. The row itself, no tuple a step: nothing more per step for the GC to count.
        self._keys: dict[str, StepRow] = {}
        # saga_id -> step_id -> approval row (the requests of that saga).
        self._approvals: dict[str, dict[str, ApprovalRow]] = {}
        self._closed = False
        self._wakers: list[Callable[[str], None]] = []  # workers' wakeups (queue_wakeups)
        self._queue_rows: dict[str, dict[str, Any]] = {}  # queue states and limits (MemoryQueueControl)
        self._signing_key = signing_key_bytes(signing_key)
        self._sealing = Sealing(self._signing_key)
        # The sagas whose step rows (`_unsealed`) or saga row (`_unsealed_sagas`) were written and are not sealed
        # yet: sealed when the saga is first read. Ids only, no container per saga. A step row that came without a
        # seal another way, an import, stays unsealed and is reported so: `_imported` keeps those (few) rows.
        self._unsealed: set[str] = set()
        self._unsealed_sagas: set[str] = set()
        self._imported: dict[str, dict[str, StepRow]] = {}
        # Saga rows written by this store are sealed; only an imported one created before it may carry no seal.
        self._sealed_since = now()
        # saga_id -> its queue entry (QUEUED sagas, and started ones: they count toward their queue's limits).
        self._queued: dict[str, QueueEntry] = {}
        # saga_id -> when a worker started it (the rate windows).
        self._started: dict[str, datetime] = {}
        # saga_id -> the reason of a request to cancel it.
        self._cancels: dict[str, str] = {}
        # saga_id -> the owner that took its cancel request in (its writes pass again; see take_cancel).
        self._cancel_seen: dict[str, str] = {}
        # Retention: holds, the sagas a purge is archiving, and the finished sagas `keep` counts (oldest first).
        self._holds: dict[str, SagaHold] = {}
        self._messages: dict[str, dict[str, tuple[str, Any, datetime]]] = {}  # by saga, by message id (schema 9)
        # WAITING sagas a message, decision or cancel made due (schema 15's wake_at), until a worker claims them.
        self._woken: dict[str, datetime] = {}
        self._purging: set[str] = set()
        self._finished: dict[str, None] = {}
        self._keep = keep_option(keep)
        # Schedules by name (the SQL stores' `schedules` table).
        self._schedules: dict[str, Schedule] = {}

    @property
    def url(self) -> str:
        """Return the store's URL."""
        return "memory://"

    @property
    def signing_key(self) -> bytes | None:
        """Return the key records are signed with, or None."""
        return self._signing_key

    @property
    def sealed_since(self) -> datetime | None:
        """Return when the store began sealing saga rows: when it was made."""
        return self._sealed_since

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the memory store is closed; open a new one with open_store('memory://')")

    async def create_saga(self, saga: SagaRow, steps: Sequence[StepRow]) -> tuple[SagaRow, list[StepRow]] | None:
        """Insert a new saga unless its id is taken; return the existing one if it is."""
        self._check_open()
        saga_id = saga.saga_id
        existing = self._snapshot(saga_id)
        if existing is not None:
            return existing
        if not self._put_new(saga_id, steps):
            self._check_keys(steps)
            self._put_steps(steps, unsealed=True)
        self._sagas[saga_id] = saga
        self._unsealed_sagas.add(saga_id)
        return None

    def _put_new(self, saga_id: str, steps: Sequence[StepRow]) -> bool:
        """Store the rows of the new saga `saga_id` (unsealed) when each is its own, of distinct steps, with a key
        nobody holds (a new saga's usual rows); False, having written nothing, for any other (see `_check_keys`).

        What `_check_keys` and `_put_steps` do for them, in one loop: the rows by step and by key, the keys checked
        against the store's in C."""
        if not steps or self._steps.get(saga_id):
            return False
        rows: dict[str, StepRow] = {}
        by_key: dict[str, StepRow] = {}
        for row in steps:
            if row.saga_id != saga_id:
                return False
            rows[row.step_id] = by_key[row.idempotency_key] = row
        if len(rows) != len(steps) or len(by_key) != len(steps) or not self._keys.keys().isdisjoint(by_key):
            return False
        self._steps[saga_id] = rows
        self._keys.update(by_key)
        self._unsealed.add(saga_id)
        return True

    @property
    def writes_inline(self) -> InlineWrite | None:
        """Return `write`, this store's `save` done inline (not for a subclass or an instance that changed `save`).

        Handed step rows unlinked, the store links them as it seals them (when the saga is first read); a row
        given linked is kept as it is.
        """
        return self.write if type(self).save is MemoryStore.save and "save" not in vars(self) else None

    async def save(
        self,
        saga: SagaRow | None,
        steps: Sequence[StepRow],
        *,
        owner: str | None = None,
        reseal: bool = True,
        lease: bool = True,
    ) -> None:
        """Keep the given rows (snapshots the caller no longer touches); with `owner`, only if it owns the saga."""
        self.write(saga, steps, owner, reseal, lease)

    def write(
        self,
        saga: SagaRow | None,
        steps: Sequence[StepRow],
        owner: str | None = None,
        reseal: bool = True,
        lease: bool = True,
    ) -> None:
        """Do what `save` does, in the calling code: it never pauses (the engine calls it when `writes_inline`)."""
        if self._closed:  # checked inline: a running saga saves at every step
            self._check_open()
        if owner is not None and self._wrote_steps(saga, steps, owner):
            pass  # the engine's write: its step rows written already (see _wrote_steps)
        else:
            self._write(saga, steps, owner)
        if saga is not None:
            if not lease and (stored := self._sagas.get(saga.saga_id)) is not None:
                saga.lease_expires_at = stored.lease_expires_at  # the stored lease stays
            self._sagas[saga.saga_id] = saga
            self._unsealed_sagas.add(saga.saga_id)  # sealed when first read (`reseal` only spares a seal)
        if self._keep is not None and saga is not None and saga.status.is_terminal:
            self._ended(saga)

    def _wrote_steps(self, saga: SagaRow | None, steps: Sequence[StepRow], owner: str) -> bool:
        """Check and write the step rows of an owner-conditional write of one stored saga, each row keeping its
        step's key or taking a key nobody holds; False, having written nothing, for any other (see `_write`)."""
        if saga is not None:
            saga_id = saga.saga_id
        elif steps:
            saga_id = steps[0].saga_id
        else:
            return False
        rows = self._steps.get(saga_id)
        if rows is None:
            return False
        keys = self._keys
        fresh: list[StepRow] | None = None  # rows new to the store
        for row in steps:
            old = rows.get(row.step_id)
            if old is None:
                if row.saga_id != saga_id or row.idempotency_key in keys:
                    return False
                if fresh is None:
                    fresh = [row]
                else:
                    fresh.append(row)
            elif old is row or old.idempotency_key != row.idempotency_key or row.saga_id != saga_id:
                return False
        stored = self._sagas.get(saga_id)
        if stored is None or stored.owner != owner:
            raise lease_lost(saga_id, owner, self.url)
        if self._cancels and saga_id in self._cancels and self._cancel_seen.get(saga_id) != owner:
            raise lease_lost(saga_id, owner, self.url)  # a cancel its owner has not taken in (see take_cancel)
        if fresh is not None and len(fresh) > 1 and len({row.idempotency_key for row in fresh}) != len(fresh):
            return False  # two new rows taking one key: refused by `_write`
        if steps:
            for row in steps:
                rows[row.step_id] = keys[row.idempotency_key] = row  # (a kept key: its holder's new snapshot)
            self._unsealed.add(saga_id)
        return True

    def _write(self, saga: SagaRow | None, steps: Sequence[StepRow], owner: str | None) -> None:
        """Check and write the step rows of any save (raising, having written nothing, on a refused one)."""
        if owner is not None:
            self._check_owner(saga, steps, owner)
        if steps:
            self._check_keys(steps)  # before anything is written: a refused save writes nothing
            self._put_steps(steps, unsealed=True)

    def _check_owner(self, saga: SagaRow | None, steps: Sequence[StepRow], owner: str) -> None:
        """Raise LeaseLostError unless the stored saga of the rows is owned by `owner`."""
        saga_id = saga.saga_id if saga is not None else steps[0].saga_id if steps else None
        if saga_id is None:
            return  # nothing to write
        for row in steps:
            if row.saga_id != saga_id:
                ids = {row.saga_id for row in steps} | ({saga.saga_id} if saga is not None else set())
                raise ValueError(f"an owner-conditional save writes the rows of one saga, not of {sorted(ids)}")
        stored = self._sagas.get(saga_id)
        if stored is None or stored.owner != owner:
            raise lease_lost(saga_id, owner, self.url)
        if self._cancels and saga_id in self._cancels and self._cancel_seen.get(saga_id) != owner:
            raise lease_lost(saga_id, owner, self.url)  # a cancel its owner has not taken in (see take_cancel)

    def _check_keys(self, steps: Sequence[StepRow]) -> None:
        """Raise StoreError if a row takes an idempotency key another step holds (in the store or the batch)."""
        keys = self._keys
        fresh = []
        for row in steps:
            holder = keys.get(row.idempotency_key)
            if holder is None:
                fresh.append(row.idempotency_key)
            elif holder.step_id != row.step_id or holder.saga_id != row.saga_id:
                self._check_batch(steps)  # raises, naming the holder as it always did
        # A key its own step holds cannot clash in the batch: another row taking it is refused above. Only keys new
        # to the store can clash, with each other, and distinct ones cannot: then the batch needs no bookkeeping.
        if len(fresh) > 1 and len(set(fresh)) != len(fresh):
            self._check_batch(steps)

    def _check_batch(self, steps: Sequence[StepRow]) -> None:
        """Check every row against the store and the rows before it in the batch; raise StoreError on a clash."""
        batch: dict[str, tuple[str, str]] = {}
        for row in steps:
            ident = (row.saga_id, row.step_id)
            held = self._keys.get(row.idempotency_key)
            holder = batch.get(row.idempotency_key) or (None if held is None else (held.saga_id, held.step_id))
            if holder is not None and holder != ident:
                raise StoreError(
                    f"step {row.step_id!r} of saga {row.saga_id!r} has idempotency key {row.idempotency_key!r}, "
                    f"which step {holder[1]!r} of saga {holder[0]!r} holds in {self.url}; idempotency keys are "
                    "unique across every step (a duplicate key?): nothing was written",
                    url=self.url,
                )
            batch[row.idempotency_key] = ident

    def _put_steps(self, steps: Sequence[StepRow], *, unsealed: bool = False) -> None:
        """Store the rows; `unsealed`: note those given unsealed, to seal them when their saga is read."""
        keys, by_saga = self._keys, self._steps
        saga_id, rows = None, None
        for row in steps:
            if row.saga_id != saga_id or rows is None:
                saga_id = row.saga_id
                rows = by_saga.get(saga_id)
                if rows is None:
                    rows = by_saga[saga_id] = {}
                if unsealed:
                    self._unsealed.add(saga_id)
            step_id = row.step_id
            old = rows.get(step_id)
            rows[step_id] = row
            if not unsealed and row.hash is None:
                self._imported.setdefault(saga_id, {})[step_id] = row  # never sealed here: reported unsealed
            if old is not None and old.idempotency_key != row.idempotency_key:
                keys.pop(old.idempotency_key, None)
            keys[row.idempotency_key] = row  # (a kept key: its holder's new snapshot)

    def _seal(self, saga_id: str) -> None:
        """Seal what of a saga was written unsealed and is still stored: its step rows (linked first) and its row
        (a dynamic saga's first chained: its head, `plan_hash`, over the calls stored)."""
        saga = self._sagas.get(saga_id)
        written = saga_id in self._unsealed or saga_id in self._unsealed_sagas
        if saga_id in self._unsealed:
            self._unsealed.discard(saga_id)
            stored = self._steps.get(saga_id, {})
            imported = self._imported.get(saga_id, {})
            rows = [row for row in stored.values() if row.hash is None and imported.get(row.step_id) is not row]
            if rows and saga is not None:
                self._sealing.link_and_seal(saga, rows, stored.values())
        if saga is not None and saga.kind == "dynamic" and written:
            head = chain_head(sorted(self._steps.get(saga_id, {}).values(), key=lambda row: row.seq))
            if head != saga.plan_hash:  # its calls were handed unchained (see `links_rows`)
                saga.plan_hash = head
                self._unsealed_sagas.add(saga_id)
        if saga_id in self._unsealed_sagas:
            self._unsealed_sagas.discard(saga_id)
            if saga is not None:
                self._sealing.saga(saga)

    def _snapshot(self, saga_id: str) -> tuple[SagaRow, list[StepRow]] | None:
        saga = self._sagas.get(saga_id)
        if saga is None:
            return None
        if saga_id in self._unsealed or saga_id in self._unsealed_sagas:
            self._seal(saga_id)
            saga = self._sagas[saga_id]
        steps = sorted((row.copy() for row in self._steps.get(saga_id, {}).values()), key=lambda r: r.seq)
        return saga.copy(), steps

    async def load_saga(self, saga_id: str) -> tuple[SagaRow, list[StepRow]] | None:
        """Return snapshots of a saga's rows, or None."""
        self._check_open()
        return self._snapshot(saga_id)

    async def claim_saga(self, saga_id: str, owner: str, lease_expires_at: datetime, now: datetime) -> bool:
        """Make `owner` the owner of a live saga nobody else holds; return whether it now does."""
        self._check_open()
        saga = self._sagas.get(saga_id)
        if saga is None or saga.status not in _LIVE:
            return False
        free = saga.owner in (None, owner) or saga.lease_expires_at is None or saga.lease_expires_at < now
        if free:
            self._sagas[saga_id] = replace(saga, owner=owner, lease_expires_at=lease_expires_at)
            self._cancel_seen.pop(saga_id, None)  # a new hold: a cancel is taken in anew
        return free

    async def change_saga(self, saga: SagaRow, *, status: SagaStatus, owner: str | None = None) -> bool:
        """Keep `saga` (a snapshot) only if the stored row is in `status` (and `owner`'s, if given); say if it did."""
        self._check_open()
        stored = self._sagas.get(saga.saga_id)
        if stored is None or stored.status is not status or stored.purged_at is not None:
            return False
        if owner is not None and stored.owner != owner:
            return False
        self._sagas[saga.saga_id] = saga
        self._unsealed_sagas.add(saga.saga_id)  # sealed when first read
        if saga.status is SagaStatus.QUEUED:
            self._started.pop(saga.saga_id, None)  # given back to its queue: not counted as started
        if self._keep is not None and saga.status.is_terminal:
            self._ended(saga)
        return True

    async def renew_leases(
        self, owner: str, saga_ids: Sequence[str], lease_expires_at: datetime, now: datetime
    ) -> set[str]:
        """Extend the leases `owner` holds; return the ids it still owns."""
        self._check_open()
        held = set()
        for saga_id in saga_ids:
            saga = self._sagas.get(saga_id)
            if saga is not None and saga.owner == owner and saga.status in _LIVE:
                self._sagas[saga_id] = replace(saga, lease_expires_at=lease_expires_at)
                held.add(saga_id)
        return held

    async def claim_expired(
        self, owner: str, lease_expires_at: datetime, now: datetime, limit: int = 100
    ) -> list[tuple[SagaRow, list[StepRow]]]:
        """Take over up to `limit` live sagas whose lease expired; return snapshots of them from before the claim."""
        self._check_open()
        claimed: list[tuple[SagaRow, list[StepRow]]] = []
        for saga in sorted(self._sagas.values(), key=lambda row: (row.created_at, row.saga_id)):
            if len(claimed) >= limit:
                break
            expired = saga.lease_expires_at is None or saga.lease_expires_at < now
            if saga.status not in _LIVE or not expired:
                continue
            snapshot = self._snapshot(saga.saga_id)  # as it was: its owner before the claim
            assert snapshot is not None
            self._sagas[saga.saga_id] = replace(saga, owner=owner, lease_expires_at=lease_expires_at)
            self._cancel_seen.pop(saga.saga_id, None)
            claimed.append(snapshot)
        return claimed

    # -- queues --------------------------------------------------------------------------------------------------

    async def enqueue(
        self, saga: SagaRow, steps: Sequence[StepRow], entry: QueueEntry
    ) -> tuple[SagaRow, list[StepRow]] | None:
        """Store a new QUEUED saga in `entry`'s queue; return what is stored if the id is taken."""
        existing = await self.create_saga(saga, steps)
        if existing is None or (existing[0].status is SagaStatus.QUEUED and saga.saga_id not in self._queued):
            self._queued[saga.saga_id] = entry
            for wake in list(self._wakers):
                wake(entry.queue)
        return existing

    @asynccontextmanager
    async def queue_wakeups(self, wake: Callable[[str], None]) -> AsyncIterator[bool]:
        """Call `wake(queue)` at each submit to this store while inside (yields True)."""
        self._wakers.append(wake)
        try:
            yield True
        finally:
            self._wakers.remove(wake)

    async def claim_queued(
        self,
        owner: str,
        lease_expires_at: datetime,
        now: datetime,
        queue: Queue,
        limit: int,
        fits: Callable[[SagaRow], bool] | None = None,
    ) -> list[tuple[SagaRow, list[StepRow]]]:
        """Start up to `limit` QUEUED sagas of `queue` within its limits (counted here); return snapshots of them."""
        self._check_open()
        if self._held_back(queue.name):  # an operator's pause or drain (API.md §19): nothing new starts
            return []
        mine = [(saga_id, entry) for saga_id, entry in self._queued.items() if entry.queue == queue.name]
        running: dict[str | None, int] = {}
        for saga_id, entry in mine:
            if self._sagas[saga_id].status in _LIVE:
                running[entry.key] = running.get(entry.key, 0) + 1
        allowed = queue_allowance(queue, sum(running.values()), limit)
        if queue.rate_limit is not None:
            since = now - timedelta(seconds=queue.rate_limit.per)
            recent = sum(1 for saga_id, _ in mine if self._started.get(saga_id, since) > since)
            allowed = min(allowed, queue.rate_limit.limit - recent)
        waiting = [
            (self._sagas[saga_id], entry)
            for saga_id, entry in mine
            if self._sagas[saga_id].status is SagaStatus.QUEUED
            and (entry.not_before is None or entry.not_before <= now)
        ]
        waiting.sort(key=lambda pair: (pair[1].priority, pair[0].created_at, pair[0].saga_id))
        claimed: list[tuple[SagaRow, list[StepRow]]] = []
        for saga, entry in waiting:
            if len(claimed) >= allowed:
                break
            if key_full(queue, entry.key, running) or (fits is not None and not fits(saga)):
                continue
            running[entry.key] = running.get(entry.key, 0) + 1
            started = replace(
                saga, status=SagaStatus.RUNNING, owner=owner, lease_expires_at=lease_expires_at, updated_at=now
            )
            self._sealing.saga(started)
            self._sagas[saga.saga_id] = started
            self._started[saga.saga_id] = now
            snapshot = self._snapshot(saga.saga_id)
            assert snapshot is not None
            claimed.append(snapshot)
        return claimed

    async def queue_depth(self, queue: str) -> int:
        """Return how many sagas wait QUEUED in `queue`."""
        self._check_open()
        return sum(
            1
            for saga_id, entry in self._queued.items()
            if entry.queue == queue and self._sagas[saga_id].status is SagaStatus.QUEUED
        )

    async def request_cancel(self, saga_id: str, reason: str) -> bool:
        """Record a request to cancel a live or waiting saga, once; return whether it did."""
        self._check_open()
        saga = self._sagas.get(saga_id)
        if saga is None or saga.status not in _CANCELLABLE or saga_id in self._cancels:
            return False
        self._cancels[saga_id] = reason
        await self.wake_saga(saga_id, now())  # a WAITING one is due at once, to compensate
        await self.notify_workers()  # the workers that can act on it hear of it at once
        return True

    async def wake_saga(self, saga_id: str, at: datetime) -> bool:
        """Make a WAITING saga due at `at`; return whether it waits."""
        self._check_open()
        saga = self._sagas.get(saga_id)
        if saga is None or saga.status is not SagaStatus.WAITING:
            return False
        self._woken[saga_id] = min(at, self._woken.get(saga_id, at))
        return True

    async def note_waiting(self, saga_id: str, note: dict[str, Any]) -> bool:
        """Note why a saga nobody drives does not move (unsealed); return whether it did."""
        self._check_open()
        saga = self._sagas.get(saga_id)
        if saga is None or saga.owner is not None or saga.status not in _UNDRIVEN:
            return False
        self._sagas[saga_id] = replace(saga, waiting_for=dict(note))
        return True

    async def cancel_request(self, saga_id: str) -> str | None:
        """Return the reason of the saga's cancel request, or None."""
        return self._cancels.get(saga_id)

    async def take_cancel(self, saga_id: str, owner: str) -> str | None:
        """Take in the cancel request of a saga `owner` holds (its writes pass again); return it, or None."""
        self._check_open()
        saga = self._sagas.get(saga_id)
        request = self._cancels.get(saga_id)
        if request is None or saga is None or saga.owner != owner:
            return None
        self._cancel_seen[saga_id] = owner
        return request

    # -- approvals -----------------------------------------------------------------------------------------------

    def _approval_rows(self, saga_id: str) -> list[ApprovalRow]:
        return sorted((row.copy() for row in self._approvals.get(saga_id, {}).values()), key=lambda r: r.seq)

    async def request_approvals(self, rows: Sequence[ApprovalRow], *, seal: bool = True) -> list[str]:
        """Record the requests not recorded yet; return the step ids it recorded."""
        self._check_open()
        added = []
        if seal:
            self._sealing.approvals(rows)
        for row in rows:
            held = self._approvals.setdefault(row.saga_id, {})
            if row.step_id not in held:
                held[row.step_id] = row.copy()
                added.append(row.step_id)
        return added

    async def load_approvals(self, saga_id: str) -> list[ApprovalRow]:
        """Return a saga's approval rows, in step order."""
        self._check_open()
        return self._approval_rows(saga_id)

    async def decide_approval(self, row: ApprovalRow, *, by_deadline: bool = False) -> bool:
        """Record the decision of an undecided request; return whether it did."""
        self._check_open()
        self._sealing.approvals([row])
        stored = self._approvals.get(row.saga_id, {}).get(row.step_id)
        if stored is None or stored.decision is not None or row.decided_at is None:
            return False
        expired = stored.deadline is not None and stored.deadline <= row.decided_at
        if expired is not by_deadline:
            return False
        stored.decision, stored.decided_by, stored.decided_at = row.decision, row.decided_by, row.decided_at
        stored.note, stored.hash = row.note, row.hash
        await self.wake_saga(row.saga_id, row.decided_at or now())  # due at once (if it waits)
        return True

    async def list_approvals(self, *, due: datetime | None = None, limit: int = 100) -> list[ApprovalRow]:
        """Return undecided requests of WAITING sagas, oldest first (with `due`: those past their deadline)."""
        self._check_open()
        found = [
            row.copy()
            for saga_id, held in self._approvals.items()
            if (saga := self._sagas.get(saga_id)) is not None and saga.status is SagaStatus.WAITING
            for row in held.values()
            if row.decision is None and (due is None or (row.deadline is not None and row.deadline <= due))
        ]
        found.sort(key=lambda r: (r.requested_at, r.saga_id, r.seq))
        return found[:limit]

    async def waiting_sagas(self, now: datetime, limit: int = 100, offset: int = 0) -> list[str]:
        """Return WAITING plan (or saga function) sagas whose requests are all decided, unowned or lease expired."""
        self._check_open()
        ready = [
            saga
            for saga in self._sagas.values()
            if saga.status is SagaStatus.WAITING
            and (saga.kind == "plan" or saga.plan is not None)  # a saga function's saga resumes too
            and _due(saga, self._woken.get(saga.saga_id), now)
            and (saga.owner is None or saga.lease_expires_at is None or saga.lease_expires_at < now)
            and all(row.decision is not None for row in self._approvals.get(saga.saga_id, {}).values())
        ]
        ready.sort(key=lambda saga: (saga.created_at, saga.saga_id))
        return [saga.saga_id for saga in ready[offset : offset + limit]]

    async def due_work(self, now: datetime, queues: Sequence[str]) -> frozenset[DueWork]:
        """Tell which of an idle worker's looks would find something now."""
        self._check_open()
        found: set[DueWork] = set()
        names = set(queues)
        if any(
            entry.queue in names
            and (entry.not_before is None or entry.not_before <= now)
            and self._sagas[saga_id].status is SagaStatus.QUEUED
            for saga_id, entry in self._queued.items()
        ):
            found.add("queued")
        if (await self.due_schedules(now, 1))[1]:
            found.add("schedules")
        if await self.list_approvals(due=now, limit=1):
            found.add("approvals")
        if await self.waiting_sagas(now, 1):
            found.add("waiting")
        if any(
            saga.status in _LIVE and (saga.lease_expires_at is None or saga.lease_expires_at < now)
            for saga in self._sagas.values()
        ):
            found.add("orphans")
        return frozenset(found)

    async def claim_waiting(
        self, saga_id: str, owner: str, lease_expires_at: datetime, now: datetime
    ) -> tuple[SagaRow, list[StepRow]] | None:
        """Give a WAITING saga nobody else holds to `owner`; return its rows as claimed, else None."""
        self._check_open()
        saga = self._sagas.get(saga_id)
        if saga is None or saga.status is not SagaStatus.WAITING:
            return None
        if not (saga.owner in (None, owner) or saga.lease_expires_at is None or saga.lease_expires_at < now):
            return None
        self._sagas[saga_id] = replace(saga, owner=owner, lease_expires_at=lease_expires_at, updated_at=now)
        self._woken.pop(saga_id, None)  # taken in: a message, decision or cancel stored from now on wakes it again
        return self._snapshot(saga_id)

    async def list_rows(
        self,
        status: SagaStatus | None,
        limit: int,
        offset: int,
        *,
        owner: str | None = None,
        reason: EndReason | None = None,
    ) -> list[tuple[SagaRow, int]]:
        """Return saga rows, newest first, each with its count of step rows."""
        self._check_open()
        rows = [
            row
            for row in self._sagas.values()
            if (status is None or row.status is status)
            and (owner is None or row.owner == owner)
            and (reason is None or (row.status.is_terminal and end_of(row.status, (), row.history)[0] == reason))
        ]
        rows.sort(key=lambda row: (row.created_at, row.saga_id), reverse=True)
        page = rows[offset : offset + limit]
        for row in page:
            if row.saga_id in self._unsealed_sagas:
                self._seal(row.saga_id)
        return [(self._sagas[row.saga_id].copy(), len(self._steps.get(row.saga_id, {}))) for row in page]

    async def insert_rows(self, saga: SagaRow, steps: Sequence[StepRow]) -> tuple[SagaRow, list[StepRow]] | None:
        """Insert rows as given (seals kept) unless the id is taken; return what is stored if it is."""
        self._check_open()
        existing = self._snapshot(saga.saga_id)
        if existing is not None:
            return existing
        self._check_keys(steps)
        self._sagas[saga.saga_id] = saga
        self._put_steps(steps)
        return None

    async def close(self) -> None:
        """Forget everything; the store cannot be used afterwards."""
        self._closed = True
        self._sagas.clear()
        self._steps.clear()
        self._keys.clear()
        self._approvals.clear()
        self._unsealed.clear()
        self._unsealed_sagas.clear()
        self._imported.clear()
        self._holds.clear()
        self._messages.clear()
        self._woken.clear()
        self._finished.clear()


def _due(saga: SagaRow, woken: datetime | None, at: datetime) -> bool:
    """Tell whether a WAITING saga is due at `at`: made due (a message, a decision, a cancel), or by its wait's end."""
    if woken is not None and woken <= at:
        return True
    wake = wake_time(saga)
    if wake is not None and wake <= at:
        return True
    # A saga waiting since before wake times (or claimed, and let go by a worker that died): looked at once.
    return saga.owner is not None and saga.lease_expires_at is not None and saga.lease_expires_at < at
