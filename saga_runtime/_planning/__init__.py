"""Planning: plans normalised and checked (tools, arguments, ids, $refs, policy) before anything is stored or run."""

from saga_runtime._planning._build import build_plan
from saga_runtime._planning._llm_plans import plan_from_anthropic, plan_from_openai
from saga_runtime._planning._llm_usage import TokenUsage, usage_from_anthropic, usage_from_openai
from saga_runtime._planning._plan import (
    JOINS,
    MAX_ID_BYTES,
    Join,
    Plan,
    PlannedStep,
    Step,
    call_args,
    has_refs,
    stored_as_is,
    stored_kwargs,
    valid_id,
)
from saga_runtime._planning._policy import PlanPolicy
from saga_runtime._planning._refs import RefError, resolve_refs
from saga_runtime._planning._replay import check_plan_record

__all__ = [
    "JOINS",
    "MAX_ID_BYTES",
    "Join",
    "Plan",
    "PlanPolicy",
    "PlannedStep",
    "RefError",
    "Step",
    "TokenUsage",
    "build_plan",
    "call_args",
    "check_plan_record",
    "has_refs",
    "plan_from_anthropic",
    "plan_from_openai",
    "resolve_refs",
    "stored_as_is",
    "stored_kwargs",
    "usage_from_anthropic",
    "usage_from_openai",
    "valid_id",
]
