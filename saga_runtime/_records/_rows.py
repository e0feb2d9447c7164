"""The rows every store persists: a saga and its steps, as plain slotted dataclasses.

The engine mutates its own rows while it runs and hands them to the store, which keeps snapshots; pydantic models
(`SagaResult`, `StepRecord`) are built from rows only at the edges, where users read them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, Protocol

__all__ = [
    "SagaKind",
    "SagaRow",
    "SagaStatus",
    "StepRow",
    "StepStatus",
    "canonical_json",
    "idempotency_key",
    "idempotency_keys",
    "key_parts",
    "now",
    "plan_groups",
    "plan_joins",
    "planned_rows",
    "planned_version",
    "snapshots",
    "step_succeeded",
    "with_unstarted",
]

SagaKind = Literal["plan", "dynamic"]


class SagaStatus(StrEnum):
    """Where a saga stands.

    RUNNING and COMPENSATING are live (an owner drives them; recovery takes them over when the owner is gone).
    SUCCESS, COMPENSATED and COMPENSATION_FAILED are terminal. PARKED is neither: recovery failed on it too many
    times, so it waits for an operator (`executor.unpark(saga_id)`) instead of being retried forever. WAITING is
    neither: it stopped before a group holding a step that needs a person's approval; nothing of it runs and no
    executor holds its lease until every request of that group is decided (`executor.approve` / `reject`).
    QUEUED is neither: submitted to a queue, it waits for a worker serving that queue to start it.
    """

    RUNNING = "RUNNING"
    COMPENSATING = "COMPENSATING"
    SUCCESS = "SUCCESS"
    COMPENSATED = "COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    PARKED = "PARKED"
    WAITING = "WAITING"
    QUEUED = "QUEUED"

    @property
    def is_terminal(self) -> bool:
        """Tell whether the saga has ended (no tool of it will run again)."""
        return self in _TERMINAL


_TERMINAL = frozenset({SagaStatus.SUCCESS, SagaStatus.COMPENSATED, SagaStatus.COMPENSATION_FAILED})


class StepStatus(StrEnum):
    """Where a step ended up.

    PENDING: never started. RUNNING: about to run or running (after a crash: outcome unknown).
    SUCCESS: `execute` returned. FAILED: `execute` raised on its last attempt; no effect, never compensated.
    CANCELLED: stopped while running (a sibling failed, the caller left, or the last attempt timed out); its
    effect is unknown, so it is compensated with `result=None` when the saga compensates.
    COMPENSATED / COMPENSATION_FAILED: the step's compensation succeeded / gave up; `error` keeps why the step
    itself stopped, if it did.
    WAITING: the step waits for a person's decision and never ran. REJECTED: a person (or the request's deadline)
    refused it; it never ran, has no effect and is never compensated.
    """

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    COMPENSATED = "COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    WAITING = "WAITING"
    REJECTED = "REJECTED"


def now() -> datetime:
    """Return the current time, timezone-aware in UTC (every stored time is)."""
    return datetime.now(UTC)


def idempotency_key(saga_id: str, step_id: str) -> str:
    """Return the idempotency key of a step: stable for (saga, step), distinct for any other pair."""
    if type(saga_id) is str and type(step_id) is str:
        # The text json.dumps([saga_id, step_id]) writes, without building an encoder per call.
        text = f"[{_ascii(saga_id)}, {_ascii(step_id)}]"
    else:
        text = json.dumps([saga_id, step_id])
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"sr-{digest[:40]}"


def key_parts(step_ids: Sequence[str]) -> list[bytes]:
    """Return each step id's part of the text its idempotency key hashes (ids of type str; see `idempotency_keys`)."""
    return [f"{_ascii(step_id)}]".encode() for step_id in step_ids]


def idempotency_keys(saga_id: str, step_ids: list[str], parts: Sequence[bytes] | None = None) -> list[str]:
    """Return `idempotency_key(saga_id, step_id)` for each step id, in order (the saga's part hashed once).

    `parts`: `key_parts(step_ids)`, kept by a plan that many sagas run (its ids are str).
    """
    if parts is None:
        if type(saga_id) is not str or not all(type(step_id) is str for step_id in step_ids):
            return [idempotency_key(saga_id, step_id) for step_id in step_ids]
        parts = key_parts(step_ids)
    elif type(saga_id) is not str:
        return [idempotency_key(saga_id, step_id) for step_id in step_ids]
    head = hashlib.sha256(f"[{_ascii(saga_id)}, ".encode())
    keys = []
    for part in parts:
        digest = head.copy()
        digest.update(part)
        keys.append("sr-" + digest.hexdigest()[:40])
    return keys


class KeyMaker:
    """The idempotency keys of one saga's steps (`idempotency_key`'s), the saga's part hashed once: a saga function
    makes its calls' keys one at a time."""

    __slots__ = ("_head", "_saga_id")

    def __init__(self, saga_id: str) -> None:
        self._saga_id = saga_id
        self._head = hashlib.sha256(f"[{_ascii(saga_id)}, ".encode()) if type(saga_id) is str else None

    def __call__(self, step_id: str) -> str:
        """Return the idempotency key of the saga's step `step_id`."""
        head = self._head
        if head is None or type(step_id) is not str:
            return idempotency_key(self._saga_id, step_id)
        part = _STEP_PARTS.get(step_id)
        if part is None:
            if len(_STEP_PARTS) >= _STEP_PARTS_KEPT:
                _STEP_PARTS.clear()
            part = _STEP_PARTS[step_id] = f"{_ascii(step_id)}]".encode()
        digest = head.copy()
        digest.update(part)
        return "sr-" + digest.hexdigest()[:40]


# Each step id's part of the text its key hashes (`key_parts`), by id: a saga function's calls have the same ids
# ("<tool>-<position>") in every saga it runs. (Bytes of an immutable str: never stale.)
_STEP_PARTS: dict[str, bytes] = {}
_STEP_PARTS_KEPT = 4096


def step_succeeded(status: StepStatus, error: str | None, finished_at: datetime | None) -> bool:
    """Tell whether a step's execute succeeded and counts: SUCCESS, or undone later with the saga.

    A step that lost a `first` race and was undone carries an error saying so, and does not count.
    """
    if status is StepStatus.SUCCESS:
        return error is None  # a `first` loser that could not be undone stays SUCCESS, marked as lost
    undone = status is StepStatus.COMPENSATED or status is StepStatus.COMPENSATION_FAILED
    return undone and error is None and finished_at is not None


_LISTS = frozenset({list})


def plan_joins(plan: Any) -> dict[str, tuple[int, str]]:
    """Return the ids a stored plan gives its groups, with each group's index and join mode."""
    joins: dict[str, tuple[int, str]] = {}
    if type(plan) is list and _LISTS.issuperset(map(type, plan)):
        return joins  # every group a plain list (the common case): none has an id (checked by a loop in C)
    for g, group in enumerate(plan if isinstance(plan, list) else []):
        if isinstance(group, dict) and isinstance(group.get("id"), str):
            joins[group["id"]] = (g, str(group.get("join", "all")))
    return joins


def plan_groups(plan: Any) -> list[list[Any]]:
    """Return the steps of each group of a stored plan (a group is a list, or `{"group": [...], "join": ...}`)."""
    if not isinstance(plan, list):
        return []
    groups = []
    for group in plan:
        members = group.get("group") if isinstance(group, dict) else group
        groups.append(list(members) if isinstance(members, list) else [])
    return groups


def _planned_steps(plan: Any) -> int:
    """Return how many steps a stored plan holds (as `plan_groups` counts them, without copying its groups)."""
    count = 0
    for group in plan if isinstance(plan, list) else ():
        members = group.get("group") if isinstance(group, dict) else group
        if isinstance(members, list):
            count += len(members)
    return count


def planned_version(step: Any) -> str:
    """Return the tool version a stored plan's step was planned with (a plan stores it when it is not "1")."""
    version = step.get("version") if isinstance(step, dict) else None
    return version if isinstance(version, str) else "1"


_ascii = json.encoder.encode_basestring_ascii
# The stdlib's C encoder, built once: json.dumps builds an encoder per call, which costs more than encoding a small
# value. Same output as `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
# allow_nan=False)`; it has no circular-reference check and no `default`, so a value it refuses is encoded again
# by json.dumps, which raises the usual error.
_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_encode = (
    None
    if _c_encoder is None
    else _c_encoder(None, None, json.encoder.encode_basestring, None, ":", ",", True, False, False)
)


def _slow_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """Return the one JSON text of a JSON-able value: sorted keys, no spaces; used for hashes and comparisons."""
    if _encode is None:
        return _slow_json(value)
    try:
        return "".join(_encode(value, 0))
    except (TypeError, ValueError, RecursionError):
        return _slow_json(value)


@dataclass(slots=True)
class StepRow:
    """One step of a saga as stored: its call, its outcome, and its compensation."""

    saga_id: str
    seq: int
    step_id: str
    group: int
    tool_name: str
    args: Any
    idempotency_key: str
    status: StepStatus = StepStatus.PENDING
    attempts: int = 0
    result: Any = None
    error: str | None = None
    error_type: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    compensated_at: datetime | None = None
    compensation_error: str | None = None
    compensation_attempts: int = 0
    prev_hash: str | None = None
    hash: str | None = None
    # The version of the tool the step was planned with, and whether `reconcile` settled its unknown outcome.
    tool_version: str = "1"
    reconciled: bool = False

    def copy(self) -> StepRow:
        """Return a snapshot of this row (values are JSON data that is never mutated in place)."""
        # Slot by slot into a bare instance: calling the class with 21 arguments builds (and frees) a tuple of them
        # and goes through type_call and __init__, twice what the stores cost; this is the hot path (a write each).
        new = _new_object(StepRow)
        new.saga_id = self.saga_id
        new.seq = self.seq
        new.step_id = self.step_id
        new.group = self.group
        new.tool_name = self.tool_name
        new.args = self.args
        new.idempotency_key = self.idempotency_key
        new.status = self.status
        new.attempts = self.attempts
        new.result = self.result
        new.error = self.error
        new.error_type = self.error_type
        new.started_at = self.started_at
        new.finished_at = self.finished_at
        new.compensated_at = self.compensated_at
        new.compensation_error = self.compensation_error
        new.compensation_attempts = self.compensation_attempts
        new.prev_hash = self.prev_hash
        new.hash = self.hash
        new.tool_version = self.tool_version
        new.reconciled = self.reconciled
        return new


_new_object = object.__new__


def snapshots(rows: Iterable[StepRow], step_ids: Container[str]) -> list[StepRow]:
    """Return a snapshot (`StepRow.copy`'s) of each row whose step is one of `step_ids`, in order: built in one
    loop, as a new saga's store gets one per step announced with it."""
    out: list[StepRow] = []
    add, new_object = out.append, _new_object
    for row in rows:
        if row.step_id not in step_ids:
            continue
        new = new_object(StepRow)
        new.saga_id = row.saga_id
        new.seq = row.seq
        new.step_id = row.step_id
        new.group = row.group
        new.tool_name = row.tool_name
        new.args = row.args
        new.idempotency_key = row.idempotency_key
        new.status = row.status
        new.attempts = row.attempts
        new.result = row.result
        new.error = row.error
        new.error_type = row.error_type
        new.started_at = row.started_at
        new.finished_at = row.finished_at
        new.compensated_at = row.compensated_at
        new.compensation_error = row.compensation_error
        new.compensation_attempts = row.compensation_attempts
        new.prev_hash = row.prev_hash
        new.hash = row.hash
        new.tool_version = row.tool_version
        new.reconciled = row.reconciled
        add(new)
    return out


_PENDING = StepStatus.PENDING  # (a module global: an enum class's attribute is slow to read on Python 3.11)


class Planned(Protocol):
    """What `planned_rows` reads of a planned step (the planning layer's, not imported here)."""

    @property
    def step_id(self) -> str: ...
    @property
    def group(self) -> int: ...
    @property
    def tool_name(self) -> str: ...
    @property
    def version(self) -> str: ...


def planned_rows(saga_id: str, steps: Sequence[Planned], args: Sequence[Any], keys: Sequence[str]) -> list[StepRow]:
    """Return a new saga's PENDING rows, one per planned step in order (`seq` its place), with its arguments and
    idempotency key by place: `StepRow(saga_id, seq, step_id, group, tool_name, args, key, tool_version=version)`,
    built slot by slot as `StepRow.copy` builds one (a saga builds one per planned step)."""
    if not len(steps) == len(args) == len(keys):
        raise ValueError(f"{len(steps)} steps, {len(args)} arguments and {len(keys)} keys")
    rows: list[StepRow] = []
    add, new_object, pending = rows.append, _new_object, _PENDING
    for seq, step in enumerate(steps):
        new = new_object(StepRow)
        new.saga_id = saga_id
        new.seq = seq
        new.step_id = step.step_id
        new.group = step.group
        new.tool_name = step.tool_name
        new.args = args[seq]
        new.idempotency_key = keys[seq]
        new.status = pending
        new.attempts = 0
        new.result = None
        new.error = None
        new.error_type = None
        new.started_at = None
        new.finished_at = None
        new.compensated_at = None
        new.compensation_error = None
        new.compensation_attempts = 0
        new.prev_hash = None
        new.hash = None
        new.tool_version = step.version
        new.reconciled = False
        add(new)
    return rows


@dataclass(slots=True)
class SagaRow:
    """One saga as stored: what it runs, where it stands, who owns it, and what it cost."""

    saga_id: str
    kind: SagaKind
    plan: Any
    plan_hash: str | None
    status: SagaStatus
    created_at: datetime
    updated_at: datetime
    owner: str | None = None
    lease_expires_at: datetime | None = None
    budget: dict[str, Any] | None = None
    cost: float = 0.0
    tokens: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    finished_at: datetime | None = None
    recovery_attempts: int = 0
    parked_from: SagaStatus | None = None
    # When a purge removed its steps and payloads (a tombstone: its id never runs again); None while it is whole.
    purged_at: datetime | None = None
    # What happened to the saga besides its steps, in order: takeovers and a cancel (JSON entries, sealed).
    history: list[dict[str, Any]] = field(default_factory=list)
    # The hash sealing the row's content (see saga_runtime._records._chain.seal_saga); set by the store as it writes
    # the row. Not part of a row's value: two rows with the same content are equal whether sealed or not.
    seal: str | None = field(default=None, compare=False)
    # Why a saga nobody drives does not move, as the last worker that looked noted it (a tool or version it lacks):
    # see saga_runtime._records._outcome. Not sealed, not part of the row's value: it changes as workers come and go.
    waiting_for: dict[str, Any] | None = field(default=None, compare=False)
    # The saga this one runs as a step of (`saga.child()`, API.md §18); None for a saga of its own. Set once, at
    # its creation: its parent drives it, and undoes it as a whole when the parent compensates.
    parent_id: str | None = None

    def copy(self) -> SagaRow:
        """Return a snapshot of this row (its metadata and history containers copied; see `StepRow.copy`)."""
        new = _new_object(SagaRow)
        new.saga_id = self.saga_id
        new.kind = self.kind
        new.plan = self.plan
        new.plan_hash = self.plan_hash
        new.status = self.status
        new.created_at = self.created_at
        new.updated_at = self.updated_at
        new.owner = self.owner
        new.lease_expires_at = self.lease_expires_at
        new.budget = self.budget
        new.cost = self.cost
        new.tokens = self.tokens
        new.metadata = dict(self.metadata)
        new.error = self.error
        new.finished_at = self.finished_at
        new.recovery_attempts = self.recovery_attempts
        new.parked_from = self.parked_from
        new.purged_at = self.purged_at
        new.history = list(self.history)
        new.seal = self.seal
        new.waiting_for = self.waiting_for
        new.parent_id = self.parent_id
        return new


def with_unstarted(saga: SagaRow, rows: list[StepRow]) -> list[StepRow]:
    """Return a plan saga's rows with a PENDING row for each planned step never started (no row written yet).

    A step's row is first written at its intent, so a stored saga holds rows only for steps that started; the
    others are read from its plan. Rows of other sagas are returned as they are.
    """
    if saga.kind != "plan" or len(rows) >= _planned_steps(saga.plan):
        return rows
    groups = plan_groups(saga.plan)
    have = {row.step_id for row in rows}
    out = list(rows)
    seq = 0
    for group, members in enumerate(groups):
        for step in members:
            step_id = step.get("id") if isinstance(step, dict) else None
            if isinstance(step_id, str) and step_id not in have:
                key = idempotency_key(saga.saga_id, step_id)
                tool, args = step.get("tool"), step.get("args")
                out.append(
                    StepRow(saga.saga_id, seq, step_id, group, tool, args, key, tool_version=planned_version(step))
                )
            seq += 1
    out.sort(key=lambda row: row.seq)
    return out
