"""OpenTelemetry tracing of sagas, spans named by the OpenTelemetry GenAI conventions where they apply.

Install `saga-runtime[otel]`, configure OpenTelemetry as usual, and give the executor the hook::

    from saga_runtime import SagaExecutor
    from saga_runtime.otel import TracingHook

    executor = SagaExecutor(registry, store=store, hooks=[TracingHook()])

One trace per saga, under its span `saga {saga id}`; `gen_ai.operation.name` names each operation:

- `execute_tool {tool}`, one per step attempt (from the previous failure, backoff included): `gen_ai.tool.name`,
  `gen_ai.tool.call.id` (the step id), `gen_ai.tool.type="function"`.
- `chat {model}`, one per `LLMRunner` model call (kind CLIENT): `gen_ai.request.model`, `gen_ai.response.model`,
  `gen_ai.response.finish_reasons`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`.
- `compensate {tool}`, one per compensation attempt.

Own attributes: `saga_runtime.saga.{id,status}`, `saga_runtime.step.{id,tool,group,attempt,status,
idempotency_key}`, `saga_runtime.compensation.attempt`, `saga_runtime.llm.{turn,cost}`. Failures have ERROR
status and `error.type`. A saga waiting for approval ends its span (WAITING); going on starts a new one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("saga_runtime.otel needs OpenTelemetry: pip install 'saga-runtime[otel]'") from exc

from saga_runtime._engine import SagaEvent
from saga_runtime._llm import ModelCallEvent

__all__ = ["TracingHook"]

_FAILED = {"FAILED", "CANCELLED", "COMPENSATION_FAILED"}


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


def _fail(span: Span, error: str | None, fallback: str) -> None:
    """Mark a span failed: ERROR status and `error.type`."""
    prefix = (error or "").split(":", 1)[0]
    span.set_status(Status(StatusCode.ERROR, error or fallback))
    span.set_attribute("error.type", prefix if prefix.isidentifier() else fallback)


class TracingHook:
    """A `SagaHook` that turns saga events into OpenTelemetry spans (see the module docstring)."""

    def __init__(self, tracer_provider: TracerProvider | None = None, *, tracer: Tracer | None = None) -> None:
        self._tracer = tracer or trace.get_tracer("saga_runtime", tracer_provider=tracer_provider)
        self._sagas: dict[str, Span] = {}
        self._attempts: dict[tuple[str, str], Span] = {}
        self._compensations: dict[tuple[str, str], Span] = {}

    def __call__(self, event: SagaEvent) -> None:
        """Open, annotate or close the span the event belongs to."""
        handler = getattr(self, f"_{event.kind}", None)
        if handler is not None:
            handler(event)

    # -- the saga

    def _saga_started(self, event: SagaEvent) -> None:
        self._end_saga(event, None)  # started again: the earlier run's span ends
        self._sagas[event.saga_id] = self._tracer.start_span(
            f"saga {event.saga_id}",
            start_time=_ns(event.at),
            attributes={"saga_runtime.saga.id": event.saga_id, "saga_runtime.saga.status": event.status or ""},
        )

    def _saga_finished(self, event: SagaEvent) -> None:
        self._end_saga(event, event.status or "")

    def _approval_requested(self, event: SagaEvent) -> None:
        span = self._sagas.get(event.saga_id)
        if span is not None:
            span.add_event(
                "approval requested",
                {"saga_runtime.step.id": event.step_id or "", "saga_runtime.step.tool": event.tool_name or ""},
                timestamp=_ns(event.at),
            )
        # Undecided: the saga waits, maybe for days.
        self._end_saga(event, "WAITING")

    def _end_saga(self, event: SagaEvent, status: str | None) -> None:
        for spans in (self._attempts, self._compensations):
            for key in [key for key in spans if key[0] == event.saga_id]:
                spans.pop(key).end(end_time=_ns(event.at))
        span = self._sagas.pop(event.saga_id, None)
        if span is None:
            return
        if status is not None:
            span.set_attribute("saga_runtime.saga.status", status)
            if status not in ("SUCCESS", "WAITING"):
                span.set_status(Status(StatusCode.ERROR, event.error or status))
                span.set_attribute("error.type", status)
        span.end(end_time=_ns(event.at))

    # -- steps

    def _child(
        self, event: SagaEvent, name: str, attributes: dict[str, Any], *, kind: SpanKind = SpanKind.INTERNAL
    ) -> Span:
        parent = self._sagas.get(event.saga_id)
        context = trace.set_span_in_context(parent) if parent is not None else None
        start = event.started_at if isinstance(event, ModelCallEvent) and event.started_at else event.at
        return self._tracer.start_span(
            name,
            context=context,
            kind=kind,
            start_time=_ns(start),
            attributes={"saga_runtime.saga.id": event.saga_id, **attributes},
        )

    @staticmethod
    def _step(event: SagaEvent) -> dict[str, Any]:
        return {
            "saga_runtime.step.id": event.step_id or "",
            "saga_runtime.step.tool": event.tool_name or "",
            "saga_runtime.step.group": event.group if event.group is not None else -1,
            "saga_runtime.step.idempotency_key": event.idempotency_key or "",
        }

    def _open_attempt(self, event: SagaEvent, attempt: int) -> None:
        tool = event.tool_name or ""
        key = (event.saga_id, event.step_id or "")
        previous = self._attempts.pop(key, None)
        if previous is not None:
            previous.end(end_time=_ns(event.at))
        self._attempts[key] = self._child(
            event,
            f"execute_tool {tool}",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": event.step_id or "",
                "gen_ai.tool.type": "function",
                **self._step(event),
                "saga_runtime.step.attempt": attempt,
            },
        )

    def _step_started(self, event: SagaEvent) -> None:
        self._open_attempt(event, event.attempt or 1)

    def _attempt_failed(self, event: SagaEvent) -> None:
        key = (event.saga_id, event.step_id or "")
        span = self._attempts.get(key)
        if span is None or not event.will_retry:
            return  # the last attempt's span ends with the step
        self._attempts.pop(key)
        span.set_attribute("saga_runtime.step.status", "FAILED")
        _fail(span, event.error, "FAILED")
        span.end(end_time=_ns(event.at))
        self._open_attempt(event, (event.attempt or 1) + 1)

    def _step_finished(self, event: SagaEvent) -> None:
        span = self._attempts.pop((event.saga_id, event.step_id or ""), None)
        if span is None:
            return
        span.set_attribute("saga_runtime.step.status", event.status or "")
        if event.status in _FAILED:
            _fail(span, event.error, event.status or "FAILED")
        span.end(end_time=_ns(event.at))

    # -- compensations

    def _compensation_started(self, event: SagaEvent) -> None:
        key = (event.saga_id, event.step_id or "")
        previous = self._compensations.pop(key, None)
        if previous is not None:  # retried: the failed attempt's span ends
            _fail(previous, None, "FAILED")
            previous.end(end_time=_ns(event.at))
        attributes = {**self._step(event), "saga_runtime.compensation.attempt": event.attempt or 0}
        self._compensations[key] = self._child(event, f"compensate {event.tool_name}", attributes)

    def _compensation_finished(self, event: SagaEvent) -> None:
        span = self._compensations.pop((event.saga_id, event.step_id or ""), None)
        if span is None:
            return
        span.set_attribute("saga_runtime.step.status", event.status or "")
        if event.status in _FAILED:
            _fail(span, event.error, event.status or "FAILED")
        span.end(end_time=_ns(event.at))

    # -- model calls of an LLMRunner

    def _model_called(self, event: SagaEvent) -> None:
        if not isinstance(event, ModelCallEvent):
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": event.model,
            "saga_runtime.llm.turn": event.turn,
        }
        if event.error is None:
            attributes |= {
                "gen_ai.usage.input_tokens": event.input_tokens,
                "gen_ai.usage.output_tokens": event.output_tokens,
                "saga_runtime.llm.cost": event.cost,
            }
            if event.response_model:
                attributes["gen_ai.response.model"] = event.response_model
            if event.finish_reason:
                attributes["gen_ai.response.finish_reasons"] = [event.finish_reason]
        span = self._child(event, f"chat {event.model}", attributes, kind=SpanKind.CLIENT)
        if event.error is not None:
            _fail(span, event.error, "_OTHER")
        span.end(end_time=_ns(event.at))
