"""The journal's intents on a saga row no engine holds yet: take over, release, park, history; approval decisions.

Claims use them before (or after) an engine drives the saga; like the Journal, nothing else assigns these fields.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from saga_runtime._engine._transitions import saga_to
from saga_runtime._records import (
    REJECTED,
    ApprovalRow,
    CancelOutcome,
    SagaRow,
    SagaStatus,
    StepRow,
    TakeoverReason,
    cancel_entry,
    end_entry,
    end_reason_of,
    note_reason,
    now,
    output_entry,
    read_note,
    release_entry,
    released_by,
    standing_of,
    takeover_entry,
)

__all__ = [
    "WAITS_FOR_TOOLS",
    "adopted",
    "asleep",
    "cancel_noted",
    "decided",
    "ended",
    "let_go",
    "note_cancel",
    "noted",
    "park",
    "rejection_of",
    "reopened_by_parent",
    "returned",
    "sleeps_of",
    "slept",
    "take_over",
    "took_over",
    "waits_for_tools",
]

logger = logging.getLogger("saga_runtime")

#: How the error of a live saga nobody can drive for lack of its tools begins (cleared when a worker takes it).
WAITS_FOR_TOOLS = "waits for a worker that has its tool(s) "


def adopted(saga: SagaRow, parent_id: str) -> None:
    """Make a new saga (not yet stored) a child of `parent_id`: one step of it (`saga.child()`)."""
    saga.parent_id = parent_id


def reopened_by_parent(saga: SagaRow, owner: str, expires: datetime, why: str) -> None:
    """Move a SUCCESS child saga to COMPENSATING under `owner`'s lease (its parent compensates): a child's move only
    (`_transitions.CHILD_MOVES`); its error says why, and it is no longer finished."""
    saga_to(saga, SagaStatus.COMPENSATING)
    saga.error, saga.finished_at = why, None
    take_over(saga, owner, expires, now())


def take_over(saga: SagaRow, owner: str, expires: datetime, at: datetime | None = None) -> None:
    """Note that `owner` holds the saga's lease until `expires` (the store said so)."""
    saga.owner, saga.lease_expires_at = owner, expires
    saga.waiting_for = None  # it moves now
    if saga.error is not None and saga.error.startswith(WAITS_FOR_TOOLS):
        saga.error = None  # a worker with the tools drives it now
    if at is not None:
        saga.updated_at = at


def let_go(saga: SagaRow, *, uncount: bool = False, by: str | None = None) -> None:
    """Give the saga's lease up (no owner); `uncount` takes back the recovery attempt its claim counted.

    `by`: the executor letting it go stops (a worker's stop), noted in its history: the next takeover names it.
    """
    if by is not None:
        saga.history = [*saga.history, release_entry(now(), by)]
    saga.owner, saga.lease_expires_at = None, None
    if uncount:
        saga.recovery_attempts = max(0, saga.recovery_attempts - 1)
    saga.updated_at = now()


def waits_for_tools(saga: SagaRow, missing: list[str], note: dict[str, Any] | None = None) -> None:
    """Say in the saga's error which tools it waits for, and the operator's way out; `note`: why it waits."""
    saga.waiting_for = note
    saga.error = (
        f"{WAITS_FOR_TOOLS}{', '.join(missing)} (missing or renamed): register them, or give up on it with "
        f"unpark({saga.saga_id!r}, compensate=True)"
    )


def park(saga: SagaRow, why: str) -> None:
    """Make the saga PARKED for an operator, saying why."""
    saga.parked_from = saga.status
    saga_to(saga, SagaStatus.PARKED)
    saga.error = f"parked: {why}; fix the cause, then executor.unpark({saga.saga_id!r})"


def decided(request: ApprovalRow, decision: str, by: str, note: str | None) -> ApprovalRow:
    """Return a copy of `request` holding a decision made now, unsealed (the store seals it as it records it)."""
    row = request.copy()
    row.decision, row.decided_by, row.decided_at, row.note, row.hash = decision, by, now(), note, None
    return row


def took_over(saga: SagaRow, by: str, from_owner: str | None, at: datetime) -> None:
    """Add to the saga's history that `by` took it over from `from_owner` (None: it had been released, by whom its
    history says)."""
    reason: TakeoverReason
    if from_owner is None:
        reason, from_owner = "released", released_by(saga.history)
    else:
        reason = "restart" if from_owner == by else "lease expired"
    saga.history = [*saga.history, takeover_entry(at, by, from_owner, reason)]


def ended(saga: SagaRow, status: SagaStatus, rows: Iterable[StepRow], cause: str | None) -> None:
    """Add to the history of a saga that did not succeed how it ended and which effects stand (decided once).

    `cause`: the class name of the exception that failed it, when known (see saga_runtime._records._outcome).
    """
    rows = list(rows)
    saga.history = [
        *saga.history,
        end_entry(end_reason_of(status, rows, saga.history, cause), standing_of(status, rows)),
    ]


def note_cancel(saga: SagaRow, request: str) -> tuple[bool, str | None]:
    """Record an operator's cancel request (its stored note) in the saga's history with what came of it; return
    whether it was added, and why the saga stops (None: it does not).

    Only a RUNNING (or WAITING) saga stops: a compensating one goes on undoing, and one whose SUCCESS is being
    written ends so, the cancel recorded as ignored.
    """
    note = read_note(request, at=now())
    status = saga.status
    outcome: CancelOutcome = (
        "cancelled"
        if status is SagaStatus.RUNNING or status is SagaStatus.WAITING
        else "ignored"
        if status is SagaStatus.SUCCESS
        else "compensating"
    )
    added = cancel_noted(saga, note, outcome)
    if added:
        logger.warning("saga %s: cancel requested (%s): %s", saga.saga_id, note_reason(note), outcome)
    return added, note_reason(note) if outcome == "cancelled" else None


def rejection_of(approvals: list[ApprovalRow], step_id: str) -> str | None:
    """Return the words a step rejected by a decision is recorded with (who, and why), or None if it was not."""
    for request in approvals:
        if request.step_id == step_id and request.decision == REJECTED:
            return f"rejected by {request.decided_by}" + (f": {request.note}" if request.note else "")
    return None


def cancel_noted(saga: SagaRow, note: dict[str, Any], outcome: CancelOutcome) -> bool:
    """Add an operator's cancel and what came of it to the saga's history, once; return whether it was added."""
    if any(entry.get("kind") == "cancel" for entry in saga.history):
        return False
    saga.history = [*saga.history, cancel_entry(note, outcome)]
    return True


def returned(saga: SagaRow, output: Any) -> None:
    """Add a saga function's return value (a JSON value) to its history; written (sealed) with its end."""
    saga.history = [*saga.history, output_entry(output)]


def slept(saga: SagaRow, position: int, wake_at: datetime) -> None:
    """Add a saga function's sleep to its history, at its position among the saga's waits (sealed with the row)."""
    saga.history = [*saga.history, {"kind": "sleep", "position": position, "wake_at": wake_at.isoformat()}]


def sleeps_of(saga: SagaRow) -> list[datetime]:
    """Return the wake times of a saga's recorded sleeps, by position."""
    return [datetime.fromisoformat(entry["wake_at"]) for entry in saga.history if entry.get("kind") == "sleep"]


def asleep(saga: SagaRow, at: datetime) -> bool:
    """Tell whether a WAITING saga waits for its last sleep to end (rather than for a decision)."""
    wakes = sleeps_of(saga)
    return bool(wakes) and wakes[-1] > at


def noted(saga: SagaRow, entry: dict[str, Any]) -> None:
    """Add an entry (a saga function's wait: a recv begun or received) to the saga's history, sealed with the row."""
    saga.history = [*saga.history, entry]
