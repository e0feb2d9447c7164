"""ModelCallEvent: what an LLMRunner tells hooks of each model call."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from saga_runtime._engine import EventKind, SagaEvent, SagaHook
from saga_runtime._engine._events import emit
from saga_runtime._planning import TokenUsage
from saga_runtime._records import now

__all__ = ["MODEL_CALLED", "ModelCallEvent", "tell_model_call"]

# Added by the runner, above the engine.
MODEL_CALLED = cast(EventKind, "model_called")


@dataclass(frozen=True, slots=True)
class ModelCallEvent(SagaEvent):
    """An `LLMRunner` model call (`kind` "model_called"), told once its answer is recorded.

    `started_at` to `at` includes retries; `input_tokens` counts cached input; a failed call has `error`
    and no usage. Replayed turns tell nothing.
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
    """Hand the hooks a `ModelCallEvent`."""
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
