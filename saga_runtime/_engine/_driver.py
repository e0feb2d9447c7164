"""The driver: feed a saga's groups to the engine, from wherever its rows stand, to its end or its wait.

A plan feeds it group by group (`drive_plan`); a dynamic saga, or a saga function, one call group at a time
(`CallDriver`, `drive_calls`): the same adopt, hold, run, compensate and finish steps of the engine. Plans come from
the planning layer above; the engine sees them through the protocols below, and builds them from a stored saga,
resolves a step's `$ref`s, or gets a saga function's body, through the `Planner` a front door hands it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from saga_runtime._engine._approvals import HOLDABLE
from saga_runtime._engine._cancellation import CANCELLED, WorkerStopped
from saga_runtime._engine._journal_rows import returned
from saga_runtime._engine._saga import RUNNABLE, SagaEngine
from saga_runtime._exceptions import describe
from saga_runtime._records import SagaResult, SagaRow, SagaStatus, StepRow, StepStatus, own_copy, result_from_rows

__all__ = ["CallBody", "CallDriver", "PlanShape", "Planner", "drive_calls", "drive_plan"]

logger = logging.getLogger("saga_runtime")


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
    def join_of(self, group: int) -> PlanJoin: ...
    def group_ids(self) -> dict[str, int]: ...


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


async def drive_plan(engine: SagaEngine, plan: PlanShape, planner: Planner) -> SagaResult:
    """Run (or resume) a plan saga from wherever its rows stand, to a terminal status or a wait."""
    try:
        return await _drive(engine, plan, planner)
    finally:
        # Each error's traceback holds the engine: let go of them, so refcounting frees it, not the GC.
        engine.verdict.errors.clear()


async def _drive(engine: SagaEngine, plan: PlanShape, planner: Planner) -> SagaResult:
    if engine.saga.status is SagaStatus.COMPENSATING:
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
            return own_copy(engine.group_result([engine.rows[s.step_id] for s in plan.groups[g]], plan.join_of(g).mode))
        return own_copy(engine.result_for(target))  # a copy: the step it is given to may change it

    by_id = engine.rows
    gates = any(step.approval for step in plan.steps)
    if gates:
        await engine.gate.load()  # its requests are part of its result, decided in an earlier run or not
    try:
        for g, group in enumerate(plan.groups):
            if engine.shelters is not None and engine.shelters.stopping:
                await engine.flush()  # its worker stops: what ran is recorded, and nothing more starts
                raise WorkerStopped
            join = plan.join_of(g)
            recorded = [by_id[step.step_id] for step in group]
            engine.adopt(recorded, join.mode)
            if engine.failed:
                break
            for step, row in zip(group, recorded, strict=True):
                if row.status not in RUNNABLE:
                    continue
                if step.kwargs is not None:
                    engine.validated(row, step.kwargs)  # used only if the row runs with the plan's own args
                elif planner.refs(step):
                    try:
                        engine.set_args(row, planner.resolve(step, lookup))
                    except (ValueError, LookupError) as exc:
                        engine.fail_before_start(row, exc)
            gated = gates and [r for s, r in zip(group, recorded, strict=True) if s.approval and r.status in HOLDABLE]
            if gated and not engine.failed:
                waiting, rejected = await engine.hold(gated)
                if waiting:
                    return await engine.wait()  # the saga stops here until every request is decided
                if rejected:
                    for row in rejected:
                        engine.fail(f"step {row.step_id!r} ({row.tool_name}) was {row.error}")
                    break
            if not await engine.run_group(recorded, join=join.mode, needed=join.needed):
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
    return await engine.finish(SagaStatus.SUCCESS)


# A saga function's code, run over its record: given the driver, it feeds it call groups and returns the function's
# return value (a JSON value).
CallBody = Callable[["CallDriver"], Awaitable[Any]]
_UNKNOWN = (StepStatus.PENDING, StepStatus.RUNNING, StepStatus.CANCELLED)
_NO_OUTPUT: Any = object()


class CallDriver:
    """The driver a dynamic saga feeds one call group at a time, and ends once its code is done."""

    __slots__ = ("diverged", "engine", "waiting")

    def __init__(self, engine: SagaEngine) -> None:
        self.engine = engine
        self.waiting: SagaResult | None = None  # set once a call waits for a person's decision (the saga WAITs)
        self.diverged: BaseException | None = None  # code that left its record: the saga fails, whatever it does

    async def feed(
        self, rows: Sequence[StepRow], *, join: str, needed: int | None, gated: Sequence[StepRow], keep_going: bool
    ) -> tuple[bool, list[StepRow]]:
        """Run one group of calls (rows not yet in the saga are added); return (whether it held, its refused calls).

        `gated`: its calls that need a person's decision (held first: when one is undecided the saga WAITs, and
        `waiting` says so); `keep_going`: a refused call does not stop the others (the code sees each outcome).
        """
        engine = self.engine
        if engine.shelters is not None and engine.shelters.stopping:
            await engine.flush()  # its worker stops: what ran is recorded, and nothing more starts
            raise WorkerStopped
        known = engine.rows
        for row in rows:
            if row.step_id not in known:
                engine.add_step(row)
        registry = engine.config.registry
        failed_live = join == "all" and any(
            row.status is StepStatus.FAILED and registry.get(row.tool_name).retry_scope == "saga" for row in rows
        )
        refused = [row for row in rows if row.status is StepStatus.REJECTED]
        if gated:
            waiting, rejected = await engine.hold(gated)
            if waiting:
                self.waiting = await engine.wait()
                return False, []
            refused += rejected
        if refused and not keep_going:
            # Refused as a whole: the other calls are recorded as never run.
            engine.not_run(rows, f"not run: call {refused[0].step_id!r} of its group was rejected")
            await engine.flush()
            return False, refused
        runnable = [row for row in rows if row not in refused]
        ok = True
        if failed_live:
            # Failed live and died mid-undo: finish undoing, run nothing again.
            await engine.compensate_unknown(rows)
            await engine.flush()
        elif join != "all" or any(row.status in _UNKNOWN for row in runnable):
            ok = await engine.run_group(runnable, join=join, needed=needed)
            engine.forgive()  # the calling code decides whether a failure ends the saga
            await engine.compensate_unknown(rows, successes=join != "all" and not ok)
            await engine.flush()  # durable before the caller sees a result
        return ok, refused

    async def end(
        self, error: BaseException | None = None, *, what: str = "the saga block", output: Any = _NO_OUTPUT
    ) -> SagaResult | None:
        """End the saga once its code is done: SUCCESS (with `output`, a saga function's return value), or
        compensated when `error` left the code, it diverged from its record, or an effect could not be undone.

        None when nothing more is this executor's to write (the lease was lost, or the worker stopped it).
        """
        engine = self.engine
        if self.waiting is not None:
            return self.waiting
        if engine.fenced:
            return None
        if self.diverged is not None:
            engine.fail(f"{what} left its record: {describe(self.diverged)}")
        elif error is not None:
            engine.fail(
                "the saga was cancelled by its caller"
                if isinstance(error, CANCELLED)
                else f"{what} raised {describe(error)}"
            )
        else:
            stuck = next((row for row in engine.rows.values() if row.status is StepStatus.COMPENSATION_FAILED), None)
            if stuck is None:
                if output is not _NO_OUTPUT and output is not None:
                    returned(engine.saga, output)
                    engine.journal.touch_saga()  # sealed with the saga row's end
                return await engine.finish(SagaStatus.SUCCESS)
            # An effect that could not be undone must not end in SUCCESS.
            engine.fail(f"call {stuck.step_id!r} ({stuck.tool_name}) has an effect that could not be undone")
        return await engine.compensate()


async def drive_calls(engine: SagaEngine, body: CallBody, *, what: str) -> SagaResult:
    """Run (or resume) a saga function: its code over its record, to a terminal status or a wait.

    Calls recorded are served, the first one not recorded goes live; an exception leaving the code compensates.
    """
    try:
        return await _drive_calls(engine, body, what)
    finally:
        engine.verdict.errors.clear()


async def _drive_calls(engine: SagaEngine, body: CallBody, what: str) -> SagaResult:
    if engine.compensating:
        return await engine.compensate()  # died while being undone: finish that, never forward
    rows = engine.rows.values()
    registry = engine.config.registry
    if any(
        row.status in (StepStatus.WAITING, StepStatus.REJECTED)
        or ((spec := registry.find(row.tool_name)) is not None and spec.approval)
        for row in rows
    ):
        await engine.gate.load()  # its requests, decided in an earlier run or not
    driver = CallDriver(engine)
    result: SagaResult | None
    try:
        output = await body(driver)
    except CANCELLED as exc:
        if engine.fenced or engine.detached:
            engine.stop()  # another executor owns it, or its worker stops: driven on from its records
            raise
        logger.warning("saga %s: cancelled by its caller, compensating", engine.saga.saga_id)
        await driver.end(exc, what=what)
        raise
    except Exception as exc:
        result = await driver.end(exc, what=what)
    else:
        result = await driver.end(what=what, output=output)
    return result if result is not None else result_from_rows(engine.saga, list(engine.rows.values()))
