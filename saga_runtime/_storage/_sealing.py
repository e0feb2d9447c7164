"""Sealing as a store writes: every seal of a record (step, saga and approval rows) is computed here.

The engine hands rows unsealed (`hash` None), each step row with its link (`prev_hash`, fixed when the step is
created), so a store seals without reading anything back. A row given sealed (an import) is kept as it is. The
seal functions themselves are saga_runtime._records._chain's and ._approvals': their format is the record's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from saga_runtime._records import (
    ApprovalRow,
    SagaRow,
    SagaStatus,
    Sealer,
    StepRow,
    identity_hash,
    planned_identities,
    seal,
    seal_approval,
    seal_saga,
)

__all__ = ["Sealing"]

# Sagas whose hash states are kept at once (oldest dropped first: a seal then starts afresh, nothing else).
_KEPT = 1024
_LIVE = frozenset({SagaStatus.RUNNING, SagaStatus.COMPENSATING})


class Sealing:
    """Seal the rows one store writes, with its signing key; keep each live saga's step hash states between writes."""

    __slots__ = ("_key", "_sealers")

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key
        self._sealers: dict[str, Sealer] = {}

    @property
    def key(self) -> bytes | None:
        """Return the signing key (None: plain SHA-256 seals)."""
        return self._key

    @key.setter
    def key(self, key: bytes | None) -> None:
        self._key = key
        self._sealers.clear()  # their states were keyed with the old key

    def steps(self, rows: Sequence[StepRow]) -> None:
        """Seal the unsealed rows among `rows`, keeping what was hashed for the next seals of the same rows."""
        sealers = self._sealers
        for row in rows:
            if row.hash is not None:
                continue
            sealer = sealers.get(row.saga_id)
            if sealer is None:
                if len(sealers) >= _KEPT:
                    del sealers[next(iter(sealers))]
                sealer = sealers[row.saga_id] = Sealer(self._key)
            sealer.seal(row, row.prev_hash)  # (None: an unlinked row; verify says so)

    def steps_once(self, rows: Sequence[StepRow]) -> None:
        """Seal `rows` (unsealed, each sealed once: no hash state kept)."""
        key = self._key
        for row in rows:
            if row.prev_hash is not None:
                seal(row, row.prev_hash, key)
            else:  # an unlinked row: sealed as it is (verify says it links to nothing)
                Sealer(key).seal(row, None)

    def link_and_seal(self, saga: SagaRow, rows: Sequence[StepRow], stored: Iterable[StepRow]) -> None:
        """Link the unlinked rows among `rows` as the engine would have, then seal `rows` (each once).

        A row links to the identity of the row before it: the stored one (`stored`: every step row of the saga),
        or, for a plan's step never started (no row), the planned one; the first links to the saga id.
        """
        by_seq: dict[int, StepRow] | None = None
        planned: list[StepRow] | None = None
        for row in rows:
            if row.prev_hash is not None:
                continue
            if by_seq is None:
                by_seq = {step.seq: step for step in stored}
            previous = by_seq.get(row.seq - 1)
            if previous is None and row.seq > 0:
                if planned is None:
                    planned = planned_identities(saga) or []
                previous = planned[row.seq - 1] if row.seq - 1 < len(planned) else None
            row.prev_hash = identity_hash(previous, row.saga_id)
        self.steps_once(rows)

    def saga(self, saga: SagaRow, *, reseal: bool = True) -> None:
        """Seal a saga row; with `reseal` False its seal is kept (no sealed field changed), unless it has none.

        A saga no longer live has its steps' hash states dropped.
        """
        key = self._key
        current = saga.seal
        if reseal or current is None or current.startswith("hmac:") is (key is None):
            seal_saga(saga, key)
        if saga.status not in _LIVE:
            self._sealers.pop(saga.saga_id, None)

    def approvals(self, rows: Sequence[ApprovalRow]) -> None:
        """Seal the unsealed approval rows among `rows`, each to its step (its link, `prev_hash`)."""
        for row in rows:
            if row.hash is None:
                seal_approval(row, row.prev_hash or "", self._key)
