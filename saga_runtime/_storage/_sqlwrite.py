"""Writes on any SQL dialect: rows made into a Write, and a batch of writes written statement by statement.

The drivers write batches their own, cheaper way (one statement on PostgreSQL, one script on MySQL, one thread hop
on SQLite); this is the plain form they fall back on, and the reference for what a batch must do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from saga_runtime._records import SagaRow, StepRow
from saga_runtime._storage._batch import Outcome, Write
from saga_runtime._storage._codec import RowCodec
from saga_runtime._storage._sql import Queries

__all__ = ["Transaction", "gated", "passed_rows", "write_by_statements", "write_of"]

# Ids per `IN (...)` list: well under every driver's limit on parameters of one statement.
_IN_CHUNK = 500


class Transaction(Protocol):
    """What the shared store code needs of a driver inside one transaction."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; return the number of rows it changed."""
        ...

    async def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each parameter tuple, in as few round trips as the driver allows."""
        ...

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Sequence[Any]]:
        """Run a query; return its records as sequences of column values."""
        ...


def write_of(
    codec: RowCodec,
    what: str,
    saga: SagaRow | None,
    steps: Sequence[StepRow],
    *,
    owner: str | None = None,
    create: bool = False,
) -> Write | None:
    """Return the write of some rows as parameters (refusing values that cannot be stored); None if empty."""
    saga_params = None if saga is None else codec.saga_params(saga)
    # One row per step: a statement may touch a row once, and the last version of a row is the one that counts.
    by_step = {(row.saga_id, row.step_id): codec.step_params(row) for row in steps}
    if saga_params is None and not by_step:
        return None
    keys = frozenset(saga_id for saga_id, _ in by_step) | ({saga.saga_id} if saga is not None else set())
    saga_id = saga.saga_id if saga is not None else min(keys)
    if owner is not None and len(keys) > 1:
        raise ValueError(f"an owner-conditional save writes the rows of one saga, not of {sorted(keys)}")
    rows = list(by_step.values())
    # The bulk of a write is its JSON (plan, metadata; args, result): what keeps a batch's statement in bounds,
    # counted in UTF-8 bytes (a character may take four).
    size = sum(_bytes(row[5]) + _bytes(row[9]) for row in rows)
    if saga_params is not None:
        size += _bytes(saga_params[2]) + _bytes(saga_params[10])
    return Write(what, saga_id, saga_params, rows, owner=owner, create=create, keys=keys, size=size)


def _bytes(text: str | None) -> int:
    """Return the size of a JSON text in UTF-8 bytes (0 for None)."""
    if text is None:
        return 0
    return len(text) if text.isascii() else len(text.encode())


async def write_by_statements(
    transaction: Callable[..., AbstractAsyncContextManager[Transaction]],
    q: Queries,
    codec: RowCodec,
    writes: Sequence[Write],
    atomic_batches: bool,
) -> list[Outcome | Exception]:
    """Write a batch in one transaction (`transaction(begin=...)`), statement by statement.

    An owner-conditional write's saga row is read under a row lock first, so no claim slips in between the check
    and the write; a create inserts its saga only if the id is free, and its steps only then. Unconditional rows
    of one table, with a driver whose executemany is atomic (`atomic_batches`), need no transaction of their own.
    """
    sagas = [write.saga for write in writes if write.saga is not None]
    steps = [row for write in writes for row in write.steps]
    plain = not any(write.owner is not None or write.create for write in writes)
    if plain and (len(sagas) + len(steps) == 1 or (atomic_batches and not (sagas and steps))):
        async with transaction(begin=False) as tx:
            if sagas:
                await tx.executemany(q.upsert_saga, sagas)
            if steps:
                await tx.executemany(q.upsert_steps, steps)
        return [Outcome.WRITTEN] * len(writes)
    async with transaction(begin=True) as tx:
        checked = sorted({write.saga_id for write in writes if write.owner is not None})
        gates = gated(writes, await _owners(tx, q, codec, checked))
        for i, write in enumerate(writes):
            if gates[i] is None and write.create and await tx.execute(q.insert_saga, write.saga or ()) != 1:
                gates[i] = Outcome.TAKEN
        outcomes, sagas, steps = passed_rows(writes, gates)
        if sagas:
            await tx.executemany(q.upsert_saga, sagas)
        if steps:
            await tx.executemany(q.upsert_steps, steps)
    return outcomes


def gated(writes: Sequence[Write], owners: Mapping[str, str | None]) -> list[Outcome | None]:
    """Return LOST for each owner-conditional write whose saga has another owner (or none), None for the rest.

    A driver then inserts the saga of each create still None, setting TAKEN where the id was taken.
    """
    return [
        Outcome.LOST if write.owner is not None and owners.get(write.saga_id) != write.owner else None
        for write in writes
    ]


def passed_rows(
    writes: Sequence[Write], gates: Sequence[Outcome | None]
) -> tuple[list[Outcome | Exception], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Return each write's outcome (WRITTEN where its gate let it pass), and the saga rows (not those of creates,
    inserted already) and step rows of the writes that passed, for the driver to upsert."""
    outcomes: list[Outcome | Exception] = []
    sagas: list[tuple[Any, ...]] = []
    steps: list[tuple[Any, ...]] = []
    for write, gate in zip(writes, gates, strict=True):
        if gate is not None:
            outcomes.append(gate)
            continue
        if write.saga is not None and not write.create:
            sagas.append(write.saga)
        steps.extend(write.steps)
        outcomes.append(Outcome.WRITTEN)
    return outcomes, sagas, steps


async def _owners(tx: Transaction, q: Queries, codec: RowCodec, saga_ids: Sequence[str]) -> dict[str, str | None]:
    """Return the owners of stored sagas, their rows locked for the rest of the transaction (SQLite: all are)."""
    owners: dict[str, str | None] = {}
    lock = "" if q.dialect == "sqlite" else " FOR UPDATE"
    for start in range(0, len(saga_ids), _IN_CHUNK):
        chunk = saga_ids[start : start + _IN_CHUNK]
        sql = q._in("SELECT saga_id, owner FROM sagas WHERE saga_id IN (*)" + lock, len(chunk))
        for saga_id, owner in await tx.fetch(sql, chunk):
            owners[codec.id_out(saga_id)] = owner
    return owners
