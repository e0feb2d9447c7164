"""A saga's history besides its steps: takeovers, an operator's cancel, and a saga function's return value.

Entries are JSON on the saga row, sealed with it, read as `Takeover` and `CancelRecord`. A cancel request
reaches the owner as a JSON note, so its reason never passes for who asked or when.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from saga_runtime._records._chain import plan_digest
from saga_runtime._records._rows import SagaRow, SagaStatus

__all__ = [
    "CancelOutcome",
    "CancelRecord",
    "Takeover",
    "TakeoverReason",
    "cancel_entry",
    "cancel_note",
    "cancel_of",
    "function_of",
    "note_reason",
    "output_entry",
    "output_of",
    "read_note",
    "release_entry",
    "released_by",
    "same_work",
    "takeover_entry",
    "takeovers_of",
    "wake_time",
]

#: Lease ran out, owner's id back after a restart, or released by a stopped worker.
TakeoverReason = Literal["lease expired", "restart", "released"]

#: What came of a cancel: the saga stopped and compensated ("cancelled"), it was being compensated already and its
#: undo went on ("compensating"), or it had already ended and the cancel changed nothing ("ignored").
CancelOutcome = Literal["cancelled", "compensating", "ignored"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Takeover(BaseModel):
    """A takeover by another executor: when, by whom, from whom, and why."""

    model_config = _FROZEN

    at: datetime
    by: str
    from_owner: str | None = None
    reason: TakeoverReason


class CancelRecord(BaseModel):
    """An operator's request to cancel the saga: when, by whom (a person, or the executor's id), why, and what came
    of it (`outcome`: None in records written before it was kept)."""

    model_config = _FROZEN

    at: datetime
    by: str
    reason: str | None = None
    outcome: CancelOutcome | None = None


def takeover_entry(at: datetime, by: str, from_owner: str | None, reason: TakeoverReason) -> dict[str, Any]:
    """Return the history entry of a takeover."""
    return {"kind": "takeover", "at": at.isoformat(), "by": by, "from_owner": from_owner, "reason": reason}


def release_entry(at: datetime, by: str) -> dict[str, Any]:
    """Return the history entry of a saga let go by a stopped executor (the next takeover names it)."""
    return {"kind": "release", "at": at.isoformat(), "by": by}


def released_by(history: list[dict[str, Any]]) -> str | None:
    """Return who let the saga go last, if it was let go since it was last taken over."""
    for entry in reversed(history):
        kind = entry.get("kind")
        if kind == "release":
            by = entry.get("by")
            return by if isinstance(by, str) else None
        if kind == "takeover":
            return None
    return None


def cancel_entry(note: dict[str, Any], outcome: CancelOutcome) -> dict[str, Any]:
    """Return the history entry of a cancel note, and what came of it."""
    return {"kind": "cancel", "at": note["at"], "by": note["by"], "reason": note.get("reason"), "outcome": outcome}


def cancel_note(at: datetime, by: str, reason: str | None) -> str:
    """Return the text stored as a saga's cancel request."""
    return json.dumps({"at": at.isoformat(), "by": by, "reason": reason}, ensure_ascii=False)


def read_note(text: str, *, at: datetime) -> dict[str, Any]:
    """Return a stored cancel request as a note (older plain text: its reason)."""
    try:
        note = json.loads(text)
    except ValueError:
        note = None
    if isinstance(note, dict) and isinstance(note.get("at"), str) and isinstance(note.get("by"), str):
        return note
    return {"at": at.isoformat(), "by": "unknown", "reason": text}


def note_reason(note: dict[str, Any]) -> str:
    """Return the saga error of a cancel: "cancelled", and why."""
    reason = note.get("reason")
    return "cancelled" + (f": {reason}" if reason else "") + f" (by {note['by']})"


def takeovers_of(history: list[dict[str, Any]]) -> list[Takeover]:
    """Return the takeovers of a saga's history, in order."""
    return [
        Takeover.model_validate({k: v for k, v in entry.items() if k != "kind"})
        for entry in history
        if entry.get("kind") == "takeover"
    ]


def cancel_of(history: list[dict[str, Any]]) -> CancelRecord | None:
    """Return the cancel recorded in a saga's history, if any."""
    for entry in history:
        if entry.get("kind") == "cancel":
            return CancelRecord.model_validate({k: v for k, v in entry.items() if k != "kind"})
    return None


def output_entry(value: Any) -> dict[str, Any]:
    """Return the history entry of a saga function's return value (a JSON value), written with its SUCCESS."""
    return {"kind": "output", "value": value}


def output_of(history: list[dict[str, Any]]) -> Any:
    """Return the return value recorded in a saga's history (None if none)."""
    for entry in history:
        if entry.get("kind") == "output":
            return entry.get("value")
    return None


def function_of(plan: Any) -> tuple[str, str, dict[str, Any]] | None:
    """Return the (name, version, arguments) a saga function's saga records in place of a plan; None for others."""
    if isinstance(plan, dict) and isinstance(plan.get("function"), str):
        args = plan.get("args")
        version = plan.get("version")
        return plan["function"], version if isinstance(version, str) else "1", args if isinstance(args, dict) else {}
    return None


def wake_time(saga: SagaRow) -> datetime | None:
    """Return when a WAITING saga is due to be looked at by its wait's own clock: its pending sleep's end, or its
    pending recv's deadline; None for any other row, or a wait with no end (a decision, a message without a
    timeout: those make it due as they are stored). Stored as `wake_at`, indexed, so workers ask only for due sagas.
    """
    if saga.status is not SagaStatus.WAITING or not saga.history:
        return None
    received = {entry.get("position") for entry in saga.history if entry.get("kind") == "received"}
    for entry in reversed(saga.history):
        kind = entry.get("kind")
        if kind == "recv" and entry.get("position") not in received:
            deadline = entry.get("deadline")
            return None if deadline is None else datetime.fromisoformat(deadline)
        if kind == "sleep":
            return datetime.fromisoformat(entry["wake_at"])
        if kind in ("recv", "received"):
            return None  # its last wait ended: it waits for something else now (a decision)
    return None


def same_work(stored: SagaRow, attempted: SagaRow) -> bool:
    """Tell whether a stored saga runs what a new one of the same id would: the same plan, or the same saga function
    with the same arguments (a saga id names one piece of work: its idempotency key)."""
    if stored.kind != attempted.kind:
        return False
    if stored.kind == "plan":
        return stored.plan_hash == attempted.plan_hash
    return plan_digest(stored.plan) == plan_digest(attempted.plan)
