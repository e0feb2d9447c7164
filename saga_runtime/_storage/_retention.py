"""Retention over any store (API.md §14): purge finished sagas to tombstones, archive them first, hold some back.

A purge checks everything it is given before it changes anything, then asks the store for one bounded batch at a
time (`purge_batch`: one transaction of at most a few hundred sagas), so running sagas and other workers go on
beside it. Each batch is archived (appended and flushed) before its rows go; a saga whose archiving fails is not
purged, and the error is raised once the sagas before it are.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from saga_runtime._records import PurgeReport, SagaHold, SagaRow, SagaStatus, now, seal_saga

if TYPE_CHECKING:
    from saga_runtime._storage._base import SagaStore

__all__ = [
    "DEFAULT_PURGE_STATUSES",
    "Archive",
    "ArchiveTarget",
    "RetentionStore",
    "check_statuses",
    "hold",
    "purge",
    "tombstone",
    "unhold",
]

#: What a purge removes unless told otherwise: COMPENSATION_FAILED needs an operator, so only when named.
DEFAULT_PURGE_STATUSES = (SagaStatus.SUCCESS, SagaStatus.COMPENSATED)
# Sagas per batch (one transaction) unless the store says otherwise.
_BATCH = 200

ArchiveTarget = str | os.PathLike[str] | Callable[[dict[str, Any]], Awaitable[Any]]


class RetentionStore(Protocol):
    """The primitives of retention each store brings (one transaction each)."""

    async def purge_candidates(
        self, cutoff: datetime, statuses: Sequence[SagaStatus], limit: int, offset: int
    ) -> list[str]:
        """Return the ids a purge would remove now, oldest finished first (nothing locked, nothing changed)."""
        ...

    async def purge_batch(
        self, cutoff: datetime, statuses: Sequence[SagaStatus], limit: int, archive: Archive | None, at: datetime
    ) -> tuple[list[str], Exception | None]:
        """Purge up to `limit` sagas (archived first) in one transaction; return their ids and an archive error."""
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


def tombstone(saga: SagaRow, at: datetime, key: bytes | None) -> SagaRow:
    """Return the tombstone of a finished saga: its id, status, plan hash, times, cost and tokens, sealed again."""
    kept = replace(
        saga, plan=None, budget=None, metadata={}, error=None, owner=None, lease_expires_at=None, purged_at=at
    )
    seal_saga(kept, key)
    return kept


class Archive:
    """Where purged sagas go first: a file (one export per line, appended and flushed) or an async callable."""

    def __init__(self, target: ArchiveTarget) -> None:
        self._call: Callable[[dict[str, Any]], Awaitable[Any]] | None = None
        self._path: Path | None = None
        self._file: Any = None
        if callable(target):
            self._call = target
            self.name = getattr(target, "__qualname__", repr(target))
        elif isinstance(target, str | os.PathLike):
            self._path = Path(target)
            self.name = str(target)
        else:
            raise TypeError(f"archive must be a file path or an async callable, not {type(target).__name__}")

    def check(self, *, create: bool) -> None:
        """Raise ValueError if the file cannot be appended to; with `create`, open it (made if absent)."""
        if self._path is None:
            return
        path = self._path
        if path.is_dir():
            raise ValueError(f"archive {str(path)!r} is a directory; give a file path")
        if not create:
            folder = path.parent if not path.exists() else path
            if not os.access(folder, os.W_OK):
                raise ValueError(f"archive {str(path)!r} cannot be written")
            return
        try:
            self._file = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"archive {str(path)!r} cannot be written: {exc.strerror or exc}") from None

    async def put(self, documents: Sequence[dict[str, Any]]) -> tuple[int, Exception | None]:
        """Archive exports in order; return how many are archived, and the error that stopped the rest."""
        if self._call is not None:
            for done, document in enumerate(documents):
                try:
                    await self._call(document)
                except Exception as exc:
                    return done, exc
            return len(documents), None
        try:
            lines = [json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n" for document in documents]
            self._file.writelines(lines)
            self._file.flush()
            os.fsync(self._file.fileno())  # on disk before the rows go
        except Exception as exc:  # a disk full: nothing of this batch counts as archived
            return 0, exc
        return len(documents), None

    def close(self) -> None:
        """Close the archive file, if one is open."""
        if self._file is not None:
            self._file.close()
            self._file = None


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
    """Return the statuses a purge removes; raise ValueError naming one that is not terminal."""
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
    """Purge the terminal sagas that finished more than `older_than` ago (see the module docstring)."""
    cutoff = _cutoff(older_than)
    wanted = check_statuses(statuses)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be an int >= 0 or None, not {limit!r}")
    box = None if archive is None else Archive(archive)
    retention = cast(RetentionStore, store)
    batch = int(getattr(store, "purge_batch_size", _BATCH))
    ids: list[str] = []
    if box is not None:
        box.check(create=not dry_run)  # before the first deletion
    try:
        while limit is None or len(ids) < limit:
            size = batch if limit is None else min(batch, limit - len(ids))
            if dry_run:
                found = await retention.purge_candidates(cutoff, wanted, size, len(ids))
                error = None
            else:
                found, error = await retention.purge_batch(cutoff, wanted, size, box, now())
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
    """Hold a saga: never purged until released; raise KeyError if no saga has the id."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("a hold needs a reason (who asked for it, and why)")
    retention = cast(RetentionStore, store)
    if not await retention.hold_saga(saga_id, reason, now()):
        raise KeyError(f"no saga {saga_id!r} in {store.url}; nothing was held")


async def unhold(store: SagaStore, saga_id: str) -> bool:
    """Release a saga's hold; return whether it was held."""
    retention = cast(RetentionStore, store)
    return await retention.unhold_saga(saga_id)
