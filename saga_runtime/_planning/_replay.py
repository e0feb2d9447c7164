"""Replay of a plan saga: check that its record is what its plan, run, would have written."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from saga_runtime._exceptions import ReplayDivergenceError
from saga_runtime._planning._refs import RefError, resolve_refs
from saga_runtime._records import (
    SagaRow,
    SagaStatus,
    StepRow,
    canonical_json,
    mask_secrets,
    plan_groups,
    plan_joins,
    step_succeeded,
    with_unstarted,
)

__all__ = ["check_plan_record"]


def check_plan_record(saga: SagaRow, rows: Sequence[StepRow]) -> None:
    """Raise `ReplayDivergenceError` naming the first record that disagrees with the saga's plan."""

    def diverged(message: str, position: int | None = None) -> ReplayDivergenceError:
        return ReplayDivergenceError(
            f"saga {saga.saga_id!r} does not replay: {message}", saga_id=saga.saga_id, position=position
        )

    plan: Any = saga.plan
    if saga.purged_at is not None:
        raise diverged(f"it was purged at {saga.purged_at.isoformat()} (a tombstone: its steps are in its archive)")
    if not isinstance(plan, list) or saga.plan_hash is None:
        raise diverged("it has no stored plan")
    if hashlib.sha256(canonical_json(mask_secrets(plan)).encode()).hexdigest() != saga.plan_hash:
        raise diverged("its stored plan does not match the plan's hash")
    stored = {row.step_id for row in rows}
    last = max((row.group for row in rows), default=-1)
    for group, members in enumerate(plan_groups(plan)):
        for step in members:
            never = isinstance(step, dict) and step.get("id") not in stored
            # Only a step not started yet may lack its record: never in a succeeded saga, nor before a later group.
            if never and (saga.status is SagaStatus.SUCCESS or group < last):
                raise diverged(f"the record of step {step.get('id')!r} is missing")
    rows = with_unstarted(saga, list(rows))  # steps never started have no row: read from the plan
    by_id = {row.step_id: row for row in rows}
    planned = [(g, step) for g, group in enumerate(plan_groups(plan)) for step in group]
    if len(planned) != len(rows) or {step["id"] for _, step in planned} != set(by_id):
        raise diverged(f"the plan has {len(planned)} steps, the record {len(rows)}")

    joins = plan_joins(plan)

    def lookup(step_id: str) -> Any:
        if step_id in joins:
            group, mode = joins[step_id]
            members = sorted((r for r in rows if r.group == group), key=lambda r: r.seq)
            wins = [r.result for r in members if step_succeeded(r.status, r.error, r.finished_at)]
            if mode != "first":
                return wins
            if not wins:
                raise RefError(f"group {step_id!r} has no recorded winner")
            return wins[0]
        row = by_id.get(step_id)
        if row is None or (row.result is None and row.error is not None):
            raise RefError(f"{step_id!r} has no recorded result")
        return row.result

    for position, (group, step) in enumerate(planned):
        row = by_id[step["id"]]
        if row.seq != position or row.group != group or row.tool_name != step["tool"]:
            raise diverged(
                f"step {row.step_id!r} is recorded as {row.tool_name} at #{row.seq} of group {row.group}; the plan "
                f"has {step['tool']} at #{position} of group {group}",
                position,
            )
        if row.attempts == 0:
            continue  # never ran: its arguments were never resolved
        try:
            expected = resolve_refs(step["args"], lookup)
        except RefError as exc:
            raise diverged(
                f"step {row.step_id!r} ran, yet its $ref cannot be resolved from the record: {exc}", position
            ) from None
        # Secrets compare as "**********": each encryption of one differs.
        if canonical_json(mask_secrets(expected)) != canonical_json(mask_secrets(row.args)):
            raise diverged(
                f"step {row.step_id!r} ran with arguments its plan and the recorded results do not give", position
            )
