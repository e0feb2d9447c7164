"""Event hooks see everything a saga does; the OpenTelemetry hook turns it into a span tree."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from saga_runtime import LoggingHook, RetryPolicy, SagaEvent, SagaExecutor, SagaHook, SagaStatus, ToolRegistry
from saga_runtime.otel import TracingHook


def make_registry() -> ToolRegistry:
    """Return tools for a saga that retries, fails, and compensates one step that refuses once."""
    registry = ToolRegistry()
    refusals = {"left": 1}

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=2, initial_interval=0))
    class Reserve:
        async def execute(self, item: str) -> dict[str, str]:
            return {"item": item}

        async def compensate(self, result: Any) -> None:
            if refusals["left"]:
                refusals["left"] -= 1
                raise ConnectionError("warehouse busy")

    @registry.tool(retry=RetryPolicy(max_attempts=2, initial_interval=0))
    class Ship:
        async def execute(self, to: str) -> None:
            raise LookupError(f"no route to {to}")

    return registry


PLAN = [
    {"id": "reserve", "tool": "Reserve", "args": {"item": "desk"}},
    {"id": "ship", "tool": "Ship", "args": {"to": "Mars"}},
]


async def test_hooks_see_every_event_of_a_compensated_saga_in_order() -> None:
    """A hook is told: saga started, steps started/finished, failed attempts, compensations, saga finished."""
    events: list[SagaEvent] = []
    executor = SagaExecutor(make_registry(), hooks=[events.append])
    result = await executor.run(PLAN, saga_id="traced")
    assert result.status is SagaStatus.COMPENSATED
    assert [(e.kind, e.step_id) for e in events] == [
        ("saga_started", None),
        ("step_started", "reserve"),
        ("step_finished", "reserve"),
        ("step_started", "ship"),
        ("attempt_failed", "ship"),
        ("attempt_failed", "ship"),
        ("step_finished", "ship"),
        ("compensation_started", "reserve"),
        ("compensation_started", "reserve"),
        ("compensation_finished", "reserve"),
        ("saga_finished", None),
    ]
    assert [e.will_retry for e in events if e.kind == "attempt_failed"] == [True, False]
    assert events[-1].status == "COMPENSATED"
    assert events[6].status == "FAILED"
    assert "no route to Mars" in (events[6].error or "")


async def test_a_failing_hook_never_breaks_a_saga(caplog: pytest.LogCaptureFixture) -> None:
    """A hook that raises is logged and ignored; the saga runs as without it."""

    def broken(event: SagaEvent) -> None:
        raise RuntimeError("observer bug")

    hook: SagaHook = broken
    result = await SagaExecutor(make_registry(), hooks=[hook]).run(PLAN[:1])
    assert result.status is SagaStatus.SUCCESS
    assert "observer bug" in caplog.text


async def test_tracing_hook_builds_the_span_tree_of_a_compensated_saga() -> None:
    """One span per saga, its children one span per step and per compensation attempt, with ids and statuses."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    executor = SagaExecutor(make_registry(), hooks=[TracingHook(provider)])
    await executor.run(PLAN, saga_id="traced")

    spans = {span.name: span for span in exporter.get_finished_spans()}
    names = [span.name for span in exporter.get_finished_spans()]
    assert sorted(names) == sorted(
        ["saga traced", "step Reserve", "step Ship", "compensate Reserve", "compensate Reserve"]
    )
    root = spans["saga traced"]
    assert root.parent is None
    assert root.attributes is not None
    assert root.attributes["saga.status"] == "COMPENSATED"
    assert root.status.status_code is StatusCode.ERROR
    for span in exporter.get_finished_spans():
        if span is not root:
            assert span.parent is not None
            assert span.parent.span_id == root.context.span_id
            assert span.context.trace_id == root.context.trace_id
            assert span.attributes is not None
            assert span.attributes["saga.id"] == "traced"
    ship = spans["step Ship"]
    assert ship.attributes is not None
    assert ship.attributes["saga.step.status"] == "FAILED"
    assert ship.attributes["saga.step.attempts"] == 2
    assert [event.name for event in ship.events] == ["attempt failed", "attempt failed"]
    assert ship.status.status_code is StatusCode.ERROR
    compensations = [span for span in exporter.get_finished_spans() if span.name == "compensate Reserve"]
    assert compensations[-1].attributes is not None
    assert compensations[-1].attributes["saga.step.status"] == "COMPENSATED"


async def test_logging_hook_logs_one_line_per_event_with_the_event_attached(caplog: pytest.LogCaptureFixture) -> None:
    """LoggingHook writes every event to saga_runtime.events, failures at WARNING, with record.saga_event."""
    caplog.set_level(logging.INFO, logger="saga_runtime.events")
    await SagaExecutor(make_registry(), hooks=[LoggingHook()]).run(PLAN, saga_id="logged")
    records = [r for r in caplog.records if r.name == "saga_runtime.events"]
    events = [getattr(r, "saga_event") for r in records]  # noqa: B009 - set through `extra`, unknown to typing
    assert events[0].kind == "saga_started"
    assert records[-1].getMessage() == f"saga logged saga finished -> COMPENSATED: {events[-1].error}"
    failed = {event.kind for record, event in zip(records, events, strict=True) if record.levelno == logging.WARNING}
    assert failed >= {"attempt_failed", "step_finished", "saga_finished"}
