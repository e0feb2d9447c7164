"""A saga whose tool is missing or renamed says what it waits for, and an operator can give up on it (issue 25)."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from saga_runtime import SagaAdmin, SagaExecutor, SagaInProgressError, SagaStatus, StepContext, StepStatus, ToolRegistry
from saga_runtime._records import SagaRow, StepRow, idempotency_key, now, seal_all

from .conftest import Stores

CALLS: Counter[str] = Counter()
full = ToolRegistry()


@full.tool
class Charge:
    async def execute(self, amount: int, ctx: StepContext) -> dict[str, Any]:
        CALLS["charge"] += 1
        return {"amount": amount}

    async def compensate(self, result: dict[str, Any] | None, ctx: StepContext) -> None:
        CALLS["refund"] += 1


@full.tool
class Ship:
    async def execute(self, item: str) -> str:
        CALLS["ship"] += 1
        return item

    async def compensate(self, result: str | None) -> None:
        CALLS["unship"] += 1


# A worker after Ship was renamed: it has Charge only.
partial = ToolRegistry()
partial.register(Charge())

PLAN = [
    {"id": "charge", "tool": "Charge", "args": {"amount": 9}},
    {"id": "ship", "tool": "Ship", "args": {"item": "book"}},
    {"id": "last", "tool": "Charge", "args": {"amount": 1}},
]


async def orphan(store: Any, saga_id: str, status: SagaStatus = SagaStatus.RUNNING) -> None:
    """Store a saga whose owner died after its charge and its shipping succeeded."""
    from saga_runtime._planning import build_plan

    planned = build_plan(PLAN, full)
    started = now() - timedelta(minutes=5)
    saga = SagaRow(
        saga_id, "plan", planned.to_json(), planned.digest, status, started, started, owner="dead",
        lease_expires_at=started,
    )  # fmt: skip
    rows = []
    steps = [("charge", {"amount": 9}), ("ship", {"item": "book"}), ("last", {"amount": 1})]
    for seq, (step, args) in enumerate(steps):
        tool = "Ship" if step == "ship" else "Charge"
        row = StepRow(saga_id, seq, step, seq, tool, args, idempotency_key(saga_id, step))
        if seq < 2:
            row.status, row.attempts, row.started_at, row.finished_at = StepStatus.SUCCESS, 1, started, started
            row.result = {"amount": 9} if tool == "Charge" else "book"
        rows.append(row)
    seal_all(rows, None)
    assert await store.create_saga(saga, rows) is None


async def test_a_saga_waiting_for_a_missing_tool_says_so_and_warns_once(
    stores: Stores, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its error names the missing tool and the way out; one WARNING per worker and saga, not one per pass."""
    store = await stores.open(kind, wipe=True)
    await orphan(store, "waits")
    worker = SagaExecutor(partial, store=store)
    with caplog.at_level(logging.WARNING, logger="saga_runtime"):
        for _ in range(3):
            assert await worker.recover() == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "Ship" in r.getMessage()]
    assert len(warnings) == 1
    stored = await store.get_saga("waits")
    assert stored is not None
    assert stored.status is SagaStatus.RUNNING
    assert "Ship" in (stored.error or "")
    assert "compensate=True" in (stored.error or "")
    # A worker with the tool drives it on: the message goes with the wait.
    CALLS.clear()
    (done,) = await SagaExecutor(full, store=store).recover()
    assert done.status is SagaStatus.SUCCESS
    assert done.error is None
    assert CALLS == {"charge": 1}


@pytest.mark.parametrize("status", [SagaStatus.RUNNING, SagaStatus.COMPENSATING])
async def test_unpark_with_compensate_gives_up_on_a_saga_waiting_for_a_missing_tool(
    stores: Stores, kind: str, status: SagaStatus
) -> None:
    """Unpark accepts it: the tools present compensate, the missing one's step is COMPENSATION_FAILED saying why."""
    store = await stores.open(kind, wipe=True)
    await orphan(store, "gone", status)
    await SagaExecutor(partial, store=store).recover()
    with pytest.raises(SagaInProgressError, match="Ship"):
        await SagaAdmin(store).unpark("gone", compensate=True)  # no tools at all: nothing to compensate with
    CALLS.clear()
    result = await SagaAdmin(store, registry=partial).unpark("gone", compensate=True)
    assert result is not None
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert CALLS == {"refund": 1}
    assert result.step("charge").status is StepStatus.COMPENSATED
    ship = result.step("ship")
    assert ship.status is StepStatus.COMPENSATION_FAILED
    assert "'Ship' is not registered" in (ship.compensation_error or "")
    assert "an operator chose to compensate it" in (result.error or "")
    # The worker lacking the tool gave the saga back as it found it: the takeover names the crashed owner.
    assert [(t.from_owner, t.reason) for t in result.takeovers] == [("dead", "lease expired")]
    assert await store.verify_saga("gone")
    with pytest.raises(SagaInProgressError):
        await SagaExecutor(partial, store=store).unpark("gone", compensate=True)


async def test_a_saga_whose_owner_is_alive_is_not_given_up_on(stores: Stores, kind: str) -> None:
    """Only a saga whose owner is gone: one under a live lease is refused, and nothing is compensated."""
    store = await stores.open(kind, wipe=True)
    await orphan(store, "alive")
    assert await store.claim_saga("alive", "someone", now() + timedelta(minutes=5), now())
    CALLS.clear()
    with pytest.raises(SagaInProgressError, match="someone"):
        await SagaExecutor(partial, store=store).unpark("alive", compensate=True)
    assert CALLS == {}
    stored = await store.get_saga("alive")
    assert stored is not None
    assert stored.status is SagaStatus.RUNNING
