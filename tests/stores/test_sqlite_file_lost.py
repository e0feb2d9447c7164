"""A SQLite file deleted or replaced under an open store: the store fails loudly and reports nothing as written."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from saga_runtime import SagaExecutor, SagaStatus, StepContext, StoreError, StoreFileError, ToolRegistry, open_store

PLAN: list[Any] = [{"id": "charge", "tool": "Charge"}, {"id": "ship", "tool": "Ship"}]


def make_registry(charges: list[str], *, between: Any = None) -> ToolRegistry:
    """Return tools that count charges by saga; `between(saga_id)` runs after a charge, before shipping."""
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self, ctx: StepContext) -> str:
            charges.append(ctx.saga_id)
            if between is not None:
                between(ctx.saga_id)
            return "charged"

        async def compensate(self, result: Any) -> None:
            return None

    @registry.tool
    class Ship:
        async def execute(self) -> str:
            return "shipped"

    return registry


def remove_database(path: Path) -> None:
    """Delete a SQLite database and its WAL files, as a user cleaning up a directory would."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def replace_database(path: Path) -> None:
    """Put another SQLite database at `path` (a restored backup, a copy moved over it)."""
    other = path.with_name("other.db")
    sqlite3.connect(other).close()
    os.replace(other, path)


@pytest.mark.parametrize("change", [remove_database, replace_database], ids=["deleted", "replaced"])
async def test_no_saga_is_reported_written_after_its_sqlite_file_is_deleted_or_replaced(
    tmp_path: Path, change: Any
) -> None:
    """Once the file at the path is not the store's, every call raises StoreFileError; a new store re-runs nothing."""
    path = tmp_path / "sagas.db"
    charges: list[str] = []
    store = await open_store(f"sqlite:///{path}")
    executor = SagaExecutor(make_registry(charges), store=store)
    first = await executor.run(PLAN, saga_id="before")
    assert first.status is SagaStatus.SUCCESS

    change(path)
    outcomes: list[Any] = []
    for n in range(5):
        try:
            outcomes.append((await executor.run(PLAN, saga_id=f"after-{n}")).status)
        except StoreError as exc:
            outcomes.append(exc)
    with pytest.raises(StoreFileError, match=r"was (deleted|replaced)"):
        await store.get_saga("before")
    await store.close()

    assert SagaStatus.SUCCESS not in outcomes
    assert all(isinstance(outcome, StoreFileError) for outcome in outcomes)
    assert charges == ["before"]  # refused before any tool ran
    if change is remove_database:
        # What the store reported written is what a new store on the path finds: nothing of the lost file.
        async with open_store(f"sqlite:///{path}") as again:
            assert await again.list_sagas() == []


async def test_a_saga_whose_file_is_deleted_mid_run_is_not_reported_finished(tmp_path: Path) -> None:
    """A file deleted while a saga runs: run() raises StoreFileError instead of reporting SUCCESS, and so do reads."""
    path = tmp_path / "sagas.db"
    charges: list[str] = []
    store = await open_store(f"sqlite:///{path}", retry_for=0)
    executor = SagaExecutor(make_registry(charges, between=lambda saga_id: remove_database(path)), store=store)

    try:
        status: Any = (await executor.run(PLAN, saga_id="during")).status
    except StoreError as exc:
        status = exc
    assert isinstance(status, StoreFileError), status
    with pytest.raises(StoreFileError):
        await store.load_saga("during")
    await store.close()
    assert charges == ["during"]
