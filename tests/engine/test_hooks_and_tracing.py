"""Event hooks see everything a saga does; the OpenTelemetry hook turns it into spans named by the GenAI conventions."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from llm_fakes import BrokenModel
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from shop_tools import warehouse_registry

from saga_runtime import (
    LLMRunner,
    LoggingHook,
    MockLLMClient,
    ModelCallEvent,
    SagaEvent,
    SagaExecutor,
    SagaHook,
    SagaStatus,
    ToolRegistry,
    open_store,
)
from saga_runtime.otel import TracingHook


def make_registry() -> ToolRegistry:
    """Return tools for a saga that retries, fails, and compensates one step that refuses once."""
    return warehouse_registry()


PLAN = [
    {"id": "reserve", "tool": "Reserve", "args": {"item": "desk"}},
    {"id": "ship", "tool": "Ship", "args": {"to": "Mars"}},
]


async def test_hooks_see_every_event_of_a_compensated_saga_in_order() -> None:
    """A hook is told: saga started, steps started/finished, each attempt's start and failure, compensations, end."""
    events: list[SagaEvent] = []
    executor = SagaExecutor(make_registry(), hooks=[events.append])
    result = await executor.run(PLAN, saga_id="traced")
    assert result.status is SagaStatus.COMPENSATED
    assert [(e.kind, e.step_id) for e in events] == [
        ("saga_started", None),
        ("step_started", "reserve"),
        ("attempt_started", "reserve"),
        ("step_finished", "reserve"),
        ("step_started", "ship"),
        ("attempt_started", "ship"),
        ("attempt_failed", "ship"),
        ("attempt_started", "ship"),
        ("attempt_failed", "ship"),
        ("step_finished", "ship"),
        ("compensation_started", "reserve"),
        ("compensation_started", "reserve"),
        ("compensation_finished", "reserve"),
        ("saga_finished", None),
    ]
    assert [e.will_retry for e in events if e.kind == "attempt_failed"] == [True, False]
    assert events[-1].status == "COMPENSATED"
    assert events[9].status == "FAILED"
    assert "no route to Mars" in (events[9].error or "")


async def test_a_failing_hook_never_breaks_a_saga(caplog: pytest.LogCaptureFixture) -> None:
    """A hook that raises is logged and ignored; the saga runs as without it."""

    def broken(event: SagaEvent) -> None:
        raise RuntimeError("observer bug")

    hook: SagaHook = broken
    result = await SagaExecutor(make_registry(), hooks=[hook]).run(PLAN[:1])
    assert result.status is SagaStatus.SUCCESS
    assert "observer bug" in caplog.text


def traced() -> tuple[TracingHook, InMemorySpanExporter]:
    """Return a tracing hook whose finished spans land in an in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return TracingHook(provider), exporter


def attributes(span: ReadableSpan) -> dict[str, Any]:
    """Return a finished span's attributes as a plain dict."""
    return dict(span.attributes or {})


async def test_tracing_hook_builds_the_span_tree_of_a_compensated_saga() -> None:
    """One span per saga; its children one `execute_tool {tool}` span per attempt and one per compensation attempt."""
    hook, exporter = traced()
    executor = SagaExecutor(make_registry(), hooks=[hook])
    await executor.run(PLAN, saga_id="traced")

    finished = exporter.get_finished_spans()
    assert sorted(span.name for span in finished) == sorted(
        [
            "saga traced",
            "execute_tool Reserve",
            "execute_tool Ship",
            "execute_tool Ship",
            "compensate Reserve",
            "compensate Reserve",
        ]
    )
    (root,) = [span for span in finished if span.name == "saga traced"]
    assert root.parent is None
    assert attributes(root)["saga_runtime.saga.status"] == "COMPENSATED"
    assert attributes(root)["saga_runtime.saga.id"] == "traced"
    assert root.status.status_code is StatusCode.ERROR
    for span in finished:
        if span is not root:
            assert span.parent is not None
            assert span.parent.span_id == root.context.span_id
            assert span.context.trace_id == root.context.trace_id
            assert attributes(span)["saga_runtime.saga.id"] == "traced"
    first, last = sorted(
        (span for span in finished if span.name == "execute_tool Ship"), key=lambda span: span.start_time or 0
    )
    assert [attributes(first)["saga_runtime.step.attempt"], attributes(last)["saga_runtime.step.attempt"]] == [1, 2]
    assert attributes(first)["error.type"] == attributes(last)["error.type"] == "LookupError"
    assert attributes(last)["saga_runtime.step.status"] == "FAILED"
    assert first.status.status_code is last.status.status_code is StatusCode.ERROR
    assert "no route to Mars" in (last.status.description or "")
    compensations = sorted(
        (span for span in finished if span.name == "compensate Reserve"), key=lambda span: span.start_time or 0
    )
    assert compensations[0].status.status_code is StatusCode.ERROR
    assert attributes(compensations[-1])["saga_runtime.step.status"] == "COMPENSATED"
    assert attributes(compensations[-1])["saga_runtime.compensation.attempt"] == 2
    assert compensations[-1].status.status_code is StatusCode.UNSET


async def test_a_step_attempt_span_carries_the_genai_tool_attributes() -> None:
    """`execute_tool {tool}` has the gen_ai.* tool attributes (call id: the step id); ids under saga_runtime.*."""
    hook, exporter = traced()
    await SagaExecutor(make_registry(), hooks=[hook]).run(PLAN[:1], saga_id="genai")
    (span,) = [span for span in exporter.get_finished_spans() if span.name == "execute_tool Reserve"]
    assert span.kind is SpanKind.INTERNAL
    assert attributes(span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "Reserve",
        "gen_ai.tool.call.id": "reserve",
        "gen_ai.tool.type": "function",
        "saga_runtime.saga.id": "genai",
        "saga_runtime.step.id": "reserve",
        "saga_runtime.step.tool": "Reserve",
        "saga_runtime.step.group": 0,
        "saga_runtime.step.attempt": 1,
        "saga_runtime.step.idempotency_key": attributes(span)["saga_runtime.step.idempotency_key"],
        "saga_runtime.step.status": "SUCCESS",
    }
    assert attributes(span)["saga_runtime.step.idempotency_key"]
    assert span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_an_llm_runner_model_call_is_a_chat_span_with_its_usage(store_kind: str, tmp_path: Path) -> None:
    """Each model call of an LLMRunner is `chat {model}` (CLIENT) under the saga's span, with its gen_ai usage."""
    hook, exporter = traced()
    registry = make_registry()
    url = "memory://" if store_kind == "memory" else f"sqlite:///{tmp_path / 'traced.db'}"
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store, hooks=[hook])
        runner = LLMRunner(MockLLMClient([("Reserve", {"item": "desk"})]), "gpt-4o", registry, executor)
        result = await runner.run("reserve a desk", saga_id="chat")
    assert result.status is SagaStatus.SUCCESS
    finished = exporter.get_finished_spans()
    (root,) = [span for span in finished if span.name == "saga chat"]
    chats = sorted((span for span in finished if span.name == "chat gpt-4o"), key=lambda span: span.start_time or 0)
    calls = result.metadata["llm_calls"]
    assert len(chats) == len(calls) == 2
    for span, call in zip(chats, calls, strict=True):
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None
        assert span.parent.span_id == root.context.span_id
        assert attributes(span)["gen_ai.operation.name"] == "chat"
        assert attributes(span)["gen_ai.request.model"] == "gpt-4o"
        assert attributes(span)["gen_ai.response.model"] == "gpt-4o"
        assert attributes(span)["gen_ai.usage.input_tokens"] == call["prompt_tokens"]
        assert attributes(span)["gen_ai.usage.output_tokens"] == call["completion_tokens"]
        assert attributes(span)["gen_ai.response.finish_reasons"] == (call["finish_reason"],)
        assert attributes(span)["saga_runtime.saga.id"] == "chat"
        assert attributes(span)["saga_runtime.llm.turn"] == call["turn"]
    assert [span.name for span in finished].count("execute_tool Reserve") == 1


async def test_a_failed_model_call_is_a_chat_span_in_error() -> None:
    """A model call that fails is a `chat {model}` span with an ERROR status and the exception's type."""
    hook, exporter = traced()
    registry = make_registry()
    events: list[SagaEvent] = []

    executor = SagaExecutor(registry, hooks=[hook, events.append])
    await LLMRunner(BrokenModel(), "gpt-4o", registry, executor).run("hi", saga_id="broken")
    (span,) = [span for span in exporter.get_finished_spans() if span.name == "chat gpt-4o"]
    assert span.status.status_code is StatusCode.ERROR
    assert attributes(span)["error.type"] == "ValueError"
    assert "gen_ai.usage.input_tokens" not in attributes(span)
    (event,) = [event for event in events if isinstance(event, ModelCallEvent)]
    assert event.kind == "model_called"
    assert event.error is not None
    assert "the model is confused" in event.error


async def test_a_saga_waiting_for_approval_ends_its_span_and_going_on_starts_another() -> None:
    """The saga's span ends WAITING when it stops for a decision; approved, a new span covers the rest."""
    hook, exporter = traced()
    registry = ToolRegistry()

    @registry.tool(approval=True)
    class Wire:
        async def execute(self, to: str) -> str:
            return to

    executor = SagaExecutor(registry, hooks=[hook])
    plan = [{"id": "wire", "tool": "Wire", "args": {"to": "ana"}}]
    assert (await executor.run(plan, saga_id="pay")).status is SagaStatus.WAITING
    (waiting,) = exporter.get_finished_spans()
    assert attributes(waiting)["saga_runtime.saga.status"] == "WAITING"
    assert waiting.status.status_code is StatusCode.UNSET
    assert [event.name for event in waiting.events] == ["approval requested"]
    await executor.approve("pay", "wire", by="alice")
    names = [span.name for span in exporter.get_finished_spans()]
    assert names == ["saga pay", "execute_tool Wire", "saga pay"]


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
