"""The engine's groups: ordered groups, concurrent steps, sibling cancellation, sync tools, limits and $refs."""

from __future__ import annotations

import asyncio
import threading
import time

import anyio
import anyio.lowlevel
import pytest
from shop_tools import boom_tool

from saga_runtime import SagaExecutor, SagaStatus, StepContext, StepStatus, ToolRegistry

# A handshake that never completes would hang a broken engine; this bound turns the hang into a failure.
HANDSHAKE = 2.0


async def test_groups_run_in_order() -> None:
    """Every step of a group ends before any step of the next group starts."""
    registry = ToolRegistry()
    log: list[tuple[str, str]] = []

    @registry.tool
    class Mark:
        async def execute(self, key: str) -> str:
            log.append(("start", key))
            await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()
            log.append(("end", key))
            return key

    plan = [
        [{"id": "a0", "tool": "Mark", "args": {"key": "a0"}}, {"id": "a1", "tool": "Mark", "args": {"key": "a1"}}],
        {"id": "b0", "tool": "Mark", "args": {"key": "b0"}},
        [{"id": "c0", "tool": "Mark", "args": {"key": "c0"}}, {"id": "c1", "tool": "Mark", "args": {"key": "c1"}}],
    ]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.SUCCESS
    group_of = {"a0": 0, "a1": 0, "b0": 1, "c0": 2, "c1": 2}
    assert {r.step_id: r.group for r in result.steps} == group_of
    for i, (kind, key) in enumerate(log):
        if kind != "start":
            continue
        ended_before = {k for kd, k in log[:i] if kd == "end"}
        earlier = {k for k, g in group_of.items() if g < group_of[key]}
        assert earlier <= ended_before, f"{key} started before {earlier - ended_before} ended"


async def test_steps_of_a_group_run_concurrently() -> None:
    """Each step of a group waits for every sibling to have started, which only concurrent steps can do."""
    registry = ToolRegistry()
    keys = ["s0", "s1", "s2"]
    started = {key: anyio.Event() for key in keys}

    @registry.tool
    class Rendezvous:
        async def execute(self, key: str) -> str:
            started[key].set()
            with anyio.fail_after(HANDSHAKE):
                for event in started.values():
                    await event.wait()
            return key

    plan = [[{"id": key, "tool": "Rendezvous", "args": {"key": key}} for key in keys]]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert [r.result for r in result.steps] == keys


async def test_group_of_sleeping_steps_takes_about_one_sleep() -> None:
    """A group of N steps sleeping 0.05 s each finishes well under N x 0.05 s."""
    registry = ToolRegistry()
    n, nap = 8, 0.05

    @registry.tool
    class Nap:
        async def execute(self, i: int) -> int:
            await asyncio.sleep(nap)
            return i

    plan = [[{"tool": "Nap", "args": {"i": i}} for i in range(n)]]
    executor = SagaExecutor(registry)
    start = time.perf_counter()
    result = await executor.run(plan)
    elapsed = time.perf_counter() - start

    assert result.status is SagaStatus.SUCCESS
    assert [r.result for r in result.steps] == list(range(n))
    assert elapsed < n * nap * 0.6, f"{n} concurrent naps of {nap}s took {elapsed:.3f}s"


async def test_failing_step_cancels_running_siblings_and_later_groups_never_start() -> None:
    """A failing step cancels running siblings (CANCELLED, seen in the tool); later groups stay PENDING."""
    registry = ToolRegistry()
    sibling_started = anyio.Event()
    observed: list[str] = []
    later_calls: list[str] = []

    @registry.tool
    class Hang:
        async def execute(self, key: str) -> None:
            sibling_started.set()
            try:
                await anyio.Event().wait()  # never set: only cancellation ends this
            except anyio.get_cancelled_exc_class():
                observed.append(key)
                raise

    @registry.tool
    class Boom:
        async def execute(self) -> None:
            with anyio.fail_after(HANDSHAKE):
                await sibling_started.wait()
            raise RuntimeError("boom")

    @registry.tool
    class Later:
        async def execute(self) -> None:
            later_calls.append("later")

    plan = [
        [
            {"id": "hang1", "tool": "Hang", "args": {"key": "hang1"}},
            {"id": "boom", "tool": "Boom"},
            {"id": "hang2", "tool": "Hang", "args": {"key": "hang2"}},
        ],
        {"id": "later", "tool": "Later"},
    ]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.COMPENSATED
    assert sorted(observed) == ["hang1", "hang2"]
    for step_id in ("hang1", "hang2"):
        record = result.step(step_id)
        assert record.status is StepStatus.CANCELLED  # Hang has no compensate: it stays where it ended
        assert record.error_type == "CancelledError"
        assert "boom" in (record.error or "")
    boom = result.step("boom")
    assert boom.status is StepStatus.FAILED
    assert boom.error_type == "RuntimeError"
    assert result.step("later").status is StepStatus.PENDING
    assert result.step("later").attempts == 0
    assert later_calls == []


async def test_cancelled_sibling_with_compensate_is_compensated_with_none() -> None:
    """A sibling cancelled mid-run by a failure has an unknown outcome: compensated with None, COMPENSATED."""
    registry = ToolRegistry()
    sibling_started = anyio.Event()
    compensated_with: list[object] = []

    @registry.tool
    class Hang:
        async def execute(self) -> str:
            sibling_started.set()
            await anyio.Event().wait()
            return "never"

        async def compensate(self, result: object) -> None:
            compensated_with.append(result)

    @registry.tool
    class Boom:
        async def execute(self) -> None:
            with anyio.fail_after(HANDSHAKE):
                await sibling_started.wait()
            raise RuntimeError("boom")

    result = await SagaExecutor(registry).run([[{"id": "hang", "tool": "Hang"}, {"id": "boom", "tool": "Boom"}]])

    assert result.status is SagaStatus.COMPENSATED
    assert compensated_with == [None]
    hang = result.step("hang")
    assert hang.status is StepStatus.COMPENSATED
    assert hang.compensated_at is not None
    assert hang.error_type == "CancelledError"


async def test_sync_tool_runs_in_a_worker_thread_without_blocking_the_loop() -> None:
    """A sync tool blocking on a threading.Event runs off the loop: an async sibling makes progress and releases it."""
    registry = ToolRegistry()
    sync_started = threading.Event()
    release = threading.Event()
    threads: dict[str, int] = {}
    loop_thread = threading.get_ident()

    @registry.tool
    class Blocking:
        def execute(self) -> bool:
            threads["sync"] = threading.get_ident()
            sync_started.set()
            return release.wait(timeout=HANDSHAKE)

    @registry.tool
    class Releaser:
        async def execute(self) -> int:
            ticks = 0
            with anyio.fail_after(HANDSHAKE):
                while not sync_started.is_set():  # the loop keeps turning while the sync tool runs
                    ticks += 1
                    await anyio.sleep(0.001)
            for _ in range(3):
                ticks += 1
                await anyio.lowlevel.checkpoint()
            release.set()
            return ticks

    result = await SagaExecutor(registry).run(
        [[{"id": "sync", "tool": "Blocking"}, {"id": "async", "tool": "Releaser"}]]
    )

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert result.result_of("sync") is True  # released by the async sibling, not by the wait timing out
    assert result.result_of("async") >= 3
    assert threads["sync"] != loop_thread


class Meter:
    """Count the calls in progress and the most there were at once."""

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0

    async def busy(self, ticks: int) -> None:
        """Be one call in progress for `ticks` short sleeps."""
        self.active += 1
        self.peak = max(self.peak, self.active)
        for _ in range(ticks):
            await anyio.sleep(0.001)
        self.active -= 1


async def test_max_concurrency_caps_concurrent_tool_calls() -> None:
    """max_concurrency=2 lets at most two tool calls of a group of six run at once, and does reach two."""
    registry = ToolRegistry()
    meter = Meter()

    @registry.tool
    class Busy:
        async def execute(self, i: int) -> int:
            await meter.busy(5)
            return i

    executor = SagaExecutor(registry, max_concurrency=2)
    result = await executor.run([[{"tool": "Busy", "args": {"i": i}} for i in range(6)]])

    assert result.status is SagaStatus.SUCCESS
    assert meter.peak == 2
    assert [r.result for r in result.steps] == list(range(6))


async def test_max_concurrency_also_caps_sync_tools() -> None:
    """max_concurrency caps sync tools running in worker threads too."""
    registry = ToolRegistry()
    lock = threading.Lock()
    counts = {"active": 0, "peak": 0}

    @registry.tool
    class SyncBusy:
        def execute(self, i: int) -> int:
            with lock:
                counts["active"] += 1
                counts["peak"] = max(counts["peak"], counts["active"])
            time.sleep(0.01)
            with lock:
                counts["active"] -= 1
            return i

    executor = SagaExecutor(registry, max_concurrency=1)
    result = await executor.run([[{"tool": "SyncBusy", "args": {"i": i}} for i in range(4)]])

    assert result.status is SagaStatus.SUCCESS
    assert counts["peak"] == 1


async def test_refs_pass_results_between_groups() -> None:
    """$ref values are replaced by an earlier group's result, a field of it, or a list item of it."""
    registry = ToolRegistry()
    received: dict[str, object] = {}

    @registry.tool
    class Make:
        async def execute(self) -> dict:
            return {"order": {"id": "A1", "items": ["pen", "ink"]}, "total": 7}

    @registry.tool
    class Use:
        async def execute(self, whole: dict, order_id: str, item: str, total: int, ctx: StepContext) -> str:
            received.update(whole=whole, order_id=order_id, item=item, total=total, ctx_args=dict(ctx.args))
            return f"{order_id}:{item}"

    @registry.tool
    class Last:
        async def execute(self, label: str) -> str:
            received["label"] = label
            return label.upper()

    plan = [
        {"id": "make", "tool": "Make"},
        {
            "id": "use",
            "tool": "Use",
            "args": {
                "whole": {"$ref": "make"},
                "order_id": {"$ref": "make.order.id"},
                "item": {"$ref": "make.order.items.1"},
                "total": {"$ref": "make.total"},
            },
        },
        {"id": "last", "tool": "Last", "args": {"label": {"$ref": "use"}}},
    ]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    made = {"order": {"id": "A1", "items": ["pen", "ink"]}, "total": 7}
    assert received["whole"] == made
    assert received["order_id"] == "A1"
    assert received["item"] == "ink"
    assert received["total"] == 7
    assert received["label"] == "A1:ink"
    assert result.result_of("last") == "A1:INK"
    # The record keeps the resolved arguments, as the tool saw them.
    assert result.step("use").args == {"whole": made, "order_id": "A1", "item": "ink", "total": 7}
    assert received["ctx_args"] == result.step("use").args


@pytest.mark.parametrize("size", [1, 3])
async def test_failing_group_leaves_next_group_pending(size: int) -> None:
    """Whether a failing group has one step or several, no step of a later group runs."""
    registry = ToolRegistry()
    calls: list[str] = []

    @registry.tool
    class Fail:
        async def execute(self, i: int) -> None:
            calls.append(f"fail{i}")
            raise ValueError("no")

    @registry.tool
    class After:
        async def execute(self) -> None:
            calls.append("after")

    plan = [[{"tool": "Fail", "args": {"i": i}} for i in range(size)], {"id": "after", "tool": "After"}]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.COMPENSATED
    assert "after" not in calls
    assert result.step("after").status is StepStatus.PENDING


async def test_max_concurrency_also_caps_compensations() -> None:
    """max_concurrency caps a group's concurrent compensations as it caps executes."""
    registry = ToolRegistry()
    meter = Meter()

    @registry.tool
    class Effect:
        async def execute(self, i: int) -> int:
            return i

        async def compensate(self, result: int) -> None:
            await meter.busy(3)

    boom_tool(registry)

    executor = SagaExecutor(registry, max_concurrency=2)
    result = await executor.run([[{"tool": "Effect", "args": {"i": i}} for i in range(5)], {"tool": "Boom"}])

    assert result.status is SagaStatus.COMPENSATED
    assert meter.peak == 2
