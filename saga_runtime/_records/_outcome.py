"""How a saga ended and why it waits: `SagaResult.end_reason`, `effects_standing` and `waiting_for` (API.md §19).

The end is decided once, where the engine records the saga terminal: an `end` entry in the saga's history (sealed
with the row, so it survives every store and a purge). A record written before the entry existed is read by the
same rules from its steps. Why a saga waits is read from the record as it stands, and from the note a worker that
could not move it left on the row (`SagaRow.waiting_for`, not sealed: it changes as workers come and go).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from typing_extensions import TypedDict

from saga_runtime._records._queues import ACTIVE, QueueStanding
from saga_runtime._records._rows import SagaRow, SagaStatus, StepRow, StepStatus

__all__ = [
    "END_REASONS",
    "WAITING_KINDS",
    "EndReason",
    "WaitingFor",
    "WaitingKind",
    "end_entry",
    "end_of",
    "end_reason_of",
    "queue_waiting_of",
    "standing_of",
    "waiting_for_of",
    "waiting_note",
]

#: Why a saga that did not succeed ended (None: it succeeded, or has not ended).
EndReason = Literal["failed", "cancelled", "rejected", "budget", "deadline", "diverged", "timeout"]
END_REASONS: tuple[EndReason, ...] = ("failed", "cancelled", "rejected", "budget", "deadline", "diverged", "timeout")

#: What a saga that is neither live nor terminal waits for.
WaitingKind = Literal["decision", "message", "time", "tool", "version", "queue_paused", "limit", "parked"]
WAITING_KINDS: tuple[WaitingKind, ...] = (
    "decision",
    "message",
    "time",
    "tool",
    "version",
    "queue_paused",
    "limit",
    "parked",
)


class WaitingFor(TypedDict):
    """Why a QUEUED, WAITING or PARKED saga does not move: a kind, and what exactly (a tool, a time, ...)."""

    kind: WaitingKind
    detail: str


# Error types that say how a saga ended, whatever step raised them (the exception's class name, as recorded).
_BY_TYPE: dict[str, EndReason] = {
    "BudgetExceededError": "budget",
    "ReplayDivergenceError": "diverged",
}
_TIMEOUTS = frozenset({"TimeoutError", "AttemptTimeout"})
# Errors of steps stopped because of another's failure, or never started: they say nothing of the cause.
_SECONDARY = frozenset({"CancelledError", "NotRun", "Unknown"})
_CALLER_LEFT = "CancelledError"


# Statuses read for every saga's end, as module constants: Python 3.11 reads an enum class's attribute through
# EnumType.__getattr__'s slow hook, a module global at a fraction of its cost.
_SUCCESS, _STEP_SUCCESS, _REJECTED = SagaStatus.SUCCESS, StepStatus.SUCCESS, StepStatus.REJECTED


def end_reason_of(
    status: SagaStatus, rows: Iterable[StepRow], history: Sequence[dict[str, Any]], cause: str | None = None
) -> EndReason | None:
    """Return why a saga ended `status`: None for SUCCESS or a saga not ended.

    `cause`: the class name of the exception that failed the saga, when the engine knows it (the failed step's,
    the one leaving a dynamic saga's block; "CancelledError" when its caller left). An operator's cancel in the
    record wins; then a rejected approval; then a budget crossed or a divergence anywhere; then a timeout of
    the step that failed it; else "failed".
    """
    if status is _SUCCESS or not status.is_terminal:
        return None
    # A cancel that stopped the saga (one that reached it compensating or ending SUCCESS did not: older records
    # have no outcome and stopped it).
    if any(entry.get("kind") == "cancel" and entry.get("outcome") in (None, "cancelled") for entry in history):
        return "cancelled"
    ordered = sorted(rows, key=lambda row: row.seq)
    if any(row.status is _REJECTED for row in ordered):
        return "rejected"
    types = [] if cause is None else [cause]
    types += [row.error_type for row in ordered if row.error_type and row.error_type not in _SECONDARY]
    for error_type in types:
        if error_type in _BY_TYPE:
            return _BY_TYPE[error_type]
    if types and types[0] in _TIMEOUTS:
        return "timeout"
    if cause == _CALLER_LEFT:
        return "cancelled"
    return "failed"


def standing_of(status: SagaStatus, rows: Iterable[StepRow]) -> list[str]:
    """Return the ids of the steps whose effect stands after the saga compensated (still SUCCESS), in step order.

    A step compensation left SUCCESS is one of a tool without `compensate` (read-only, irreversible, or not
    undoable), or a race's loser that could not be undone. Empty for a saga that did not compensate.
    """
    if status is _SUCCESS or not status.is_terminal:
        return []
    return [row.step_id for row in sorted(rows, key=lambda row: row.seq) if row.status is _STEP_SUCCESS]


def end_entry(reason: EndReason | None, standing: list[str]) -> dict[str, Any]:
    """Return the history entry of a saga's end."""
    return {"kind": "end", "reason": reason, "effects_standing": standing}


def end_of(
    status: SagaStatus, rows: Iterable[StepRow], history: Sequence[dict[str, Any]]
) -> tuple[EndReason | None, list[str]]:
    """Return a saga's end reason and standing effects: as recorded, else read from its steps."""
    for entry in reversed(history):
        if entry.get("kind") == "end":
            reason = entry.get("reason")
            standing = entry.get("effects_standing")
            return (
                reason if reason in END_REASONS else None,
                [str(step) for step in standing] if isinstance(standing, list) else [],
            )
    if status is _SUCCESS or not status.is_terminal:
        return None, []
    rows = list(rows)
    return end_reason_of(status, rows, history), standing_of(status, rows)


def waiting_note(kind: WaitingKind, detail: str, *, by: str, at: datetime) -> dict[str, Any]:
    """Return the note a worker leaves on a saga it cannot move: what it lacks, who it is, and when it looked."""
    return {"kind": kind, "detail": detail, "by": by, "at": at.isoformat(timespec="seconds")}


def waiting_for_of(
    saga: SagaRow, pending: Sequence[tuple[str, str, datetime | None]] | None = None, *, now: datetime | None = None
) -> WaitingFor | None:
    """Return why `saga` does not move, or None when it is terminal, or live under an owner.

    `pending`: the undecided approval requests (step id, tool, deadline); None when they were not read (a list's
    line). A worker's note (`saga.waiting_for`: a tool or version it lacks) explains a saga nothing else holds.
    """
    status = saga.status
    if status is SagaStatus.PARKED:
        return {"kind": "parked", "detail": saga.error or "parked for an operator"}
    if status.is_terminal:
        return None
    live = status is SagaStatus.RUNNING or status is SagaStatus.COMPENSATING
    if live and saga.owner is not None and (now is None or (saga.lease_expires_at or now) > now):
        return None
    note = saga.waiting_for
    if status is SagaStatus.WAITING and (pending or (pending is None and note is None)):
        return {"kind": "decision", "detail": _decisions(pending) if pending else "a decision on its approvals"}
    if note is not None and note.get("kind") in WAITING_KINDS and isinstance(note.get("detail"), str):
        by = note.get("by")
        detail = note["detail"] + (f" (noted by worker {by} at {note.get('at')})" if by else "")
        return {"kind": note["kind"], "detail": detail}
    return None


def queue_waiting_of(standing: QueueStanding) -> WaitingFor | None:
    """Return why a QUEUED saga of an active-looking queue is not started, from where it stands in its queue: the
    queue paused or draining first, then its start time (`not_before`) not reached, then a limit its workers serve
    it with that is reached now (its key's concurrency, the queue's concurrency, its rate window); None when
    nothing known holds it back."""
    name = standing.queue
    if standing.state != ACTIVE:
        why = f"queue {name!r} is {standing.state}: resume it (saga-runtime queue resume {name}) to start its sagas"
        return {"kind": "queue_paused", "detail": why}
    if standing.not_before is not None and standing.not_before > datetime.now(UTC):
        start = standing.not_before.isoformat(timespec="seconds")
        return {"kind": "time", "detail": f"its start time (not_before): {start}"}
    per_key, key = standing.key_concurrency, standing.key
    if per_key is not None and key is not None and standing.key_running >= per_key:
        detail = (
            f"key {key!r} of queue {name!r} has {standing.key_running} running, its limit (key_concurrency={per_key})"
        )
        return {"kind": "limit", "detail": detail}
    if standing.concurrency is not None and standing.running >= standing.concurrency:
        detail = f"queue {name!r} has {standing.running} running, its limit (concurrency={standing.concurrency})"
        return {"kind": "limit", "detail": detail}
    if standing.rate_limit is not None and standing.recent >= standing.rate_limit:
        per = f"{standing.rate_per:g}s" if standing.rate_per is not None else "window"
        detail = f"queue {name!r} started {standing.recent} sagas in the last {per}, its rate limit"
        return {"kind": "limit", "detail": detail}
    return None


def _decisions(pending: Sequence[tuple[str, str, datetime | None]]) -> str:
    parts = []
    for step_id, tool, deadline in pending:
        until = "" if deadline is None else f", deadline {deadline.isoformat(timespec='seconds')}"
        parts.append(f"step {step_id!r} ({tool}{until})")
    return "a decision on " + ", ".join(parts)
