"""The SagaStore protocol: the journal's primitives every store implements, and the capabilities a store may offer.

`SagaStore` is the core a store of your own implements (docs/guides/custom-store.md): create, write under an owner
condition, read one, list, claim, renew leases, take over orphans. What more a store can do (queues, cancels, waits
and approvals, messages, retention, schedules, due work) it declares in `capabilities`, each a protocol of its own;
the engine asks a store for a capability by that declaration (`queues_of(store)`, `has(store, "waits")`), never by
probing its members. Stores know rows (saga_runtime._records), never tools, plans or the engine. Each method is
one transaction.
Rows handed to `create_saga` and `save` are snapshots the caller never touches again: a store may keep them.
Rows a store returns are fresh copies the caller may change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast, runtime_checkable

from saga_runtime._exceptions import StoreError
from saga_runtime._records import (
    ApprovalRow,
    DueWork,
    EndReason,
    PurgeReport,
    Queue,
    QueueEntry,
    QueueInfo,
    QueueStanding,
    QueueState,
    SagaHold,
    SagaResult,
    SagaRow,
    SagaStatus,
    SagaSummary,
    Schedule,
    StepRow,
    VerifyResult,
)

if TYPE_CHECKING:
    from saga_runtime._storage._archive import Archive

__all__ = [
    "EVERY_CAPABILITY",
    "CancelStore",
    "Capability",
    "DueWorkStore",
    "InlineWrite",
    "MessageStore",
    "QueueStore",
    "RetentionStore",
    "SagaStore",
    "ScheduleStore",
    "Store",
    "WaitStore",
    "cancels_of",
    "due_work_of",
    "has",
    "key_full",
    "messages_of",
    "queue_allowance",
    "queues_of",
    "retention_of",
    "same_rows",
    "schedules_of",
    "waits_of",
]


#: What a store whose writes never pause does in place of `save`: (saga, steps, owner, reseal, lease), no await.
InlineWrite = Callable[[SagaRow | None, Sequence[StepRow], str | None, bool, bool], None]

#: What a store may offer beyond the core, each a protocol below: declared in `SagaStore.capabilities`.
Capability = Literal["queues", "cancels", "waits", "messages", "retention", "schedules", "due_work"]
#: Every capability: what the built-in stores (memory, SQLite, PostgreSQL, MySQL/MariaDB) declare.
EVERY_CAPABILITY: frozenset[Capability] = frozenset(
    ("queues", "cancels", "waits", "messages", "retention", "schedules", "due_work")
)


@runtime_checkable
class SagaStore(Protocol):
    """A durable home for sagas: the journal's primitives, which every store implements (memory, SQLite, PostgreSQL,
    MySQL/MariaDB, and a store of your own).

    The primitives (create, save, load, insert, list, claim, change, renew, claim expired) are each store's own; get,
    verify, export, import and list are built on them once (saga_runtime._storage._reading). What else a store
    offers it declares in `capabilities` (the protocols below); a store declaring none runs plain sagas to their end.

    Leases are judged on one clock. A lease is written as an expiry on the writer's clock (a claim's with the
    writer's `now`); PostgreSQL and MySQL/MariaDB store their own time plus what is left of it, and compare
    expiries with their own time, so a worker's skewed clock neither takes live sagas nor writes leases already
    expired. Memory and SQLite, whose writers share one machine's clock, store and compare the times as given.
    """

    @property
    def retry_for(self) -> float:
        """Return the seconds an operation that lost its connection is retried for (0: never retried)."""
        ...

    @property
    def sealed_since(self) -> datetime | None:
        """Return when the store began sealing saga rows (a row written before carries no seal), or None."""
        ...

    @property
    def url(self) -> str:
        """Return the store's URL, password removed."""
        ...

    @property
    def writes_inline(self) -> InlineWrite | None:
        """Return the function doing `save`'s work in the calling code, if this store's writes never pause (no lock,
        no await: the memory store); else None. Declared by the store itself, never probed: the engine then writes
        through it, and hands the store its step rows unlinked (`prev_hash` None: the store links them)."""
        ...

    @property
    def signing_key(self) -> bytes | None:
        """Return the key the saga records are signed with (HMAC-SHA-256), or None for plain SHA-256 seals."""
        ...

    @property
    def capabilities(self) -> frozenset[Capability]:
        """Return what the store offers beyond these primitives; the engine asks for nothing else (`has`)."""
        ...

    async def create_saga(self, saga: SagaRow, steps: Sequence[StepRow]) -> tuple[SagaRow, list[StepRow]] | None:
        """Insert a new saga with its first step rows, atomically; return None, or the existing saga if the id is taken.

        When the id is taken nothing is written: the caller compares plans and decides. Rows are sealed as `save`
        seals them.
        """
        ...

    async def save(
        self,
        saga: SagaRow | None,
        steps: Sequence[StepRow],
        *,
        owner: str | None = None,
        reseal: bool = True,
        lease: bool = True,
    ) -> None:
        """Write the saga row (if given) and upsert the step rows, all in one commit; return once it is durable.

        The store seals what it writes (saga_runtime._storage._sealing): the saga row, unless `reseal` is False
        (no sealed field changed since its `seal`, which is kept), and each step row given unsealed (`hash` None),
        to the link it carries (`prev_hash`).

        With `lease` False (an owner-conditional write of a live saga whose owner knows enough of its lease is
        left), the stored lease is left as it is: the row's `lease_expires_at` is not written. Such a write never
        shortens the lease, and leaves the indexed lease column alone (PostgreSQL may then update the row in place).

        With `owner`, the write happens only if the stored saga's `owner` is `owner`, checked atomically with the
        write (the saga row locked where the database needs it); otherwise nothing is written and `LeaseLostError`
        is raised: another executor owns the saga now. The rows of an owner-conditional save are of one saga.
        Concurrent saves may share a commit (group commit); each still returns only once its own rows are durable,
        and a save refused (a stale owner, a duplicate idempotency key) fails alone.
        """
        ...

    async def load_saga(self, saga_id: str) -> tuple[SagaRow, list[StepRow]] | None:
        """Return snapshots of a saga's row and its step rows (ordered by seq), or None if it is not stored.

        A step is stored once first written (at its intent): a planned step that never started has no row.
        """
        ...

    async def insert_rows(self, saga: SagaRow, steps: Sequence[StepRow]) -> tuple[SagaRow, list[StepRow]] | None:
        """Insert rows as given (their seals kept), atomically; return None, or what is stored if the id is taken."""
        ...

    async def list_rows(
        self,
        status: SagaStatus | None,
        limit: int,
        offset: int,
        *,
        owner: str | None = None,
        reason: EndReason | None = None,
    ) -> list[tuple[SagaRow, int]]:
        """Return saga rows, newest first, each with its count of step rows; only those in `status` if given,
        only those `owner` holds if given (a restarted executor finds its own sagas), and only those that ended for
        `reason` if given (`SagaSummary.end_reason`; SQL stores: on an index)."""
        ...

    async def claim_saga(self, saga_id: str, owner: str, lease_expires_at: datetime, now: datetime) -> bool:
        """Make `owner` the owner of a live saga if nobody else holds it; atomic; return whether it now does.

        A saga is free when it is RUNNING or COMPENSATING and unowned, owned by `owner` already, or its lease
        expired before `now`. A finished or PARKED saga is never claimed.
        """
        ...

    async def change_saga(self, saga: SagaRow, *, status: SagaStatus, owner: str | None = None) -> bool:
        """Write the saga row `saga` (sealed anew) only if the stored one is in `status`; atomic; return if it did.

        The one conditional write of a status change the journal makes on a saga no engine drives (an operator's
        unpark, retry or cancel of a queued saga, a worker giving a saga back to its queue): the stored row is
        checked and replaced in one transaction (locked where the database needs it), so of two writers at once
        only one wins (the other gets False). With `owner`, the stored saga must be owned by `owner` too. A
        tombstone never changes. A row written QUEUED is no longer counted as started in its queue's rate window.
        Retried after a lost connection, a try finding `saga` stored (the lost try's commit) answers True.
        """
        ...

    async def renew_leases(
        self, owner: str, saga_ids: Sequence[str], lease_expires_at: datetime, now: datetime
    ) -> set[str]:
        """Extend the leases `owner` still holds on live `saga_ids`; return the ids it still owns (fencing)."""
        ...

    async def claim_expired(
        self, owner: str, lease_expires_at: datetime, now: datetime, limit: int = 100
    ) -> list[tuple[SagaRow, list[StepRow]]]:
        """Take over up to `limit` live sagas whose lease expired before `now`; return snapshots of them as they
        were before the claim (their owner then: the engine records from whom it took each over).

        Atomic per saga (`FOR UPDATE SKIP LOCKED` on PostgreSQL and MySQL/MariaDB, `BEGIN IMMEDIATE` on SQLite):
        two owners claiming at once never get the same saga. A live saga without a lease (NULL) counts as expired;
        a PARKED one is not live. Claiming counts no recovery attempt: the engine counts one when it starts driving
        a saga.
        """
        ...

    async def close(self) -> None:
        """Release the store's connections; the store cannot be used afterwards."""
        ...


@runtime_checkable
class QueueStore(Protocol):
    """Sagas submitted to queues for workers to start, and an operator's control of the queues (API.md §19).

    A store offering it declares "queues" in its `capabilities`."""

    async def enqueue(
        self, saga: SagaRow, steps: Sequence[StepRow], entry: QueueEntry
    ) -> tuple[SagaRow, list[StepRow]] | None:
        """Store a new QUEUED saga and its PENDING step rows in `entry`'s queue; return None, or what is stored.

        A saga whose id is taken and is still QUEUED outside any queue (a submit that stopped half-way) is put in
        `entry`'s queue. No worker starts a saga before it is in its queue.
        """
        ...

    async def claim_queued(
        self,
        owner: str,
        lease_expires_at: datetime,
        now: datetime,
        queue: Queue,
        limit: int,
        fits: Callable[[SagaRow], bool] | None = None,
    ) -> list[tuple[SagaRow, list[StepRow]]]:
        """Start up to `limit` QUEUED sagas of `queue` whose `not_before` passed: RUNNING under `owner`'s lease.

        Lowest priority first, then the earliest submitted. The queue's limits (`concurrency`, `key_concurrency`,
        `rate_limit`) are counted in the same transaction as the claim, so they hold across every worker; two
        owners claiming at once never get the same saga. A saga `fits` refuses (the worker lacks its tools) is
        passed over unwritten, keeping its place, and those behind it looked at (up to a thousand a claim).
        Returns snapshots of the sagas started.
        """
        ...

    def queue_wakeups(self, wake: Callable[[str], None]) -> AbstractAsyncContextManager[bool]:
        """While inside, call `wake(queue)` soon after a saga is queued in `queue` by any process.

        Yields whether it can: PostgreSQL listens for the submits' notifications (LISTEN/NOTIFY), memory hears its
        own submits; the others yield False, and a worker finds new sagas by polling. `wake("")` means "look at
        every queue" (notifications may have been missed, say while a lost connection was restored);
        `wake(DECISION_WAKE)` that a decision, cancel, unpark, retry or message made a saga ready (`notify_workers`).
        """
        ...

    async def queue_depth(self, queue: str) -> int:
        """Return how many sagas wait QUEUED in `queue`."""
        ...

    async def set_queue_state(self, name: str, state: QueueState, at: datetime) -> None:
        """Store queue `name`'s state ("active", "paused", "draining"); a claim of a paused or draining queue
        starts nothing (what runs goes on). Wakes the workers that listen."""
        ...

    async def queue_state(self, name: str) -> QueueState:
        """Return the state an operator set for queue `name` ("active" when none was)."""
        ...

    async def saga_queue_states(self, saga_ids: Sequence[str]) -> dict[str, QueueStanding]:
        """Return where each saga of `saga_ids` submitted to a queue stands there (the queue, its state, the limits
        its workers last noted and what they count now, the rate window on the database's clock), by id: those not
        queued left out. A list's page reads them at once: its statements do not grow with the page."""
        ...

    async def note_queue_limits(self, queue: Queue, at: datetime) -> None:
        """Record the limits a worker serves `queue` with, for `queue_infos` (the queue's state unchanged)."""
        ...

    async def queue_infos(self) -> list[QueueInfo]:
        """Return every queue holding a non-terminal saga or a stored state: counts, oldest queued, state, limits.

        Reads only non-terminal sagas (an index), so its cost does not grow with finished history.
        """
        ...

    async def list_queue_rows(
        self, queue: str, status: SagaStatus | None, limit: int, offset: int
    ) -> list[tuple[SagaRow, int]]:
        """Return the rows of the sagas submitted to `queue` (only those in `status` if given), newest first, each
        with its count of step rows."""
        ...

    async def notify_workers(self, queue: str = "") -> None:
        """Wake idle workers that listen (PostgreSQL's NOTIFY, memory's own): those serving `queue`, or with "" every
        one, to go on with what a decision, cancel, unpark, retry or message made ready (their `queue_wakeups` hear
        DECISION_WAKE). Polling stores: nothing to do, their workers look every interval."""
        ...


@runtime_checkable
class CancelStore(Protocol):
    """Requests to cancel a saga another process may drive, taken in by its owner at its next write.

    A store offering it declares "cancels" in its `capabilities`."""

    async def request_cancel(self, saga_id: str, reason: str) -> bool:
        """Record a request to cancel a RUNNING, COMPENSATING or WAITING saga (once); return whether it did."""
        ...

    async def cancel_request(self, saga_id: str) -> str | None:
        """Return the reason of the saga's cancel request, or None if nobody asked."""
        ...

    async def take_cancel(self, saga_id: str, owner: str) -> str | None:
        """Take in the cancel request of a saga `owner` holds; return it, or None.

        An owner-conditional `save` is refused (LeaseLostError) while the saga holds a cancel request its owner has
        not taken in, so an owner learns of a cancel at its next write. Taken in, its writes pass again; a claim of
        the saga (a new owner, or the same after a restart) must take it in anew.
        """
        ...


@runtime_checkable
class WaitStore(Protocol):
    """Sagas that wait (for a person's decision, a message, a time): approval requests and the claims of a waiting saga.

    A store offering it declares "waits" in its `capabilities`."""

    async def request_approvals(self, rows: Sequence[ApprovalRow], *, seal: bool = True) -> list[str]:
        """Record the approval requests not recorded yet (by saga and step); return the step ids it recorded.

        A request recorded already is left as it is (its time, deadline and any decision stand). A row given
        unsealed (`hash` None) is sealed to its step (the link it carries, `prev_hash`); not with `seal` False
        (an import: rows are kept as given).
        """
        ...

    async def load_approvals(self, saga_id: str) -> list[ApprovalRow]:
        """Return snapshots of a saga's approval rows, in step order."""
        ...

    async def decide_approval(self, row: ApprovalRow, *, by_deadline: bool = False) -> bool:
        """Record the decision `row` holds (decision, decided_by, decided_at, note, hash); atomic; return if it did.

        One conditional update: only an undecided request is decided, so of two decisions at once exactly one is
        recorded (the other gets False). A person's decision needs the deadline not passed at `decided_at`;
        `by_deadline` (the deadline's own rejection) needs it passed. A row given unsealed is sealed first.
        """
        ...

    async def list_approvals(self, *, due: datetime | None = None, limit: int = 100) -> list[ApprovalRow]:
        """Return undecided requests of WAITING sagas, oldest first; with `due`, those whose deadline is not later."""
        ...

    async def waiting_sagas(self, now: datetime, limit: int = 100, offset: int = 0) -> list[str]:
        """Return the ids of WAITING plan sagas (and saga functions) due by `now` (their wait's end, or made due:
        `wake_saga`), whose requests are all decided, unowned or whose lease expired; an indexed query."""
        ...

    async def wake_saga(self, saga_id: str, at: datetime) -> bool:
        """Make a WAITING saga due at `at` for `waiting_sagas` (at once: a message, a decision or a cancel it may go
        on with); return whether it waits. A saga's own wait (a sleep's end, a recv's deadline) is written with its
        row; a message, a decision and a cancel request make it due themselves."""
        ...

    async def claim_waiting(
        self, saga_id: str, owner: str, lease_expires_at: datetime, now: datetime
    ) -> tuple[SagaRow, list[StepRow]] | None:
        """Give a WAITING saga to `owner` (leased) if nobody else holds it, atomically; return its rows as claimed
        (the saga row and its step rows), or None if it is not WAITING or another owner holds it.

        The claim of `approve()` and recovery going on with a decided saga: of two at once only one wins. The
        status stays WAITING: the new owner's engine moves it on (through its transition table) and writes it.
        """
        ...

    async def note_waiting(self, saga_id: str, note: dict[str, Any]) -> bool:
        """Note on a saga nobody drives (QUEUED, WAITING, or live without an owner) why it does not move: a worker
        lacks its tool or version (see saga_runtime._records._outcome). Not sealed; the next write of the row by an
        engine clears it. Return whether it did.
        """
        ...


@runtime_checkable
class MessageStore(Protocol):
    """Messages sent to a saga (`executor.send`), each stored once under its id.

    A store offering it declares "messages" in its `capabilities`."""

    async def put_message(self, saga_id: str, message_id: str, topic: str, body: Any, sent_at: datetime) -> bool:
        """Store a message (a JSON value) for a saga unless `message_id` is taken there; return whether it was."""
        ...

    async def load_messages(self, saga_id: str) -> list[tuple[str, str, Any, datetime]]:
        """Return a saga's messages as (message_id, topic, body, sent_at), oldest first."""
        ...


@runtime_checkable
class RetentionStore(Protocol):
    """The primitives of retention (API.md §14): saga_runtime._storage._retention builds purge and holds on them.

    A store offering it declares "retention" in its `capabilities`."""

    @property
    def purge_batch_size(self) -> int:
        """Return how many sagas one purge transaction takes at most."""
        ...

    async def purge_candidates(
        self, cutoff: datetime, statuses: Sequence[SagaStatus], limit: int, offset: int
    ) -> list[str]:
        """Return the ids a purge would remove now, oldest finished first (nothing locked, nothing changed)."""
        ...

    async def purge_batch(
        self, cutoff: datetime, statuses: Sequence[SagaStatus], limit: int, archive: Archive | None, at: datetime
    ) -> tuple[list[str], Exception | None]:
        """Purge up to `limit` sagas (archived first) in one transaction; return their ids and an archive error.

        Only terminal sagas in `statuses` finished before `cutoff`, not held and not purged, are taken; two
        purges at once take different ones. A saga whose archiving failed and those after it stay.
        """
        ...

    async def hold_saga(self, saga_id: str, reason: str, at: datetime) -> bool:
        """Hold a stored saga (a hold again replaces its reason); return False if no saga has the id."""
        ...

    async def unhold_saga(self, saga_id: str) -> bool:
        """Release a saga's hold; return whether it was held."""
        ...

    async def list_holds(self) -> list[SagaHold]:
        """Return every hold, oldest first."""
        ...


@runtime_checkable
class ScheduleStore(Protocol):
    """Schedules (API.md §18): rows a worker submits a saga from at each tick.

    A store offering it declares "schedules" in its `capabilities`."""

    async def put_schedule(self, schedule: Schedule) -> None:
        """Store a schedule, replacing the one of the same name whole."""
        ...

    async def load_schedules(self, name: str | None = None) -> list[Schedule]:
        """Return every schedule by name (only the one named `name`, if given: none if it is not stored)."""
        ...

    async def due_schedules(self, now: datetime, limit: int) -> tuple[datetime, list[Schedule]]:
        """Return the time now and up to `limit` unpaused schedules whose `next_tick` is not after it, earliest first.

        "Now" is the database's clock where machines share it (PostgreSQL, MySQL/MariaDB), so a worker whose clock
        runs ahead submits nothing early; `now` on memory and SQLite (one machine's clock).
        """
        ...

    async def advance_schedule(self, name: str, expected: datetime, next_tick: datetime, last_tick: datetime) -> bool:
        """Move an unpaused schedule's `next_tick` from `expected` on (recording `last_tick`); atomic; return if it did.

        One conditional update: of workers advancing the same tick at once exactly one does (the others get
        False), and a schedule paused, replaced or advanced meanwhile is left as it is.
        """
        ...

    async def pause_schedule(self, name: str) -> bool:
        """Pause a schedule (paused already: unchanged); return False if none has the name."""
        ...

    async def resume_schedule(self, name: str, next_tick: datetime) -> bool:
        """Resume a paused schedule from `next_tick` (running already: unchanged); return False if none has the name."""
        ...

    async def delete_schedule(self, name: str) -> bool:
        """Delete a schedule; return whether one had the name."""
        ...


@runtime_checkable
class DueWorkStore(Protocol):
    """One query telling an idle worker which of its looks would find something now.

    A store offering it declares "due_work" in its `capabilities`."""

    async def due_work(self, now: datetime, queues: Sequence[str]) -> frozenset[DueWork]:
        """Tell which of an idle worker's looks would find something now, in one query: "queued" (a QUEUED saga of
        `queues` whose start time passed), "schedules" (an unpaused schedule due), "approvals" (a request past its
        deadline), "waiting" (a saga `waiting_sagas` lists), "orphans" (a live saga whose lease ran out). A limit may
        still hold a queued saga back."""
        ...


@runtime_checkable
class Store(
    SagaStore,
    QueueStore,
    CancelStore,
    WaitStore,
    MessageStore,
    RetentionStore,
    ScheduleStore,
    DueWorkStore,
    Protocol,
):
    """A store as `open_store` gives it: the primitives, every capability, and the conveniences built on them.

    The conveniences are functions over the primitives (saga_runtime._storage._reading and _retention), offered as
    methods by `StoreBase`; a store of your own implements the primitives and subclasses `StoreBase` for them.
    This is the public `saga_runtime.SagaStore`: what users hold (`open_store`, `executor.store`) and call.
    """

    async def get_saga(self, saga_id: str) -> SagaResult | None:
        """Return the result of a stored saga, or None."""
        ...

    async def verify_saga(self, saga_id: str) -> VerifyResult:
        """Check a stored saga's hash chain; the result is falsy, naming the broken records, if one was altered."""
        ...

    async def list_sagas(
        self, status: SagaStatus | str | None = None, limit: int = 100, offset: int = 0, *, reason: str | None = None
    ) -> list[SagaSummary]:
        """Return summaries of stored sagas, newest first, optionally only those with `status` and end `reason`."""
        ...

    async def export_saga(self, saga_id: str) -> dict[str, Any]:
        """Return a saga as a JSON-able, versioned document; raise `KeyError` if it is not stored."""
        ...

    async def import_saga(self, data: Mapping[str, Any]) -> None:
        """Store an exported saga; the same content again is a no-op, other content under its id a conflict."""
        ...

    async def purge(
        self,
        *,
        older_than: timedelta | float,
        statuses: Iterable[SagaStatus | str] | None = None,
        archive: Any = None,
        dry_run: bool = False,
        limit: int | None = None,
    ) -> PurgeReport:
        """Remove terminal sagas finished over `older_than` ago down to tombstones (archived first if asked)."""
        ...

    async def hold(self, saga_id: str, *, reason: str) -> None:
        """Hold a saga: never purged until released; raise `KeyError` if no saga has the id."""
        ...

    async def unhold(self, saga_id: str) -> bool:
        """Release a saga's hold; return whether it was held."""
        ...

    async def holds(self) -> list[SagaHold]:
        """Return every hold, oldest first."""
        ...


def queue_allowance(queue: Queue, running: int, limit: int) -> int:
    """Return how many sagas of `queue` may start now, `running` of them running (at most `limit`)."""
    if queue.concurrency is not None:
        return max(0, min(limit, queue.concurrency - running))
    return max(0, limit)


def key_full(queue: Queue, key: str | None, running: dict[str | None, int]) -> bool:
    """Tell whether the sagas running with `key` reach `queue.key_concurrency` (sagas without a key never do)."""
    return queue.key_concurrency is not None and key is not None and running.get(key, 0) >= queue.key_concurrency


def same_rows(stored: tuple[SagaRow, list[StepRow]], given: tuple[SagaRow, Sequence[StepRow]]) -> bool:
    """Tell whether stored rows hold what was written, its lease aside (a database writes it on its own clock)."""
    saga, steps = stored
    wanted, rows = given
    if (saga.lease_expires_at is None) == (wanted.lease_expires_at is None):
        saga = replace(saga, lease_expires_at=wanted.lease_expires_at)
    return (saga, steps) == (wanted, sorted(rows, key=lambda row: row.seq))


def has(store: SagaStore, capability: Capability) -> bool:
    """Tell whether `store` declares `capability` (what it offers beyond the primitives)."""
    return capability in store.capabilities


def _lacking(store: SagaStore, capability: Capability) -> StoreError:
    return StoreError(
        f"the store at {store.url} does not keep {capability.replace('_', ' ')} (it declares "
        f"{sorted(store.capabilities) or 'no capability'}); use a store that does, such as open_store('sqlite:///sagas.db')",
        url=store.url,
    )


def queues_of(store: SagaStore) -> QueueStore:
    """Return `store` as the queue store it declares it is; raise StoreError if it does not keep queues."""
    if "queues" not in store.capabilities:
        raise _lacking(store, "queues")
    return cast(QueueStore, store)


def cancels_of(store: SagaStore) -> CancelStore:
    """Return `store` as the cancel store it declares it is; raise StoreError if it does not keep cancel requests."""
    if "cancels" not in store.capabilities:
        raise _lacking(store, "cancels")
    return cast(CancelStore, store)


def waits_of(store: SagaStore) -> WaitStore:
    """Return `store` as the wait store it declares it is; raise StoreError if it does not keep waits."""
    if "waits" not in store.capabilities:
        raise _lacking(store, "waits")
    return cast(WaitStore, store)


def messages_of(store: SagaStore) -> MessageStore:
    """Return `store` as the message store it declares it is; raise StoreError if it does not keep messages."""
    if "messages" not in store.capabilities:
        raise _lacking(store, "messages")
    return cast(MessageStore, store)


def retention_of(store: SagaStore) -> RetentionStore:
    """Return `store` as the retention store it declares it is; raise StoreError if it does not purge or hold."""
    if "retention" not in store.capabilities:
        raise _lacking(store, "retention")
    return cast(RetentionStore, store)


def schedules_of(store: SagaStore) -> ScheduleStore:
    """Return `store` as the schedule store it declares it is; raise StoreError if it does not keep schedules."""
    if "schedules" not in store.capabilities:
        raise _lacking(store, "schedules")
    return cast(ScheduleStore, store)


def due_work_of(store: SagaStore) -> DueWorkStore:
    """Return `store` as the due-work store it declares it is; raise StoreError if it does not tell due work."""
    if "due_work" not in store.capabilities:
        raise _lacking(store, "due_work")
    return cast(DueWorkStore, store)
