"""A store of your own: the journal's primitives over plain dicts, and a saga run on it.

A store implements `SagaStore`'s primitives only (create, save, load, insert, list, claim, change, renew, claim
expired) and subclasses `StoreBase` for get, verify, export, import and list. It declares no capability: queues,
cancels, waits, messages, retention, schedules and due work are what a store adds when it declares them.

Run it: `python -m saga_runtime.examples dict_store`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from saga_runtime import LeaseLostError, SagaExecutor, StoreError, ToolRegistry
from saga_runtime.stores import EndReason, SagaRow, SagaStatus, Sealing, StepRow, StoreBase, end_of, now

LIVE = (SagaStatus.RUNNING, SagaStatus.COMPENSATING)
Rows = tuple[SagaRow, list[StepRow]]


class DictStore(StoreBase):
    """Sagas in dicts: each method one atomic step (nothing here awaits between its check and its write)."""

    url, retry_for, signing_key, writes_inline = "dict://", 0.0, None, None

    def __init__(self) -> None:
        self.sagas: dict[str, SagaRow] = {}
        self.steps: dict[str, dict[str, StepRow]] = {}
        self.keys: dict[str, tuple[str, str]] = {}  # idempotency key -> (saga id, step id): unique
        self.sealing, self.sealed_since, self.closed = Sealing(), now(), False

    def _open(self) -> None:
        if self.closed:
            raise StoreError("the dict store is closed; make a new one", url=self.url)

    def _put(self, steps: Sequence[StepRow]) -> None:
        """Store step rows, each idempotency key held by one step; raise StoreError, writing nothing, if not."""
        batch: dict[str, tuple[str, str]] = {}
        for row in steps:
            holder = batch.get(row.idempotency_key) or self.keys.get(row.idempotency_key)
            if holder not in (None, (row.saga_id, row.step_id)):
                raise StoreError(f"idempotency key {row.idempotency_key!r} is held by step {holder}", url=self.url)
            batch[row.idempotency_key] = (row.saga_id, row.step_id)
        for row in steps:
            old = self.steps.setdefault(row.saga_id, {}).get(row.step_id)
            if old is not None:
                self.keys.pop(old.idempotency_key, None)
            self.steps[row.saga_id][row.step_id] = row.copy()
        self.keys.update(batch)

    async def load_saga(self, saga_id: str) -> Rows | None:
        self._open()
        saga = self.sagas.get(saga_id)
        if saga is None:
            return None
        return saga.copy(), sorted((r.copy() for r in self.steps.get(saga_id, {}).values()), key=lambda r: r.seq)

    async def insert_rows(self, saga: SagaRow, steps: Sequence[StepRow]) -> Rows | None:
        self._open()
        if saga.saga_id in self.sagas:
            return await self.load_saga(saga.saga_id)
        self._put(steps)
        self.sagas[saga.saga_id] = saga.copy()
        return None

    async def create_saga(self, saga: SagaRow, steps: Sequence[StepRow]) -> Rows | None:
        self.sealing.saga(saga)
        self.sealing.steps(steps)
        return await self.insert_rows(saga, steps)

    async def save(
        self,
        saga: SagaRow | None,
        steps: Sequence[StepRow],
        *,
        owner: str | None = None,
        reseal: bool = True,
        lease: bool = True,
    ) -> None:
        self._open()
        ids = {row.saga_id for row in steps} | ({saga.saga_id} if saga is not None else set())
        if owner is not None and len(ids) > 1:
            raise ValueError(f"an owner-conditional save writes the rows of one saga, not of {sorted(ids)}")
        for saga_id in ids if owner is not None else ():
            if saga_id not in self.sagas or self.sagas[saga_id].owner != owner:
                raise LeaseLostError(f"saga {saga_id!r} is owned by another executor, not {owner!r}", saga_id=saga_id)
        self.sealing.steps(steps)
        self._put(steps)
        if saga is not None:
            self.sealing.saga(saga, reseal=reseal)
            stored = self.sagas.get(saga.saga_id)
            if lease or stored is None:
                self.sagas[saga.saga_id] = saga.copy()
            else:  # a progress write: the stored lease stays as it is
                self.sagas[saga.saga_id] = replace(saga.copy(), lease_expires_at=stored.lease_expires_at)

    async def list_rows(
        self,
        status: SagaStatus | None,
        limit: int,
        offset: int,
        *,
        owner: str | None = None,
        reason: EndReason | None = None,
    ) -> list[tuple[SagaRow, int]]:
        self._open()
        rows = [
            saga
            for saga in sorted(self.sagas.values(), key=lambda s: (s.created_at, s.saga_id), reverse=True)
            if status in (None, saga.status)
            and owner in (None, saga.owner)
            and (reason is None or (saga.status.is_terminal and end_of(saga.status, (), saga.history)[0] == reason))
        ]
        return [(saga.copy(), len(self.steps.get(saga.saga_id, {}))) for saga in rows[offset : offset + limit]]

    def _lease(self, saga_id: str, owner: str, expires: datetime) -> None:
        self.sagas[saga_id] = replace(self.sagas[saga_id], owner=owner, lease_expires_at=expires)

    async def claim_saga(self, saga_id: str, owner: str, lease_expires_at: datetime, now: datetime) -> bool:
        self._open()
        saga = self.sagas.get(saga_id)
        if saga is None or saga.status not in LIVE:
            return False
        if saga.owner not in (None, owner) and saga.lease_expires_at is not None and saga.lease_expires_at >= now:
            return False
        self._lease(saga_id, owner, lease_expires_at)
        return True

    async def change_saga(self, saga: SagaRow, *, status: SagaStatus, owner: str | None = None) -> bool:
        self._open()
        stored = self.sagas.get(saga.saga_id)
        if stored is None or stored.status is not status or stored.purged_at is not None:
            return False
        if owner is not None and stored.owner != owner:
            return False
        self.sealing.saga(saga)
        self.sagas[saga.saga_id] = saga.copy()
        return True

    async def renew_leases(
        self, owner: str, saga_ids: Sequence[str], lease_expires_at: datetime, now: datetime
    ) -> set[str]:
        self._open()
        held = {
            i for i in saga_ids if i in self.sagas and self.sagas[i].owner == owner and self.sagas[i].status in LIVE
        }
        for saga_id in held:
            self._lease(saga_id, owner, lease_expires_at)
        return held

    async def claim_expired(
        self, owner: str, lease_expires_at: datetime, now: datetime, limit: int = 100
    ) -> list[Rows]:
        self._open()
        claimed: list[Rows | None] = []
        for saga in sorted(self.sagas.values(), key=lambda s: (s.created_at, s.saga_id)):
            expired = saga.lease_expires_at is None or saga.lease_expires_at < now
            if len(claimed) < limit and saga.status in LIVE and expired:
                claimed.append(await self.load_saga(saga.saga_id))
                self._lease(saga.saga_id, owner, lease_expires_at)
        return [rows for rows in claimed if rows is not None]

    async def close(self) -> None:
        self.closed = True


async def main() -> None:
    registry = ToolRegistry()

    @registry.tool
    class Greet:
        async def execute(self, name: str) -> str:
            return f"hello, {name}"

    store = DictStore()
    result = await SagaExecutor(registry, store=store).run([{"tool": "Greet", "args": {"name": "store"}}], saga_id="hi")
    print(f"saga {result.saga_id}: {result.status.value}, {result.steps[0].result!r}")
    print(f"verified: {bool(await store.verify_saga('hi'))}, listed: {[s.saga_id for s in await store.list_sagas()]}")
    await store.close()


if __name__ == "__main__":
    asyncio.run(main())
