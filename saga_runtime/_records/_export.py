"""A saga's export: plain, versioned JSON any store can import."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from saga_runtime._exceptions import StoreError
from saga_runtime._records._approvals import ApprovalRow
from saga_runtime._records._rows import SagaRow, SagaStatus, StepRow, StepStatus
from saga_runtime._records._values import MAX_JSON_DEPTH, nesting_problem

__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "export_rows", "import_approvals", "import_rows"]

EXPORT_FORMAT = "saga_runtime.saga"
EXPORT_VERSION = 1

_SAGA_NAMES = [f.name for f in fields(SagaRow)]
# A worker's note of why a saga waits is not part of its record: it is not exported.
_EXPORTED_SAGA_NAMES = [name for name in _SAGA_NAMES if name != "waiting_for"]
_STEP_NAMES = [f.name for f in fields(StepRow)]
_APPROVAL_NAMES = [f.name for f in fields(ApprovalRow)]
_SAGA_FIELDS = set(_SAGA_NAMES)
_STEP_FIELDS = set(_STEP_NAMES)
_APPROVAL_FIELDS = set(_APPROVAL_NAMES)
_TIMES = ("created_at", "updated_at", "finished_at", "lease_expires_at", "purged_at", "started_at", "compensated_at")
# A plan holds its steps' arguments five levels down.
_PLAN_DEPTH = MAX_JSON_DEPTH + 5


def _check_nesting(values: Sequence[tuple[str, Any, int]]) -> None:
    """Raise ValueError for a value nested too deep to store, or holding itself."""
    for what, value, depth in values:
        problem = nesting_problem(value, max_depth=depth)
        if problem is not None:
            raise ValueError(f"{what}: {problem}")


def _tree(value: Any) -> Any:
    """Return a JSON value with its containers copied, never shared with a row."""
    kind = type(value)
    if kind is dict:
        return {key: _tree(item) for key, item in value.items()}
    if kind is list:
        return [_tree(item) for item in value]
    return value


def _plain(row: Any, names: Sequence[str]) -> dict[str, Any]:
    """Return a row's fields as JSON-able values (`asdict` without its deep-copy cost)."""
    out: dict[str, Any] = {}
    for key in names:
        value = getattr(row, key)
        if isinstance(value, datetime):
            out[key] = value.isoformat()
        elif isinstance(value, SagaStatus | StepStatus):
            out[key] = value.value
        else:
            out[key] = _tree(value)
    return out


def export_rows(saga: SagaRow, steps: Sequence[StepRow], approvals: Sequence[ApprovalRow] = ()) -> dict[str, Any]:
    """Return a saga's export document, steps (and approvals) in order."""
    plain = _plain(saga, _EXPORTED_SAGA_NAMES)
    if plain["purged_at"] is None:  # only tombstones carry it
        del plain["purged_at"]
    if plain["parent_id"] is None:  # only child sagas carry it
        del plain["parent_id"]
    document: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "saga": plain,
        "steps": [_plain(row, _STEP_NAMES) for row in sorted(steps, key=lambda r: r.seq)],
    }
    if approvals:
        document["approvals"] = [_plain(row, _APPROVAL_NAMES) for row in sorted(approvals, key=lambda r: r.seq)]
    return document


def import_approvals(data: Mapping[str, Any], saga_id: str) -> list[ApprovalRow]:
    """Return an export document's approval rows; raise `StoreError` if malformed."""
    try:
        rows = []
        for raw in data.get("approvals") or []:
            values = {k: v for k, v in dict(raw).items() if k in _APPROVAL_FIELDS}
            for key in ("requested_at", "deadline", "decided_at"):
                if key in values:
                    values[key] = _parse_time(values[key])
            if values.get("saga_id") != saga_id:
                raise ValueError(f"approval {values.get('step_id')!r} belongs to saga {values.get('saga_id')!r}")
            rows.append(ApprovalRow(**values))
        _check_nesting([(f"approval {row.step_id!r}: the arguments", row.args, MAX_JSON_DEPTH) for row in rows])
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"the saga export is malformed ({type(exc).__name__}: {exc}); it cannot be imported") from None
    return rows


def _parse_time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def import_rows(data: Mapping[str, Any]) -> tuple[SagaRow, list[StepRow]]:
    """Return an export document's rows; raise `StoreError` saying what is wrong."""
    if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT:
        raise StoreError(f"not a saga export: expected a mapping with format {EXPORT_FORMAT!r}")
    version = data.get("version")
    if not isinstance(version, int) or version > EXPORT_VERSION:
        raise StoreError(
            f"saga export version {version!r} is newer than this library reads ({EXPORT_VERSION}); "
            "upgrade saga-runtime to import it"
        )
    try:
        raw_saga = dict(data["saga"])
        saga_values = {k: v for k, v in raw_saga.items() if k in _SAGA_FIELDS}
        for key in _TIMES:
            if key in saga_values:
                saga_values[key] = _parse_time(saga_values[key])
        saga_values["status"] = SagaStatus(saga_values["status"])
        if saga_values.get("parked_from") is not None:
            saga_values["parked_from"] = SagaStatus(saga_values["parked_from"])
        saga = SagaRow(**saga_values)
        steps = []
        for raw in data["steps"]:
            values = {k: v for k, v in dict(raw).items() if k in _STEP_FIELDS}
            for key in ("started_at", "finished_at", "compensated_at"):
                if key in values:
                    values[key] = _parse_time(values[key])
            values["status"] = StepStatus(values["status"])
            if values.get("saga_id") != saga.saga_id:
                raise ValueError(f"step {values.get('step_id')!r} belongs to saga {values.get('saga_id')!r}")
            steps.append(StepRow(**values))
        _check_nesting(
            [
                ("the plan", saga.plan, _PLAN_DEPTH),
                ("the metadata", saga.metadata, MAX_JSON_DEPTH),
                *((f"step {row.step_id!r}: the arguments", row.args, MAX_JSON_DEPTH) for row in steps),
                *((f"step {row.step_id!r}: the result", row.result, MAX_JSON_DEPTH) for row in steps),
            ]
        )
        # The row owns its plan (of a depth known bounded now): writers take a plan object as never changed in place
        # (its digest and text are remembered by identity), while the document's may be edited and imported again.
        saga.plan = copy.deepcopy(saga.plan)
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"the saga export is malformed ({type(exc).__name__}: {exc}); it cannot be imported") from None
    return saga, steps
