"""Tool versions (API §15): recorded per step, and checked by every path that resumes a saga (issue 26)."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from saga_runtime import (
    PlanValidationError,
    SagaAdmin,
    SagaExecutor,
    SagaStatus,
    StepContext,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaRow, StepRow, idempotency_key, now, seal_all

from .conftest import Stores

CALLS: Counter[str] = Counter()


def charge_tool(version: str = "1", compatible: tuple[str, ...] = (), *, renamed: bool = False) -> ToolRegistry:
    """Return a registry whose Charge tool is at `version` (with `renamed`, its argument is `cents`)."""
    registry = ToolRegistry()

    class Charge:
        async def execute(self, amount: int, ctx: StepContext) -> dict[str, Any]:
            CALLS[f"charge v{version}"] += 1
            return {"amount": amount}

        async def compensate(self, result: dict[str, Any] | None) -> None:
            CALLS[f"refund v{version}"] += 1

    class RenamedCharge:
        async def execute(self, cents: int) -> dict[str, Any]:
            CALLS[f"charge v{version}"] += 1
            return {"amount": cents}

        async def compensate(self, result: dict[str, Any] | None) -> None:
            CALLS[f"refund v{version}"] += 1

    tool = RenamedCharge() if renamed else Charge()
    registry.register(tool, name="Charge", version=version, compatible=compatible)
    return registry


PLAN = [
    {"id": "first", "tool": "Charge", "args": {"amount": 9}},
    {"id": "second", "tool": "Charge", "args": {"amount": 1}},
]


async def orphan(store: Any, saga_id: str, registry: ToolRegistry) -> None:
    """Store a saga, planned with `registry`, whose owner died after its first step succeeded."""
    planned = build_plan(PLAN, registry)
    started = now() - timedelta(minutes=5)
    saga = SagaRow(
        saga_id, "plan", planned.to_json(), planned.digest, SagaStatus.RUNNING, started, started, owner="dead",
        lease_expires_at=started,
    )  # fmt: skip
    step = planned.steps[0]
    row = StepRow(saga_id, 0, "first", 0, "Charge", {"amount": 9}, idempotency_key(saga_id, "first"))
    row.status, row.attempts, row.started_at, row.finished_at = StepStatus.SUCCESS, 1, started, started
    row.result, row.tool_version = {"amount": 9}, step.version
    seal_all([row], None)
    assert await store.create_saga(saga, [row]) is None


async def test_every_step_records_its_tools_version(stores: Stores, kind: str) -> None:
    """StepRecord.tool_version is the version of the tool each step was planned with, as stored and read back."""
    store = await stores.open(kind, wipe=True)
    result = await SagaExecutor(charge_tool("2"), store=store).run(PLAN, saga_id="v2")
    assert result.status is SagaStatus.SUCCESS
    stored = await store.get_saga("v2")
    assert stored is not None
    assert [step.tool_version for step in stored.steps] == ["2", "2"]
    assert not any(step.reconciled for step in stored.steps)
    assert await store.verify_saga("v2")
    default = await SagaExecutor(charge_tool(), store=store).run(PLAN, saga_id="v1")
    assert [step.tool_version for step in default.steps] == ["1", "1"]


async def test_a_finished_sagas_id_still_returns_its_result_after_an_upgrade(stores: Stores, kind: str) -> None:
    """Running a finished saga's id again with the same plan under a new tool version calls nothing, no conflict."""
    store = await stores.open(kind, wipe=True)
    CALLS.clear()
    first = await SagaExecutor(charge_tool("1"), store=store).run(PLAN, saga_id="again")
    again = await SagaExecutor(charge_tool("2", ("1",)), store=store).run(PLAN, saga_id="again")
    assert again.status is SagaStatus.SUCCESS
    assert again.steps == first.steps
    assert CALLS == {"charge v1": 2}


async def test_recovery_leaves_a_saga_of_an_incompatible_version_and_logs_it(
    stores: Stores, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose tool does not accept the recorded version leaves the saga, unparked; a compatible one runs it."""
    store = await stores.open(kind, wipe=True)
    await orphan(store, "old", charge_tool("1"))
    CALLS.clear()
    worker = SagaExecutor(charge_tool("2"), store=store)
    with caplog.at_level(logging.WARNING, logger="saga_runtime"):
        for _ in range(3):
            assert await worker.recover() == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "Charge" in r.getMessage()]
    assert len(warnings) == 1
    assert "recorded under version '1'" in warnings[0]
    assert "version '2'" in warnings[0]
    stored = await store.get_saga("old")
    assert stored is not None
    assert stored.status is SagaStatus.RUNNING
    assert "version '1'" in (stored.error or "")
    assert stored.waiting_for is not None
    assert stored.waiting_for["kind"] == "version"
    assert "recorded under version '1'" in stored.waiting_for["detail"]
    assert CALLS == {}
    assert await store.list_sagas(status=SagaStatus.PARKED) == []
    (done,) = await SagaExecutor(charge_tool("2", ("1",)), store=store).recover()
    assert done.status is SagaStatus.SUCCESS
    assert CALLS == {"charge v2": 1}
    assert [step.tool_version for step in done.steps] == ["1", "2"]  # each the version that ran it
    assert await store.verify_saga("old")


async def test_arguments_of_an_accepted_older_version_that_no_longer_fit_leave_the_saga(
    stores: Stores, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Version 2 accepts version 1 but renamed its argument: the saga is left and logged before anything runs."""
    store = await stores.open(kind, wipe=True)
    await orphan(store, "renamed", charge_tool("1"))
    CALLS.clear()
    worker = SagaExecutor(charge_tool("2", ("1",), renamed=True), store=store)
    with caplog.at_level(logging.WARNING, logger="saga_runtime"):
        assert await worker.recover() == []
    assert any("'amount'" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    stored = await store.get_saga("renamed")
    assert stored is not None
    assert stored.status is SagaStatus.RUNNING
    assert CALLS == {}
    (done,) = await SagaExecutor(charge_tool("1"), store=store).recover()
    assert done.status is SagaStatus.SUCCESS


async def test_unpark_and_retry_compensation_leave_an_incompatible_version_to_another_worker(
    stores: Stores, kind: str
) -> None:
    """Compensating through unpark with a tool of another version undoes nothing with it: the step says why."""
    store = await stores.open(kind, wipe=True)
    await orphan(store, "stuck", charge_tool("1"))
    await SagaExecutor(charge_tool("2"), store=store).recover()
    CALLS.clear()
    result = await SagaAdmin(store, registry=charge_tool("2")).unpark("stuck", compensate=True)
    assert result is not None
    assert CALLS == {}
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert "another version" in (result.step("first").compensation_error or "")
    retried = await SagaExecutor(charge_tool("2"), store=store).retry_compensation("stuck")
    assert retried.status is SagaStatus.COMPENSATING  # reopened, left for a worker with version 1
    assert CALLS == {}
    (done,) = await SagaExecutor(charge_tool("1"), store=store).recover()
    assert done.status is SagaStatus.COMPENSATED
    assert CALLS == {"refund v1": 1}


async def test_an_argument_renamed_without_a_new_version_parks_saying_what_ran(stores: Stores, kind: str) -> None:
    """The parked message names the refused argument and never says nothing was stored or run: a step had run."""
    store = await stores.open(kind, wipe=True)
    await orphan(store, "same", charge_tool("1"))
    CALLS.clear()
    worker = SagaExecutor(charge_tool("1", renamed=True), store=store)
    (parked,) = await worker.recover()
    assert parked.status is SagaStatus.PARKED
    assert "nothing was stored" not in (parked.error or "")
    assert "'amount'" in (parked.error or "")
    assert "1 step(s) of it ran already" in (parked.error or "")
    assert CALLS == {}


def test_a_version_that_is_not_a_string_is_refused_at_registration() -> None:
    """version=2 or compatible="1" raise TypeError naming the value, and nothing is registered."""
    registry = ToolRegistry()

    class Tool:
        def execute(self) -> None:
            return None

    with pytest.raises(TypeError, match="version must be a string"):
        registry.register(Tool(), version=2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="compatible"):
        registry.register(Tool(), version="2", compatible="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        registry.register(Tool(), version="")
    assert len(registry) == 0


def test_a_plan_naming_a_version_the_tool_does_not_accept_is_refused() -> None:
    """A step's "version" must be one its tool accepts; otherwise PlanValidationError and nothing runs."""
    with pytest.raises(PlanValidationError, match="does not accept"):
        build_plan([{"tool": "Charge", "args": {"amount": 1}, "version": "0"}], charge_tool("2", ("1",)))
    plan = build_plan([{"tool": "Charge", "args": {"amount": 1}, "version": "1"}], charge_tool("2", ("1",)))
    assert plan.steps[0].version == "1"


async def test_approve_with_resume_leaves_a_saga_of_an_incompatible_version(stores: Stores, kind: str) -> None:
    """An approval decided on a worker of another version is recorded; the saga waits for a worker that accepts it."""
    store = await stores.open(kind, wipe=True)
    old = charge_tool("1")
    gated = [{"id": "first", "tool": "Charge", "args": {"amount": 3}, "approval": True}]
    CALLS.clear()
    waiting = await SagaExecutor(old, store=store).run(gated, saga_id="gated")
    assert waiting.status is SagaStatus.WAITING
    left = await SagaExecutor(charge_tool("2"), store=store).approve("gated", "first", by="alice")
    assert left.status is SagaStatus.WAITING
    assert left.approvals[0].decision == "approved"
    assert CALLS == {}
    (done,) = await SagaExecutor(charge_tool("2", ("1",)), store=store).recover()
    assert done.status is SagaStatus.SUCCESS
    assert CALLS == {"charge v2": 1}
