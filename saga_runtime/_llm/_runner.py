"""LLMRunner: a model's function-calling loop run as a dynamic saga."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, overload

import anyio

from saga_runtime._engine import Budget
from saga_runtime._exceptions import (
    ApprovalPendingError,
    IdempotencyConflictError,
    LeaseLostError,
    ReplayDivergenceError,
    SecretKeyError,
    TurnLimitError,
    describe,
)
from saga_runtime._llm._adapter import Adapter, get, plain
from saga_runtime._llm._agent_runs import AgentRun
from saga_runtime._llm._calls import adapter_for, run_turn
from saga_runtime._llm._events import tell_model_call
from saga_runtime._llm._model_retry import DEFAULT_MODEL_RETRY, call_with_retry
from saga_runtime._llm._prices import Price, PriceTable
from saga_runtime._planning import PlanPolicy, TokenUsage
from saga_runtime._records import SagaResult, canonical_json, is_envelope, now, reveal
from saga_runtime._storage import sagas
from saga_runtime._tools import RetryPolicy, ToolRegistry

if TYPE_CHECKING:
    from saga_runtime._dynamic import DynamicSaga
    from saga_runtime._executor import SagaExecutor

__all__ = ["LLMRunner", "TurnLimitError"]

logger = logging.getLogger("saga_runtime")


def _pick_api(client: Any) -> str:
    """Return "anthropic" for a client with `messages.create` and no `chat`, else "chat"."""
    if get(client, "chat") is None and callable(get(get(client, "messages"), "create")):
        return "anthropic"
    return "chat"


class LLMRunner:
    """Drive a model's function calls as one saga, each turn's calls as a group.

    `api`: "chat", "responses" or "anthropic" (`client.messages.create`); `None` picks "anthropic" for a
    client with `messages.create` and no `chat`. Sync and async clients work. Only tools `policy` allows are
    sent; a bad call or a tool's failure goes back to the model. Transient model errors retry per
    `model_retry`; a failure of the loop (API, budget, `max_turns`) compensates every call.

    Each model call is recorded (`metadata["llm_calls"]`), charged and told to hooks as a `ModelCallEvent`;
    each answer (`metadata["llm_responses"]`) before its calls run, so re-running a saga id asks only
    unanswered turns. With `saga=`, the loop runs as calls of that saga (a saga function resumed over its
    record asks the model only for turns never answered), recorded in its `metadata["llm_runs"]`.
    """

    def __init__(
        self,
        client: Any,
        model: str,
        registry: ToolRegistry,
        executor: SagaExecutor,
        *,
        api: str | None = None,
        prices: Mapping[str, Price] | None = None,
        system: str | None = None,
        policy: PlanPolicy | None = None,
        strict_tools: bool = False,
        model_retry: RetryPolicy | None = None,
    ) -> None:
        self.api = _pick_api(client) if api is None else api
        self._adapter: Adapter = adapter_for(self.api)
        if self._adapter.endpoint(client) is None:
            path = ".".join(("client", *self._adapter.endpoint_path))
            raise TypeError(
                f"client has no {path}(...), which api={self.api!r} calls: pass a client of that API "
                "(or name its API with api='chat', 'responses' or 'anthropic')"
            )
        if model_retry is not None and not isinstance(model_retry, RetryPolicy):
            raise TypeError(f"model_retry must be a RetryPolicy, got {model_retry!r}")
        self.client = client
        self.model = model
        self.registry = registry
        self.executor = executor
        self.prices = dict(prices or {})
        self._prices = PriceTable(self.prices)
        self.system = system
        self.policy = policy
        self.model_retry = model_retry or DEFAULT_MODEL_RETRY
        allowed = None if policy is None else policy.allowed_tools
        specs = [spec for spec in registry if allowed is None or spec.name in allowed]
        self.tools = self._adapter.tools(specs, strict=strict_tools)

    def cost_of(
        self, prompt_tokens: int | TokenUsage, completion_tokens: int = 0, *, model: str | None = None
    ) -> float:
        """Return a call's cost (0 unpriced), from its `TokenUsage` or token counts."""
        usage = prompt_tokens if isinstance(prompt_tokens, TokenUsage) else TokenUsage(prompt_tokens, completion_tokens)
        models = [self.model] if model is None else [model, self.model]
        return self._prices.cost(usage, *models)

    @overload
    async def run(
        self,
        prompt: str | list[Any],
        *,
        saga_id: str | None = None,
        budget: Budget | None = None,
        max_turns: int = 10,
        saga: None = None,
        **options: Any,
    ) -> SagaResult: ...

    @overload
    async def run(
        self,
        prompt: str | list[Any],
        *,
        saga_id: None = None,
        budget: None = None,
        max_turns: int = 10,
        saga: DynamicSaga,
        **options: Any,
    ) -> str | None: ...

    async def run(
        self,
        prompt: str | list[Any],
        *,
        saga_id: str | None = None,
        budget: Budget | None = None,
        max_turns: int = 10,
        saga: DynamicSaga | None = None,
        **options: Any,
    ) -> SagaResult | str | None:
        """Run the loop until the model answers in text; return the result (answer in `metadata`).

        `prompt`: a user message, or messages in this API's format; `options` go to every model call. A
        failure does not raise: the result is COMPENSATED with an `error`.

        `saga`: run the loop as calls of that saga (a saga function's, or an `executor.saga()` block's) and return
        the model's final answer; a failure raises into the saga's code (which compensates if it leaves it).
        """
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if not isinstance(prompt, str | list):
            raise TypeError(f"prompt must be a string or a list of messages, got {type(prompt).__name__}")
        taken = sorted(self._adapter.reserved(self.system) & set(options))
        if taken:
            raise TypeError(f"the runner sets {', '.join(taken)} itself: leave them out of run()'s options")
        recorded_prompt = plain(prompt)
        if saga is not None:
            return await self._run_in(saga, recorded_prompt, saga_id, budget, max_turns, options)
        if saga_id is not None:
            stored = await sagas.get_saga(self.executor.store, saga_id)
            if stored is not None and stored.status.is_terminal:
                return stored  # the saga id is the idempotency key
            if stored is not None and (
                canonical_json(stored.metadata.get("prompt")),
                stored.metadata.get("model"),
                stored.metadata.get("api", "chat"),
            ) != (canonical_json(recorded_prompt), self.model, self.api):
                # Checked first: a refused re-entry must not compensate.
                raise IdempotencyConflictError(
                    f"saga {saga_id!r} was recorded for model {stored.metadata.get('model')!r} and prompt "
                    f"{stored.metadata.get('prompt')!r}; re-enter it with the same model and prompt (and API), or "
                    "use another saga_id",
                    saga_id=saga_id,
                )
        metadata = {"model": self.model, "prompt": recorded_prompt, "api": self.api}
        gated = None if self.policy is None else self.policy.approval_required
        saga = self.executor.saga(saga_id=saga_id, budget=budget, metadata=metadata, approval_required=gated)
        try:
            async with saga:
                recorded = saga.metadata.get("llm_responses") or []
                answer = await self._loop(saga, recorded_prompt, max_turns, options, recorded, saga.set_metadata)
                await saga.set_metadata(answer=answer[0], turns=answer[1])
        except (ReplayDivergenceError, IdempotencyConflictError, LeaseLostError):
            raise  # not the loop's failure
        except ApprovalPendingError as exc:
            logger.info("saga %s: the LLM loop waits for a decision on call %s", saga.saga_id, exc.step_id)
        except Exception as exc:
            if saga.result is None:  # never started
                raise
            logger.warning("saga %s: the LLM loop failed and was compensated: %s", saga.saga_id, exc)
        assert saga.result is not None
        return saga.result

    async def _run_in(
        self,
        saga: DynamicSaga,
        prompt: str | list[Any],
        saga_id: str | None,
        budget: Budget | None,
        max_turns: int,
        options: Mapping[str, Any],
    ) -> str | None:
        """Run the loop as calls of `saga`, recorded at its position among the saga's loops; return the answer."""
        from saga_runtime._dynamic import DynamicSaga  # a front door beside this one, imported when used

        if not isinstance(saga, DynamicSaga):
            raise TypeError(f"saga must be the DynamicSaga a saga function is given, got {type(saga).__name__}")
        if saga_id is not None or budget is not None:
            raise TypeError(
                "with saga=, the loop runs in that saga under its own id and budget: leave out saga_id and budget"
            )
        run = await AgentRun.begin(saga, self.model, prompt, self.api)
        gated = () if self.policy is None else self.policy.approval_required or ()
        with saga.approvals_for(gated):
            text, turns = await self._loop(saga, prompt, max_turns, options, run.responses, run.write)
        await run.write(answer=text, turns=turns)
        return text

    async def _complete(self, request: dict[str, Any]) -> Any:
        """Call the model once (a sync client in a thread)."""
        create = self._adapter.endpoint(self.client)
        if create is None:
            raise TypeError(f"the client's {'.'.join(self._adapter.endpoint_path)} is gone")
        if inspect.iscoroutinefunction(inspect.unwrap(create)):
            response = create(**request)
        else:
            response = await anyio.to_thread.run_sync(partial(create, **request))
        return await response if inspect.isawaitable(response) else response

    async def _ask(self, conversation: list[Any], options: Mapping[str, Any]) -> dict[str, Any]:
        """Return the model's next turn as recorded, retrying transient errors."""
        request = self._adapter.request(self.model, conversation, self.tools, self.system, options)
        response = await call_with_retry(self.model_retry, partial(self._complete, request), f"model {self.model}")
        return self._adapter.record(response, self.model)

    def _for_record(self, answer: dict[str, Any], saga: DynamicSaga) -> Any:
        """Return a turn as recorded, encrypted whole if it holds secret arguments."""
        secret = [
            call["name"] for call in answer["calls"] if (spec := self.registry.find(call["name"])) and spec.secrets
        ]
        if not secret:
            return answer
        if saga.keyring is None:
            raise SecretKeyError(
                f"the model called {', '.join(sorted(set(secret)))}, whose arguments hold secrets, and this executor "
                "has no key to keep them encrypted; pass SagaExecutor(..., secret_key=KEY) or set "
                "SAGA_RUNTIME_SECRET_KEY"
            )
        return saga.keyring.encrypt(answer)

    def _recorded(self, record: Any, saga: DynamicSaga) -> dict[str, Any]:
        """Return a recorded turn (an older chat completion too)."""
        if is_envelope(record):
            record = reveal(record, saga.keyring)
        if isinstance(record, Mapping) and "api" not in record:
            return adapter_for("chat").record(record, self.model)
        return dict(record)

    async def _loop(
        self,
        saga: DynamicSaga,
        prompt: str | list[Any],
        max_turns: int,
        options: Mapping[str, Any],
        answers: list[Any],
        write: Callable[..., Awaitable[None]],
    ) -> tuple[str | None, int]:
        """Ask, record (through `write`), run the calls, until a text answer: return it and the turns taken.

        `answers`: the turns recorded already, served without asking the model.
        """
        recorded = [self._recorded(r, saga) for r in answers]
        conversation = self._adapter.conversation(prompt, self.system)
        calls_log: list[dict[str, Any]] = []
        responses: list[dict[str, Any]] = []
        used_ids: set[str] = set()
        hooks = self.executor.hooks
        for turn in range(max_turns):
            started: datetime | None = None  # None: served from the record
            if turn < len(recorded):
                answer = recorded[turn]
            elif saga.replaying:
                raise ReplayDivergenceError(
                    f"saga {saga.saga_id!r}: model turn #{turn + 1} was never recorded (a replay asks no model)",
                    saga_id=saga.saga_id,
                )
            else:
                started = now()
                try:
                    answer = await self._ask(conversation, options)
                except Exception as exc:
                    tell_model_call(hooks, saga.saga_id, self.model, turn, started, error=describe(exc))
                    raise
            responses.append(self._for_record(answer, saga))
            usage = TokenUsage.from_dict(answer["usage"])
            cost = self.cost_of(usage, model=answer["model"])
            calls_log.append(
                {
                    "turn": turn,
                    "model": answer["model"],
                    **usage.as_dict(),
                    "cost": cost,
                    "finish_reason": answer["finish_reason"],
                    "refusal": answer["refusal"],
                }
            )
            # Durable before its calls run.
            await write(llm_calls=calls_log, llm_responses=responses)
            if started is not None:
                tell_model_call(hooks, saga.saga_id, self.model, turn, started, answer=answer, usage=usage, cost=cost)
            await saga.charge(cost=cost, tokens=usage.total_tokens)
            if not answer["calls"]:
                return answer["text"], turn + 1
            conversation.extend(answer["output"])
            replies = await run_turn(saga, self.registry, self.policy, answer["calls"], used_ids)
            conversation.extend(self._adapter.replies(replies))
        raise TurnLimitError(f"the model gave no final answer within max_turns={max_turns}")
