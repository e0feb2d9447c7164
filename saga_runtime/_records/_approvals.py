"""Approval requests: a step waiting for a person's decision, the decision, and its seal.

A request records the step's exact arguments (and digest) when the saga reaches its group; the decision is
written once, by a conditional update. Rows are sealed like step rows, and `prev_hash` is the gated step's
identity hash, so an edited or moved decision fails `verify_saga`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from saga_runtime._records._rows import SagaRow, StepRow, StepStatus, canonical_json, plan_groups
from saga_runtime._records._secrets import mask_secrets

__all__ = [
    "APPROVED",
    "DEADLINE",
    "REJECTED",
    "ApprovalRequest",
    "ApprovalRow",
    "approval_problems",
    "approval_request",
    "args_digest",
    "gated_steps",
    "seal_approval",
]

Decision = Literal["approved", "rejected"]
APPROVED: Decision = "approved"
REJECTED: Decision = "rejected"
#: Who rejects a request whose deadline passed.
DEADLINE = "deadline"


def args_digest(args: Any) -> str:
    """Return the SHA-256 of the arguments' canonical JSON, which decisions bind."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(slots=True)
class ApprovalRow:
    """One approval request as stored, with its decision."""

    saga_id: str
    step_id: str
    seq: int
    tool_name: str
    args: Any
    args_digest: str
    requested_at: datetime
    deadline: datetime | None = None
    decision: str | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    note: str | None = None
    prev_hash: str | None = None
    hash: str | None = None

    def copy(self) -> ApprovalRow:
        """Return a snapshot of this row."""
        return ApprovalRow(
            self.saga_id,
            self.step_id,
            self.seq,
            self.tool_name,
            self.args,
            self.args_digest,
            self.requested_at,
            self.deadline,
            self.decision,
            self.decided_by,
            self.decided_at,
            self.note,
            self.prev_hash,
            self.hash,
        )


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _seal_of(row: ApprovalRow, key: bytes | None) -> str:
    text = canonical_json(
        [
            "approval",
            row.saga_id,
            row.seq,
            row.step_id,
            row.tool_name,
            row.args_digest,
            _time(row.requested_at),
            _time(row.deadline),
            row.decision,
            row.decided_by,
            _time(row.decided_at),
            row.note,
            row.prev_hash,
        ]
    ).encode()
    if key is None:
        return hashlib.sha256(text).hexdigest()
    return "hmac:" + hmac.new(key, text, hashlib.sha256).hexdigest()


def seal_approval(row: ApprovalRow, link: str, key: bytes | None) -> None:
    """Link a request to its step's identity hash `link` and seal it."""
    row.prev_hash = link
    row.hash = _seal_of(row, key)


class ApprovalRequest(BaseModel):
    """A step's request for a person's decision: the call it would make, and the decision."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    saga_id: str
    step_id: str
    tool_name: str
    args: Any
    args_digest: str
    requested_at: datetime
    deadline: datetime | None = None
    decision: Decision | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    note: str | None = None

    @property
    def pending(self) -> bool:
        """Tell whether the request still waits for a decision."""
        return self.decision is None


def approval_request(row: ApprovalRow) -> ApprovalRequest:
    """Return the user-facing request of a stored approval row."""
    return ApprovalRequest(
        saga_id=row.saga_id,
        step_id=row.step_id,
        tool_name=row.tool_name,
        args=mask_secrets(row.args),
        args_digest=row.args_digest,
        requested_at=row.requested_at,
        deadline=row.deadline,
        decision=row.decision,  # type: ignore[arg-type]  # checked by pydantic
        decided_by=row.decided_by,
        decided_at=row.decided_at,
        note=row.note,
    )


def gated_steps(plan: Any) -> set[str]:
    """Return the ids of a stored plan's steps marked `"approval": true`."""
    return {
        step["id"]
        for group in plan_groups(plan)
        for step in group
        if isinstance(step, dict) and step.get("approval") is True and isinstance(step.get("id"), str)
    }


def approval_problems(
    saga: SagaRow, steps: Sequence[StepRow], approvals: Sequence[ApprovalRow], key: bytes | None, link: Any
) -> list[str]:
    """Return what is wrong with a saga's approvals; `link(step)` is a step's identity hash."""
    problems: list[str] = []
    by_id = {row.step_id: row for row in steps}
    decided = {}
    for row in approvals:
        where = f"approval of step {row.step_id!r}"
        step = by_id.get(row.step_id)
        if step is None:
            problems.append(f"{where}: the saga has no such step")
            continue
        if row.prev_hash != link(step):
            problems.append(f"{where}: does not link to its step (moved or forged)")
        if row.hash is None:
            problems.append(f"{where}: carries no seal")
        elif row.hash != _seal_of(row, key):
            if key is not None and not row.hash.startswith("hmac:"):
                problems.append(f"{where}: is not signed, but a signing key is configured")
            elif key is None and row.hash.startswith("hmac:"):
                problems.append(f"{where}: is signed; configure the signing key to verify it")
            else:
                problems.append(f"{where}: its content does not match its seal (altered)")
        decided[row.step_id] = row.decision
    gated = gated_steps(saga.plan) if saga.kind == "plan" else set()
    for step in steps:
        decision = decided.get(step.step_id, "none")
        where = f"step {step.step_id!r}"
        if step.status is StepStatus.REJECTED and decision != REJECTED:
            problems.append(f"{where}: is REJECTED, but its approval record says {decision or 'undecided'}")
        elif step.status is StepStatus.WAITING and decision == "none":
            problems.append(f"{where}: is WAITING, but its approval request is missing")
        elif step.attempts > 0 and (step.step_id in gated or step.step_id in decided) and decision != APPROVED:
            problems.append(f"{where}: ran, but its approval record says {decision or 'undecided'}")
    return problems
