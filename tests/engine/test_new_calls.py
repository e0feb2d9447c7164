"""A saga function's new call, as the call driver runs it: what happens once its worker stops."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from saga_runtime._engine._calls import CallDriver
from saga_runtime._engine._cancellation import WorkerStopped
from saga_runtime._records import StepRow


async def test_a_new_call_made_once_its_worker_stops_writes_what_ran_and_starts_nothing() -> None:
    """A new call made once its worker stops: what ran is written, WorkerStopped raised, no step added or run."""
    flushed: list[bool] = []
    added: list[StepRow] = []

    async def flush() -> None:
        flushed.append(True)

    def run(rows: Any) -> Any:
        raise AssertionError(f"ran {rows}")

    engine: Any = SimpleNamespace(
        shelters=SimpleNamespace(stopping=True),
        flush=flush,
        journal=SimpleNamespace(add_step=added.append),
        groups=SimpleNamespace(run=run, run_new=run),
        rows={},
        gate=SimpleNamespace(rows={}),
        verdict=SimpleNamespace(cancellation=SimpleNamespace(halted=None)),
    )
    driver = CallDriver(engine, defers=True)
    row = StepRow("saga", 0, "Noop-0", 0, "Noop", {"n": 0}, "key")
    with pytest.raises(WorkerStopped):
        await driver.run_new(row, {"n": 0}, SimpleNamespace(version="1"))
    assert flushed == [True]
    assert added == []
