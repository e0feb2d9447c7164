"""Get, verify, export, import and list, built once on a store's primitives."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from saga_runtime._exceptions import IdempotencyConflictError
from saga_runtime._records import (
    END_REASONS,
    WAITING_KINDS,
    PurgeReport,
    SagaHold,
    SagaResult,
    SagaStatus,
    SagaSummary,
    VerifyResult,
    WaitingFor,
    export_rows,
    import_approvals,
    import_rows,
    queue_waiting_of,
    result_from_rows,
    summary_from_rows,
    verify_rows,
)
from saga_runtime._storage import _retention
from saga_runtime._storage._archive import ArchiveTarget
from saga_runtime._storage._base import Capability, cancels_of, has, messages_of, queues_of, same_rows, waits_of

if TYPE_CHECKING:
    from saga_runtime._records import ApprovalRow, QueueStanding
    from saga_runtime._storage._base import SagaStore

__all__ = [
    "StoreBase",
    "approvals_of",
    "cancel_requested",
    "export_saga",
    "get_saga",
    "import_saga",
    "list_sagas",
    "messages_for",
    "queue_waits",
    "verify_saga",
    "waiting_counts",
]


async def approvals_of(store: SagaStore, saga_id: str) -> list[ApprovalRow]:
    """Return a saga's approval rows, in step order: none on a store that keeps no waits."""
    return await waits_of(store).load_approvals(saga_id) if has(store, "waits") else []


async def messages_for(store: SagaStore, saga_id: str) -> list[tuple[str, str, Any, datetime]]:
    """Return a saga's messages as (message_id, topic, body, sent_at), oldest first: none on a store without them."""
    return await messages_of(store).load_messages(saga_id) if has(store, "messages") else []


async def cancel_requested(store: SagaStore, saga_id: str) -> str | None:
    """Return the reason of a saga's cancel request, or None (always, on a store that keeps no cancels)."""
    return await cancels_of(store).cancel_request(saga_id) if has(store, "cancels") else None


async def get_saga(store: SagaStore, saga_id: str) -> SagaResult | None:
    """Return the result of a stored saga, or None."""
    snapshot = await store.load_saga(saga_id)
    if snapshot is None:
        return None
    result = result_from_rows(*snapshot, await approvals_of(store, saga_id))
    if result.status is SagaStatus.QUEUED:
        result = (await queue_waits(store, [result]))[0]
    return result


def _queue_held(standing: QueueStanding | None, waiting: WaitingFor | None) -> WaitingFor | None:
    """Return why a QUEUED saga standing so in its queue (`standing`: None if not queued) does not start: its queue
    paused or draining first, else what its row says (`waiting`: a worker's note), else its start time or a limit of
    its queue (`queue_waiting_of`)."""
    held = None if standing is None else queue_waiting_of(standing)
    if held is not None and (held["kind"] == "queue_paused" or waiting is None):
        return held
    return waiting


_Shown = TypeVar("_Shown", SagaSummary, SagaResult)


async def queue_waits(store: SagaStore, summaries: list[_Shown]) -> list[_Shown]:
    """Return `summaries` with the QUEUED ones saying what holds them back in their queue, as `get_saga` does (a
    paused queue, a start time not reached, a key, concurrency or rate limit): one read of the QUEUED sagas."""
    queued = [summary.saga_id for summary in summaries if summary.status is SagaStatus.QUEUED]
    if not queued or not has(store, "queues"):
        return summaries
    standings = await queues_of(store).saga_queue_states(queued)
    shown = []
    for summary in summaries:
        if summary.status is SagaStatus.QUEUED:
            waiting = _queue_held(standings.get(summary.saga_id), summary.waiting_for)
            if waiting is not summary.waiting_for:
                summary = summary.model_copy(update={"waiting_for": waiting})
        shown.append(summary)
    return shown


async def verify_saga(store: SagaStore, saga_id: str) -> VerifyResult:
    """Check a stored saga's hash chain; raise `KeyError` if not stored."""
    snapshot = await store.load_saga(saga_id)
    if snapshot is None:
        raise KeyError(f"no saga {saga_id!r} in {store.url}")
    approvals = await approvals_of(store, saga_id)
    return verify_rows(*snapshot, store.signing_key, approvals, sealed_since=store.sealed_since)


async def export_saga(store: SagaStore, saga_id: str) -> dict[str, Any]:
    """Return a saga's export document; raise `KeyError` if not stored."""
    snapshot = await store.load_saga(saga_id)
    if snapshot is None:
        raise KeyError(f"no saga {saga_id!r} in {store.url}")
    return export_rows(*snapshot, await approvals_of(store, saga_id))


async def import_saga(store: SagaStore, data: Mapping[str, Any]) -> None:
    """Store an exported saga; the same again is a no-op, other content a conflict."""
    saga, steps = import_rows(data)
    approvals = import_approvals(data, saga.saga_id)
    existing = await store.insert_rows(saga, steps)
    # By value: times as instants, whatever their offset.
    if existing is not None and not same_rows(existing, (saga, steps)):
        raise IdempotencyConflictError(
            f"saga {saga.saga_id!r} already exists in {store.url} with other content; "
            "import it into another store or delete the existing one first",
            saga_id=saga.saga_id,
        )
    if approvals:  # kept as exported, unsealed ones too
        await waits_of(store).request_approvals(approvals, seal=False)


async def list_sagas(
    store: SagaStore,
    status: SagaStatus | str | None = None,
    limit: int = 100,
    offset: int = 0,
    *,
    reason: str | None = None,
) -> list[SagaSummary]:
    """Return stored sagas' summaries, newest first, optionally of one `status` and one end `reason`."""
    wanted = None if status is None else SagaStatus(status)
    if reason is None:
        rows = await store.list_rows(wanted, int(limit), int(offset))
    else:
        if reason not in END_REASONS:
            raise ValueError(f"reason must be one of {list(END_REASONS)}, got {reason!r}")
        # A filtered query (SQL stores: on the end_reason index), however long the history.
        rows = await store.list_rows(wanted, int(limit), int(offset), reason=reason)
    return await queue_waits(store, [summary_from_rows(saga, count) for saga, count in rows])


async def waiting_counts(store: SagaStore, *, page: int = 500) -> dict[str, int]:
    """Return how many sagas wait for each kind of thing (`SagaResult.waiting_for`), of at most `page` sagas of each
    status that waits (QUEUED, WAITING, PARKED): what a gauge samples.
    """
    counts: dict[str, int] = dict.fromkeys(WAITING_KINDS, 0)
    for status in (SagaStatus.QUEUED, SagaStatus.WAITING, SagaStatus.PARKED):
        for saga, count in await store.list_rows(status, page, 0):
            waiting = summary_from_rows(saga, count).waiting_for
            if waiting is not None:
                counts[waiting["kind"]] += 1
    return counts


class StoreBase:
    """The public methods every store builds on its primitives.

    A store subclassing it declares no capability unless it says so (`capabilities`).
    """

    capabilities: frozenset[Capability] = frozenset()

    @asynccontextmanager
    async def queue_wakeups(self, wake: Callable[[str], None]) -> AsyncIterator[bool]:
        """Yield False: no wakeups, workers poll."""
        yield False

    async def get_saga(self: SagaStore, saga_id: str) -> SagaResult | None:
        """Return the result of a stored saga, or None."""
        return await get_saga(self, saga_id)

    async def verify_saga(self: SagaStore, saga_id: str) -> VerifyResult:
        """Check a stored saga's hash chain; the result is falsy, naming altered records, if any."""
        return await verify_saga(self, saga_id)

    async def export_saga(self: SagaStore, saga_id: str) -> dict[str, Any]:
        """Return a saga as a versioned JSON-able document; raise `KeyError` if not stored."""
        return await export_saga(self, saga_id)

    async def import_saga(self: SagaStore, data: Mapping[str, Any]) -> None:
        """Store an exported saga; the same again is a no-op, other content a conflict."""
        await import_saga(self, data)

    async def list_sagas(
        self: SagaStore,
        status: SagaStatus | str | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        reason: str | None = None,
    ) -> list[SagaSummary]:
        """Return summaries of stored sagas, newest first, optionally of one `status` and one end `reason`
        (`SagaResult.end_reason`: "failed", "cancelled", ...).
        """
        return await list_sagas(self, status, limit, offset, reason=reason)

    async def purge(
        self: SagaStore,
        *,
        older_than: timedelta | float,
        statuses: Iterable[SagaStatus | str] | None = None,
        archive: ArchiveTarget | None = None,
        dry_run: bool = False,
        limit: int | None = None,
    ) -> PurgeReport:
        """Reduce terminal sagas finished over `older_than` ago to tombstones.

        `statuses` defaults to SUCCESS and COMPENSATED; held sagas are never touched. `archive` (a path or an
        async callable) gets each export first. `dry_run` only reports.
        """
        return await _retention.purge(
            self, older_than=older_than, statuses=statuses, archive=archive, dry_run=dry_run, limit=limit
        )

    async def hold(self: SagaStore, saga_id: str, *, reason: str) -> None:
        """Hold a saga from purges until released; raise `KeyError` if unknown."""
        await _retention.hold(self, saga_id, reason)

    async def unhold(self: SagaStore, saga_id: str) -> bool:
        """Release a saga's hold; return whether it was held."""
        return await _retention.unhold(self, saga_id)

    async def holds(self: SagaStore) -> list[SagaHold]:
        """Return every hold (saga id, reason, when), oldest first."""
        return await _retention.holds(self)
