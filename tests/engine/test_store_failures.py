"""When the store cannot record an intent, the call it announces never runs (write-ahead, invariant 1)."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from saga_runtime import MemoryStore, RetryPolicy, SagaExecutor, StoreError, ToolRegistry
from saga_runtime._records import SagaRow, StepRow


class FailingStore(MemoryStore):
    """A memory store whose saves start failing after `ok_saves` successful ones."""

    def __init__(self, ok_saves: int) -> None:
        super().__init__()
        self.ok_saves = ok_saves

    async def save(
        self,
        saga: SagaRow | None,
        steps: Sequence[StepRow],
        *,
        owner: str | None = None,
        reseal: bool = True,
        lease: bool = True,
    ) -> None:
        if self.ok_saves <= 0:
            raise StoreError("the database went away", url=self.url)
        self.ok_saves -= 1
        await super().save(saga, steps, owner=owner, reseal=reseal, lease=lease)


def tools(calls: list[str]) -> ToolRegistry:
    """Return a registry whose tools log each call."""
    registry = ToolRegistry()

    @registry.tool
    class Step:
        async def execute(self, name: str) -> str:
            calls.append(name)
            return name

        async def compensate(self, result: str | None) -> None:
            calls.append(f"undo {result}")

    @registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0))
    class Flaky:
        async def execute(self, name: str) -> str:
            calls.append(name)
            raise ConnectionError("flaky")

    return registry


async def test_unrecorded_intent_means_the_tool_never_runs() -> None:
    """If the RUNNING record of a group cannot be written, run() raises StoreError and its tools never start."""
    calls: list[str] = []
    # Group 0's intent is written with the saga itself; the first save is group 1's intent, and it fails.
    executor = SagaExecutor(tools(calls), store=FailingStore(ok_saves=0))
    plan = [{"tool": "Step", "args": {"name": "first"}}, {"tool": "Step", "args": {"name": "second"}}]
    with pytest.raises(StoreError, match="went away"):
        await executor.run(plan, saga_id="s")
    assert calls == ["first"]


async def test_unrecorded_retry_attempt_is_not_made() -> None:
    """A retry whose attempt number cannot be recorded is not attempted; run() raises the StoreError."""
    calls: list[str] = []
    executor = SagaExecutor(tools(calls), store=FailingStore(ok_saves=0))
    with pytest.raises(StoreError):
        await executor.run([{"tool": "Flaky", "args": {"name": "flaky"}}], saga_id="s")
    assert calls == ["flaky"]


class RetryingStore(MemoryStore):
    """A memory store that says it retries a lost connection for `retry_for` seconds, like the SQL stores."""

    retry_for = 100.0

    def __init__(self) -> None:
        super().__init__()
        self.end_write_allowed: list[float] = []

    async def save(
        self,
        saga: SagaRow | None,
        steps: Sequence[StepRow],
        *,
        owner: str | None = None,
        reseal: bool = True,
        lease: bool = True,
    ) -> None:
        if saga is not None and saga.status.is_terminal:
            self.end_write_allowed.append(anyio.current_effective_deadline() - anyio.current_time())
        await super().save(saga, steps, owner=owner, reseal=reseal, lease=lease)


async def test_the_end_write_is_allowed_the_stores_retry_window() -> None:
    """Bug: the end write was cut at 10 s while the store retries for retry_for; it now gets retry_for and a margin."""
    store = RetryingStore()
    result = await SagaExecutor(tools([]), store=store).run([{"tool": "Step", "args": {"name": "one"}}])
    assert result.status.value == "SUCCESS"
    (allowed,) = store.end_write_allowed
    assert RetryingStore.retry_for < allowed < RetryingStore.retry_for + 60
