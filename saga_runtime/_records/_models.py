"""What users read back: SagaResult, StepRecord and SagaSummary, pydantic models built from stored rows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from saga_runtime._exceptions import SagaFailedError
from saga_runtime._records._approvals import ApprovalRequest, ApprovalRow, approval_request
from saga_runtime._records._history import CancelRecord, Takeover, cancel_of, function_of, output_of, takeovers_of
from saga_runtime._records._outcome import EndReason, WaitingFor, end_of, waiting_for_of
from saga_runtime._records._rows import (
    SagaKind,
    SagaRow,
    SagaStatus,
    StepRow,
    StepStatus,
    now,
    plan_groups,
    plan_joins,
    step_succeeded,
    with_unstarted,
)
from saga_runtime._records._secrets import ENVELOPE, mask_secrets

__all__ = ["SagaResult", "SagaSummary", "StepRecord", "approval_line", "result_from_rows", "summary_from_rows"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_M = TypeVar("_M", bound=BaseModel)


class StepRecord(BaseModel):
    """The record of one step: the call, its outcome, and its compensation."""

    model_config = _FROZEN

    step_id: str
    group: int
    tool_name: str
    args: Any
    status: StepStatus
    result: Any = None
    error: str | None = None
    error_type: str | None = None
    attempts: int = 0
    idempotency_key: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
    compensated_at: datetime | None = None
    compensation_error: str | None = None
    compensation_attempts: int = 0
    tool_version: str = "1"
    reconciled: bool = False

    @property
    def duration(self) -> float | None:
        """Return the seconds from the first attempt's start to the outcome, when both are known."""
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


# The tool a child saga's step calls (saga_runtime._tools.CHILD_TOOL: the tools layer is not this one's to import).
CHILD_STEP_TOOL = "saga.child"


class SagaResult(BaseModel):
    """The outcome of a saga: its status, every step's record, the error that ended it, and what it cost."""

    model_config = _FROZEN

    saga_id: str
    status: SagaStatus
    steps: list[StepRecord]
    error: str | None = None
    metadata: dict[str, Any] = {}
    created_at: datetime
    finished_at: datetime | None = None
    cost: float = 0.0
    tokens: int = 0
    kind: SagaKind = "plan"
    group_joins: dict[str, tuple[int, str]] = {}
    approvals: list[ApprovalRequest] = []
    # Set when a purge removed the saga's steps and payloads (API.md §14): a tombstone's result.
    purged_at: datetime | None = None
    takeovers: list[Takeover] = []
    cancel: CancelRecord | None = None
    # How it ended and why it waits (API.md §19): None / [] while it runs; see saga_runtime._records._outcome.
    end_reason: EndReason | None = None
    effects_standing: list[str] = []
    waiting_for: WaitingFor | None = None
    # A saga function's (API.md §18): its name, and what it returned (stored before the saga is SUCCESS).
    function: str | None = None
    output: Any = None
    # A child saga's (`saga.child()`, API.md §18): the saga it runs as a step of.
    parent_id: str | None = None

    @property
    def pending_approvals(self) -> list[ApprovalRequest]:
        """Return the approval requests still waiting for a decision, in step order."""
        return [request for request in self.approvals if request.decision is None]

    @property
    def ok(self) -> bool:
        """Tell whether the saga ended SUCCESS."""
        return self.status is SagaStatus.SUCCESS

    @property
    def children(self) -> list[str]:
        """Return the ids of the child sagas this saga ran (`saga.child()`, each one step of it), in step order."""
        return [
            step.args["saga_id"]
            for step in self.steps
            if step.tool_name == CHILD_STEP_TOOL and isinstance(step.args, dict) and "saga_id" in step.args
        ]

    def step(self, step_id: str) -> StepRecord:
        """Return the record of the step `step_id`; raise `KeyError` naming the known ids."""
        for record in self.steps:
            if record.step_id == step_id:
                return record
        raise KeyError(f"saga {self.saga_id!r} has no step {step_id!r} (steps: {[s.step_id for s in self.steps]})")

    def result_of(self, id: str) -> Any:
        """Return what a `$ref` to `id` gets: a step's stored result (None if it has none), or for a group id a
        `first` group's winner's result (None without a winner), else the list of its successful results.
        """
        join = self.group_joins.get(id)
        if join is None:
            return self.step(id).result
        group, mode = join
        wins = [s.result for s in self.steps if s.group == group and step_succeeded(s.status, s.error, s.finished_at)]
        if mode == "first":
            return wins[0] if wins else None
        return wins

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON-able data."""
        return self.model_dump(mode="json")

    def describe(self) -> str:
        """Return a plain-text timeline of the saga: each step's group, status, attempts, time, errors, undo."""
        return describe_result(self)

    def raise_for_status(self) -> SagaResult:
        """Return the result if the saga ended SUCCESS; raise `SagaFailedError` otherwise."""
        if self.status is SagaStatus.SUCCESS:
            return self
        culprit = _culprit(self.steps)
        errors = [f"{s.step_id} ({s.tool_name}): {s.error}" for s in self.steps if s.error]
        errors += [
            f"{s.step_id} ({s.tool_name}) compensation: {s.compensation_error}"
            for s in self.steps
            if s.compensation_error
        ]
        message = f"saga {self.saga_id!r} ended {self.status.value}"
        if self.error:
            message += f": {self.error}"
        if self.status is SagaStatus.COMPENSATION_FAILED:
            message += "; some effects were NOT undone, see the steps marked COMPENSATION_FAILED"
        elif not self.status.is_terminal:
            message += "; it has not finished yet"
        raise SagaFailedError(
            message,
            saga_id=self.saga_id,
            status=self.status.value,
            step_id=culprit.step_id if culprit else None,
            tool_name=culprit.tool_name if culprit else None,
            attempts=culprit.attempts if culprit else None,
            errors=errors,
        )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.1f}ms" if seconds < 1 else f"{seconds:.2f}s"


def describe_result(result: SagaResult) -> str:
    """Return the plain-text timeline of a saga result."""
    total = None if result.finished_at is None else (result.finished_at - result.created_at).total_seconds()
    head = f"saga {result.saga_id}: {result.status.value} ({len(result.steps)} steps, {_duration(total)}"
    if result.cost or result.tokens:
        head += f", cost {result.cost:g}, {result.tokens} tokens"
    lines = [head + ")"]
    if result.error:
        lines.append(f"  error: {result.error}")
    if result.end_reason is not None:
        lines.append(f"  ended: {result.end_reason}")
    if result.effects_standing:
        lines.append(f"  effects standing (not undone): {', '.join(result.effects_standing)}")
    if result.waiting_for is not None:
        lines.append(f"  waiting for: {result.waiting_for['kind']}: {result.waiting_for['detail']}")
    id_width = max((len(s.step_id) for s in result.steps), default=4)
    tool_width = max((len(s.tool_name) for s in result.steps), default=4)
    approvals = {request.step_id: request for request in result.approvals}
    for record in result.steps:
        attempts = f"{record.attempts} attempt{'s' if record.attempts != 1 else ''}"
        line = (
            f"  group {record.group}  {record.step_id:<{id_width}}  {record.tool_name:<{tool_width}}  "
            f"{record.status.value:<19}  {attempts:<10}  {_duration(record.duration):>8}"
        )
        if record.error:
            line += f"  {record.error}"
        lines.append(line.rstrip())
        if record.compensated_at is not None:
            lines.append(f"{'':11}undone by compensate() after {record.compensation_attempts} attempt(s)")
        elif record.compensation_error:
            lines.append(f"{'':11}NOT undone: {record.compensation_error}")
        request = approvals.get(record.step_id)
        if request is not None:
            lines.append(f"{'':11}{approval_line(request)}")
    return "\n".join(lines)


def approval_line(request: ApprovalRequest) -> str:
    """Return one line saying what became of a step's approval request."""
    if request.decision is None:
        until = "" if request.deadline is None else f" (deadline {request.deadline.isoformat(timespec='seconds')})"
        return f"waits for approval{until}"
    note = f": {request.note}" if request.note else ""
    return f"{request.decision} by {request.decided_by}{note}"


def _culprit(steps: Sequence[StepRecord]) -> StepRecord | None:
    """Return the step whose failure ended the saga: the first with an error that is not a cancellation."""
    with_error = [s for s in steps if s.error]
    for record in with_error:
        if record.error_type != "CancelledError":
            return record
    return with_error[0] if with_error else None


class SagaSummary(BaseModel):
    """One line of `list_sagas`: a saga's id, status, times, size and cost."""

    model_config = _FROZEN

    saga_id: str
    status: SagaStatus
    kind: SagaKind
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    step_count: int
    cost: float = 0.0
    tokens: int = 0
    error: str | None = None
    end_reason: EndReason | None = None
    waiting_for: WaitingFor | None = None


_new = object.__new__
# The slots every pydantic model has, set through their descriptors: what `object.__setattr__` ends up calling,
# without looking the name up on the model's class first.
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _construct(model: type[_M], values: dict[str, Any], fields: set[str]) -> _M:
    """Return a `model` holding `values` (one for every field, in field order) as they are, as `model_construct` does.

    The values come from rows the engine built or a store validated when reading. `model_construct` is much
    slower than the rows it reads (a loop over aliases and defaults per field); this sets the same state.
    `fields` is the set of every field name (copied: each model has its own set of fields set).
    """
    instance = _new(model)
    _set_dict(instance, values)
    _set_fields_set(instance, fields.copy())
    _set_extra(instance, None)
    _set_private(instance, None)
    return instance


def step_record(row: StepRow) -> StepRecord:
    """Return the user-facing record of a step row."""
    return _step_records((row,))[0]


def _step_records(rows: Sequence[StepRow], args_shown: bool = False) -> list[StepRecord]:
    """Return the records of `rows`, in their order: `_construct` inlined, as a saga's result builds one per step.

    `args_shown`: every row's arguments are known to hold no secret (`mask_secrets` keeps them): not checked.
    """
    records = []
    # One set for all: every field is set, and pydantic copies it before changing it (a frozen model never does).
    fields = _STEP_FIELDS
    new, set_dict, set_fields, set_extra, set_private = _new, _set_dict, _set_fields_set, _set_extra, _set_private
    for row in rows:
        args = row.args
        if args_shown:
            pass  # known to hold no secret
        elif type(args) is not dict or ENVELOPE in args:
            args = mask_secrets(args)  # an encrypted secret is shown as "**********"
        else:
            for value in args.values():
                if type(value) is dict or type(value) is list:  # (scalars cannot hold one: the common case)
                    args = mask_secrets(args)
                    break
        record = new(StepRecord)
        set_dict(
            record,
            {
                "step_id": row.step_id,
                "group": row.group,
                "tool_name": row.tool_name,
                "args": args,
                "status": row.status,
                "result": row.result,
                "error": row.error,
                "error_type": row.error_type,
                "attempts": row.attempts,
                "idempotency_key": row.idempotency_key,
                "started_at": row.started_at,
                "finished_at": row.finished_at,
                "compensated_at": row.compensated_at,
                "compensation_error": row.compensation_error,
                "compensation_attempts": row.compensation_attempts,
                "tool_version": row.tool_version,
                "reconciled": row.reconciled,
            },
        )
        set_fields(record, fields)
        set_extra(record, None)
        set_private(record, None)
        records.append(record)
    return records


def result_from_rows(
    saga: SagaRow,
    steps: Sequence[StepRow],
    approvals: Sequence[ApprovalRow] = (),
    *,
    complete: bool = False,
    args_shown: bool = False,
) -> SagaResult:
    """Return the SagaResult of a saga row, its step rows (in any order; sorted by `seq`) and approval rows.

    `complete`: `steps` hold a row for every planned step (an engine's), none to read from the plan.
    `args_shown`: no step's arguments hold a secret (an engine's that knows it from its plan): none masked.
    """
    rows = steps if complete else with_unstarted(saga, list(steps))
    end_reason, standing = end_of(saga.status, rows, saga.history)
    return _construct(
        SagaResult,
        {
            "saga_id": saga.saga_id,
            "status": saga.status,
            "steps": _step_records(sorted(rows, key=_seq), args_shown),
            "error": saga.error,
            "metadata": dict(saga.metadata),
            "created_at": saga.created_at,
            "finished_at": saga.finished_at,
            "cost": saga.cost,
            "tokens": saga.tokens,
            "kind": saga.kind,
            "group_joins": plan_joins(saga.plan),
            "approvals": [approval_request(row) for row in sorted(approvals, key=_seq)] if approvals else [],
            "purged_at": saga.purged_at,
            "takeovers": takeovers_of(saga.history) if saga.history else [],
            "cancel": cancel_of(saga.history) if saga.history else None,
            "end_reason": end_reason,
            "effects_standing": standing,
            "waiting_for": _waiting_for(saga, approvals),
            "function": None if (function := function_of(saga.plan)) is None else function[0],
            "output": output_of(saga.history) if saga.history else None,
            "parent_id": saga.parent_id,
        },
        _RESULT_FIELDS,
    )


_STEP_FIELDS = set(StepRecord.model_fields)
_RESULT_FIELDS = set(SagaResult.model_fields)
_seq = attrgetter("seq")  # of a StepRow or an ApprovalRow


def summary_from_rows(saga: SagaRow, step_count: int) -> SagaSummary:
    """Return the list_sagas line of a saga row (a plan saga counts its steps never started too)."""
    if saga.kind == "plan" and saga.plan is not None:
        step_count = max(step_count, sum(len(members) for members in plan_groups(saga.plan)))
    return SagaSummary(
        saga_id=saga.saga_id,
        status=saga.status,
        kind=saga.kind,
        created_at=saga.created_at,
        updated_at=saga.updated_at,
        finished_at=saga.finished_at,
        step_count=step_count,
        cost=saga.cost,
        tokens=saga.tokens,
        error=saga.error,
        end_reason=end_of(saga.status, (), saga.history)[0] if saga.status.is_terminal else None,
        waiting_for=_waiting_for(saga),
    )


def _waiting_for(saga: SagaRow, approvals: Sequence[ApprovalRow] = ()) -> WaitingFor | None:
    """Return why the saga waits (its undecided requests among `approvals`; none given: not read), or None."""
    if saga.status.is_terminal:
        return None  # the common case, read at once
    held = saga.owner is not None and saga.status is not SagaStatus.PARKED
    if held and (saga.lease_expires_at is None or saga.lease_expires_at > now()):
        return None  # driven (an owner whose lease lapsed is gone: a worker's note may say why nobody took it)
    pending = [(row.step_id, row.tool_name, row.deadline) for row in approvals if row.decision is None]
    return waiting_for_of(saga, pending if approvals else None, now=now())
