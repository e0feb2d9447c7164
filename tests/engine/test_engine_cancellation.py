"""Caller cancellation: compensation runs shielded and bounded, the saga is recorded terminal, then it propagates."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from cancelling import cancel_once
from shop_tools import boom_tool

from saga_runtime import RetryPolicy, SagaExecutor, SagaResult, SagaStatus, StepStatus, ToolRegistry

HANDSHAKE = 2.0


@dataclass
class Scenario:
    """A registry whose plan has a finished first group and a second group still running when the caller leaves."""

    registry: ToolRegistry = field(default_factory=ToolRegistry)
    running: anyio.Event = field(default_factory=anyio.Event)
    log: list[tuple[str, object]] = field(default_factory=list)
    plan: list = field(default_factory=list)


def scenario(*, hang_compensation: bool = False) -> Scenario:
    """Return a scenario: `done` (group 0) succeeds, `hang` and `hang2` (group 1) run until cancelled."""
    s = Scenario()

    @s.registry.tool(compensation_retry=RetryPolicy(max_attempts=1))
    class Done:
        async def execute(self) -> dict:
            s.log.append(("exec done", None))
            return {"tx": "t-1"}

        async def compensate(self, result: object) -> None:
            s.log.append(("compensate done", result))
            if hang_compensation:
                try:
                    await anyio.Event().wait()
                except anyio.get_cancelled_exc_class():
                    s.log.append(("compensate done cut off", None))
                    raise

    @s.registry.tool(compensation_retry=RetryPolicy(max_attempts=1))
    class Hang:
        async def execute(self, key: str) -> str:
            s.log.append((f"exec {key}", None))
            if key == "hang":
                s.running.set()
            try:
                await anyio.Event().wait()
            except anyio.get_cancelled_exc_class():
                s.log.append((f"{key} cancelled", None))
                raise
            return "never"

        async def compensate(self, result: object) -> None:
            s.log.append(("compensate hang", result))
            if hang_compensation:
                try:
                    await anyio.Event().wait()
                except anyio.get_cancelled_exc_class():
                    s.log.append(("compensate hang cut off", None))
                    raise

    s.plan = [
        {"id": "done", "tool": "Done"},
        [
            {"id": "hang", "tool": "Hang", "args": {"key": "hang"}},
            {"id": "hang2", "tool": "Hang", "args": {"key": "hang2"}},
        ],
    ]
    return s


def check_compensated(s: Scenario, stored: SagaResult | None) -> None:
    """Assert the stored saga is COMPENSATED: running steps undone with None, then `done` with its result."""
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED, stored.describe()
    assert stored.status.is_terminal
    assert stored.finished_at is not None
    for key in ("hang", "hang2"):
        record = stored.step(key)
        assert record.status is StepStatus.COMPENSATED
        assert record.error_type == "CancelledError"
        assert "caller" in (record.error or "")
        assert record.compensated_at is not None
        assert (f"{key} cancelled", None) in s.log
    done = stored.step("done")
    assert done.status is StepStatus.COMPENSATED
    assert done.result == {"tx": "t-1"}
    compensations = [entry for entry in s.log if entry[0].startswith("compensate")]
    # Group 1's two unknown steps (with None) before group 0's SUCCESS step (with its stored result).
    assert compensations == [("compensate hang", None), ("compensate hang", None), ("compensate done", {"tx": "t-1"})]


async def cancelled_run(executor: SagaExecutor, plan: list[Any], saga_id: str, started: anyio.Event) -> SagaResult:
    """Run `plan` in a task, cancel the task once `started` is set; check it raised CancelledError, return the saga."""
    await cancel_once(executor.run(plan, saga_id=saga_id), started)
    stored = await executor.store.get_saga(saga_id)
    assert stored is not None
    return stored


async def test_task_cancel_compensates_then_propagates() -> None:
    """task.cancel() mid-step: the step is CANCELLED and compensated, earlier steps too, then CancelledError."""
    s = scenario()
    executor = SagaExecutor(s.registry)
    check_compensated(s, await cancelled_run(executor, s.plan, "cancel-task", s.running))


async def test_asyncio_timeout_compensates_then_raises_timeout_error() -> None:
    """asyncio.timeout() around run(): the stored saga is COMPENSATED, then the caller sees TimeoutError."""
    s = scenario()
    executor = SagaExecutor(s.registry)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await executor.run(s.plan, saga_id="cancel-timeout")

    assert s.running.is_set()
    check_compensated(s, await executor.store.get_saga("cancel-timeout"))


async def test_wait_for_compensates_then_raises_timeout_error() -> None:
    """asyncio.wait_for() around run(): the stored saga is COMPENSATED, then the caller sees TimeoutError."""
    s = scenario()
    executor = SagaExecutor(s.registry)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(executor.run(s.plan, saga_id="cancel-wait-for"), timeout=0.05)

    assert s.running.is_set()
    check_compensated(s, await executor.store.get_saga("cancel-wait-for"))


async def test_cancelled_single_step_is_cancelled_and_compensated() -> None:
    """A lone running step (a group of one) cancelled by its caller is CANCELLED, compensated with None, COMPENSATED."""
    registry = ToolRegistry()
    running = anyio.Event()
    compensated: list[object] = []

    @registry.tool
    class Hang:
        async def execute(self) -> str:
            running.set()
            await anyio.Event().wait()
            return "never"

        async def compensate(self, result: object) -> None:
            compensated.append(result)

    executor = SagaExecutor(registry)
    stored = await cancelled_run(executor, [{"id": "hang", "tool": "Hang"}], "lone", running)
    assert stored.status is SagaStatus.COMPENSATED
    assert compensated == [None]
    assert stored.step("hang").status is StepStatus.COMPENSATED
    assert stored.step("hang").error_type == "CancelledError"


async def test_compensation_is_shielded_from_the_cancelled_caller() -> None:
    """A compensation that yields to the loop (several awaits) still completes after the caller was cancelled."""
    registry = ToolRegistry()
    running = anyio.Event()
    steps: list[str] = []

    @registry.tool
    class Effect:
        async def execute(self) -> str:
            return "charged"

        async def compensate(self, result: object) -> None:
            for i in range(5):
                await asyncio.sleep(0.001)
                steps.append(f"undo {i}")

    @registry.tool
    class Hang:
        async def execute(self) -> None:
            running.set()
            await anyio.Event().wait()

    executor = SagaExecutor(registry)
    plan = [{"id": "effect", "tool": "Effect"}, {"id": "hang", "tool": "Hang"}]
    stored = await cancelled_run(executor, plan, "sh", running)

    assert steps == [f"undo {i}" for i in range(5)]
    assert stored.status is SagaStatus.COMPENSATED
    assert stored.step("hang").status is StepStatus.CANCELLED  # no compensate: stays where it ended


async def _cancel_by_task(run: Callable[[], Awaitable[SagaResult]], running: anyio.Event) -> type[BaseException]:
    task = asyncio.create_task(run())
    with anyio.fail_after(HANDSHAKE):
        await running.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as info:
        await task
    return info.type


async def _cancel_by_timeout(run: Callable[[], Awaitable[SagaResult]], running: anyio.Event) -> type[BaseException]:
    with pytest.raises(TimeoutError) as info:
        async with asyncio.timeout(0.05):
            await run()
    return info.type


async def _cancel_by_wait_for(run: Callable[[], Awaitable[SagaResult]], running: anyio.Event) -> type[BaseException]:
    with pytest.raises(TimeoutError) as info:
        await asyncio.wait_for(run(), timeout=0.05)
    return info.type


@pytest.mark.parametrize("cancel", [_cancel_by_task, _cancel_by_timeout, _cancel_by_wait_for])
async def test_compensation_past_compensation_timeout_is_cut_off(cancel) -> None:
    """Compensation outliving compensation_timeout is cut off: saga COMPENSATION_FAILED naming compensation_timeout."""
    s = scenario(hang_compensation=True)
    executor = SagaExecutor(s.registry, compensation_timeout=0.05)

    await cancel(lambda: executor.run(s.plan, saga_id="cut-off"), s.running)

    stored = await executor.store.get_saga("cut-off")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATION_FAILED, stored.describe()
    assert stored.finished_at is not None
    for key in ("hang", "hang2"):
        record = stored.step(key)
        assert record.status is StepStatus.COMPENSATION_FAILED
        assert "compensation_timeout" in (record.compensation_error or "")
        assert record.error_type == "CancelledError"
    assert s.log.count(("compensate hang cut off", None)) == 2
    # Group 0 never got its turn: its compensation did not run, and the record says why.
    done = stored.step("done")
    assert done.status is StepStatus.COMPENSATION_FAILED
    assert "compensation_timeout" in (done.compensation_error or "")
    assert ("compensate done", {"tx": "t-1"}) not in s.log


async def test_compensation_timeout_also_bounds_a_failed_saga() -> None:
    """Without any caller cancellation, compensation_timeout bounds the compensation of a failed saga."""
    registry = ToolRegistry()

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=1))
    class Effect:
        async def execute(self) -> str:
            return "done"

        async def compensate(self, result: object) -> None:
            await anyio.Event().wait()

    boom_tool(registry)

    executor = SagaExecutor(registry, compensation_timeout=0.05)
    result = await executor.run([{"id": "effect", "tool": "Effect"}, {"id": "boom", "tool": "Boom"}], saga_id="bounded")

    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert "compensation_timeout" in (result.step("effect").compensation_error or "")
    stored = await executor.store.get_saga("bounded")
    assert stored is not None
    assert stored.to_dict() == result.to_dict()


async def test_second_cancel_during_compensation_does_not_stop_it() -> None:
    """Cancelling the caller again while compensation runs does not interrupt the shielded compensation."""
    registry = ToolRegistry()
    running = anyio.Event()
    compensating = anyio.Event()
    release = anyio.Event()
    finished: list[object] = []

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=1))
    class Effect:
        async def execute(self) -> str:
            return "charged"

        async def compensate(self, result: object) -> None:
            compensating.set()
            await release.wait()
            finished.append(result)

    @registry.tool
    class Hang:
        async def execute(self) -> None:
            running.set()
            await anyio.Event().wait()

    executor = SagaExecutor(registry)
    task = asyncio.create_task(
        executor.run([{"id": "effect", "tool": "Effect"}, {"id": "hang", "tool": "Hang"}], saga_id="twice")
    )
    with anyio.fail_after(HANDSHAKE):
        await running.wait()
    task.cancel()
    with anyio.fail_after(HANDSHAKE):
        await compensating.wait()
    task.cancel()
    await asyncio.sleep(0.01)
    assert not task.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert finished == ["charged"]
    stored = await executor.store.get_saga("twice")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED
    assert stored.step("effect").status is StepStatus.COMPENSATED


async def test_cancel_during_retry_backoff_is_cancelled_and_compensated() -> None:
    """A step cancelled by its caller while waiting between attempts is CANCELLED and compensated with None."""
    registry = ToolRegistry()
    failed_once = anyio.Event()
    compensated: list[object] = []

    @registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.2, jitter=False))
    class Flaky:
        async def execute(self) -> str:
            failed_once.set()
            raise ConnectionError("flaky")

        async def compensate(self, result: object) -> None:
            compensated.append(result)

    executor = SagaExecutor(registry)
    stored = await cancelled_run(executor, [{"id": "flaky", "tool": "Flaky"}], "backoff", failed_once)
    assert stored.status is SagaStatus.COMPENSATED
    record = stored.step("flaky")
    assert record.attempts == 1
    assert record.error_type == "CancelledError"
    assert record.status is StepStatus.COMPENSATED
    assert compensated == [None]


async def test_cancel_while_a_sync_tool_blocks_abandons_the_thread_and_compensates() -> None:
    """A caller cancelled while a sync tool blocks in its thread: the step is CANCELLED and compensated with None."""
    registry = ToolRegistry()
    started = threading.Event()
    release = threading.Event()
    compensated: list[object] = []

    @registry.tool
    class Blocking:
        def execute(self) -> str:
            started.set()
            release.wait(timeout=HANDSHAKE)
            return "late"

        def compensate(self, result: object) -> None:
            compensated.append(result)

    executor = SagaExecutor(registry)
    task = asyncio.create_task(executor.run([{"id": "blocking", "tool": "Blocking"}], saga_id="sync-cancel"))
    try:
        with anyio.fail_after(HANDSHAKE):
            assert await anyio.to_thread.run_sync(started.wait, HANDSHAKE)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        release.set()  # let the abandoned thread end

    stored = await executor.store.get_saga("sync-cancel")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED
    assert stored.step("blocking").status is StepStatus.COMPENSATED
    assert stored.step("blocking").error_type == "CancelledError"
    assert compensated == [None]


@pytest.mark.parametrize("cause", ["result not storable", "scope-step timeout"])
async def test_at_once_compensation_survives_caller_cancellation(cause: str) -> None:
    """An at-once compensation (unstorable result, timed-out scope-"step" step) finishes though the caller leaves."""
    registry = ToolRegistry()
    compensating = anyio.Event()
    release = anyio.Event()
    log: list[str] = []

    class Handle:
        pass

    # The tool's timeout bounds its compensation too: long enough for the handshake below on a loaded machine.
    @registry.tool(
        timeout=0.5 if cause == "scope-step timeout" else None,
        retry_scope="step" if cause == "scope-step timeout" else "saga",
        compensation_retry=RetryPolicy(max_attempts=1),
    )
    class Effect:
        async def execute(self) -> object:
            if cause == "scope-step timeout":
                await anyio.Event().wait()
            return Handle()

        async def compensate(self, result: object) -> None:
            compensating.set()
            try:
                await release.wait()
            except anyio.get_cancelled_exc_class():
                log.append("interrupted")
                raise
            log.append("undone")

    executor = SagaExecutor(registry)
    task = asyncio.create_task(executor.run([{"id": "effect", "tool": "Effect"}], saga_id="at-once"))
    with anyio.fail_after(HANDSHAKE):
        await compensating.wait()
    task.cancel()
    await asyncio.sleep(0.01)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert log == ["undone"]
    stored = await executor.store.get_saga("at-once")
    assert stored is not None
    assert stored.step("effect").status is StepStatus.COMPENSATED
    assert stored.status is SagaStatus.COMPENSATED
