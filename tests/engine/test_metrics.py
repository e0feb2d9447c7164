"""PrometheusHook: the metrics of real sagas, read back from the exposition text, on the memory store and SQLite."""

from __future__ import annotations

import importlib
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from llm_fakes import BrokenModel
from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families
from shop_tools import warehouse_registry

from saga_runtime import (
    LLMRunner,
    MockLLMClient,
    RetryPolicy,
    SagaExecutor,
    SagaStatus,
    SagaStore,
    ToolRegistry,
    open_store,
)
from saga_runtime.metrics import CONTENT_TYPE, PrometheusHook, start_metrics_server


def value(hook: PrometheusHook, name: str, **labels: str) -> float:
    """Return one sample of the hook's exposition text (0 when it is absent, as Prometheus reads a missing series)."""
    for family in text_string_to_metric_families(hook.exposition().decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SagaStore]:
    """Yield an open store of each kind the hook is checked on."""
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'metrics.db'}"
    async with open_store(url) as opened:
        yield opened


def make_registry(hook: PrometheusHook | None = None) -> ToolRegistry:
    """Return tools that succeed, fail after a retry, compensate (once refusing), and need an approval."""

    def while_reserving() -> None:
        if hook is not None:  # counted as running while its step runs
            assert value(hook, "saga_runtime_sagas_running") == 1

    registry = warehouse_registry(while_reserving)

    @registry.tool
    class Refund:
        async def execute(self, order: str) -> None:
            raise PermissionError("refunds are closed")

        async def compensate(self, result: Any) -> None:
            raise ConnectionError("the bank is down")

    @registry.tool(approval=True)
    class Wire:
        async def execute(self, to: str) -> str:
            return f"sent to {to}"

    return registry


RESERVE = {"id": "reserve", "tool": "Reserve", "args": {"item": "desk"}}


async def test_a_successful_saga_counts_its_start_end_steps_and_durations(store: SagaStore) -> None:
    """A SUCCESS saga: started{queue=default}, finished{SUCCESS}, each step by tool, a duration each, none running."""
    hook = PrometheusHook()
    executor = SagaExecutor(make_registry(hook), store=store, hooks=[hook])
    second = {"id": "again", "tool": "Reserve", "args": {"item": "lamp"}}
    result = await executor.run([RESERVE, second], saga_id="ok")
    assert result.status is SagaStatus.SUCCESS
    assert value(hook, "saga_runtime_sagas_started_total", queue="default") == 1
    assert value(hook, "saga_runtime_sagas_finished_total", status="SUCCESS", reason="") == 1
    assert value(hook, "saga_runtime_steps_finished_total", tool="Reserve", status="SUCCESS") == 2
    assert value(hook, "saga_runtime_step_duration_seconds_count", tool="Reserve") == 2
    assert value(hook, "saga_runtime_step_duration_seconds_sum", tool="Reserve") >= 0
    assert value(hook, "saga_runtime_sagas_running") == 0
    await executor.run([RESERVE, second], saga_id="ok")  # a finished id: its stored result, nothing run
    assert value(hook, "saga_runtime_sagas_started_total", queue="default") == 1


async def test_a_failed_saga_counts_retried_failures_and_its_compensations(store: SagaStore) -> None:
    """A step failing after its retry is FAILED once; the compensation that refused once then worked counts once."""
    hook = PrometheusHook()
    executor = SagaExecutor(make_registry(), store=store, hooks=[hook])
    plan = [RESERVE, {"id": "ship", "tool": "Ship", "args": {"to": "Mars"}}]
    result = await executor.run(plan, saga_id="undone")
    assert result.status is SagaStatus.COMPENSATED
    assert value(hook, "saga_runtime_steps_finished_total", tool="Ship", status="FAILED") == 1
    assert value(hook, "saga_runtime_step_duration_seconds_count", tool="Ship") == 1
    assert value(hook, "saga_runtime_compensations_total", tool="Reserve", status="COMPENSATED") == 1
    assert value(hook, "saga_runtime_sagas_finished_total", status="COMPENSATED", reason="failed") == 1
    assert value(hook, "saga_runtime_attempts_total", tool="Ship", outcome="retry") == 1
    assert value(hook, "saga_runtime_attempts_total", tool="Ship", outcome="failed") == 1
    assert value(hook, "saga_runtime_attempts_total", tool="Reserve", outcome="success") == 1
    assert value(hook, "saga_runtime_sagas_running") == 0


async def test_a_compensation_that_gives_up_is_counted_failed(store: SagaStore) -> None:
    """A compensation that fails every attempt counts as COMPENSATION_FAILED, and so does the saga."""
    hook = PrometheusHook()
    registry = ToolRegistry()

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=2, initial_interval=0))
    class Hold:
        async def execute(self) -> str:
            return "held"

        async def compensate(self, result: Any) -> None:
            raise ConnectionError("the bank is down")

    @registry.tool
    class Fail:
        async def execute(self) -> None:
            raise RuntimeError("no")

    executor = SagaExecutor(registry, store=store, hooks=[hook])
    result = await executor.run([{"id": "hold", "tool": "Hold"}, {"id": "fail", "tool": "Fail"}], saga_id="stuck")
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert value(hook, "saga_runtime_compensations_total", tool="Hold", status="COMPENSATION_FAILED") == 1
    assert value(hook, "saga_runtime_sagas_finished_total", status="COMPENSATION_FAILED", reason="failed") == 1


async def test_a_saga_waiting_for_an_approval_is_not_running_and_its_request_is_counted(store: SagaStore) -> None:
    """The request counts by tool; the waiting saga leaves the gauge; approved, it starts again and finishes."""
    hook = PrometheusHook()
    executor = SagaExecutor(make_registry(), store=store, hooks=[hook])
    plan = [RESERVE, {"id": "wire", "tool": "Wire", "args": {"to": "ana"}}]
    waiting = await executor.run(plan, saga_id="pay")
    assert waiting.status is SagaStatus.WAITING
    assert value(hook, "saga_runtime_approvals_requested_total", tool="Wire") == 1
    assert value(hook, "saga_runtime_sagas_running") == 0
    done = await executor.approve("pay", "wire", by="alice")
    assert done.status is SagaStatus.SUCCESS
    assert value(hook, "saga_runtime_sagas_started_total", queue="default") == 2
    assert value(hook, "saga_runtime_sagas_finished_total", status="SUCCESS", reason="") == 1
    assert value(hook, "saga_runtime_steps_finished_total", tool="Wire", status="SUCCESS") == 1
    assert value(hook, "saga_runtime_sagas_running") == 0


async def test_an_llm_runner_counts_tokens_by_model_and_kind_and_its_cost(store: SagaStore) -> None:
    """Each model call adds its input and output tokens under the model asked, and its cost at the runner's prices."""
    hook = PrometheusHook()
    registry = make_registry()
    executor = SagaExecutor(registry, store=store, hooks=[hook])
    mock = MockLLMClient(tool_sequence=[("Reserve", {"item": "desk"})])
    runner = LLMRunner(mock, "gpt-4o", registry, executor, prices={"gpt-4o": (2.5, 10.0)})
    result = await runner.run("reserve a desk", saga_id="llm")
    assert result.status is SagaStatus.SUCCESS
    calls = result.metadata["llm_calls"]
    assert len(calls) == 2
    assert value(hook, "saga_runtime_llm_tokens_total", model="gpt-4o", kind="input") == sum(
        c["prompt_tokens"] for c in calls
    )
    assert value(hook, "saga_runtime_llm_tokens_total", model="gpt-4o", kind="output") == sum(
        c["completion_tokens"] for c in calls
    )
    assert value(hook, "saga_runtime_cost_total") == pytest.approx(result.cost)
    assert result.cost > 0
    await runner.run("reserve a desk", saga_id="llm")  # finished: the model is not asked, nothing counted
    assert value(hook, "saga_runtime_cost_total") == pytest.approx(result.cost)


async def test_a_failed_model_call_counts_no_tokens() -> None:
    """A model call that fails (after its retries) adds no tokens and no cost; the saga's failure is counted."""
    hook = PrometheusHook()
    registry = make_registry()
    executor = SagaExecutor(registry, hooks=[hook])

    runner = LLMRunner(BrokenModel(), "gpt-4o", registry, executor)
    result = await runner.run("hi", saga_id="broken")
    assert result.status is SagaStatus.COMPENSATED
    assert value(hook, "saga_runtime_llm_tokens_total", model="gpt-4o", kind="input") == 0
    assert value(hook, "saga_runtime_sagas_finished_total", status="COMPENSATED", reason="failed") == 1


async def test_two_executors_in_one_process_keep_their_own_metrics_without_clashing() -> None:
    """Each hook has a registry of its own by default: two hooks register the same names, each counts its own."""
    first, second = PrometheusHook(), PrometheusHook()
    assert first.registry is not second.registry
    await SagaExecutor(make_registry(), hooks=[first]).run([RESERVE], saga_id="a")
    await SagaExecutor(make_registry(), hooks=[second]).run([RESERVE], saga_id="b")
    await SagaExecutor(make_registry(), hooks=[second]).run([RESERVE], saga_id="c")
    assert value(first, "saga_runtime_sagas_finished_total", status="SUCCESS", reason="") == 1
    assert value(second, "saga_runtime_sagas_finished_total", status="SUCCESS", reason="") == 2


async def test_hooks_given_one_registry_share_its_metrics() -> None:
    """Two hooks on the same registry (the global one included) share its series instead of failing to register."""
    registry = CollectorRegistry()
    first, second = PrometheusHook(registry), PrometheusHook(registry)
    await SagaExecutor(make_registry(), hooks=[first]).run([RESERVE], saga_id="a")
    await SagaExecutor(make_registry(), hooks=[second]).run([RESERVE], saga_id="b")
    assert value(first, "saga_runtime_sagas_finished_total", status="SUCCESS", reason="") == 2
    assert value(second, "saga_runtime_sagas_running") == 0
    assert PrometheusHook(REGISTRY).registry is PrometheusHook(REGISTRY).registry


def test_a_registry_holding_the_names_already_is_refused_clearly() -> None:
    """Names registered by something else in a given registry: ValueError saying to give the hook its own."""
    registry = CollectorRegistry()
    Counter("saga_runtime_sagas_started", "someone else's", registry=registry)
    with pytest.raises(ValueError, match="registry of its own"):
        PrometheusHook(registry)


def test_a_worker_feeds_queue_depth_and_takeovers() -> None:
    """observe_queue_depth sets the gauge per queue; observe_takeover counts; bad numbers are refused."""
    hook = PrometheusHook()
    hook.observe_queue_depth("payouts", 7)
    hook.observe_queue_depth("payouts", 3)
    hook.observe_queue_depth("default", 0)
    hook.observe_takeover()
    hook.observe_takeover(2)
    assert value(hook, "saga_runtime_queue_depth", queue="payouts") == 3
    assert value(hook, "saga_runtime_takeovers_total") == 3
    with pytest.raises(ValueError):
        hook.observe_queue_depth("payouts", -1)
    with pytest.raises(ValueError):
        hook.observe_takeover(True)


def test_every_metric_of_the_contract_is_exposed_by_name() -> None:
    """A fresh hook's exposition already names every metric family of API.md §16."""
    names = {family.name for family in text_string_to_metric_families(PrometheusHook().exposition().decode())}
    assert names >= {
        "saga_runtime_sagas_started",
        "saga_runtime_sagas_finished",
        "saga_runtime_steps_finished",
        "saga_runtime_step_duration_seconds",
        "saga_runtime_compensations",
        "saga_runtime_sagas_running",
        "saga_runtime_approvals_requested",
        "saga_runtime_llm_tokens",
        "saga_runtime_cost",
        "saga_runtime_queue_depth",
        "saga_runtime_takeovers",
    }


async def test_the_metrics_server_serves_the_hook_on_the_loopback() -> None:
    """start_metrics_server listens on 127.0.0.1 (port 0: a free one) and answers the plain text format."""
    hook = PrometheusHook()
    await SagaExecutor(make_registry(), hooks=[hook]).run([RESERVE], saga_id="served")
    with start_metrics_server(0, hook) as server:
        assert server.host == "127.0.0.1"

        def scrape() -> tuple[str, str]:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
                return response.headers["content-type"], response.read().decode()

        content_type, text = await anyio.to_thread.run_sync(scrape)
    assert content_type == CONTENT_TYPE
    assert 'saga_runtime_sagas_finished_total{reason="",status="SUCCESS"} 1.0' in text
    with pytest.raises(ValueError):
        start_metrics_server(70000, hook)


def test_without_prometheus_client_the_module_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing saga_runtime.metrics without prometheus-client raises ImportError naming the extra."""
    monkeypatch.delitem(sys.modules, "saga_runtime.metrics")
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # importing it now fails as if not installed
    with pytest.raises(ImportError, match=r"saga-runtime\[metrics\]"):
        importlib.import_module("saga_runtime.metrics")
