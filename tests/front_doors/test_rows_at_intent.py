"""Steps never started have no stored row: every reader takes them from the saga's plan (review regressions)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from saga_runtime import SagaExecutor, SagaStatus, StepStatus, ToolRegistry
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaRow, StepRow, idempotency_key, now, seal_all
from saga_runtime._storage import MemoryStore

registry = ToolRegistry()


@registry.tool
class Charge:
    def execute(self, amount: int) -> dict[str, Any]:
        return {"amount": amount}

    def compensate(self, result: dict[str, Any] | None) -> None:
        return None


@registry.tool
class Fail:
    def execute(self) -> None:
        raise RuntimeError("no")

    def compensate(self, result: None) -> None:
        return None


PLAN = [
    {"id": "a", "tool": "Charge", "args": {"amount": 1}},
    {"id": "b", "tool": "Fail", "args": {}},
    {"id": "c", "tool": "Charge", "args": {"amount": 2}},
]


async def test_a_saga_that_stopped_before_its_last_group_replays_and_lists_every_step() -> None:
    """replay() and list_sagas read the step never started from the plan (they saw 2 of 3 steps)."""
    store = MemoryStore()
    executor = SagaExecutor(registry, store=store)
    result = await executor.run(PLAN, saga_id="stopped")
    assert result.status is SagaStatus.COMPENSATED
    loaded = await store.load_saga("stopped")
    assert loaded is not None
    assert "c" not in {row.step_id for row in loaded[1]}
    replayed = await executor.replay("stopped")
    assert [step.step_id for step in replayed.steps] == ["a", "b", "c"]
    (summary,) = await store.list_sagas()
    assert summary.step_count == 3


async def test_a_worker_missing_the_tool_of_a_step_never_started_leaves_the_saga() -> None:
    """The tool of a step with no row yet counts as needed: the saga waits for a worker with it, never PARKED."""
    store = MemoryStore()
    planned = build_plan([PLAN[0], {"id": "c", "tool": "Fail", "args": {}}], registry)
    started = now() - timedelta(minutes=5)
    saga = SagaRow("orphan", "plan", planned.to_json(), planned.digest, SagaStatus.RUNNING, started, started)
    saga.owner, saga.lease_expires_at = "dead", started
    done = StepRow("orphan", 0, "a", 0, "Charge", {"amount": 1}, idempotency_key("orphan", "a"))
    done.status, done.attempts, done.started_at, done.finished_at = StepStatus.SUCCESS, 1, started, started
    done.result = {"amount": 1}
    seal_all([done], None)
    assert await store.create_saga(saga, [done]) is None  # step c (tool Fail) never started: no row
    only_charge = ToolRegistry()
    only_charge.register(Charge())
    assert await SagaExecutor(only_charge, store=store).recover() == []
    stored = await store.get_saga("orphan")
    assert stored is not None
    assert stored.status is SagaStatus.RUNNING
    assert "Fail" in (stored.error or "")
