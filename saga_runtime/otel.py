"""OpenTelemetry tracing of sagas: one span per saga, child spans per step and per compensation.

Install the extra (`pip install 'saga-runtime[otel]'`), configure OpenTelemetry as usual, and give the executor
the hook::

    from saga_runtime import SagaExecutor
    from saga_runtime.otel import TracingHook

    executor = SagaExecutor(registry, store=store, hooks=[TracingHook()])

Spans carry `saga.id`, `saga.status`, `saga.step.id`, `saga.step.tool`, `saga.step.group`, `saga.step.status`,
`saga.step.attempts` and `saga.step.idempotency_key`; a failed attempt is a span event; a step that failed, a
compensation that gave up and a saga that did not end SUCCESS have an ERROR status with the error.
"""

from __future__ import annotations

from datetime import datetime

try:
    from opentelemetry import trace
    from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("saga_runtime.otel needs OpenTelemetry: pip install 'saga-runtime[otel]'") from exc

from saga_runtime._engine import SagaEvent

__all__ = ["TracingHook"]

_FAILED = {"FAILED", "CANCELLED", "COMPENSATION_FAILED"}


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


class TracingHook:
    """A `SagaHook` that turns saga events into OpenTelemetry spans (see the module docstring)."""

    def __init__(self, tracer_provider: TracerProvider | None = None, *, tracer: Tracer | None = None) -> None:
        self._tracer = tracer or trace.get_tracer("saga_runtime", tracer_provider=tracer_provider)
        self._sagas: dict[str, Span] = {}
        self._steps: dict[tuple[str, str], Span] = {}
        self._compensations: dict[tuple[str, str], Span] = {}

    def __call__(self, event: SagaEvent) -> None:
        """Open, annotate or close the span the event belongs to."""
        handler = getattr(self, f"_{event.kind}", None)
        if handler is not None:
            handler(event)

    # -- the saga --------------------------------------------------------------------------------------------

    def _saga_started(self, event: SagaEvent) -> None:
        self._sagas[event.saga_id] = self._tracer.start_span(
            f"saga {event.saga_id}",
            start_time=_ns(event.at),
            attributes={"saga.id": event.saga_id, "saga.status": event.status or ""},
        )

    def _saga_finished(self, event: SagaEvent) -> None:
        for key in [key for key in (*self._steps, *self._compensations) if key[0] == event.saga_id]:
            for spans in (self._steps, self._compensations):
                leftover = spans.pop(key, None)
                if leftover is not None:
                    leftover.end(end_time=_ns(event.at))
        span = self._sagas.pop(event.saga_id, None)
        if span is None:
            return
        span.set_attribute("saga.status", event.status or "")
        if event.status != "SUCCESS":
            span.set_status(Status(StatusCode.ERROR, event.error or event.status))
        span.end(end_time=_ns(event.at))

    # -- steps -----------------------------------------------------------------------------------------------

    def _child(self, event: SagaEvent, name: str) -> Span:
        parent = self._sagas.get(event.saga_id)
        context = trace.set_span_in_context(parent) if parent is not None else None
        return self._tracer.start_span(
            name,
            context=context,
            start_time=_ns(event.at),
            attributes={
                "saga.id": event.saga_id,
                "saga.step.id": event.step_id or "",
                "saga.step.tool": event.tool_name or "",
                "saga.step.group": event.group if event.group is not None else -1,
                "saga.step.idempotency_key": event.idempotency_key or "",
            },
        )

    def _step_started(self, event: SagaEvent) -> None:
        key = (event.saga_id, event.step_id or "")
        self._steps.setdefault(key, self._child(event, f"step {event.tool_name}"))

    def _attempt_failed(self, event: SagaEvent) -> None:
        span = self._steps.get((event.saga_id, event.step_id or ""))
        if span is not None:
            span.add_event(
                "attempt failed",
                {"attempt": event.attempt or 0, "error": event.error or "", "will_retry": bool(event.will_retry)},
                timestamp=_ns(event.at),
            )

    def _step_finished(self, event: SagaEvent) -> None:
        span = self._steps.pop((event.saga_id, event.step_id or ""), None)
        if span is None:
            return
        span.set_attribute("saga.step.status", event.status or "")
        span.set_attribute("saga.step.attempts", event.attempt or 0)
        if event.status in _FAILED:
            span.set_status(Status(StatusCode.ERROR, event.error or event.status))
        span.end(end_time=_ns(event.at))

    # -- compensations ---------------------------------------------------------------------------------------

    def _compensation_started(self, event: SagaEvent) -> None:
        key = (event.saga_id, event.step_id or "")
        previous = self._compensations.pop(key, None)
        if previous is not None:  # a retried compensation: the failed attempt's span ends here
            previous.end(end_time=_ns(event.at))
        self._compensations[key] = self._child(event, f"compensate {event.tool_name}")

    def _compensation_finished(self, event: SagaEvent) -> None:
        span = self._compensations.pop((event.saga_id, event.step_id or ""), None)
        if span is None:
            return
        span.set_attribute("saga.step.status", event.status or "")
        span.set_attribute("saga.compensation.attempts", event.attempt or 0)
        if event.status in _FAILED:
            span.set_status(Status(StatusCode.ERROR, event.error or event.status))
        span.end(end_time=_ns(event.at))
