"""LLMRunner: an OpenAI-compatible function-calling loop whose tool calls run as a dynamic saga."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from saga_runtime._engine import Budget
from saga_runtime._exceptions import (
    ApprovalPendingError,
    ApprovalRejectedError,
    BudgetExceededError,
    IdempotencyConflictError,
    LeaseLostError,
    PlanValidationError,
    ReplayDivergenceError,
    StepFailedError,
    TurnLimitError,
)
from saga_runtime._planning import PlanPolicy, build_plan, plan_from_openai, usage_from_openai
from saga_runtime._records import SagaResult
from saga_runtime._tools import ToolRegistry

if TYPE_CHECKING:
    from saga_runtime._dynamic import DynamicSaga
    from saga_runtime._executor import SagaExecutor

__all__ = ["LLMRunner", "TurnLimitError"]

logger = logging.getLogger("saga_runtime")


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


class LLMRunner:
    """Drive a model's function calls as one saga: each turn's calls run as a group, results go back to the model.

    `client` is OpenAI-compatible (`client.chat.completions.create(model=, messages=, tools=)`), sync or async.
    Each model call is recorded in the saga (model, prompt and completion tokens, cost from `prices`: model name
    to USD per million input and output tokens) and charged to its budget. A tool's failure is sent back to the
    model as the call's result; a failure of the loop itself (the model's API, the budget, no final answer
    within `max_turns`) compensates every call made, in reverse. Calls outside `policy` are refused before they
    run, and the model is told why.

    Each answer of the model is recorded (`metadata["llm_responses"]`) before any call it asks for runs. Run an
    unfinished saga id again (its process died) with the same prompt and model, and the recorded answers are
    replayed instead of asking (and paying) the model again, while the dynamic saga serves the calls that
    finished from the record; the model is asked only for the turns that were never answered.
    """

    def __init__(
        self,
        client: Any,
        model: str,
        registry: ToolRegistry,
        executor: SagaExecutor,
        *,
        prices: Mapping[str, tuple[float, float]] | None = None,
        system: str | None = None,
        policy: PlanPolicy | None = None,
        strict_tools: bool = False,
    ) -> None:
        if not callable(_get(_get(_get(client, "chat"), "completions"), "create")):
            raise TypeError("client must be OpenAI-compatible: client.chat.completions.create(...) is missing")
        self.client = client
        self.model = model
        self.registry = registry
        self.executor = executor
        self.prices = dict(prices or {})
        self.system = system
        self.policy = policy
        self.tools = registry.to_openai_tools(strict=strict_tools)

    def cost_of(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Return what a call of this runner's model cost, from the price table (0 for a model not in it)."""
        price_in, price_out = self.prices.get(self.model, (0.0, 0.0))
        return (prompt_tokens * price_in + completion_tokens * price_out) / 1_000_000

    async def run(
        self, prompt: str, *, saga_id: str | None = None, budget: Budget | None = None, max_turns: int = 10
    ) -> SagaResult:
        """Run the loop until the model answers in text; return the saga's result (its answer in `metadata`).

        Like `executor.run`, a failure does not raise: the result is COMPENSATED (or COMPENSATION_FAILED) and
        its `error` says why. Cancellation of the caller compensates, then goes on.
        """
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if saga_id is not None:
            stored = await self.executor.store.get_saga(saga_id)
            if stored is not None and stored.status.is_terminal:
                return stored  # the saga id is the run's idempotency key: the model is not asked again
            if stored is not None and (stored.metadata.get("prompt"), stored.metadata.get("model")) != (
                prompt,
                self.model,
            ):
                # Checked before the block is entered: a refused re-entry must not compensate the recorded saga.
                raise IdempotencyConflictError(
                    f"saga {saga_id!r} was recorded for model {stored.metadata.get('model')!r} and prompt "
                    f"{stored.metadata.get('prompt')!r}; re-enter it with the same model and prompt, or use "
                    "another saga_id",
                    saga_id=saga_id,
                )
        # A call that needs a person's decision ends the run WAITING (the model's answer is recorded); run the same
        # prompt and saga id again once decided: an approved call runs, a rejected one is told to the model.
        gated = None if self.policy is None else self.policy.approval_required
        saga = self.executor.saga(
            saga_id=saga_id,
            budget=budget,
            metadata={"model": self.model, "prompt": prompt},
            approval_required=gated,
        )
        try:
            async with saga:
                await self._loop(saga, prompt, max_turns)
        except (ReplayDivergenceError, IdempotencyConflictError, LeaseLostError):
            raise  # not a failure of the loop: the caller must know
        except ApprovalPendingError as exc:
            logger.info("saga %s: the LLM loop waits for a decision on call %s", saga.saga_id, exc.step_id)
        except Exception as exc:
            if saga.result is None:  # the saga never started (an id in use, a conflict): nothing to report
                raise
            logger.warning("saga %s: the LLM loop failed and was compensated: %s", saga.saga_id, exc)
        assert saga.result is not None
        return saga.result

    async def _complete(self, messages: list[dict[str, Any]]) -> Any:
        create = self.client.chat.completions.create
        request = {"model": self.model, "messages": list(messages)}  # a snapshot: the loop keeps appending
        if self.tools:
            request["tools"] = self.tools
        if inspect.iscoroutinefunction(create):
            return await create(**request)
        response = await anyio.to_thread.run_sync(partial(create, **request))  # a sync client must not block
        return await response if inspect.isawaitable(response) else response

    async def _loop(self, saga: DynamicSaga, prompt: str, max_turns: int) -> None:
        recorded = list(saga.metadata.get("llm_responses") or [])  # a re-entered run's answers so far
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": prompt})
        calls_log: list[dict[str, Any]] = []
        responses: list[dict[str, Any]] = []
        for turn in range(max_turns):
            if turn < len(recorded):
                response = recorded[turn]  # a re-entered run: the model was asked this already
            else:
                response = _normalized(await self._complete(messages), self.model)
            responses.append(response)
            usage = usage_from_openai(response)
            cost = self.cost_of(usage.prompt_tokens, usage.completion_tokens)
            calls_log.append(
                {
                    "turn": turn,
                    "model": response["model"],
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "cost": cost,
                }
            )
            # Durable before any of its calls runs: a re-entered run replays this answer instead of paying again.
            await saga.set_metadata(llm_calls=calls_log, llm_responses=responses)
            await saga.charge(cost=cost, tokens=usage.total_tokens)  # BudgetExceededError ends the loop
            message = response["choices"][0]["message"]
            tool_calls = message.get("tool_calls") or []
            if not tool_calls:
                await saga.set_metadata(answer=message.get("content"), turns=turn + 1)
                return
            messages.append(dict(message))  # normalized: role, content and the tool calls by id
            messages.extend(await self._run_calls(saga, message))
        raise TurnLimitError(f"the model gave no final answer within max_turns={max_turns}")

    async def _run_calls(self, saga: DynamicSaga, message: Any) -> list[dict[str, Any]]:
        """Run one turn's tool calls as a group; return the tool messages that answer each call."""
        try:
            plan = plan_from_openai(message)
            build_plan(plan, self.registry, policy=self.policy)
        except PlanValidationError as exc:
            # Nothing ran: tell the model what was wrong with its calls, so it can correct them.
            ids = [_get(call, "id") for call in _get(message, "tool_calls") or []]
            refusal = json.dumps({"error": f"refused before running: {exc}"})
            return [{"role": "tool", "tool_call_id": call_id, "content": refusal} for call_id in ids]
        steps = plan[0]
        try:
            outcomes = await saga.group(
                [(step["tool"], step["args"], step["id"]) for step in steps], return_exceptions=True
            )
        except PlanValidationError as exc:  # e.g. a provider that reuses a call id of an earlier turn
            refusal = json.dumps({"error": f"refused before running: {exc}"})
            return [{"role": "tool", "tool_call_id": step["id"], "content": refusal} for step in steps]
        replies = []
        for step, outcome in zip(steps, outcomes, strict=True):
            if isinstance(outcome, BudgetExceededError):
                raise outcome
            content: dict[str, Any]
            if isinstance(outcome, ApprovalRejectedError):  # a person refused it: the model is told who, and why
                why = f": {outcome.note}" if outcome.note else ""
                content = {"error": f"refused by {outcome.by}{why}; the call was not made"}
            elif isinstance(outcome, StepFailedError):
                content = {"error": outcome.error}
            else:
                content = {"result": outcome}
            replies.append({"role": "tool", "tool_call_id": step["id"], "content": json.dumps(content)})
        return replies


def _normalized(response: Any, model: str) -> dict[str, Any]:
    """Return what the loop uses of a chat completion as plain JSON: model, usage and the first choice's message.

    This is what is recorded (so a re-entered run needs no SDK object), and what the loop reads, so a first run
    and a re-entered one take the same path.
    """
    usage = usage_from_openai(response)
    choices = _get(response, "choices") or []
    message = _get(choices[0], "message") if choices else None
    tool_calls = _get(message, "tool_calls") or []
    return {
        "model": str(_get(response, "model", model) or model),
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": _get(message, "content"),
                    "tool_calls": [
                        {
                            "id": _get(call, "id"),
                            "type": "function",
                            "function": {
                                "name": _get(_get(call, "function"), "name"),
                                "arguments": _get(_get(call, "function"), "arguments"),
                            },
                        }
                        for call in tool_calls
                    ],
                }
            }
        ],
    }
