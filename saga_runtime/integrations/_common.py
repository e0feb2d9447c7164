"""Shared by the integrations: a tool call as a saga step, model responses kept in the saga.

Calls run one at a time, in order (a saga knows calls by position); each response is recorded before it is
acted on, so a re-entered saga replays the same calls.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

from saga_runtime._dynamic import DynamicSaga
from saga_runtime._exceptions import (
    BudgetExceededError,
    LeaseLostError,
    PlanValidationError,
    ReplayDivergenceError,
    SecretKeyError,
    StepFailedError,
)
from saga_runtime._llm._prices import Price, PriceTable
from saga_runtime._planning import TokenUsage
from saga_runtime._records import is_envelope, reveal
from saga_runtime._tools import BUILTIN_TOOLS, ToolSpec, builtin_tool_message
from saga_runtime._tools._schemas import plain_schema

__all__ = ["ENDS_RUN", "ModelRecord", "call_step", "ends_run", "missing_extra", "specs_of"]

T = TypeVar("T")

# Errors that end the run, never shown to the model as a tool's failure.
ENDS_RUN: tuple[type[BaseException], ...] = (BudgetExceededError, LeaseLostError, ReplayDivergenceError)
# Known by name too.
_ENDS_RUN_NAMES = frozenset({"ApprovalPendingError"})

RESPONSES_KEY = "model_responses"


def ends_run(exc: BaseException) -> bool:
    """Tell whether a call's error ends the run, not going to the model."""
    return isinstance(exc, ENDS_RUN) or any(kind.__name__ in _ENDS_RUN_NAMES for kind in type(exc).__mro__)


def missing_extra(framework: str, extra: str) -> ImportError:
    """Return the error for a framework's missing extra."""
    return ImportError(f"{framework} is not installed: install saga-runtime[{extra}]")


def specs_of(saga: DynamicSaga, names: Iterable[str] | None) -> list[ToolSpec]:
    """Return the specs of the saga's registry, or of `names` (a built-in tool, "saga.child": `ValueError`)."""
    registry = saga.registry
    if names is None:
        return list(registry)
    wanted = list(names)
    for name in wanted:
        if isinstance(name, str) and name in BUILTIN_TOOLS:
            raise ValueError(f"{builtin_tool_message(name)} (never given to a model)")
    return [registry.get(name) for name in wanted]


def schema_of(spec: ToolSpec) -> dict[str, Any]:
    """Return a tool's argument schema, as given to model APIs."""
    return plain_schema(spec)


@dataclass
class _SagaState:
    """Per saga: a lock for its calls, and the model responses served."""

    lock: anyio.Lock = field(default_factory=anyio.Lock)
    served: int = 0


_STATES: weakref.WeakKeyDictionary[DynamicSaga, _SagaState] = weakref.WeakKeyDictionary()


def _state(saga: DynamicSaga) -> _SagaState:
    state = _STATES.get(saga)
    if state is None:
        state = _STATES[saga] = _SagaState()
    return state


async def call_step(saga: DynamicSaga, tool: str, args: Mapping[str, Any], call_id: str | None = None) -> str:
    """Run a tool call as a step; return `{"result": ...}` or `{"error": ...}` text for the model.

    Errors that end the run (`ends_run`) are raised.
    """
    step = (tool, dict(args)) if call_id is None or "." in call_id else (tool, dict(args), call_id)
    async with _state(saga).lock:
        try:
            (outcome,) = await saga.group([step], return_exceptions=True)
        except PlanValidationError as exc:
            if ends_run(exc):
                raise
            return json.dumps({"error": f"refused before running: {exc}"})
    if isinstance(outcome, BaseException) and ends_run(outcome):
        raise outcome
    if isinstance(outcome, StepFailedError):
        return json.dumps({"error": outcome.error})
    return json.dumps({"result": outcome})


class ModelRecord:
    """Record model responses before they are acted on, replay them; charge tokens."""

    def __init__(
        self,
        saga: DynamicSaga,
        framework: str,
        *,
        dump: Callable[[Any], Any],
        load: Callable[[Any], Any],
        usage: Callable[[Any], TokenUsage],
        model_name: Callable[[Any], str],
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        self.saga = saga
        self.framework = framework
        self._dump, self._load, self._usage, self._model_name = dump, load, usage, model_name
        self._prices = PriceTable(prices) if prices is not None else None

    def _sealed(self, dumped: Any) -> Any:
        """Return a response as recorded, encrypted whole if the tools take secrets."""
        registry = self.saga.registry
        if not any(registry.get(name).secrets for name in registry.names()):
            return dumped
        if self.saga.keyring is None:
            raise SecretKeyError(
                "the saga's tools take secret arguments and this executor has no key to keep the model's answers "
                "encrypted; pass SagaExecutor(..., secret_key=KEY) or set SAGA_RUNTIME_SECRET_KEY"
            )
        return self.saga.keyring.encrypt(dumped)

    async def respond(self, ask: Callable[[], Awaitable[T]]) -> T:
        """Return the next model response, recorded or asked and recorded."""
        state = _state(self.saga)
        async with state.lock:
            position = state.served
            recorded = self.saga.metadata.get(RESPONSES_KEY) or []
            if position < len(recorded):
                entry = recorded[position]
                if entry.get("framework") != self.framework:
                    raise ReplayDivergenceError(
                        f"saga {self.saga.saga_id!r} model response #{position + 1} was recorded by "
                        f"{entry.get('framework')!r}, not {self.framework!r}",
                        saga_id=self.saga.saga_id,
                        position=position,
                    )
                stored = entry["response"]
                if is_envelope(stored):
                    stored = reveal(stored, self.saga.keyring)
                response: T = self._load(stored)
            else:
                response = await ask()
                entry = {"framework": self.framework, "response": self._sealed(self._dump(response))}
                # Durable before the framework acts on it.
                await self.saga.set_metadata(**{RESPONSES_KEY: [*recorded, entry]})
            state.served = position + 1
            usage = self._usage(response)
            cost = 0.0 if self._prices is None else self._prices.cost(usage, self._model_name(response))
            # Charged already by the run this one re-enters.
            await self.saga.charge(cost=cost, tokens=usage.total_tokens)
        return response
