"""The transition table: which saga and step statuses may follow which.

Every status change of a running saga goes through `step_to` / `saga_to` (the Journal calls them); nothing else
assigns a status. A change the table does not allow is a bug in the engine, and raises `TransitionError` at once
instead of writing a record that says something impossible.
"""

from __future__ import annotations

from saga_runtime._records import SagaRow, SagaStatus, StepRow, StepStatus

__all__ = ["CHILD_MOVES", "SAGA_MOVES", "STEP_MOVES", "TransitionError", "saga_to", "step_to"]

_S = SagaStatus
_T = StepStatus

#: Saga statuses and those that may follow each. A live status may follow itself (a resumed saga goes on as it
#: was); COMPENSATION_FAILED reopens to COMPENSATING when an operator retries its compensations; PARKED goes on
#: (RUNNING or COMPENSATING) when an operator unparks it. A RUNNING saga WAITs before a group holding a step that
#: needs a person's decision, and runs on (or, a dynamic saga whose code gives up, compensates) once an executor
#: claims it again. A QUEUED saga is started by a worker (RUNNING), given back to its queue by a worker that lacks
#: its tools (QUEUED again), or cancelled before it ran (COMPENSATED: nothing to undo).
SAGA_MOVES: dict[SagaStatus, frozenset[SagaStatus]] = {
    _S.RUNNING: frozenset({_S.RUNNING, _S.COMPENSATING, _S.SUCCESS, _S.PARKED, _S.WAITING, _S.QUEUED}),
    _S.WAITING: frozenset({_S.RUNNING, _S.COMPENSATING}),
    _S.QUEUED: frozenset({_S.RUNNING, _S.COMPENSATED}),
    _S.COMPENSATING: frozenset({_S.COMPENSATING, _S.COMPENSATED, _S.COMPENSATION_FAILED, _S.PARKED}),
    _S.COMPENSATION_FAILED: frozenset({_S.COMPENSATING}),
    _S.SUCCESS: frozenset(),
    _S.COMPENSATED: frozenset(),
    _S.PARKED: frozenset({_S.RUNNING, _S.COMPENSATING}),
}

#: What a child saga (`saga.child()`, one with a parent) may do besides: a SUCCESS child is undone as a whole when
#: its parent compensates (the parent's engine drives it: `_engine._children`). A saga of its own never leaves
#: SUCCESS.
CHILD_MOVES: dict[SagaStatus, frozenset[SagaStatus]] = {_S.SUCCESS: frozenset({_S.COMPENSATING})}

_UNDONE = frozenset({_T.COMPENSATED, _T.COMPENSATION_FAILED})

#: Step statuses and those that may follow each.
#: - A step starts (RUNNING) from PENDING, or again from an unknown outcome (RUNNING, CANCELLED) when resumed;
#:   an unknown outcome that `reconcile` finds done becomes SUCCESS.
#: - FAILED is compensated only when its effect is known to be out there (a result that could not be stored).
#: - COMPENSATION_FAILED reopens to what it was before (SUCCESS, or CANCELLED: unknown) for an operator's retry.
#: - A step that needs a person's decision WAITs (it never ran); approved, it is PENDING again and runs as any
#:   step does (written ahead RUNNING); refused, it is REJECTED for good and never compensated.
STEP_MOVES: dict[StepStatus, frozenset[StepStatus]] = {
    _T.PENDING: frozenset({_T.RUNNING, _T.FAILED, _T.WAITING}),
    _T.WAITING: frozenset({_T.PENDING, _T.REJECTED}),
    _T.REJECTED: frozenset(),
    _T.RUNNING: frozenset({_T.RUNNING, _T.SUCCESS, _T.FAILED, _T.CANCELLED}) | _UNDONE,
    _T.CANCELLED: frozenset({_T.RUNNING, _T.SUCCESS, _T.CANCELLED}) | _UNDONE,
    _T.SUCCESS: _UNDONE,
    _T.FAILED: _UNDONE,
    _T.COMPENSATION_FAILED: frozenset({_T.SUCCESS, _T.CANCELLED, _T.COMPENSATION_FAILED}),
    _T.COMPENSATED: frozenset(),
}


class TransitionError(RuntimeError):
    """A status change the transition table does not allow: a bug in saga_runtime, never a user's error."""


def step_to(row: StepRow, status: StepStatus) -> None:
    """Move a step to `status`; raise `TransitionError` if the table does not allow it."""
    if status not in STEP_MOVES[row.status]:
        raise TransitionError(
            f"step {row.step_id!r} of saga {row.saga_id!r} cannot go from {row.status.value} to {status.value} "
            "(a bug in saga_runtime: please report it)"
        )
    row.status = status


def saga_to(saga: SagaRow, status: SagaStatus) -> None:
    """Move a saga to `status`; raise `TransitionError` if the table does not allow it."""
    if status not in SAGA_MOVES[saga.status] and (
        saga.parent_id is None or status not in CHILD_MOVES.get(saga.status, ())
    ):
        raise TransitionError(
            f"saga {saga.saga_id!r} cannot go from {saga.status.value} to {status.value} "
            "(a bug in saga_runtime: please report it)"
        )
    saga.status = status
