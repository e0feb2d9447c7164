"""The driver: feed a saga's groups to the engine, from wherever its rows stand, to its end or its wait.

A plan feeds it group by group (`drive_plan`, here); a dynamic saga, or a saga function, one call group at a time
(`CallDriver`, `drive_calls`, in `_calls`): the same adopt, hold, run, compensate and finish steps of the engine.
Plans come from the planning layer above; the engine sees them through the protocols below, and builds them from a
stored saga, resolves a step's `$ref`s, or gets a saga function's body, through the `Planner` a front door hands it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

from saga_runtime._engine._approvals import HOLDABLE
from saga_runtime._engine._calls import CallBody, drive_calls
from saga_runtime._engine._cancellation import CANCELLED, WorkerStopped
from saga_runtime._engine._saga import RUNNABLE, SagaEngine
from saga_runtime._records import (
    SagaResult,
    SagaRow,
    SagaStatus,
    StepStatus,
    own_copy,
)

__all__ = ["PlanShape", "Planner", "Work", "drive", "drive_plan", "work_of"]

logger = logging.getLogger("saga_runtime")

# Statuses read for every saga, as module constants: Python 3.11 reads an enum class's attribute through
# EnumType.__getattr__'s slow hook, a module global at a fraction of its cost.
_SUCCESS, _COMPENSATING = SagaStatus.SUCCESS, SagaStatus.COMPENSATING
_PENDING = StepStatus.PENDING


class PlanStep(Protocol):
    """One planned step, as the driver reads it."""

    @property
    def step_id(self) -> str: ...
    @property
    def approval(self) -> bool: ...
    @property
    def kwargs(self) -> dict[str, Any] | None: ...


class PlanJoin(Protocol):
    """How a group ends."""

    @property
    def mode(self) -> str: ...
    @property
    def needed(self) -> int | None: ...


class PlanShape(Protocol):
    """A validated plan: groups of steps, run in order."""

    @property
    def groups(self) -> Sequence[Sequence[PlanStep]]: ...
    @property
    def steps(self) -> Sequence[PlanStep]: ...
    @property
    def gated(self) -> bool: ...
    @property
    def group_joins(self) -> Sequence[PlanJoin]: ...
    def join_of(self, group: int) -> PlanJoin: ...
    def group_ids(self) -> Mapping[str, int]: ...


class Planner(Protocol):
    """Build plans from stored sagas and resolve `$ref`s: the planning layer, handed down by a front door."""

    def build(self, raw: Any) -> PlanShape:
        """Return the validated plan of a stored saga; raise `PlanValidationError`."""
        ...

    def refs(self, step: Any) -> bool:
        """Tell whether a step's arguments hold a `$ref`."""
        ...

    def resolve(self, step: Any, lookup: Callable[[str], Any]) -> Any:
        """Return a step's arguments with each `$ref` resolved by `lookup`; raise ValueError or LookupError."""
        ...

    def body(self, saga: SagaRow) -> CallBody | None:
        """Return what runs a saga function's code over its record (None: not a saga function's saga)."""
        ...


# What drives a saga: its plan, a saga function's code, or None (a dynamic saga whose code is gone with its process).
Work = PlanShape | CallBody | None


def work_of(planner: Planner, saga: SagaRow) -> Work:
    """Return what drives a stored saga (see `Work`); raise `PlanValidationError` when this executor cannot."""
    return planner.build(saga.plan) if saga.kind == "plan" else planner.body(saga)


def drive(
    engine: SagaEngine, work: Work, planner: Planner, *, resumed: bool = False
) -> Coroutine[Any, Any, SagaResult]:
    """Drive a claimed saga by its work to its end or its wait: every entry point's one way to drive a saga (await
    it: the coroutine of what drives it, no layer of its own around every pause of the saga).

    `resumed`: its record is gone over again (taken over, decided, due): a saga function's code is told so.
    """
    if work is None:  # a dynamic saga whose code is gone: nothing can go on with it
        engine.fail("its process stopped in the middle of the saga; recovery compensated it")
        return engine.compensate()
    if not callable(work):
        return drive_plan(engine, work, planner, resumed=resumed)
    if resumed:
        engine.emit("saga_resumed")
    name = engine.saga.plan.get("function") if isinstance(engine.saga.plan, dict) else None
    return drive_calls(engine, work, what=f"saga function {name!r}")


async def drive_plan(engine: SagaEngine, plan: PlanShape, planner: Planner, *, resumed: bool = True) -> SagaResult:
    """Run (or resume) a plan saga from wherever its rows stand, to a terminal status or a wait.

    `resumed=False`: nothing of it was recorded before this run (a saga just created, or started from its queue):
    no recorded outcome to take in before each group.
    """
    try:
        if engine.saga.status is _COMPENSATING:
            # The saga's error names why it compensates; a record without one (written by an older version) gets it
            # from its first failed group.
            for g, group in enumerate(plan.groups):
                if engine.failed or engine.saga.error is not None:
                    break
                join, rows = plan.join_of(g), [engine.rows[step.step_id] for step in group]
                engine.adopt(rows, join.mode)
                if join.mode != "all" and not any(row.status in RUNNABLE for row in rows):
                    engine.judge(rows, join.mode, join.needed)
            return await engine.compensate()
        group_ids = plan.group_ids()

        def lookup(target: str) -> Any:
            if target in group_ids:
                g = group_ids[target]
                return own_copy(
                    engine.group_result([engine.rows[s.step_id] for s in plan.groups[g]], plan.join_of(g).mode)
                )
            return own_copy(engine.result_for(target))  # a copy: the step it is given to may change it

        by_id, verdict, groups = engine.rows, engine.verdict, engine.groups
        gates = plan.gated
        if gates:
            await engine.gate.load()  # its requests are part of its result, decided in an earlier run or not
        try:
            for group, join in zip(plan.groups, plan.group_joins, strict=True):
                if engine.shelters is not None and engine.shelters.stopping:
                    await engine.flush()  # its worker stops: what ran is recorded, and nothing more starts
                    raise WorkerStopped
                # (One step a group, the sequential case, without a list comprehension's frame.)
                recorded = [by_id[group[0].step_id]] if len(group) == 1 else [by_id[step.step_id] for step in group]
                # (A group of a saga run from its start holds only what this run recorded: nothing to adopt.)
                if resumed:
                    engine.adopt(recorded, join.mode)
                if verdict.failed:  # (engine.failed, read at every group)
                    break
                if len(group) == 1 and join.mode == "all":
                    step, row = group[0], recorded[0]
                    if step.kwargs is not None and row.status is _PENDING and not step.approval:
                        # The sequential case: one step never started, its arguments the plan's, validated with it
                        # (no `$ref`, no decision to wait for), run with them at once. Nothing paused since the last
                        # group ended: its step's reading of the clock starts this one's.
                        if not await groups.run_one(row, step.kwargs):
                            break
                        continue
                # Each step's arguments validated with the plan, handed to the group's run (used only if the step
                # runs: a step with `$ref`s has none, and is given its arguments resolved here).
                # (Built in one comprehension; the steps are walked again only if one has none: a `$ref` to resolve.)
                given: list[dict[str, Any] | None] = [step.kwargs for step in group]
                if None in given:
                    for step, row, kwargs in zip(group, recorded, given, strict=True):
                        if kwargs is None and row.status in RUNNABLE and planner.refs(step):
                            try:
                                engine.set_args(row, planner.resolve(step, lookup))
                            except (ValueError, LookupError) as exc:
                                engine.fail_before_start(row, exc)
                gated = gates and [
                    r for s, r in zip(group, recorded, strict=True) if s.approval and r.status in HOLDABLE
                ]
                if gated and not engine.failed:
                    waiting, rejected = await engine.hold(gated)
                    if waiting:
                        return await engine.wait_for_decisions()  # the saga stops here until every request is decided
                    if rejected:
                        for row in rejected:
                            engine.fail(f"step {row.step_id!r} ({row.tool_name}) was {row.error}")
                        break
                # Nothing paused since the last group ended (unless a decision was awaited): its step's reading of the
                # clock starts this group's (one reading where two were taken a few us apart).
                mode = join.mode
                needed = None if mode == "all" else join.needed  # (an `all` group needs every step)
                if not await groups.run(recorded, join=mode, needed=needed, handed=not gated, kwargs=given):
                    break
        except CANCELLED:
            if engine.fenced or engine.detached:
                # Another executor owns the saga now, or a recovering worker is shutting down: it is not undone from
                # here; its owner (or the next recovery) drives it on from its records.
                engine.stop()
                raise
            logger.warning("saga %s: cancelled by its caller, compensating", engine.saga.saga_id)
            await engine.compensate()
            raise
        if engine.failed:
            return await engine.compensate()
        return await engine.finish(_SUCCESS, handed=True)  # (the last step's end, nothing paused since: the saga's)
    finally:
        # Each error's traceback holds the engine: let go of them, so refcounting frees it, not the GC.
        engine.verdict.errors.clear()
