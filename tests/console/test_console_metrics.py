"""The console's /metrics: Prometheus' plain text format, behind the UI token when one is set."""

from __future__ import annotations

import sys

import pytest
from conftest import run_sync
from console_helpers import client, example
from prometheus_client.parser import text_string_to_metric_families

from saga_runtime import SagaExecutor, ToolRegistry, open_store
from saga_runtime.metrics import CONTENT_TYPE, PrometheusHook

TOKEN = "the metrics token of the test"


def value(text: str, name: str, **labels: str) -> float:
    """Return one sample of an exposition text (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


def test_metrics_count_what_the_console_runs_in_the_plain_text_format(url: str) -> None:
    """Without a token /metrics answers the plain text format; an approval run here shows in its counters."""
    with client(url, registry=example().registry) as console:
        before = console.get("/metrics")
        assert before.status_code == 200
        assert before.headers["content-type"] == CONTENT_TYPE
        assert value(before.text, "saga_runtime_sagas_finished_total", status="SUCCESS", reason="") == 0
        assert value(before.text, "saga_runtime_sagas_waiting", kind="decision") == 1  # refund-A-0990
        (request,) = console.get("/api/approvals").json()["approvals"]
        body = {"saga_id": "refund-A-0990", "step_id": "refund", "by": "alice", "args_digest": request["args_digest"]}
        assert console.post("/api/actions/approve", json=body).status_code == 200
        after = console.get("/metrics").text
    assert value(after, "saga_runtime_sagas_started_total", queue="default") == 1
    assert value(after, "saga_runtime_sagas_finished_total", status="SUCCESS", reason="") == 1
    assert value(after, "saga_runtime_steps_finished_total", tool="RefundCard", status="SUCCESS") == 1
    assert value(after, "saga_runtime_sagas_running") == 0
    assert value(after, "saga_runtime_sagas_waiting", kind="decision") == 0


def test_with_a_token_metrics_need_it(url: str) -> None:
    """With a token set, /metrics answers 401 without it or with a wrong one, and 200 with it as a Bearer header."""
    with client(url, token=TOKEN) as console:
        refused = console.get("/metrics")
        assert refused.status_code == 401
        assert "Bearer" in refused.text
        assert "saga_runtime_" not in refused.text
        assert console.get("/metrics", headers={"authorization": "Bearer nope"}).status_code == 401
        given = console.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        assert given.status_code == 200
        assert "saga_runtime_sagas_running 0.0" in given.text


def test_the_console_serves_the_hook_it_is_given(url: str) -> None:
    """create_app(metrics=hook) serves that hook: an app's own executor's sagas show in the console's /metrics."""
    hook = PrometheusHook()

    async def work() -> None:
        async with open_store(url) as store:
            plan = [{"id": "ticket", "tool": "OpenTicket", "args": {"customer": "c-9", "text": "hello"}}]
            await SagaExecutor(example().registry, store=store, hooks=[hook]).run(plan, saga_id="app-1")

    run_sync(work)
    with client(url, metrics=hook) as console:
        text = console.get("/metrics").text
    assert value(text, "saga_runtime_steps_finished_total", tool="OpenTicket", status="SUCCESS") == 1


def test_without_the_metrics_extra_metrics_say_what_to_install(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without prometheus-client /metrics answers 501 naming the extra; the console itself works."""
    monkeypatch.setitem(sys.modules, "saga_runtime.metrics", None)  # importing it now fails as if not installed
    with client(url, registry=ToolRegistry()) as console:
        missing = console.get("/metrics")
        assert missing.status_code == 501
        assert "saga-runtime[metrics]" in missing.text
        assert console.get("/api/sagas").status_code == 200
