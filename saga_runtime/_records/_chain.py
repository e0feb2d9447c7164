"""The hash chain over a saga's step records: an edited, removed or reordered record is detected.

Step rows change as a saga runs (RUNNING, then SUCCESS, then maybe COMPENSATED), so the chain links what never
changes and seals what does:

- `prev_hash` of a row is the hash of the previous row's identity (saga, position, step id, group, tool,
  idempotency key); the first row links to the saga id. Removing or reordering rows breaks these links.
- `hash` of a row seals its whole content, `prev_hash` included, with SHA-256, or HMAC-SHA-256 when a signing key
  is configured. Editing any field of a row breaks its seal.
- A plan saga's rows must be exactly the steps of its plan (whose hash is stored); a dynamic saga stores the
  head of its identity chain in `plan_hash`, so a removed last record is detected as well.

Updating one row re-seals that row only: a store write stays one row per changed step. The saga row itself is
not sealed; with a signing key, a row can only be re-sealed by someone holding the key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from saga_runtime._records._rows import SagaRow, StepRow, plan_groups

__all__ = ["VerifyResult", "chain_head", "extend_head", "identity_hash", "seal", "seal_all", "verify_rows"]


def _normal(value: Any) -> Any:
    """Return a JSON value in the one form every database gives back (integral floats as ints)."""
    kind = type(value)
    if kind is dict:
        return {key: _normal(item) for key, item in value.items()}
    if kind is list:
        return [_normal(item) for item in value]
    if kind is float and value.is_integer():
        return int(value)
    return value


_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
# The stdlib's C encoder, built once: json.dumps builds one per call, which costs more than the encoding of a
# row. Same output (sorted keys, no spaces, float repr); the values were checked JSON-able when stored.
_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_encode = (
    None
    if _c_encoder is None
    else _c_encoder(None, None, json.encoder.encode_basestring, None, ":", ",", True, False, False)
)


def _text(value: Any) -> str:
    if _encode is None:
        return _dumps(value)
    return "".join(_encode(value, 0))


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def identity_hash(row: StepRow | None, saga_id: str) -> str:
    """Return the hash of a row's identity (what never changes), or of the saga id for the link before the first."""
    if row is None:
        parts: list[Any] = ["saga", saga_id]
    else:
        parts = [row.saga_id, row.seq, row.step_id, row.group, row.tool_name, row.idempotency_key]
    return hashlib.sha256(_text(parts).encode()).hexdigest()


def _content(row: StepRow) -> bytes:
    return _text(
        [
            row.saga_id,
            row.seq,
            row.step_id,
            row.group,
            row.tool_name,
            _normal(row.args),
            row.idempotency_key,
            row.status.value,
            row.attempts,
            _normal(row.result),
            row.error,
            row.error_type,
            _time(row.started_at),
            _time(row.finished_at),
            _time(row.compensated_at),
            row.compensation_error,
            row.compensation_attempts,
            row.prev_hash,
        ]
    ).encode()


def _seal_of(row: StepRow, key: bytes | None) -> str:
    content = _content(row)
    if key is None:
        return hashlib.sha256(content).hexdigest()
    return "hmac:" + hmac.new(key, content, hashlib.sha256).hexdigest()


def seal(row: StepRow, previous: StepRow | str | None, key: bytes | None) -> None:
    """Link `row` to the row before it (or to that row's identity hash, if known) and seal its content."""
    row.prev_hash = previous if isinstance(previous, str) else identity_hash(previous, row.saga_id)
    row.hash = _seal_of(row, key)


def extend_head(head: str | None, row: StepRow) -> str:
    """Return the chain head after `row` is added (None: the head of a saga without records)."""
    start = head if head is not None else identity_hash(None, row.saga_id)
    return hashlib.sha256((start + identity_hash(row, row.saga_id)).encode()).hexdigest()


def chain_head(rows: Sequence[StepRow]) -> str | None:
    """Return the head of the identity chain of `rows` (in order): what a dynamic saga stores as its plan_hash."""
    head = None
    for row in rows:
        head = extend_head(head, row)
    return head


def seal_all(rows: Sequence[StepRow], key: bytes | None) -> None:
    """Link and seal every row of a saga, in order."""
    previous = None
    for row in sorted(rows, key=lambda r: r.seq):
        seal(row, previous, key)
        previous = row


@dataclass(frozen=True)
class VerifyResult:
    """The verdict of `store.verify_saga`: truthy when the record is intact; `problems` says what broke where."""

    saga_id: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    signed: bool = False

    def __bool__(self) -> bool:
        return self.ok


def verify_rows(saga: SagaRow, rows: Sequence[StepRow], key: bytes | None) -> VerifyResult:
    """Check a saga's step rows against their chain, their seals and the saga's plan."""
    problems: list[str] = []
    ordered = sorted(rows, key=lambda row: row.seq)
    for position, row in enumerate(ordered):
        where = f"record #{position} (step {row.step_id!r})"
        if row.seq != position:
            problems.append(f"{where}: stands at position {row.seq}; a record before it was removed or moved")
        previous = ordered[position - 1] if position else None
        if row.prev_hash != identity_hash(previous, saga.saga_id):
            problems.append(f"{where}: does not link to the record before it (removed, inserted or reordered)")
        if row.hash is None:
            problems.append(f"{where}: carries no seal")
        elif row.hash != _seal_of(row, key):
            if key is not None and not row.hash.startswith("hmac:"):
                problems.append(f"{where}: is not signed, but a signing key is configured")
            elif key is None and row.hash.startswith("hmac:"):
                problems.append(f"{where}: is signed; configure the signing key to verify it")
            else:
                problems.append(f"{where}: its content does not match its seal (altered)")
    if saga.kind == "plan" and isinstance(saga.plan, list):
        planned = [step.get("id") for group in plan_groups(saga.plan) for step in group if isinstance(step, dict)]
        if [row.step_id for row in ordered] != planned:
            problems.append(f"the records are not the plan's steps: {len(ordered)} records for {len(planned)} steps")
    elif saga.kind == "dynamic" and saga.plan_hash != chain_head(ordered):
        problems.append("the saga's chain head does not match its records: a record was removed or added")
    return VerifyResult(saga.saga_id, not problems, problems, signed=key is not None)
