"""What a saga's writes hand the store: its own rows to a store that takes them at once, copies to any other."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from saga_runtime import MemoryStore, SagaExecutor, StepStatus, ToolRegistry, open_store
from saga_runtime._records import SagaRow, StepRow


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    class Nap:
        async def execute(self, n: int) -> int:
            await asyncio.sleep(0)
            return n

    return registry


_PLAN = [{"tool": "Nap", "args": {"n": n}} for n in range(3)]


class _PausingStore(MemoryStore):
    """A memory store whose write pauses (so it is awaited, not inline), keeping what each save was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[tuple[StepRow, StepStatus]] = []

    async def save(self, saga: SagaRow | None, steps: Sequence[StepRow], **options: Any) -> None:
        self.handed += [(row, row.status) for row in steps]
        await asyncio.sleep(0)
        await super().save(saga, steps, **options)


async def test_a_sql_store_is_handed_the_journals_rows(tmp_path: Path) -> None:
    """A SQL store (takes_rows_at_once) gets a step's own row at its intent and at its result: no copy a write."""
    async with open_store(f"sqlite:///{tmp_path / 'sagas.db'}") as store:
        assert type(store).takes_rows_at_once is True
        handed: list[StepRow] = []
        save = store.save

        async def watched(saga: SagaRow | None, steps: Sequence[StepRow], **options: Any) -> None:
            handed.extend(steps)
            await save(saga, steps, **options)

        store.save = watched  # type: ignore[method-assign]
        result = await SagaExecutor(_registry(), store=store).run(_PLAN, saga_id="s")
        assert result.status.value == "SUCCESS"
        by_step: dict[str, set[int]] = {}
        for row in handed:
            by_step.setdefault(row.step_id, set()).add(id(row))
        # Steps 1 and 2: their intent and their result, each write handing the one row object.
        assert sorted(len(ids) for ids in by_step.values()) == [1, 1, 1]
        assert (await store.verify_saga("s")).ok


async def test_a_store_that_keeps_rows_is_handed_copies() -> None:
    """A store not declaring takes_rows_at_once gets snapshots: a row handed RUNNING still reads RUNNING after."""
    store = _PausingStore()
    assert store.writes_inline is None
    result = await SagaExecutor(_registry(), store=store).run(_PLAN, saga_id="s")
    assert result.status.value == "SUCCESS"
    assert [status for _, status in store.handed].count(StepStatus.RUNNING) == 2  # steps 1 and 2's intents
    assert all(row.status is status for row, status in store.handed[:-1])  # (the end hands the rows themselves)
