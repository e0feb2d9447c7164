"""Regression tests for bugs a review of the durability code found; each test names the bug it pins."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import timedelta
from typing import Any

from saga_runtime import MemoryStore, RetryPolicy, SagaExecutor, SagaStatus, StepStatus, ToolRegistry
from saga_runtime._records import SagaRow, StepRow, canonical_json, idempotency_key, now, seal_all


def registry_logging(log: list[tuple[str, Any]]) -> ToolRegistry:
    """Return a Pay tool that logs charges and refunds."""
    registry = ToolRegistry()

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=1))
    class Pay:
        async def execute(self, n: int) -> dict[str, int]:
            log.append(("charge", n))
            return {"tx": n}

        async def compensate(self, result: dict[str, int] | None) -> None:
            log.append(("refund", result))

    return registry


def plant(store: MemoryStore, saga_id: str, status: SagaStatus, rows: list[StepRow]) -> None:
    """Store a saga as a dead executor (or an earlier run) left it."""
    started = now() - timedelta(minutes=5)
    saga = SagaRow(saga_id, "dynamic", None, None, status, started, started, owner="dead", lease_expires_at=started)
    seal_all(rows, None)
    store._sagas[saga_id] = saga
    store._steps[saga_id] = {row.step_id: row for row in rows}


def row(saga_id: str, seq: int, status: StepStatus, **fields: Any) -> StepRow:
    """Return a Pay step row."""
    step_id = f"Pay-{seq}"
    values: dict[str, Any] = {"attempts": 1, "started_at": now(), **fields}
    return StepRow(saga_id, seq, step_id, seq, "Pay", {"n": seq}, idempotency_key(saga_id, step_id), status, **values)


async def test_a_step_whose_undo_had_begun_is_compensated_not_run_again() -> None:
    """Bug: recovery re-ran forward a CANCELLED step whose at-once compensation was already written ahead."""
    log: list[tuple[str, Any]] = []
    store = MemoryStore()
    plant(store, "s", SagaStatus.RUNNING, [row("s", 0, StepStatus.CANCELLED, compensation_attempts=1)])
    store._sagas["s"].kind = "plan"
    store._sagas["s"].plan = [[{"id": "Pay-0", "tool": "Pay", "args": {"n": 0}}]]
    store._sagas["s"].plan_hash = hashlib.sha256(canonical_json(store._sagas["s"].plan).encode()).hexdigest()
    await SagaExecutor(registry_logging(log), store=store).recover()
    assert log == [("refund", None)]


async def test_retry_compensation_undoes_a_race_loser_with_its_result() -> None:
    """Bug: retry_compensation called compensate(None) for a `first` loser that had a stored result."""
    log: list[tuple[str, Any]] = []
    store = MemoryStore()
    loser = row(
        "s", 0, StepStatus.COMPENSATION_FAILED, result={"tx": 7}, error="lost the race to step 'x'", finished_at=now()
    )
    plant(store, "s", SagaStatus.COMPENSATION_FAILED, [loser])
    result = await SagaExecutor(registry_logging(log), store=store).retry_compensation("s")
    assert result.status is SagaStatus.COMPENSATED
    assert log == [("refund", {"tx": 7})]


async def test_a_hung_undo_of_a_refused_result_is_bounded_and_recorded() -> None:
    """Bug: the undo of a refused result ignored compensation_timeout (run() never returned) and left no trace."""
    registry = ToolRegistry()

    @registry.tool
    class Quote:
        async def execute(self) -> int:
            return -1

        def validate(self, result: int) -> None:
            if result < 0:
                raise ValueError("negative")

        async def compensate(self, result: int | None) -> None:
            await asyncio.sleep(30)

    executor = SagaExecutor(registry, compensation_timeout=0.2)
    result = await asyncio.wait_for(executor.run([{"id": "q", "tool": "Quote"}]), timeout=5)
    step = result.step("q")
    assert step.status is StepStatus.COMPENSATION_FAILED
    assert "compensation_timeout ran out" in (step.compensation_error or "")
    assert result.status is SagaStatus.COMPENSATION_FAILED
