"""Planning: plans normalised and checked (tools, arguments, ids, $refs, policy) before anything is stored or run."""

from saga_runtime._planning._plan import Plan, PlannedStep, Step, build_plan, has_refs
from saga_runtime._planning._policy import PlanPolicy
from saga_runtime._planning._refs import RefError, resolve_refs
from saga_runtime._planning._replay import check_plan_record

__all__ = [
    "Plan",
    "PlanPolicy",
    "PlannedStep",
    "RefError",
    "Step",
    "build_plan",
    "check_plan_record",
    "has_refs",
    "resolve_refs",
]
