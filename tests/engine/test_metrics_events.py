"""The engine events §16's metrics need: takeovers, each charge's cost, each attempt's start (issue 26)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import anyio.lowlevel

from saga_runtime import RetryPolicy, SagaEvent, SagaExecutor, SagaStatus, StepContext, ToolRegistry, open_store
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaRow, now
from saga_runtime.metrics import PrometheusHook

from .test_metrics import value

registry = ToolRegistry()
FLAKY = {"left": 0}


@registry.tool
class AsyncCharge:
    async def execute(self, cents: int, ctx: StepContext) -> int:
        ctx.charge(cost=cents / 100)
        return cents


@registry.tool
class ThreadCharge:
    def execute(self, cents: int, ctx: StepContext) -> int:  # a sync tool: it charges from a worker thread
        ctx.charge(cost=cents / 100, tokens=3)
        return cents


@registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0))
class Flaky:
    async def execute(self) -> str:
        if FLAKY["left"]:
            FLAKY["left"] -= 1
            raise ConnectionError("try again")
        return "ok"


class Recorder:
    """A hook keeping every event, and the thread each came on."""

    def __init__(self) -> None:
        self.events: list[SagaEvent] = []

    def __call__(self, event: SagaEvent) -> None:
        self.events.append(event)

    def kinds(self) -> Counter[str]:
        return Counter(event.kind for event in self.events)


async def test_every_charge_is_one_charged_event_counted_in_cost_total() -> None:
    """A tool's ctx.charge (async, or sync from its thread) is one `charged` event, in the loop, and adds its cost."""
    hook, recorder = PrometheusHook(), Recorder()
    executor = SagaExecutor(registry, hooks=[hook, recorder])
    plan = [{"tool": "AsyncCharge", "args": {"cents": 150}}, {"tool": "ThreadCharge", "args": {"cents": 25}}]
    result = await executor.run(plan)
    await anyio.lowlevel.checkpoint()  # the thread's charge is told once the loop runs again
    assert result.status is SagaStatus.SUCCESS
    charged = [event for event in recorder.events if event.kind == "charged"]
    assert [(event.cost, event.tokens) for event in charged] == [(1.5, 0), (0.25, 3)]
    assert value(hook, "saga_runtime_cost_total") == result.cost == 1.75


async def test_each_attempt_start_is_one_event() -> None:
    """A step that fails twice then succeeds emits attempt_started three times, numbered 1, 2, 3."""
    FLAKY["left"] = 2
    recorder = Recorder()
    result = await SagaExecutor(registry, hooks=[recorder]).run([{"tool": "Flaky"}])
    assert result.status is SagaStatus.SUCCESS
    assert [e.attempt for e in recorder.events if e.kind == "attempt_started"] == [1, 2, 3]
    assert recorder.kinds()["step_started"] == 1


async def test_a_takeover_by_recovery_is_one_event_counted_in_takeovers_total() -> None:
    """Recovery taking over an orphaned saga emits saga_taken_over once; the hook counts it."""
    hook, recorder = PrometheusHook(), Recorder()
    async with open_store("memory://") as store:
        planned = build_plan([{"tool": "AsyncCharge", "args": {"cents": 1}}], registry)
        started = now() - timedelta(minutes=1)
        saga = SagaRow(
            "orphan", "plan", planned.to_json(), planned.digest, SagaStatus.RUNNING, started, started,
            owner="gone", lease_expires_at=started,
        )  # fmt: skip
        assert await store.create_saga(saga, []) is None
        executor = SagaExecutor(registry, store=store, hooks=[hook, recorder])
        (done,) = await executor.recover()
        assert done.status is SagaStatus.SUCCESS
        assert await executor.recover() == []
    assert recorder.kinds()["saga_taken_over"] == 1
    assert value(hook, "saga_runtime_takeovers_total") == 1


def test_every_metric_name_of_section_16_is_produced() -> None:
    """The exposition of a fresh hook, fed once, names every metric §16 lists."""
    hook = PrometheusHook()
    names: list[Any] = [
        "saga_runtime_sagas_started_total",
        "saga_runtime_sagas_finished_total",
        "saga_runtime_steps_finished_total",
        "saga_runtime_step_duration_seconds",
        "saga_runtime_compensations_total",
        "saga_runtime_sagas_running",
        "saga_runtime_approvals_requested_total",
        "saga_runtime_llm_tokens_total",
        "saga_runtime_cost_total",
        "saga_runtime_queue_depth",
        "saga_runtime_takeovers_total",
    ]
    hook.observe_queue_depth("default", 0)
    text = hook.exposition().decode()
    for name in names:
        assert f"# TYPE {name.removesuffix('_total')}" in text, name
