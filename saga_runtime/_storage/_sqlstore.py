"""SQLStore: the SagaStore contract written once, for every database, over the database's Dialect object.

The dialect (saga_runtime._storage._dialect) brings the connections, statements, codec, batch writer and error
table; no class extends this one. Writes (`save`, `create_saga`, `import_saga`) go through a group commit
(saga_runtime._storage._batch): concurrent writes share one transaction, each caller returning once its own rows
are durable; a write refused (a stale owner, a duplicate idempotency key, a taken id) fails alone. Each dialect
writes a batch in as few round trips as it can (`Dialect.write_batch`).

Every operation is one transaction, safe to run again: `create_saga` inserts or does nothing, `save` upserts,
claims are conditional. So an operation that lost its connection (`StoreConnectionError`: the server restarted,
a connection was killed) is retried on a fresh connection, with exponential backoff, for up to `retry_for`
seconds (`open_store(url, retry_for=30.0)`, the default; 0 turns retries off). Busy or deadlocked transactions
(`StoreBusyError`) and refused values are not retried here: they are the caller's to handle.
"""

from __future__ import annotations

import logging
import math
import random
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import anyio

from saga_runtime._exceptions import StoreBusyError, StoreConnectionError, StoreError
from saga_runtime._records import (
    ApprovalRow,
    DueWork,
    EndReason,
    Queue,
    QueueEntry,
    SagaRow,
    SagaStatus,
    StepRow,
    now,
)
from saga_runtime._storage._approval_sql import approval_params, approval_row, due_work_sql
from saga_runtime._storage._base import EVERY_CAPABILITY, key_full, queue_allowance, same_rows
from saga_runtime._storage._batch import Batcher, Outcome, Write, lease_lost
from saga_runtime._storage._dialect import Dialect
from saga_runtime._storage._queue_sql import SQLQueueControl, held_back
from saga_runtime._storage._reading import StoreBase
from saga_runtime._storage._sealing import Sealing
from saga_runtime._storage._sql import (
    LIVE_STATUSES,
    MIGRATIONS,
    SAGA_COLUMNS,
    SEALED_SAGAS_VERSION,
    schema_too_new,
    version_table_ddl,
)
from saga_runtime._storage._sql_retention import SQLRetention
from saga_runtime._storage._sql_schedules import SQLSchedules
from saga_runtime._storage._sqlwrite import Transaction, write_of

__all__ = ["DEFAULT_RETRY_FOR", "Dialect", "SQLStore", "Transaction", "retry_for_option"]

logger = logging.getLogger("saga_runtime")

# Ids per `IN (...)` list: well under every driver's limit on parameters of one statement.
_IN_CHUNK = 500
_DUE_WORK: tuple[DueWork, ...] = ("queued", "schedules", "approvals", "waiting", "orphans")  # due_work's columns
# Queued sagas a claim passes over at most (refused by the worker, or of a key filled by the claim itself).
_PASS_OVER_MAX = 1000
_PAGE_MIN = 64  # sagas a page past them reads at least
# Sagas that may be left undriven (no owner), of which a worker notes why they do not move.
_UNDRIVEN = (*LIVE_STATUSES, SagaStatus.QUEUED.value, SagaStatus.WAITING.value)
# Tries of an operator's conditional change that the database broke off as a deadlock's victim.
_BUSY_TRIES = 4

# Retries after a lost connection: the first after about 50 ms, doubling up to 2 s between tries, each wait
# jittered (50-100 %) so the workers of a restarted server do not all reconnect at the same instant.
DEFAULT_RETRY_FOR = 30.0
_FIRST_DELAY = 0.05
_MAX_DELAY = 2.0
_CLEANUP_SECONDS = 5.0

_T = TypeVar("_T")
# Outcomes read on every write, as module constants: Python 3.11 reads an enum class's attribute through
# EnumType.__getattr__'s slow hook, a module global at a fraction of its cost.
_WRITTEN, _LOST = Outcome.WRITTEN, Outcome.LOST


def retry_for_option(value: float | None, query: dict[str, str]) -> float:
    """Return the `retry_for` seconds of a store: the keyword, else the URL's query parameter, else the default.

    Removes `retry_for` from `query` either way; raise ValueError unless it is a finite number >= 0.
    """
    raw = query.pop("retry_for", None)
    seconds = float(value if value is not None else raw if raw is not None else DEFAULT_RETRY_FOR)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"retry_for must be a number of seconds >= 0 (0: no retries), not {seconds!r}")
    return seconds


def url_option(value: Any, query: dict[str, str], name: str, default: Any) -> Any:
    """Return a store option: the keyword `value`, else the URL's query parameter `name`, else `default`.

    Removes `name` from `query` either way, so what is left there is what the store does not know.
    """
    raw = query.pop(name, None)
    return value if value is not None else raw if raw is not None else default


def pool_sizes(min_size: int | None, max_size: int | None, query: dict[str, str]) -> tuple[int, int]:
    """Return a pool's (min_size, max_size) from keywords or the URL (defaults 1 and 10); refuse bad sizes."""
    low = int(url_option(min_size, query, "min_size", 1))
    high = int(url_option(max_size, query, "max_size", 10))
    if not 0 <= low <= high or high < 1:
        raise ValueError(f"need 0 <= min_size <= max_size and max_size >= 1, got {low} and {high}")
    return low, high


def _storable(text: str) -> bool:
    """Tell whether a string can be sent to every database: no NUL, no lone surrogate."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class _Start:
    """What a claim writes on the sagas it starts: owner, lease, the worker's time, and the claim's clock."""

    owner: str
    lease: datetime
    now: datetime
    clock: datetime


class SQLStore(StoreBase, SQLRetention, SQLSchedules, SQLQueueControl):
    """A SagaStore on a SQL database; its dialect brings the driver, connections, statements and error table."""

    #: Queues, cancels, waits, messages, retention, schedules and due work, on every database alike.
    capabilities = EVERY_CAPABILITY

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._url = dialect.url
        self._queries = dialect.queries
        self._approval_queries = dialect.approval_queries
        self._due_sql: dict[int, str] = {}  # due_work's query by the number of queues it looks in
        self._codec = dialect.codec
        self._closed = False
        self._retry_for = dialect.retry_for
        self._sealing = Sealing()
        self._outage = dialect.outage
        # Group commit: up to `writers` batches of writes at once.
        self._batcher = Batcher(self._flush, slots=dialect.writers, alone=self._flush_once)

    @classmethod
    async def open(cls, dialect: Dialect) -> SQLStore:
        """Return a store on a connected `dialect`, its schema brought up to date (closed again if that fails)."""
        store = cls(dialect)
        try:
            await store._migrate()
        except BaseException:
            with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
                await store.close()
            raise
        return store

    @property
    def dialect(self) -> Dialect:
        """Return the store's dialect: its database's connections, statements, codec and error table."""
        return self._dialect

    def _transaction(self, *, begin: bool) -> AbstractAsyncContextManager[Transaction]:
        return self._dialect.transaction(begin=begin)

    # -- shared ----------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Return the store's URL, password removed."""
        return self._url

    # The hash chain's key; open_store(url, signing_key=...) sets it once the store is open.
    _signing_key: bytes | None = None

    @property
    def signing_key(self) -> bytes | None:
        """Return the key records are signed with, or None."""
        return self._signing_key

    def use_signing_key(self, key: bytes | None) -> None:
        """Sign (and verify) saga records with `key` (HMAC-SHA-256) from now on."""
        self._signing_key = self._sealing.key = key

    # When the database began sealing saga rows (schema version 3 applied); read at open.
    _sealed_since: datetime | None = None

    @property
    def sealed_since(self) -> datetime | None:
        """Return when the database began sealing saga rows (schema version 3), or None."""
        return self._sealed_since

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._dialect.name} {self._url}{' (closed)' if self._closed else ''}>"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the store {self._url} is closed; open a new one with open_store()", url=self._url)

    @property
    def writes_inline(self) -> None:
        """Return None: a database write pauses (its commit is awaited)."""
        return None

    @property
    def retry_for(self) -> float:
        """Return the seconds an operation that lost its connection is retried for (0: not retried)."""
        return self._retry_for

    async def _retrying(
        self,
        what: str,
        operation: Callable[[], Awaitable[_T]],
        *,
        failed: tuple[StoreConnectionError, float] | None = None,
    ) -> _T:
        """Run `operation` (one whole transaction); run it again on a fresh connection while it loses its own.

        Only StoreConnectionError is retried, with exponential backoff, until `retry_for` seconds have passed
        since the first try; then the last error is raised. Cancellation goes through at once (a sleep).
        `failed`: the first try was made already (a caller's inlined fast path), and lost its connection with
        this error, having started at this `time.monotonic()`.
        """
        started = time.monotonic() if failed is None else failed[1]
        retries = 0
        while True:
            try:
                if failed is not None:
                    exc, failed = failed[0], None
                    raise exc
                self._check_open()
                result = await operation()
            except StoreConnectionError as exc:
                elapsed = time.monotonic() - started
                remaining = self._retry_for - elapsed
                if remaining <= 0:
                    if retries:
                        self._outage.gave_up()
                        exc.add_note(
                            f"saga_runtime gave up after {retries} retries over {elapsed:.1f}s "
                            f"(retry_for={self._retry_for:g}s)"
                        )
                    raise
                delay = min(remaining, min(_MAX_DELAY, _FIRST_DELAY * 2**retries) * random.uniform(0.5, 1.0))
                retries += 1
                # One WARNING when the outage starts, one when it ends; each retry at DEBUG (the URL, password hidden).
                self._outage.retry(what, exc, retries, delay)
                await anyio.sleep(delay)
            else:
                if self._outage.down:
                    self._outage.answered()
                return result

    async def _migrate(self) -> int:
        """Create the schema or bring it up to SCHEMA_VERSION in place; return the version found."""
        q = self._queries
        async with self._dialect.schema_transaction() as tx:
            exists = (await tx.fetch(q.table_exists, ("schema_version",)))[0][0]
            found = 0
            if exists:
                found = int((await tx.fetch(q.read_version))[0][0] or 0)
            else:
                await tx.execute(version_table_ddl(self._dialect.flavour))
            latest = MIGRATIONS[-1].version
            if found > latest:
                raise schema_too_new(found, latest, self._url)
            for migration in MIGRATIONS:
                if migration.version > found:
                    for statement in migration.statements(self._dialect.flavour):
                        await tx.execute(statement)
                    await tx.execute(
                        q.record_version,
                        (migration.version, migration.description, self._codec.time_in(now())),
                    )
            applied = await tx.fetch(q.sealed_since, (SEALED_SAGAS_VERSION,))
            self._sealed_since = self._codec.time_out(applied[0][0]) if applied else None
        return found

    async def schema_version(self) -> int:
        """Return the schema version recorded in the database."""
        return await self._retrying("schema_version", self._schema_version_once)

    async def _schema_version_once(self) -> int:
        async with self._transaction(begin=False) as tx:
            return int((await tx.fetch(self._queries.read_version))[0][0] or 0)

    async def _read(self, tx: Transaction, saga_id: str, *, lock: bool) -> tuple[SagaRow, list[StepRow]] | None:
        sql = self._queries.load + (self._queries.lock_suffix if lock else "")
        return self._codec.rows_of_load(await tx.fetch(sql, (saga_id,)))

    # -- writes: every one goes through the group commit ------------------------------------------------------

    async def _flush(self, writes: Sequence[Write]) -> Sequence[Outcome | Exception]:
        """Write one batch, then, if it failed for one write's sake, each write alone (each gets its own answer)."""
        try:
            return await self._flush_once(writes)
        except Exception as exc:
            if len(writes) == 1 or self._shared_failure(exc):
                raise
        outcomes: list[Outcome | Exception] = []
        for write in writes:
            if write.future is not None and write.future.done():  # its caller left: not written, and nobody asks
                outcomes.append(Outcome.WRITTEN)
                continue
            try:
                outcomes.extend(await self._flush_once([write]))
            except Exception as exc:
                outcomes.append(exc)
        return outcomes

    async def _flush_once(self, writes: Sequence[Write]) -> Sequence[Outcome | Exception]:
        """Write one batch (one transaction), retried on a fresh connection while the connection is lost.

        The first try is `_retrying`'s, inlined: the hot path of every write, one coroutine instead of three. A save
        written alone repeats this first try in `save` itself (no coroutine of its own): a change here goes there too.
        """
        write_batch = self._write_batch
        started = time.monotonic()
        self._check_open()
        for write in writes:
            write.tries += 1
        try:
            outcomes = await write_batch(writes)
        except StoreConnectionError as exc:
            failed = (exc, started)
        else:
            if self._outage.down:
                self._outage.answered()
            return outcomes

        what = writes[0].what if len(writes) == 1 else " and ".join(sorted({write.what for write in writes}))
        return await self._retrying(what, lambda: self._again(writes), failed=failed)

    def _again(self, writes: Sequence[Write]) -> Awaitable[Sequence[Outcome | Exception]]:
        """Return another try of a batch's write (after a lost connection), counted in its writes' tries."""
        for write in writes:
            write.tries += 1
        return self._write_batch(writes)

    def _shared_failure(self, exc: Exception) -> bool:
        """Tell whether a batch's error concerns every write of it (else each is written alone to find out)."""
        if isinstance(exc, StoreConnectionError) or self._closed:
            return True
        own = self._dialect.write_errors
        return own is not None and not (isinstance(exc, own) or isinstance(exc.__cause__, own))

    def _closed_error(self) -> StoreError:
        return StoreError(
            f"the store {self._url} was closed before this write was committed; open a new one with open_store()",
            url=self._url,
        )

    def _write_batch(self, writes: Sequence[Write]) -> Awaitable[Sequence[Outcome | Exception]]:
        """Return the dialect's write of a batch (a plain call, not a coroutine of its own: the tests' seam)."""
        return self._dialect.write_batch(writes)

    async def _insert(
        self, saga: SagaRow, steps: Sequence[StepRow], what: str = "create_saga"
    ) -> tuple[SagaRow, list[StepRow]] | None:
        """Insert a saga and its steps unless the id is taken; return what is stored under it if it is.

        Retried on a lost connection. A retry finding exactly these rows stored returns None: they are this
        call's own, committed by a try whose answer the connection took with it.
        """
        if what != "import_saga":  # an import keeps the seals it was exported with
            self._sealing.saga(saga)
            self._sealing.steps(steps)
        write = write_of(self._codec, what, saga, steps, create=True)
        assert write is not None
        if await self._batcher.submit(write) is _WRITTEN:
            return None
        existing = await self._retrying(what, lambda: self._load_once(saga.saga_id))
        if existing is None:  # pragma: no cover - the database said the id was taken, and sagas are never deleted
            raise StoreError(f"saga {saga.saga_id!r} is both taken and absent in {self._url}", url=self._url)
        if write.tries > 1 and same_rows(existing, (saga, steps)):
            return None
        return existing

    async def create_saga(self, saga: SagaRow, steps: Sequence[StepRow]) -> tuple[SagaRow, list[StepRow]] | None:
        """Insert a new saga with its first step rows, atomically; return the existing saga if the id is taken.

        Retried after a lost connection; a retry finding exactly these rows (the lost try's commit) returns None.
        """
        self._check_open()
        return await self._insert(saga, steps)

    async def save(
        self,
        saga: SagaRow | None,
        steps: Sequence[StepRow],
        *,
        owner: str | None = None,
        reseal: bool = True,
        lease: bool = True,
    ) -> None:
        """Write the saga row (if given) and upsert the step rows in one commit; return once it is durable.

        With `owner`, write only if the stored saga's owner is `owner`, checked in the same transaction (the row
        locked); else write nothing and raise LeaseLostError. With `lease` False too, the stored lease stays.
        Concurrent saves share commits (group commit).
        """
        if self._closed:
            self._check_open()
        self._sealing.steps(steps)
        if saga is not None:
            self._sealing.saga(saga, reseal=reseal)
        write = write_of(self._codec, "save", saga, steps, owner=owner, lease=lease)
        if write is None:
            return
        batcher = self._batcher
        if batcher.alone(write):
            # Nothing else is being written: `submit` and `_flush_once` written out (two coroutines fewer on every
            # write of a saga written alone, the hot path), the first try here and the retries `_retrying`'s.
            started = time.monotonic()
            write.tries += 1
            try:
                try:
                    outcome: Outcome | Exception = (await self._write_batch((write,)))[0]
                except StoreConnectionError as exc:
                    outcome = (await self._retrying("save", lambda: self._again((write,)), failed=(exc, started)))[0]
                else:
                    if self._outage.down:
                        self._outage.answered()
            finally:
                batcher.alone_done(write)
            if isinstance(outcome, Exception):
                raise outcome
        else:
            outcome = await batcher.submit(write)
        if outcome is _LOST:
            if write.tries > 1 and await self._stored_as(saga, steps):
                return  # a lost try had committed it (a release or a park changes the owner it checks)
            raise lease_lost(write.saga_id, owner, self._url)

    async def _stored_as(self, saga: SagaRow | None, steps: Sequence[StepRow]) -> bool:
        """Tell whether the store holds exactly these rows (what a retried write's lost try may have committed)."""
        saga_id = saga.saga_id if saga is not None else steps[0].saga_id if steps else None
        stored = None if saga_id is None else await self.load_saga(saga_id)
        if stored is None:
            return False
        by_id = {row.step_id: row for row in stored[1]}
        return (saga is None or stored[0] == saga) and all(by_id.get(row.step_id) == row for row in steps)

    async def _load_once(self, saga_id: str) -> tuple[SagaRow, list[StepRow]] | None:
        async with self._transaction(begin=False) as tx:
            return await self._read(tx, saga_id, lock=False)

    async def load_saga(self, saga_id: str) -> tuple[SagaRow, list[StepRow]] | None:
        """Return a saga's row and its step rows (ordered by seq), or None if it is not stored."""
        self._check_open()
        if not _storable(saga_id):
            return None  # nothing is stored under an id no store can hold (the driver would refuse to send it)
        return await self._retrying("load_saga", lambda: self._load_once(saga_id))

    # -- leases ----------------------------------------------------------------------------------------------

    async def claim_saga(self, saga_id: str, owner: str, lease_expires_at: datetime, now: datetime) -> bool:
        """Make `owner` the owner of a live saga if nobody else holds it; atomic; return whether it now does.

        A saga is free when it is RUNNING or COMPENSATING and unowned, owned by `owner` already, or its lease
        expired before `now` (no lease counts as expired); a finished or PARKED saga never is. One conditional
        UPDATE, so two claimers never both win; retried after a lost connection, it still answers True if the
        lost try had won (the saga is then `owner`'s own).
        """
        self._check_open()
        q, codec = self._queries, self._codec
        params = (owner, codec.lease_in(lease_expires_at, now), saga_id, *LIVE_STATUSES, owner, *codec.now_in(now))

        async def claim() -> bool:
            async with self._transaction(begin=False) as tx:
                if await tx.execute(q.claim, params) == 1:
                    return True
                if not self._dialect.counts_changed_rows:
                    return False
                # 0 also when `owner` held it already and rewrote the same lease.
                return int((await tx.fetch(q.owns, (saga_id, owner, *LIVE_STATUSES)))[0][0]) == 1

        return await self._retrying("claim_saga", claim)

    async def change_saga(self, saga: SagaRow, *, status: SagaStatus, owner: str | None = None) -> bool:
        """Write `saga` (re-sealed) only if the stored row is in `status` (and `owner`'s, if given); say if it did.

        The row is read under a lock, so nobody writes it between the check and the write. Retried after a lost
        connection, a try finding `saga` stored (its status, owner and time) answers True: the lost try's commit.
        """
        self._check_open()
        q, codec = self._queries, self._codec
        saga_id = saga.saga_id
        tries = 0

        async def once() -> bool:
            nonlocal tries
            tries += 1
            async with self._transaction(begin=True) as tx:
                records = await tx.fetch(q.lock_saga, (saga_id,))
                if not records:
                    return False
                stored = codec.saga_row(records[0])
                if stored.purged_at is not None:  # a tombstone never changes again (API.md §14)
                    return False
                if stored.status is not status or (owner is not None and stored.owner != owner):
                    return tries > 1 and (stored.status, stored.owner, stored.updated_at) == (
                        saga.status,
                        saga.owner,
                        saga.updated_at,
                    )
                row = saga.copy()
                self._sealing.saga(row)
                params = codec.saga_params(row)
                if await tx.execute(q.rewrite_saga, (*params[1:], saga_id, status.value)) != 1:
                    return False
                if row.status is SagaStatus.QUEUED:
                    await tx.execute(q.unstart, (saga_id,))  # back in its queue: not counted as started
                saga.seal = row.seal
                return True

        busy = 0
        while True:
            try:
                return await self._retrying("change_saga", once)
            except StoreBusyError:  # a deadlock victim (MySQL: a claim's locking scan): rolled back, so try again
                busy += 1
                if busy >= _BUSY_TRIES:
                    raise
                await anyio.sleep(0.01 * 2**busy)

    async def _conditional_update(
        self, what: str, update: str, params: Sequence[Any], lost_try: tuple[str, Sequence[Any]]
    ) -> bool:
        """Run one conditional UPDATE of fields no seal covers; return whether it changed a row.

        Retried after a lost connection, a try changing nothing asks `lost_try` (a COUNT query) whether the lost
        try's commit is what it finds.
        """
        tries = 0

        async def once() -> bool:
            nonlocal tries
            tries += 1
            async with self._transaction(begin=False) as tx:
                if await tx.execute(update, params) == 1:
                    return True
                if tries == 1:
                    return False
                return int((await tx.fetch(*lost_try))[0][0]) == 1

        return await self._retrying(what, once)

    async def renew_leases(
        self, owner: str, saga_ids: Sequence[str], lease_expires_at: datetime, now: datetime
    ) -> set[str]:
        """Extend the leases `owner` still holds on the live sagas `saga_ids`; return the ids it still owns."""
        self._check_open()
        # In saga id order, chunk after chunk: each statement locks its rows so, as a batch of writes does (two
        # statements locking the same sagas in other orders could deadlock).
        ids = sorted(set(saga_ids))
        if not ids:
            return set()
        q, codec = self._queries, self._codec

        async def renew() -> set[str]:
            held: set[str] = set()
            # One statement needs no transaction of its own; a read-back or several chunks do.
            async with self._transaction(begin=not q.renew_returns or len(ids) > _IN_CHUNK) as tx:
                for start in range(0, len(ids), _IN_CHUNK):
                    chunk = ids[start : start + _IN_CHUNK]
                    params = (codec.lease_in(lease_expires_at, now), owner, *LIVE_STATUSES, *q.ids(chunk))
                    if q.renew_returns:
                        records = await tx.fetch(q.renew(len(chunk)), params)
                    else:
                        # The rows just updated are locked by this transaction: reading them back is exact.
                        await tx.execute(q.renew(len(chunk)), params)
                        records = await tx.fetch(q.owned(len(chunk)), (owner, *LIVE_STATUSES, *q.ids(chunk)))
                    held.update(codec.id_out(record[0]) for record in records)
            return held

        return await self._retrying("renew_leases", renew)

    async def claim_expired(
        self, owner: str, lease_expires_at: datetime, now: datetime, limit: int = 100
    ) -> list[tuple[SagaRow, list[StepRow]]]:
        """Take over up to `limit` live sagas whose lease expired before `now`; return snapshots, oldest first.

        One transaction: the expired rows are selected `FOR UPDATE SKIP LOCKED` (PostgreSQL, MySQL/MariaDB) or
        under SQLite's write lock (`BEGIN IMMEDIATE`), given to `owner` (no recovery attempt counted),
        and read with their steps as they were before (their owners); two owners claiming at once never get the
        same saga. PARKED sagas are not live, so never claimed. Retried after a lost connection: if the lost try
        had committed, its sagas are `owner`'s until their lease runs out, then claimed again.
        """
        self._check_open()
        if limit < 1:
            return []
        q, codec = self._queries, self._codec

        async def claim() -> list[tuple[SagaRow, list[StepRow]]]:
            async with self._dialect.claim_transaction() as tx:
                records = await tx.fetch(q.expired, (*LIVE_STATUSES, *codec.now_in(now), int(limit)))
                ids = [codec.id_out(record[0]) for record in records]
                if not ids:
                    return []
                taken = codec.rows_of_load_many(await tx.fetch(q.load_many(len(ids)), q.ids(ids)))  # owners before
                await tx.execute(q.take(len(ids)), (owner, codec.lease_in(lease_expires_at, now), *q.ids(ids)))
                return taken

        return await self._retrying("claim_expired", claim)

    # -- queues ----------------------------------------------------------------------------------------------

    async def enqueue(
        self, saga: SagaRow, steps: Sequence[StepRow], entry: QueueEntry
    ) -> tuple[SagaRow, list[StepRow]] | None:
        """Store a new QUEUED saga, then put it in `entry`'s queue; return what is stored if the id is taken.

        Two writes: the saga (through the group commit), then its queue columns (no worker sees it before). A
        submit that stopped between them is finished by the next submit of the same id.
        """
        existing = await self.create_saga(saga, steps)
        if existing is not None and existing[0].status is not SagaStatus.QUEUED:
            return existing
        q, codec = self._queries, self._codec
        params = (
            entry.queue,
            entry.key,
            int(entry.priority),
            codec.time_in(entry.not_before),
            saga.saga_id,
            SagaStatus.QUEUED.value,
        )

        async def once() -> None:
            async with self._transaction(begin=False) as tx:
                await tx.execute(q.enqueue, params)

        await self._retrying("enqueue", once)
        return existing

    async def claim_queued(
        self,
        owner: str,
        lease_expires_at: datetime,
        now: datetime,
        queue: Queue,
        limit: int,
        fits: Callable[[SagaRow], bool] | None = None,
    ) -> list[tuple[SagaRow, list[StepRow]]]:
        """Start up to `limit` QUEUED sagas of `queue` within its limits; return snapshots of them.

        One transaction: the queue's lock row is locked (when it has limits: claimers of one queue count in
        turn), its running sagas counted, the database's clock read (the rate window, `not_before` and the start
        stamped are all on it, whatever the worker's clock says), the recent starts counted, then the sagas
        started in order (see `_start_queued`).
        """
        self._check_open()
        if limit < 1:
            return []
        q, codec = self._queries, self._codec
        limited = queue.concurrency is not None or queue.key_concurrency is not None or queue.rate_limit is not None

        async def claim() -> list[tuple[SagaRow, list[StepRow]]]:
            async with self._dialect.claim_transaction() as tx:
                # An operator's pause or drain (API.md §19): nothing new starts.
                if await held_back(tx, self._dialect.flavour, queue.name):
                    return []
                running: dict[str | None, int] = {}
                if limited:
                    await tx.execute(q.queue_lock_insert, (queue.name,))
                    await tx.fetch(q.queue_lock, (queue.name,))
                    for key, count in await tx.fetch(q.queue_running, (queue.name, *LIVE_STATUSES)):
                        running[key] = int(count)
                clock = now if q.queue_clock is None else codec.time_out((await tx.fetch(q.queue_clock))[0][0])
                assert clock is not None
                allowed = queue_allowance(queue, sum(running.values()), limit)
                if queue.rate_limit is not None:
                    since = codec.time_in(clock - timedelta(seconds=queue.rate_limit.per))
                    window = (queue.name, since, queue.rate_limit.limit)  # counted up to the limit: on the index
                    recent = int((await tx.fetch(q.queue_started, window))[0][0])
                    allowed = min(allowed, queue.rate_limit.limit - recent)
                if allowed < 1:
                    return []
                start = _Start(owner, lease_expires_at, now, clock)
                ids = await self._start_queued(tx, queue, start, allowed, running, fits)
                if not ids:
                    return []
                return codec.rows_of_load_many(await tx.fetch(q.load_many(len(ids)), q.ids(ids)))

        return await self._retrying("claim_queued", claim)

    async def _start_queued(
        self,
        tx: Transaction,
        queue: Queue,
        start: _Start,
        allowed: int,
        running: dict[str | None, int],
        fits: Callable[[SagaRow], bool] | None,
    ) -> list[str]:
        """Start up to `allowed` due sagas of `queue` in start order, in the claim's transaction; return their ids.

        The scan leaves out keys at their limit in the database (counting this claim's own starts), so free slots
        go to the first runnable sagas however many blocked ones come before them. Sagas selected `FOR UPDATE SKIP
        LOCKED` (MySQL/MariaDB: `FOR UPDATE`, see Queries; SQLite: under `BEGIN IMMEDIATE`); each started (RUNNING
        under the owner's lease, re-sealed, `started_at` on the claim's clock) unless `fits` refuses it (then left
        unwritten; the scan goes on past it, a page at a time, up to _PASS_OVER_MAX sagas passed over).
        """
        q, codec = self._queries, self._codec
        keyed = queue.key_concurrency is not None
        head: tuple[Any, ...] = (queue.name, SagaStatus.QUEUED.value, codec.time_in(start.clock))
        if keyed:
            head += (queue.name, *LIVE_STATUSES, queue.key_concurrency)
        # A page a little longer than `allowed`: a key may reach its limit with this claim's own starts.
        scan = allowed if not keyed else allowed * 2 + 8
        stamp = codec.time_in(start.clock)
        ids: list[str] = []
        after: tuple[Any, ...] = ()  # the last row looked at: the next page begins past it
        passed = 0
        while True:
            waiting = await tx.fetch(q.queue_waiting(keyed=keyed, after=bool(after)), (*head, *after, scan))
            for raw_id, key, priority, created_at in waiting:
                if len(ids) >= allowed:
                    break
                saga_id = codec.id_out(raw_id)
                after = (priority, priority, created_at, created_at, saga_id)
                if key_full(queue, key, running):  # full with this claim's starts; the next page leaves it out
                    passed += 1
                    continue
                saga = codec.saga_row((await tx.fetch(q.lock_saga, (saga_id,)))[0])
                if fits is not None and not fits(saga):
                    passed += 1
                    continue
                running[key] = running.get(key, 0) + 1
                ids.append(saga_id)
                saga.status, saga.owner, saga.lease_expires_at = SagaStatus.RUNNING, start.owner, start.lease
                saga.updated_at = start.now
                self._sealing.saga(saga)
                params = codec.saga_params(saga)
                await tx.execute(q.queue_start, (*params[1:], stamp, saga_id, SagaStatus.QUEUED.value))
            if len(ids) >= allowed or len(waiting) < scan or passed >= _PASS_OVER_MAX:
                return ids
            scan = max(scan, _PAGE_MIN)

    @asynccontextmanager
    async def queue_wakeups(self, wake: Callable[[str], None]) -> AsyncIterator[bool]:
        """Call `wake(queue)` after submits by any process while inside, if the database can tell (see Dialect)."""
        async with self._dialect.queue_wakeups(wake) as heard:
            yield heard

    async def queue_depth(self, queue: str) -> int:
        """Return how many sagas wait QUEUED in `queue` (on the queue index)."""
        self._check_open()
        records = await self._fetch("queue_depth", self._queries.queue_depth, (queue, SagaStatus.QUEUED.value))
        return int(records[0][0])

    async def request_cancel(self, saga_id: str, reason: str) -> bool:
        """Record a request to cancel a live or waiting saga, once; return whether it did."""
        self._check_open()
        q = self._queries
        statuses = (*LIVE_STATUSES, SagaStatus.WAITING.value)
        asked = await self._conditional_update(
            "request_cancel",
            q.request_cancel,
            (reason, saga_id, *statuses),
            (q.cancel_asked, (saga_id, reason)),
        )
        if asked:
            await self.wake_saga(saga_id, now())  # a WAITING one is due at once, to compensate
            await self.notify_workers()  # the workers that can act on it hear of it at once
        return asked

    async def note_waiting(self, saga_id: str, note: dict[str, Any]) -> bool:
        """Note why a saga nobody drives does not move (unsealed); return whether it did."""
        self._check_open()
        text = self._codec.json_in(note, f"the waiting note of saga {saga_id!r}")
        return await self._conditional_update(
            "note_waiting",
            self._queries.note_waiting,
            (text, saga_id, *_UNDRIVEN),
            (self._queries.waiting_noted, (saga_id, text)),
        )

    async def cancel_request(self, saga_id: str) -> str | None:
        """Return the reason of the saga's cancel request, or None."""
        self._check_open()
        records = await self._fetch("cancel_request", self._queries.cancel_request, (saga_id,))
        return None if not records or records[0][0] is None else str(records[0][0])

    async def take_cancel(self, saga_id: str, owner: str) -> str | None:
        """Take in the cancel request of a saga `owner` holds (its writes pass again); return it, or None."""
        self._check_open()
        q = self._queries

        async def once() -> str | None:
            async with self._transaction(begin=True) as tx:
                await tx.execute(q.take_cancel, (owner, saga_id, owner))
                records = await tx.fetch(q.cancel_taken, (saga_id, owner, owner))
            return None if not records or records[0][0] is None else str(records[0][0])

        busy = 0
        while True:
            try:
                return await self._retrying("take_cancel", once)
            except StoreBusyError:  # a deadlock victim: rolled back, so try again
                busy += 1
                if busy >= _BUSY_TRIES:
                    raise
                await anyio.sleep(0.01 * 2**busy)

    # -- approvals -------------------------------------------------------------------------------------------

    async def request_approvals(self, rows: Sequence[ApprovalRow], *, seal: bool = True) -> list[str]:
        """Record the requests not recorded yet (one transaction); return the step ids it recorded."""
        self._check_open()
        if not rows:
            return []
        if seal:
            self._sealing.approvals(rows)
        params = [approval_params(self._codec, row) for row in rows]
        insert = self._approval_queries.insert

        async def once() -> list[str]:
            added = []
            async with self._transaction(begin=True) as tx:
                for row, values in zip(rows, params, strict=True):
                    if await tx.execute(insert, values) == 1:
                        added.append(row.step_id)
            return added

        return await self._retrying("request_approvals", once)

    async def load_approvals(self, saga_id: str) -> list[ApprovalRow]:
        """Return a saga's approval rows, in step order."""
        self._check_open()
        return [
            approval_row(self._codec, r)
            for r in await self._fetch("load_approvals", self._approval_queries.load, (saga_id,))
        ]

    async def decide_approval(self, row: ApprovalRow, *, by_deadline: bool = False) -> bool:
        """Record the decision of an undecided request: one conditional UPDATE; return whether it did."""
        self._check_open()
        self._sealing.approvals([row])
        aq, time_in = self._approval_queries, self._codec.time_in
        stamp = time_in(row.decided_at)
        params = (row.decision, row.decided_by, stamp, row.note, row.hash, row.saga_id, row.step_id, stamp)
        lost_try = (aq.decided_as, (row.saga_id, row.step_id, row.hash))
        if aq.decide_wake is not None:  # one statement: decided and due at once
            tries = 0
            sql, wake_params = aq.decide_wake[by_deadline], (*params, stamp or time_in(now()))

            async def once() -> bool:
                nonlocal tries
                tries += 1
                async with self._transaction(begin=False) as tx:
                    if await tx.fetch(sql, wake_params):
                        return True
                    return tries > 1 and int((await tx.fetch(*lost_try))[0][0]) == 1

            return await self._retrying("decide_approval", once)
        decided = await self._conditional_update(
            "decide_approval", aq.expire if by_deadline else aq.decide, params, lost_try
        )
        if decided:
            await self.wake_saga(row.saga_id, row.decided_at or now())  # due at once (if it waits)
        return decided

    async def list_approvals(self, *, due: datetime | None = None, limit: int = 100) -> list[ApprovalRow]:
        """Return undecided requests of WAITING sagas, oldest first (with `due`: those past their deadline)."""
        self._check_open()
        aq = self._approval_queries
        params: tuple[Any, ...]
        if due is None:
            sql, params = aq.pending, (aq.waiting, int(limit))
        else:
            sql, params = aq.due, (aq.waiting, self._codec.time_in(due), int(limit))
        return [approval_row(self._codec, r) for r in await self._fetch("list_approvals", sql, params)]

    async def waiting_sagas(self, now: datetime, limit: int = 100, offset: int = 0) -> list[str]:
        """Return WAITING plan (or saga function) sagas whose requests are all decided, unowned or lease expired."""
        self._check_open()
        aq = self._approval_queries
        codec = self._codec
        params = (aq.waiting, codec.time_in(now), *codec.now_in(now), int(limit), int(offset))
        records = await self._fetch("waiting_sagas", aq.ready, params)
        return [self._codec.id_out(record[0]) for record in records]

    async def due_work(self, now: datetime, queues: Sequence[str]) -> frozenset[DueWork]:
        """Tell which of an idle worker's looks would find something now: one statement of five EXISTS."""
        self._check_open()
        codec, waiting = self._codec, self._approval_queries.waiting
        names = tuple(queues) or ("",)
        sql = self._due_sql.get(len(names))
        if sql is None:
            sql = self._due_sql[len(names)] = due_work_sql(self._dialect.flavour, len(names))
        clock, at = codec.now_in(now), codec.time_in(now)
        params = (*names, *clock, *clock, waiting, at, waiting, at, *clock, *clock)
        found = (await self._fetch("due_work", sql, params))[0]
        return frozenset(kind for kind, yes in zip(_DUE_WORK, found, strict=True) if yes)

    async def wake_saga(self, saga_id: str, at: datetime) -> bool:
        """Make a WAITING saga due at `at` (its `wake_at`): one UPDATE; return whether it waits."""
        self._check_open()
        params = (self._codec.time_in(at), saga_id, SagaStatus.WAITING.value)

        async def once() -> bool:
            async with self._transaction(begin=False) as tx:
                return await tx.execute(self._queries.wake, params) == 1

        return await self._retrying("wake_saga", once)

    async def claim_waiting(
        self, saga_id: str, owner: str, lease_expires_at: datetime, now: datetime
    ) -> tuple[SagaRow, list[StepRow]] | None:
        """Give a WAITING saga nobody else holds to `owner` and return it as claimed, with its steps; else None.

        PostgreSQL: one statement (the conditional UPDATE and the read); the others: the UPDATE, then the read.
        """
        self._check_open()
        aq, codec = self._approval_queries, self._codec
        lease = codec.lease_in(lease_expires_at, now)
        at, until = codec.time_in(now), codec.time_in(lease_expires_at)
        params = (owner, lease, at, until, saga_id, aq.waiting, owner, *codec.now_in(now))
        if aq.claim_load is not None:  # a retried try wins again: the saga is `owner`'s already
            return codec.rows_of_load(await self._fetch("claim_waiting", aq.claim_load, params))
        if not await self._conditional_update(
            "claim_waiting", aq.claim, params, (aq.holds, (saga_id, owner, aq.waiting))
        ):
            return None
        claimed = await self.load_saga(saga_id)
        if claimed is None or claimed[0].owner != owner or claimed[0].status is not SagaStatus.WAITING:
            return None  # taken over meanwhile (its lease ran out at once)
        return claimed

    async def _fetch(self, what: str, sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
        """Run one query on its own (autocommit), retried after a lost connection; return its records."""

        async def read() -> Sequence[Sequence[Any]]:
            async with self._transaction(begin=False) as tx:
                return await tx.fetch(sql, params)

        return await self._retrying(what, read)

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
        q = self._queries
        params: tuple[Any, ...]
        if reason is not None:  # on the end_reason index (the owner of an ended saga is gone)
            if owner is not None:
                return []
            sql, params = q.list_reason(status is not None), (reason, *([] if status is None else [status.value]))
            params = (*params, limit, offset)
        elif owner is not None:
            sql, params = q.list_owned(status is not None), (owner, *([] if status is None else [status.value]))
            params = (*params, limit, offset)
        elif status is None:
            sql, params = q.list_all, (limit, offset)
        else:
            sql, params = q.list_status, (status.value, limit, offset)
        n = len(SAGA_COLUMNS)
        return [(self._codec.saga_row(r), int(r[n])) for r in await self._fetch("list_sagas", sql, params)]

    async def insert_rows(self, saga: SagaRow, steps: Sequence[StepRow]) -> tuple[SagaRow, list[StepRow]] | None:
        """Insert rows as given (seals kept) unless the id is taken; return what is stored if it is."""
        self._check_open()
        return await self._insert(saga, steps, "import_saga")

    async def close(self) -> None:
        """Release the store's connections; the store cannot be used afterwards."""
        if self._closed:
            return
        self._closed = self._dialect.closed = True
        try:
            await self._batcher.close(self._closed_error())
        finally:
            await self._dialect.close()

    def __del__(self, _warn: Any = warnings.warn) -> None:
        # Like aiosqlite: a store dropped without close() leaks connections (and, for SQLite, a thread).
        if not getattr(self, "_closed", True):
            _warn(f"{self!r} was never closed; call `await store.close()`", ResourceWarning, stacklevel=1)
