"""An idle worker's one look per interval (SagaStore.due_work), and a store that does not declare it."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio

from saga_runtime import MemoryStore, SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._storage import EVERY_CAPABILITY, Capability


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    class Note:
        async def execute(self, n: int) -> int:
            return n

    return registry


class _OlderStore:
    """A store of its own that declares every capability but `due_work` (and has none): the rest a memory store's."""

    capabilities: frozenset[Capability] = EVERY_CAPABILITY - {"due_work"}

    def __init__(self) -> None:
        self._inner = MemoryStore()

    def __getattr__(self, name: str) -> Any:
        if name == "due_work":
            raise AttributeError(name)
        return getattr(self._inner, name)


async def _served_until_done(executor: SagaExecutor, saga_id: str) -> SagaStatus | None:
    """Serve until the saga ends SUCCESS (or 20 s pass); return its status then."""
    status = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(executor.serve, interval=0.05))
        for _ in range(400):
            result = await executor.store.get_saga(saga_id)
            status = None if result is None else result.status
            if status is SagaStatus.SUCCESS:
                break
            await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    return status


async def test_a_saga_due_later_is_started_once_its_time_comes() -> None:
    """A queued saga whose start time comes while the worker idles is started by the look that finds it due."""
    executor = SagaExecutor(_registry(), MemoryStore())
    await executor.submit([{"tool": "Note", "args": {"n": 1}}], saga_id="later", not_before=0.3)
    assert await _served_until_done(executor, "later") is SagaStatus.SUCCESS


async def test_a_store_without_due_work_is_served_as_before() -> None:
    """A store not declaring `due_work` is still served: every loop looks each interval, as before the one look."""
    executor = SagaExecutor(_registry(), _OlderStore())  # type: ignore[arg-type]
    await executor.submit([{"tool": "Note", "args": {"n": 1}}], saga_id="later", not_before=0.3)
    assert await _served_until_done(executor, "later") is SagaStatus.SUCCESS
