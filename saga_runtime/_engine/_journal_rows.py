"""The journal's intents on a saga row no engine holds yet: take over, release, park, history; approval decisions.

Claims use them before (or after) an engine drives the saga; like the Journal, nothing else assigns these fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from saga_runtime._engine._transitions import saga_to
from saga_runtime._records import (
    ApprovalRow,
    SagaRow,
    SagaStatus,
    StepRow,
    TakeoverReason,
    cancel_entry,
    end_entry,
    end_reason_of,
    now,
    standing_of,
    takeover_entry,
)

__all__ = [
    "WAITS_FOR_TOOLS",
    "cancel_noted",
    "decided",
    "ended",
    "let_go",
    "park",
    "take_over",
    "took_over",
    "waits_for_tools",
]

#: How the error of a live saga nobody can drive for lack of its tools begins (cleared when a worker takes it).
WAITS_FOR_TOOLS = "waits for a worker that has its tool(s) "


def take_over(saga: SagaRow, owner: str, expires: datetime, at: datetime | None = None) -> None:
    """Note that `owner` holds the saga's lease until `expires` (the store said so)."""
    saga.owner, saga.lease_expires_at = owner, expires
    saga.waiting_for = None  # it moves now
    if saga.error is not None and saga.error.startswith(WAITS_FOR_TOOLS):
        saga.error = None  # a worker with the tools drives it now
    if at is not None:
        saga.updated_at = at


def let_go(saga: SagaRow, *, uncount: bool = False) -> None:
    """Give the saga's lease up (no owner); `uncount` takes back the recovery attempt its claim counted."""
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
    """Add to the saga's history that `by` took it over from `from_owner` (None: it had been released)."""
    reason: TakeoverReason = "released" if from_owner is None else "restart" if from_owner == by else "lease expired"
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


def cancel_noted(saga: SagaRow, note: dict[str, Any]) -> bool:
    """Add an operator's cancel to the saga's history, once; return whether it was added."""
    if any(entry.get("kind") == "cancel" for entry in saga.history):
        return False
    saga.history = [*saga.history, cancel_entry(note)]
    return True
