"""The step a child saga runs as (`saga.child()`, API.md §18): the built-in tool "saga.child".

A child is one step of its parent, recorded as any call: written ahead (RUNNING) with the child's work and id as
its arguments, then its result, a summary of the child (`{"saga_id", "status", "output"}`). So the parent's replay
serves it, a re-run that asks for another child diverges, and a re-run that finds the step without an outcome runs
it again: its `execute` finds the child's record by id, returns it if it ended, resumes it if not, and never makes a
second one. Its `compensate` undoes the child as a whole (saga_runtime._engine._children).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from saga_runtime._engine import adopted, driving, run_child, undo_child
from saga_runtime._exceptions import PlanValidationError, SagaFailedError
from saga_runtime._planner import RegistryPlanner
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaStatus
from saga_runtime._starting import function_saga, new_plan_saga
from saga_runtime._tools import BUILTIN_TOOLS, CHILD_NOT_UNDONE, CHILD_TOOL, StepContext, build_spec

__all__: list[str] = []  # registers the built-in tool "saga.child" when imported


class ChildNotUndoneError(SagaFailedError):
    """A child saga ended with effects standing: its parent's compensation still reaches its step, and says so."""


assert ChildNotUndoneError.__name__ == CHILD_NOT_UNDONE


class _ChildSaga:
    """A child saga, run as one step of its parent; undone as a whole when the parent compensates."""

    async def execute(
        self,
        ctx: StepContext,
        saga_id: str,
        function: str | None = None,
        args: dict[str, Any] | None = None,
        plan: list[Any] | None = None,
    ) -> dict[str, Any]:
        drives = driving()
        config = drives.config
        registry = config.registry
        if function is not None:
            found = registry.function(function)
            if found is None:
                raise PlanValidationError([f"{function!r} is not a saga function of this registry"], saga_id=saga_id)
            row = function_saga(drives, found, args, saga_id, None, None)
            steps: list[Any] = []
            work: Any = RegistryPlanner(registry, config.keyring).body(row)
            announce = False
        else:
            planned = build_plan(plan, registry, keyring=config.keyring)
            row, steps = new_plan_saga(drives, planned, saga_id, None, None)
            work = planned
            announce = not (planned.groups and any(step.approval for step in planned.groups[0]))
        adopted(row, ctx.saga_id)
        result = await run_child(drives.actions, work, row, steps, announce=announce)
        if result.status in (SagaStatus.COMPENSATION_FAILED, SagaStatus.PARKED):
            raise ChildNotUndoneError(
                f"child saga {saga_id!r} ended {result.status.value}, its effects not all undone: {result.error}",
                saga_id=saga_id,
                status=result.status.value,
            )
        if result.status is not SagaStatus.SUCCESS:
            raise SagaFailedError(
                f"child saga {saga_id!r} ended {result.status.value}: {result.error}",
                saga_id=saga_id,
                status=result.status.value,
            )
        return {"saga_id": saga_id, "status": result.status.value, "output": result.output}

    async def compensate(self, result: Any, ctx: StepContext) -> None:
        await undo_child(driving(), ctx.args["saga_id"], ctx.saga_id)


# Built under a name a tool may take, then given its own (a '.': no registered tool can take it).
BUILTIN_TOOLS[CHILD_TOOL] = replace(build_spec(_ChildSaga(), name="saga_child"), name=CHILD_TOOL)
