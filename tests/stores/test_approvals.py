"""Approvals on every store (API.md §9): a step that waits for a person runs once, after a yes, and never after a no.

Each test counts how often each tool ran: a decision is consumed once, whatever runs twice around it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from saga_runtime import (
    ApprovalError,
    PlanPolicy,
    SagaEvent,
    SagaExecutor,
    SagaStatus,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._records import args_digest

from .conftest import Stores, sqlite_query

RAN: Counter[str] = Counter()

registry = ToolRegistry()


@registry.tool
class Charge:
    async def execute(self, amount: int) -> dict[str, int]:
        RAN["Charge"] += 1
        return {"charged": amount}

    async def compensate(self, result: Any) -> None:
        RAN["refund"] += 1


@registry.tool(approval=True, approval_timeout=3600)
class Wire:
    async def execute(self, iban: str, amount: int) -> dict[str, str]:
        RAN["Wire"] += 1
        return {"wired": iban}

    async def compensate(self, result: Any) -> None:
        RAN["unwire"] += 1


@registry.tool(approval=True, approval_timeout=0.2)
class Hurry:
    async def execute(self, what: str) -> str:
        RAN["Hurry"] += 1
        return what


@registry.tool
class RefundCard:
    async def execute(self, amount: int) -> dict[str, int]:
        RAN["RefundCard"] += 1
        return {"refunded": amount}


PLAN = [
    {"id": "charge", "tool": "Charge", "args": {"amount": 500}},
    {"id": "wire", "tool": "Wire", "args": {"iban": "DE00 1234", "amount": {"$ref": "charge.charged"}}},
    {"id": "after", "tool": "Charge", "args": {"amount": 1}},
]


@pytest.fixture(autouse=True)
def _count_from_zero() -> None:
    """Count every test's tool calls from zero."""
    RAN.clear()


async def two_handles(stores: Stores, kind: str) -> tuple[Any, Any]:
    """Return two handles on one store: the same object for memory (private to it), two connections otherwise."""
    first = await stores.open(kind, wipe=True)
    if kind == "memory":
        return first, first
    return first, await stores.open(kind)


async def edit_approval(stores: Stores, kind: str, store: Any, sql: str) -> None:
    """Run an UPDATE on the approvals table behind the store's back (memory: edit its row)."""
    if kind == "memory":
        row = store._approvals["pay"]["wire"]
        row.decided_by = "mallory"
    elif kind == "sqlite":
        sqlite_query(stores.url(kind), sql)
    else:
        await stores.execute(kind, stores.url(kind), [sql])


async def test_run_waits_before_the_group_and_approve_runs_it_once(stores: Stores, kind: str) -> None:
    """run() stops WAITING before the gated group, lease released; approve() runs the rest, each tool once."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    result = await executor.run(PLAN, saga_id="pay")
    assert result.status is SagaStatus.WAITING
    assert [s.status for s in result.steps] == [StepStatus.SUCCESS, StepStatus.WAITING, StepStatus.PENDING]
    assert RAN == {"Charge": 1}
    (request,) = result.pending_approvals
    assert (request.step_id, request.tool_name, request.args) == ("wire", "Wire", {"iban": "DE00 1234", "amount": 500})
    assert request.args_digest == args_digest({"iban": "DE00 1234", "amount": 500})
    assert request.deadline is not None
    assert request.decision is None
    stored, _ = await store.load_saga("pay")  # type: ignore[misc]
    assert (stored.owner, stored.lease_expires_at) == (None, None)
    assert await executor.recover() == []  # not an orphan: nothing of it runs
    assert (await executor.run(PLAN, saga_id="pay")).status is SagaStatus.WAITING  # the stored result, no call
    assert RAN == {"Charge": 1}

    done = await executor.approve("pay", "wire", by="alice", note="checked the invoice")
    assert done.status is SagaStatus.SUCCESS
    assert RAN == {"Charge": 2, "Wire": 1}
    (decided,) = done.approvals
    assert (decided.decision, decided.decided_by, decided.note) == ("approved", "alice", "checked the invoice")
    assert done.pending_approvals == []
    assert (await store.get_saga("pay")).approvals == done.approvals  # type: ignore[union-attr]
    assert await store.verify_saga("pay")
    assert (await executor.run(PLAN, saga_id="pay")).status is SagaStatus.SUCCESS
    assert RAN == {"Charge": 2, "Wire": 1}


async def test_reject_ends_the_step_rejected_and_compensates_what_ran(stores: Stores, kind: str) -> None:
    """reject(): the step is REJECTED, never runs, its group and later ones do not run, earlier steps are undone."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    await executor.run(PLAN, saga_id="pay")
    result = await executor.reject("pay", "wire", by="bob", note="wrong account")
    assert result.status is SagaStatus.COMPENSATED
    assert [s.status for s in result.steps] == [StepStatus.COMPENSATED, StepStatus.REJECTED, StepStatus.PENDING]
    assert result.step("wire").error == "rejected by bob: wrong account"
    assert result.error is not None
    assert "rejected by bob" in result.error
    assert RAN == {"Charge": 1, "refund": 1}
    assert result.approvals[0].decision == "rejected"
    assert await store.verify_saga("pay")


async def test_a_request_is_decided_once(stores: Stores, kind: str) -> None:
    """Deciding a request again, either way, raises ApprovalError naming the first decision and changes nothing."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    await executor.run(PLAN, saga_id="pay")
    await executor.approve("pay", "wire", by="alice")
    for again in (executor.approve("pay", "wire", by="carol"), executor.reject("pay", "wire", by="carol")):
        with pytest.raises(ApprovalError, match="approved by alice") as caught:
            await again
        assert (caught.value.decision, caught.value.decided_by) == ("approved", "alice")
    assert RAN == {"Charge": 2, "Wire": 1}
    result = await store.get_saga("pay")
    assert result is not None
    assert result.approvals[0].decided_by == "alice"


async def test_unknown_saga_step_and_wrong_digest_record_nothing(stores: Stores, kind: str) -> None:
    """An unknown saga, a step that waits for nothing, or another args_digest: ApprovalError, nothing recorded."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    result = await executor.run(PLAN, saga_id="pay")
    with pytest.raises(ApprovalError, match="no saga"):
        await executor.approve("nope", "wire", by="alice")
    with pytest.raises(ApprovalError, match="waits for no decision"):
        await executor.approve("pay", "charge", by="alice")
    with pytest.raises(ApprovalError, match="digest"):
        await executor.approve("pay", "wire", by="alice", args_digest=args_digest({"iban": "XX", "amount": 500}))
    with pytest.raises(ApprovalError, match="who decides"):
        await executor.approve("pay", "wire", by="")
    assert (await executor.pending_approvals())[0].decision is None
    assert RAN == {"Charge": 1}
    done = await executor.approve("pay", "wire", by="alice", args_digest=result.pending_approvals[0].args_digest)
    assert done.status is SagaStatus.SUCCESS
    assert RAN == {"Charge": 2, "Wire": 1}


async def test_two_executors_deciding_at_once_record_exactly_one(stores: Stores, kind: str) -> None:
    """An approve and a reject at once, from two executors on two store handles: one wins; Wire runs at most once."""
    one, two = await two_handles(stores, kind)
    first, second = SagaExecutor(registry, store=one), SagaExecutor(registry, store=two)
    approved = 0
    for n in range(3):
        await first.run(PLAN, saga_id=f"pay-{n}")
        outcomes = await asyncio.gather(
            first.approve(f"pay-{n}", "wire", by="alice"),
            second.reject(f"pay-{n}", "wire", by="bob"),
            return_exceptions=True,
        )
        errors = [o for o in outcomes if isinstance(o, ApprovalError)]
        assert len(errors) == 1, outcomes
        final = await one.get_saga(f"pay-{n}")
        assert final is not None
        assert final.status in (SagaStatus.SUCCESS, SagaStatus.COMPENSATED)
        winner = final.approvals[0]
        assert winner.decided_by == errors[0].decided_by
        assert (winner.decision == "approved") is (final.status is SagaStatus.SUCCESS)
        approved += winner.decision == "approved"
    assert Counter({"Charge": 3 + approved, "Wire": approved, "refund": 3 - approved}) == RAN


async def test_two_executors_approving_at_once_run_the_step_once(stores: Stores, kind: str) -> None:
    """Two approvals at once, both resuming, from two executors on two handles: one decision, Wire runs once."""
    one, two = await two_handles(stores, kind)
    first, second = SagaExecutor(registry, store=one), SagaExecutor(registry, store=two)
    await first.run(PLAN, saga_id="pay")
    outcomes = await asyncio.gather(
        first.approve("pay", "wire", by="alice"), second.approve("pay", "wire", by="bob"), return_exceptions=True
    )
    assert sum(isinstance(o, ApprovalError) for o in outcomes) == 1, outcomes
    assert RAN == {"Charge": 2, "Wire": 1}
    final = await one.get_saga("pay")
    assert final is not None
    assert final.status is SagaStatus.SUCCESS


async def test_resume_false_leaves_it_to_a_worker_that_runs_it_once(stores: Stores, kind: str) -> None:
    """approve(resume=False) only records; another executor's recover() then goes on with the saga, once."""
    one, two = await two_handles(stores, kind)
    executor, worker = SagaExecutor(registry, store=one), SagaExecutor(registry, store=two)
    await executor.run(PLAN, saga_id="pay")
    recorded = await executor.approve("pay", "wire", by="alice", resume=False)
    assert recorded.status is SagaStatus.WAITING
    assert recorded.approvals[0].decision == "approved"
    assert RAN == {"Charge": 1}
    assert await executor.pending_approvals() == []
    results = await asyncio.gather(worker.recover(), executor.recover())
    assert [r.status for batch in results for r in batch] == [SagaStatus.SUCCESS]
    assert RAN == {"Charge": 2, "Wire": 1}
    assert await worker.recover() == []


async def test_the_deadline_rejects_a_request_and_recovery_goes_on(stores: Stores, kind: str) -> None:
    """A request past its deadline cannot be approved; recover() rejects it (by "deadline") and compensates."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    plan = [
        {"id": "charge", "tool": "Charge", "args": {"amount": 5}},
        {"id": "hurry", "tool": "Hurry", "args": {"what": "x"}},
    ]
    await executor.run(plan, saga_id="late")
    await asyncio.sleep(0.3)
    with pytest.raises(ApprovalError, match="deadline"):
        await executor.approve("late", "hurry", by="alice")
    (result,) = await executor.recover()
    assert result.status is SagaStatus.COMPENSATED
    assert result.step("hurry").status is StepStatus.REJECTED
    assert (result.approvals[0].decision, result.approvals[0].decided_by) == ("rejected", "deadline")
    assert RAN == {"Charge": 1, "refund": 1}
    assert await store.verify_saga("late")


async def test_a_group_goes_on_once_every_request_of_it_is_decided(stores: Stores, kind: str) -> None:
    """Two gated steps in one group: the first approval only records; the second runs the group, each once."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    plan = [
        [
            {"id": "a", "tool": "Wire", "args": {"iban": "A", "amount": 1}},
            {"id": "b", "tool": "Wire", "args": {"iban": "B", "amount": 2}},
            {"id": "c", "tool": "Charge", "args": {"amount": 3}},
        ]
    ]
    result = await executor.run(plan, saga_id="two")
    assert [s.status for s in result.steps] == [StepStatus.WAITING, StepStatus.WAITING, StepStatus.PENDING]
    assert [s.attempts for s in result.steps] == [0, 0, 0]
    assert (await executor.approve("two", "a", by="alice")).status is SagaStatus.WAITING
    assert RAN == {}
    assert (await executor.approve("two", "b", by="alice")).status is SagaStatus.SUCCESS
    assert RAN == {"Wire": 2, "Charge": 1}


async def test_a_policy_gates_a_tool_without_changing_it(stores: Stores, kind: str) -> None:
    """PlanPolicy(approval_required=...) makes that tool's calls wait; recovery knows it without the policy."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    plan = [{"id": "refund", "tool": "RefundCard", "args": {"amount": 9000}}]
    result = await executor.run(plan, saga_id="r", policy=PlanPolicy(approval_required={"RefundCard"}))
    assert result.status is SagaStatus.WAITING
    assert result.pending_approvals[0].tool_name == "RefundCard"
    assert RAN == {}
    await executor.approve("r", "refund", by="alice", resume=False)
    (done,) = await SagaExecutor(registry, store=store).recover()
    assert done.status is SagaStatus.SUCCESS
    assert RAN == {"RefundCard": 1}


async def test_pending_approvals_lists_undecided_requests_oldest_first(stores: Stores, kind: str) -> None:
    """executor.pending_approvals() lists the undecided requests across sagas, oldest first, up to `limit`."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    for n in range(3):
        await executor.run(PLAN, saga_id=f"pay-{n}")
    await executor.approve("pay-1", "wire", by="alice")
    pending = await executor.pending_approvals()
    assert [(p.saga_id, p.step_id) for p in pending] == [("pay-0", "wire"), ("pay-2", "wire")]
    assert [p.saga_id for p in await executor.pending_approvals(limit=1)] == ["pay-0"]


async def test_an_edited_decision_breaks_the_record(stores: Stores, kind: str) -> None:
    """The decision is sealed into the saga's record: editing who approved makes verify_saga fail."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    await executor.run(PLAN, saga_id="pay")
    await executor.approve("pay", "wire", by="alice")
    assert await store.verify_saga("pay")
    await edit_approval(stores, kind, store, "UPDATE approvals SET decided_by = 'mallory'")
    verdict = await store.verify_saga("pay")
    assert not verdict
    assert any("approval of step 'wire'" in problem for problem in verdict.problems)


async def test_hooks_hear_each_request_and_decision_once_stored(stores: Stores, kind: str) -> None:
    """approval_requested and approval_decided are each emitted once, after what they report is stored."""
    store = await stores.open(kind, wipe=True)
    seen: list[tuple[str, Any, Any]] = []

    def hook(event: SagaEvent) -> None:
        if event.kind.startswith("approval"):
            seen.append((event.kind, event.step_id, event.decided_by))

    executor = SagaExecutor(registry, store=store, hooks=[hook])
    await executor.run(PLAN, saga_id="pay")
    assert seen == [("approval_requested", "wire", None)]
    assert (await executor.pending_approvals())[0].step_id == "wire"
    await executor.approve("pay", "wire", by="alice")
    assert seen == [("approval_requested", "wire", None), ("approval_decided", "wire", "alice")]


async def test_export_and_import_keep_the_decisions(stores: Stores, kind: str) -> None:
    """An exported saga carries its approval records; imported elsewhere, it reads and verifies the same."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    await executor.run(PLAN, saga_id="pay")
    result = await executor.approve("pay", "wire", by="alice", note="ok")
    document = await store.export_saga("pay")
    assert [a["decided_by"] for a in document["approvals"]] == ["alice"]
    other = await stores.open("memory")
    await other.import_saga(document)
    await other.import_saga(document)  # the same again: nothing changes
    imported = await other.get_saga("pay")
    assert imported is not None
    assert imported.approvals == result.approvals
    assert await other.verify_saga("pay")
