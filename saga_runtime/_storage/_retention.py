"""Retention over any store: purge finished sagas to tombstones, archived first; holds.

A purge checks its arguments before changing anything, then works in bounded batches (one transaction each)
so other work goes on. A batch is archived and flushed before its rows go; a saga failing to archive stays,
and the error is raised once those before it are purged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from saga_runtime._records import PurgeReport, SagaRow, SagaStatus, now, seal_saga
from saga_runtime._storage._archive import Archive, ArchiveTarget
from saga_runtime._storage._base import retention_of

if TYPE_CHECKING:
    from saga_runtime._records import SagaHold
    from saga_runtime._storage._base import SagaStore

__all__ = [
    "DEFAULT_PURGE_STATUSES",
    "Archive",
    "ArchiveTarget",
    "check_statuses",
    "hold",
    "holds",
    "keeps_child",
    "purge",
    "tombstone",
    "unhold",
]

#: COMPENSATION_FAILED needs an operator: purged only when named.
DEFAULT_PURGE_STATUSES = (SagaStatus.SUCCESS, SagaStatus.COMPENSATED)


def keeps_child(parent: SagaRow | None) -> bool:
    """Tell whether a child saga's parent may still undo it (API.md §18), so the child is not purged: unless the
    parent is gone, purged, COMPENSATED, or SUCCESS and no child itself (a SUCCESS child may be undone with its own
    parent). A child's record is what its parent's compensation undoes: purged, its effects would stand."""
    if parent is None or parent.purged_at is not None:
        return False
    return not (
        parent.status is SagaStatus.COMPENSATED or (parent.status is SagaStatus.SUCCESS and parent.parent_id is None)
    )


def tombstone(saga: SagaRow, at: datetime, key: bytes | None) -> SagaRow:
    """Return a finished saga's tombstone (id, status, plan hash, times, cost, tokens), resealed."""
    kept = replace(
        saga, plan=None, budget=None, metadata={}, error=None, owner=None, lease_expires_at=None, purged_at=at
    )
    seal_saga(kept, key)
    return kept


def _cutoff(older_than: timedelta | float) -> datetime:
    if isinstance(older_than, timedelta):
        seconds = older_than.total_seconds()
    elif isinstance(older_than, int | float) and not isinstance(older_than, bool):
        seconds = float(older_than)
    else:
        raise TypeError(f"older_than must be a timedelta or seconds, not {type(older_than).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"older_than must be a duration >= 0, not {older_than!r}")
    return now() - timedelta(seconds=seconds)


def check_statuses(statuses: Iterable[SagaStatus | str] | None) -> tuple[SagaStatus, ...]:
    """Return the statuses to purge; raise ValueError naming a non-terminal one."""
    if statuses is None:
        return DEFAULT_PURGE_STATUSES
    if isinstance(statuses, str | SagaStatus):
        statuses = [statuses]
    wanted: list[SagaStatus] = []
    for status in statuses:
        try:
            value = SagaStatus(status)
        except ValueError:
            raise ValueError(f"unknown saga status {status!r}; purge takes terminal statuses") from None
        if not value.is_terminal:
            terminal = ", ".join(s.value for s in SagaStatus if s.is_terminal)
            raise ValueError(f"cannot purge {value.value} sagas: only terminal ones ({terminal}) are purged")
        if value not in wanted:
            wanted.append(value)
    if not wanted:
        raise ValueError("statuses is empty; name at least one terminal status, or leave it None")
    return tuple(wanted)


async def purge(
    store: SagaStore,
    *,
    older_than: timedelta | float,
    statuses: Iterable[SagaStatus | str] | None = None,
    archive: ArchiveTarget | None = None,
    dry_run: bool = False,
    limit: int | None = None,
) -> PurgeReport:
    """Purge terminal sagas finished more than `older_than` ago."""
    cutoff = _cutoff(older_than)
    wanted = check_statuses(statuses)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be an int >= 0 or None, not {limit!r}")
    kept = retention_of(store)
    box = None if archive is None else Archive(archive)
    batch = kept.purge_batch_size
    ids: list[str] = []
    if box is not None:
        box.check(create=not dry_run)  # before the first deletion
    try:
        while limit is None or len(ids) < limit:
            size = batch if limit is None else min(batch, limit - len(ids))
            if dry_run:
                found = await kept.purge_candidates(cutoff, wanted, size, len(ids))
                error = None
            else:
                found, error = await kept.purge_batch(cutoff, wanted, size, box, now())
            ids += found
            if error is not None:
                raise error
            if len(found) < size:
                break
    finally:
        if box is not None:
            box.close()
    return PurgeReport(len(ids), ids, None if box is None else box.name, dry_run)


async def hold(store: SagaStore, saga_id: str, reason: str) -> None:
    """Hold a saga from purges until released; raise KeyError if unknown."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("a hold needs a reason (who asked for it, and why)")
    if not await retention_of(store).hold_saga(saga_id, reason, now()):
        raise KeyError(f"no saga {saga_id!r} in {store.url}; nothing was held")


async def unhold(store: SagaStore, saga_id: str) -> bool:
    """Release a saga's hold; return whether it was held."""
    return await retention_of(store).unhold_saga(saga_id)


async def holds(store: SagaStore) -> list[SagaHold]:
    """Return every hold, oldest first."""
    return await retention_of(store).list_holds()
