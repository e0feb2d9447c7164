"""A turn's tool calls run as a saga group, each checked alone; `tool_result_messages` for own loops."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from saga_runtime._exceptions import (
    ApprovalRejectedError,
    BudgetExceededError,
    PlanValidationError,
    StepFailedError,
    describe,
)
from saga_runtime._llm._adapter import Adapter, ToolReply
from saga_runtime._llm._anthropic import AnthropicAdapter
from saga_runtime._llm._chat import ChatAdapter
from saga_runtime._llm._responses import ResponsesAdapter
from saga_runtime._planning import PlanPolicy, build_plan, plan_from_openai
from saga_runtime._tools import ToolRegistry

if TYPE_CHECKING:
    from saga_runtime._dynamic import DynamicSaga

__all__ = ["ADAPTERS", "adapter_for", "reply_for", "run_turn", "tool_result_messages"]

ADAPTERS: dict[str, Adapter] = {a.api: a for a in (ChatAdapter(), ResponsesAdapter(), AnthropicAdapter())}


def adapter_for(api: str) -> Adapter:
    """Return the adapter of a model API by name."""
    try:
        return ADAPTERS[api]
    except KeyError:
        raise ValueError(f"api must be one of {', '.join(map(repr, ADAPTERS))}, got {api!r}") from None


def _refusal(call_id: str, reason: Any) -> ToolReply:
    return ToolReply(call_id, json.dumps({"error": f"refused before running: {reason}"}), is_error=True)


def reply_for(call_id: str, outcome: Any) -> ToolReply:
    """Return `{"result": ...}` or `{"error": ...}` for an outcome; raise `BudgetExceededError`."""
    if isinstance(outcome, BudgetExceededError):
        raise outcome
    if isinstance(outcome, ApprovalRejectedError):
        why = f": {outcome.note}" if outcome.note else ""
        return ToolReply(
            call_id, json.dumps({"error": f"refused by {outcome.by}{why}; the call was not made"}), is_error=True
        )
    if isinstance(outcome, StepFailedError):
        return ToolReply(call_id, json.dumps({"error": outcome.error}), is_error=True)
    if isinstance(outcome, BaseException):
        return ToolReply(call_id, json.dumps({"error": describe(outcome)}), is_error=True)
    return ToolReply(call_id, json.dumps({"result": outcome}))


def tool_result_messages(
    call_ids: Sequence[str], outcomes: Sequence[Any], *, api: str = "chat"
) -> list[dict[str, Any]]:
    """Return the tool-result messages of `api` ("chat", "responses", "anthropic") for a turn.

    `outcomes`: what `saga.group(calls, return_exceptions=True)` returned; a `BudgetExceededError` is raised.
    """
    if len(call_ids) != len(outcomes):
        raise ValueError(f"{len(call_ids)} call ids for {len(outcomes)} outcomes: give one id per outcome")
    adapter = adapter_for(api)
    return adapter.replies([reply_for(call_id, outcome) for call_id, outcome in zip(call_ids, outcomes, strict=True)])


def _turn_limit(policy: PlanPolicy | None) -> int | None:
    if policy is None:
        return None
    limits = [n for n in (policy.max_group_size, policy.max_steps) if n is not None]
    return min(limits) if limits else None


async def run_turn(
    saga: DynamicSaga,
    registry: ToolRegistry,
    policy: PlanPolicy | None,
    calls: Iterable[dict[str, Any]],
    used_ids: set[str],
) -> list[ToolReply]:
    """Run a turn's calls as a group; return a reply per call. Bad calls are refused alone.

    Calls past the policy's group or step limit are refused; `used_ids` gains the ids run.
    """
    replies: dict[int, ToolReply] = {}
    runnable: list[tuple[int, dict[str, Any]]] = []
    taken = set(used_ids)
    for position, call in enumerate(calls):
        call_id = str(call.get("id") or "")
        function = {"name": call.get("name"), "arguments": call.get("arguments")}
        item = {"id": call.get("id"), "type": "function", "function": function}
        try:
            ((step,),) = plan_from_openai([item])
            if step["id"] in taken:
                raise PlanValidationError([f"step id {step['id']!r} is already used in this saga"])
            build_plan([[step]], registry, policy=policy, keyring=saga.keyring)
        except PlanValidationError as exc:
            replies[position] = _refusal(call_id, exc)
            continue
        taken.add(step["id"])
        runnable.append((position, step))
    limit = _turn_limit(policy)
    if limit is not None and len(runnable) > limit:
        for position, step in runnable[limit:]:
            replies[position] = _refusal(
                step["id"], f"the turn has {len(runnable)} runnable calls; the plan policy allows at most {limit}"
            )
        runnable = runnable[:limit]
    if runnable:
        steps = [step for _, step in runnable]
        try:
            outcomes = await saga.group(
                [(step["tool"], step["args"], step["id"]) for step in steps], return_exceptions=True
            )
        except PlanValidationError as exc:  # told to the model
            for position, step in runnable:
                replies[position] = _refusal(step["id"], exc)
        else:
            for (position, step), outcome in zip(runnable, outcomes, strict=True):
                replies[position] = reply_for(step["id"], outcome)
            used_ids.update(step["id"] for step in steps)
    return [replies[position] for position in sorted(replies)]
