"""Writes on any SQL dialect: rows made into a Write (parameters), and what a driver's transaction offers.

Each driver writes a batch its own way (one statement on PostgreSQL, one statement or script on MySQL, one thread
hop on SQLite), each write's condition folded into its statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from saga_runtime._records import SagaRow, StepRow
from saga_runtime._storage._batch import Write
from saga_runtime._storage._codec import SAGA_COLUMNS, RowCodec

__all__ = ["KEPT_LEASE_COLUMNS", "Transaction", "kept_lease", "write_of"]

# The saga row's lease among its parameters (SAGA_COLUMNS order), and the columns an update keeping it writes.
_LEASE = SAGA_COLUMNS.index("lease_expires_at")
KEPT_LEASE_COLUMNS = tuple(column for column in SAGA_COLUMNS if column != "lease_expires_at")


class Transaction(Protocol):
    """What the shared store code needs of a driver inside one transaction."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; return the number of rows it changed."""
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
    lease: bool = True,
) -> Write | None:
    """Return the write of some rows as parameters (refusing values that cannot be stored); None if empty.

    `lease` False: an owner-conditional update of the saga row leaves the stored lease as it is (`kept_lease`).
    """
    if saga is None and not steps:
        return None
    step_params = codec.step_params
    # The bulk of a write is its JSON (plan, metadata; args, result): what keeps a batch's statement in bounds,
    # counted in UTF-8 bytes (a character may take four).
    size = 0
    rows: list[tuple[Any, ...]] = []
    saga_id = None if saga is None else saga.saga_id
    mixed = False  # rows of more than one saga among them (the usual write's are all of one)
    for row in steps:
        params = step_params(row)
        rows.append(params)
        if row.saga_id != saga_id:
            if saga_id is None:
                saga_id = row.saga_id
            else:
                mixed = True
        args, result = params[5], params[9]
        if args is not None:
            size += len(args) if args.isascii() else len(args.encode())
        if result is not None:
            size += len(result) if result.isascii() else len(result.encode())
    if len(rows) > 1 and (
        _repeats(steps)
        if len(rows) > 2
        # (`_repeats` of the usual save's two rows, inlined)
        else steps[0].step_id == steps[1].step_id and steps[0].saga_id == steps[1].saga_id
    ):
        # One row per step: a statement may touch a row once, and the last version of a row is the one that counts.
        rows = list({(row.saga_id, row.step_id): params for row, params in zip(steps, rows, strict=True)}.values())
    saga_params = None
    if saga is not None:
        saga_params = codec.saga_params(saga)
        size += _bytes(saga_params[2]) + _bytes(saga_params[10])
    assert saga_id is not None
    keys = frozenset((saga_id,))
    if mixed:
        ids = {row.saga_id for row in steps}
        if saga is not None:
            ids.add(saga_id)
        if owner is not None:
            raise ValueError(f"an owner-conditional save writes the rows of one saga, not of {sorted(ids)}")
        keys = frozenset(ids)
        if saga is None:
            saga_id = min(ids)
    keep = not lease and saga_params is not None and owner is not None and not create
    # (Positional: a call with keywords costs the dataclass's __init__ a dict of them, on every write.)
    return Write(what, saga_id, saga_params, rows, owner, create, keep, keys, size)


def _repeats(steps: Sequence[StepRow]) -> bool:
    """Tell whether a step row appears twice among `steps`."""
    return len({(row.saga_id, row.step_id) for row in steps}) < len(steps)


def kept_lease(saga_params: Sequence[Any]) -> tuple[Any, ...]:
    """Return a saga row's parameters without its lease: those of KEPT_LEASE_COLUMNS."""
    return (*saga_params[:_LEASE], *saga_params[_LEASE + 1 :])


def _bytes(text: str | None) -> int:
    """Return the size of a JSON text in UTF-8 bytes (0 for None)."""
    if text is None:
        return 0
    return len(text) if text.isascii() else len(text.encode())
