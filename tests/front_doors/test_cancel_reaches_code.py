"""An operator's cancel reaches code that catches errors, waits or sleeps; messages go to the right recv.

Regression tests of an independent review of saga functions and cancels: each failed on the code before.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga_runtime import (
    DynamicSaga,
    SagaExecutor,
    SagaStatus,
    StepContext,
    StepFailedError,
    ToolRegistry,
    open_store,
)

DONE: list[str] = []
UNDONE: list[str] = []


def registry() -> ToolRegistry:
    """Return a registry of one payment tool (slow for n="slow"), its calls and undos counted."""
    tools = ToolRegistry()
    DONE.clear()
    UNDONE.clear()

    @tools.tool
    class Pay:
        async def execute(self, n: str, ctx: StepContext) -> dict[str, str]:
            if n == "slow":
                await asyncio.sleep(3)
            DONE.append(n)
            return {"paid": n}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            UNDONE.append(ctx.args["n"])

    return tools


async def cancel_soon(executor: SagaExecutor, saga_id: str, after: float = 0.4) -> None:
    """Cancel `saga_id` after `after` seconds, as an operator elsewhere would."""
    await asyncio.sleep(after)
    await executor.cancel(saga_id, reason="customer left")


async def test_a_dynamic_saga_that_catches_the_cut_call_still_compensates() -> None:
    """Code catching the StepFailedError of a call a cancel cut does not end the saga SUCCESS: it compensates."""
    async with open_store("memory://") as store:
        executor = SagaExecutor(registry(), store, lease_timeout=1.5)
        canceller = asyncio.create_task(cancel_soon(SagaExecutor(registry(), store), "caught"))
        async with executor.saga(saga_id="caught") as saga:
            await saga.call("Pay", n="a")
            with pytest.raises(StepFailedError):
                await saga.call("Pay", n="slow")
        await canceller
        result = await store.get_saga("caught")
    assert result is not None
    assert (result.status, result.end_reason) == (SagaStatus.COMPENSATED, "cancelled")
    assert UNDONE == ["slow", "a"]


async def test_no_call_runs_after_a_cancel_the_code_caught() -> None:
    """After a cancel, the next call raises StepFailedError (not run) and runs nothing; the saga ends COMPENSATED."""
    async with open_store("memory://") as store:
        executor = SagaExecutor(registry(), store, lease_timeout=1.5)
        canceller = asyncio.create_task(cancel_soon(SagaExecutor(registry(), store), "after"))

        async def body() -> None:
            async with executor.saga(saga_id="after") as saga:
                await saga.call("Pay", n="a")
                with pytest.raises(StepFailedError):
                    await saga.call("Pay", n="slow")
                await saga.call("Pay", n="c")

        with pytest.raises(StepFailedError, match="not run: cancelled"):
            await body()
        await canceller
        result = await store.get_saga("after")
    assert result is not None
    assert result.status is SagaStatus.COMPENSATED
    assert "c" not in DONE


async def test_a_cancelled_saga_function_waiting_for_a_message_compensates(tmp_path: Any) -> None:
    """A saga function released to wait for a message (WAITING) and then cancelled is compensated by serve()."""
    tools = registry()

    @tools.saga
    async def pay_then_wait(saga: DynamicSaga) -> Any:
        await saga.call("Pay", n="a")
        return await saga.recv("go")

    async with open_store(f"sqlite:///{tmp_path / 'wait.db'}") as store:
        executor = SagaExecutor(tools, store, wait_threshold=0.1)
        worker = asyncio.create_task(executor.serve(interval=0.05))
        try:
            assert (await executor.run(pay_then_wait, saga_id="w")).status is SagaStatus.WAITING
            await executor.cancel("w", reason="customer left")
            result = await executor.handle("w").result(timeout=20)
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
    assert (result.status, result.end_reason) == (SagaStatus.COMPENSATED, "cancelled")
    assert UNDONE == ["a"]


async def test_a_cancel_ends_a_sleep_in_the_process() -> None:
    """A cancel taken in while a saga function sleeps in its process ends the sleep and compensates."""
    tools = registry()

    @tools.saga
    async def pay_then_nap(saga: DynamicSaga) -> None:
        await saga.call("Pay", n="a")
        await saga.sleep(30)

    async with open_store("memory://") as store:
        executor = SagaExecutor(tools, store, lease_timeout=1.5, wait_threshold=60)
        canceller = asyncio.create_task(cancel_soon(SagaExecutor(tools, store), "nap"))
        result = await asyncio.wait_for(executor.run(pay_then_nap, saga_id="nap"), 20)
        await canceller
    assert (result.status, result.end_reason) == (SagaStatus.COMPENSATED, "cancelled")


async def test_two_recvs_at_once_receive_two_messages() -> None:
    """Two recvs of one topic waiting at once each receive a message of their own, never the same one."""
    tools = registry()

    @tools.saga
    async def two(saga: DynamicSaga) -> list[Any]:
        return list(await asyncio.gather(saga.recv("r", timeout=5), saga.recv("r", timeout=5)))

    async with open_store("memory://") as store:
        executor = SagaExecutor(tools, store, wait_threshold=100)
        running = asyncio.create_task(executor.run(two, saga_id="two"))
        await asyncio.sleep(0.3)
        await executor.send("two", "r", {"n": 1})
        await executor.send("two", "r", {"n": 2})
        result = await running
    assert result.status is SagaStatus.SUCCESS
    assert sorted(item["n"] for item in result.output) == [1, 2]


async def test_a_message_sent_after_a_recv_timed_out_goes_to_the_next_recv(tmp_path: Any) -> None:
    """A message sent after a released recv's deadline is for the next recv, even if no worker looked between."""
    tools = registry()

    @tools.saga
    async def timed(saga: DynamicSaga) -> list[Any]:
        first = await saga.recv("t", timeout=0.6)
        return [first, await saga.recv("t", timeout=10)]

    async with open_store(f"sqlite:///{tmp_path / 'late.db'}") as store:
        executor = SagaExecutor(tools, store, wait_threshold=0.1)
        assert (await executor.run(timed, saga_id="late")).status is SagaStatus.WAITING
        await asyncio.sleep(1.0)  # the first recv's deadline passes; no worker runs meanwhile
        await executor.send("late", "t", {"late": 1})
        worker = asyncio.create_task(executor.serve(interval=0.05))
        try:
            result = await executor.handle("late").result(timeout=20)
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
    assert result.output == [None, {"late": 1}]


async def test_a_cancel_during_compensation_leaves_the_end_reason_failed() -> None:
    """A saga already compensating for a failed step when a cancel arrives ended "failed", not "cancelled"."""
    tools = ToolRegistry()

    @tools.tool
    class Hold:
        async def execute(self) -> dict[str, bool]:
            return {"held": True}

        async def compensate(self, result: Any) -> None:
            await asyncio.sleep(1.0)  # the cancel arrives while this undo runs

    @tools.tool
    class Decline:
        async def execute(self) -> None:
            raise RuntimeError("card declined")

    async with open_store("memory://") as store:
        executor = SagaExecutor(tools, store, lease_timeout=1.5)
        running = asyncio.create_task(executor.run([{"id": "h", "tool": "Hold"}, {"id": "d", "tool": "Decline"}]))
        await asyncio.sleep(0.4)
        [saga] = await store.list_sagas()
        await SagaExecutor(tools, store).cancel(saga.saga_id, reason="too late")
        result = await running
    assert result.status is SagaStatus.COMPENSATED
    assert result.end_reason == "failed"
