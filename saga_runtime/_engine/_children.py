"""Child sagas (`saga.child()`, API.md §18): a saga run as one step of another, driven only through its parent.

One driver per child, always its parent's: the parent's step runs the child (and after a crash, the parent's re-run
reaches that step again, finds the child's record and resumes it, never starting a second one), and the parent's
compensation undoes it as a whole. Recovery, a restart's take-back and a worker's wake-ups leave alone a child
whose parent is live (`_lineage.through_parent`): were both to drive it, the child could run a tool while its
parent undoes it, or be compensated by recovery while its parent's re-run waits for its result. A child whose
parent is gone or ended (it cannot come to that through the engine: a parent's step ends only once its child has)
is recovered as any saga.

The step runs the child to its end (a WAITING child is gone on with here once due: the parent holds its lease and
its worker slot meanwhile, and looks at the child cheaply, see `_next_look`); its compensation moves a SUCCESS
child to COMPENSATING (allowed for a child only, see `_transitions.CHILD_MOVES`) and undoes its steps in reverse,
or drives a live one to compensate.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from saga_runtime._engine import _journal
from saga_runtime._engine._claim import DRIVING, Drives
from saga_runtime._engine._driver import drive
from saga_runtime._engine._notices import watching
from saga_runtime._engine._saga import SagaEngine
from saga_runtime._exceptions import IdempotencyConflictError, SagaError
from saga_runtime._records import (
    SagaResult,
    SagaRow,
    SagaStatus,
    StepRow,
    now,
    result_from_rows,
    same_work,
    wake_time,
)

if TYPE_CHECKING:
    from saga_runtime._engine._actions import Actions
    from saga_runtime._engine._calls import CallBody
    from saga_runtime._engine._driver import PlanShape

__all__ = ["DRIVING", "driving", "run_child", "undo_child"]

logger = logging.getLogger("saga_runtime")

# How often a child's step looks again at a child held elsewhere (an old owner's lease running out, a recovery
# giving it back).
_POLL = 0.1
# A WAITING child (a long sleep, a recv, a decision: for days, maybe) is looked at, reading only, after a pause that
# starts at _FIRST_LOOK and doubles while it waits on, up to _MOST_LOOK; at once when it is made due in this process
# (a message, a decision or a cancel for it: `_notices`), and when its wake time comes (a sleep's end, a recv's
# deadline). Made due by another process, it is seen within _MOST_LOOK.
_FIRST_LOOK = 0.1
_MOST_LOOK = 2.0


def driving() -> Drives:
    """Return the executor driving the current saga; raise `SagaError` outside one."""
    drives = DRIVING.get()
    if drives is None:
        raise SagaError("a child saga runs as a step of a saga an executor drives; none is driven here")
    return drives


def _check_parent(saga: SagaRow, parent_id: str) -> None:
    if saga.parent_id != parent_id:
        whose = "a saga of its own" if saga.parent_id is None else f"a child of saga {saga.parent_id!r}"
        raise IdempotencyConflictError(
            f"saga {saga.saga_id!r} is {whose}, not a child of {parent_id!r}: give the child another saga_id",
            saga_id=saga.saga_id,
        )


async def run_child(
    actions: Actions, work: PlanShape | CallBody, row: SagaRow, steps: list[StepRow], *, announce: bool
) -> SagaResult:
    """Run the child saga `row` (new, `parent_id` set) to its end, or resume the stored one of that id; return its
    result (terminal, or PARKED). Never a second child: the id is the child's idempotency key.

    The child is driven detached: cut (its parent's worker stops, its parent's lease is lost, its parent's caller
    cancels), it stops where it stands, never compensating on its own; its parent decides its fate (a re-run finds
    it and drives it on, a compensation undoes it).
    """
    drives: Drives = actions.drives
    store = drives.config.store
    recovery = actions.recovery
    parent_id = row.parent_id
    assert parent_id is not None
    pause = _FIRST_LOOK
    with watching(store.url, row.saga_id) as watch:  # before the first read: no notice falls between read and wait
        while True:
            stored = await store.load_saga(row.saga_id)
            if stored is not None:
                saga = stored[0]
                _check_parent(saga, parent_id)
                if not same_work(saga, row):
                    raise IdempotencyConflictError(
                        f"saga {row.saga_id!r} already exists with other work (another function, arguments or "
                        "plan); a child's saga_id names one piece of work",
                        saga_id=row.saga_id,
                    )
                if saga.status.is_terminal or saga.status is SagaStatus.PARKED:
                    return result_from_rows(*stored)  # its tools are not called again
                if saga.status is SagaStatus.WAITING:
                    # Claimed (two writes) only once it may go on: until then each look only reads.
                    if await recovery.may_go_on(saga, stored[1]) and (
                        await recovery.go_on(row.saga_id, detached=True, parent=parent_id) is not None
                    ):
                        pause = _FIRST_LOOK  # it went on, and ended or waits again
                        continue
                    woken = await watch.wait(_next_look(saga, pause))  # not due yet, undecided, or held
                    pause = _FIRST_LOOK if woken else min(pause * 2, _MOST_LOOK)
                    continue
            result = await _drive(actions, work, row.copy(), [step.copy() for step in steps], stored, announce)
            if result is None:
                # Held by an owner whose lease has not run out yet (the parent's earlier driver, gone or finishing
                # it), or by a recovery about to give it back: it ends, or its lease does, and then it is this one's.
                await anyio.sleep(_POLL)
            elif result.status.is_terminal:
                return result
            # else WAITING (a long sleep, a message, a decision): gone on with above once due.


def _next_look(saga: SagaRow, pause: float) -> float:
    """Return how long a WAITING child's step waits before it looks again: `pause`, or less if its wake time comes
    sooner (a wake time passed already: `pause`, the child's claim being what it waits for)."""
    wake = wake_time(saga)
    if wake is None:
        return pause
    left = (wake - now()).total_seconds()
    return min(pause, left) if left > 0 else pause


async def _drive(
    actions: Actions,
    work: PlanShape | CallBody,
    row: SagaRow,
    steps: list[StepRow],
    stored: tuple[SagaRow, list[StepRow]] | None,
    announce: bool,
) -> SagaResult | None:
    """Store the new child and drive it, or drive the stored one on; None if it is held elsewhere."""
    drives = actions.drives
    engine: SagaEngine | None = None
    if stored is None:
        engine = drives.claims.start_plan(row, steps, announce=announce)
        created = row.copy()
        announced = engine.journal.announced
        existing = await _journal.create(
            drives.config.store, created, [step.copy() for step in steps if step.step_id in announced]
        )
        if existing is not None:
            return None  # stored meanwhile: looked at again
        engine.journal.stored_as(created)
        claim = drives.claim(row, take="new")
    else:
        claim = drives.claim(stored[0], stored[1], take="orphan")
    async with claim as held:
        if held is None:
            return None
        engine = held.start(engine)
        engine.detached = True
        engine.emit("saga_started")
        return await drive(engine, work, actions.planner, resumed=stored is not None)


async def undo_child(drives: Drives, saga_id: str, parent_id: str) -> None:
    """Undo the child `saga_id` of `parent_id` as a whole (its parent compensates): a SUCCESS child is compensated
    step by step in reverse; a live one is driven to compensate; a child never created or already undone is left.

    Raise `SagaError` when its effects could not all be undone (the parent's step then records that).
    """
    store = drives.config.store
    why = f"its parent saga {parent_id!r} compensates"
    while True:
        stored = await store.load_saga(saga_id)
        if stored is None:
            return  # never created: nothing to undo
        saga, rows = stored
        _check_parent(saga, parent_id)
        status = saga.status
        if status is SagaStatus.COMPENSATED:
            return
        if saga.purged_at is not None:  # its steps are gone: nothing left to undo them by
            raise SagaError(f"child saga {saga_id!r} was purged while {status.value}: its effects cannot be undone")
        if status in (SagaStatus.COMPENSATION_FAILED, SagaStatus.PARKED):
            raise SagaError(f"child saga {saga_id!r} is {status.value}: its effects are not all undone ({saga.error})")
        if status is SagaStatus.SUCCESS:
            result = await _reopen_and_compensate(drives, saga, rows, why)
        else:
            result = await _compensate_live(drives, saga, rows, why)
        if result is None:
            await anyio.sleep(_POLL)  # held elsewhere meanwhile: looked at again


async def _reopen_and_compensate(drives: Drives, saga: SagaRow, rows: list[StepRow], why: str) -> SagaResult | None:
    """Move a SUCCESS child to COMPENSATING under this executor's lease, and compensate it."""
    config = drives.config
    # Written only where the child is still SUCCESS: its parent's driver (this) is the one that may reopen it.
    if not await _journal.reopen_child(config.store, saga, config.executor_id, drives.claims.lease_until(now()), why):
        return None  # moved meanwhile: looked at again
    logger.info("saga %s: a SUCCESS child, compensated as a whole: %s", saga.saga_id, why)
    async with drives.claim(saga, rows, take="new") as held:
        if held is None:
            return None
        engine = held.start()
        return await engine.compensate()


async def _compensate_live(drives: Drives, saga: SagaRow, rows: list[StepRow], why: str) -> SagaResult | None:
    """Claim a live child (its owner gone: the parent's earlier driver) and compensate it; None if held elsewhere."""
    waiting = saga.status is SagaStatus.WAITING
    claim = drives.claim(saga, rows, take="waiting" if waiting else "orphan")
    async with claim as held:
        if held is None:
            return None
        engine = held.start()
        if waiting:
            await engine.resume()
        engine.fail(why)
        return await engine.compensate()
