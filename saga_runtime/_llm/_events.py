"""ModelCallEvent: what an LLMRunner tells the executor's hooks about each call it makes to the model."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from saga_runtime._engine import EventKind, SagaEvent, SagaHook
from saga_runtime._engine._events import emit
from saga_runtime._planning import TokenUsage
from saga_runtime._records import now

__all__ = ["MODEL_CALLED", "ModelCallEvent", "tell_model_call"]

# Not one of the engine's kinds: the runner, above the engine, adds it.
MODEL_CALLED = cast(EventKind, "model_called")


@dataclass(frozen=True, slots=True)
class ModelCallEvent(SagaEvent):
    """One model call of an `LLMRunner` (`kind` "model_called"), told once its answer is recorded.

    From `started_at` to `at`, retries included; `input_tokens` counts cached input too; a failed call has
    `error` and no usage. A turn served from the record is no call: no event.
    """

    started_at: datetime | None = None
    model: str = ""
    response_model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    turn: int = 0
    finish_reason: str | None = None


def tell_model_call(
    hooks: tuple[SagaHook, ...],
    saga_id: str,
    model: str,
    turn: int,
    started_at: datetime,
    *,
    answer: dict[str, object] | None = None,
    usage: TokenUsage | None = None,
    cost: float = 0.0,
    error: str | None = None,
) -> None:
    """Hand the hooks a `ModelCallEvent` for one call (nothing to do without hooks)."""
    if not hooks:
        return
    answered = answer or {}
    event = ModelCallEvent(
        MODEL_CALLED,
        saga_id,
        at=now(),
        error=error,
        started_at=started_at,
        model=model,
        response_model=str(answered["model"]) if answered.get("model") else None,
        input_tokens=usage.prompt_tokens if usage else 0,
        output_tokens=usage.completion_tokens if usage else 0,
        cost=cost,
        turn=turn,
        finish_reason=str(answered["finish_reason"]) if answered.get("finish_reason") else None,
    )
    emit(hooks, event)
