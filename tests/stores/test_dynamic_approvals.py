"""Approvals in dynamic sagas on every store (API.md §9): the call waits, the saga is re-entered, and it runs once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from saga_runtime import (
    ApprovalPendingError,
    ApprovalRejectedError,
    SagaExecutor,
    SagaStatus,
    StepStatus,
    ToolRegistry,
)

from .conftest import Stores

RAN: Counter[str] = Counter()

registry = ToolRegistry()


@registry.tool
class Book:
    async def execute(self, what: str) -> dict[str, str]:
        RAN["Book"] += 1
        return {"booked": what}

    async def compensate(self, result: Any) -> None:
        RAN["unbook"] += 1


@registry.tool(approval=True)
class Refund:
    async def execute(self, amount: int) -> dict[str, int]:
        RAN["Refund"] += 1
        return {"refunded": amount}

    async def compensate(self, result: Any) -> None:
        RAN["unrefund"] += 1


@registry.tool
class Email:
    async def execute(self, to: str) -> str:
        RAN["Email"] += 1
        return to


@pytest.fixture(autouse=True)
def _count_from_zero() -> None:
    """Count every test's tool calls from zero."""
    RAN.clear()


async def agent(executor: SagaExecutor, saga_id: str = "chat") -> Any:
    """Book, then refund (needs approval), then book again; return the refund's result."""
    async with executor.saga(saga_id=saga_id) as saga:
        await saga.call("Book", what="hotel")
        refund = await saga.call("Refund", amount=9000)
        await saga.call("Book", what="taxi")
    return refund


async def test_a_call_waits_and_runs_once_after_approval_on_re_entry(stores: Stores, kind: str) -> None:
    """The call raises ApprovalPendingError (saga WAITING, nothing undone); re-entered after the decision it runs."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    with pytest.raises(ApprovalPendingError) as caught:
        await agent(executor)
    error = caught.value
    assert (error.saga_id, error.step_id, error.tool_name, error.arguments) == (
        "chat",
        "Refund-1",
        "Refund",
        {"amount": 9000},
    )
    waiting = await store.get_saga("chat")
    assert waiting is not None
    assert waiting.status is SagaStatus.WAITING
    assert [s.status for s in waiting.steps] == [StepStatus.SUCCESS, StepStatus.WAITING]
    assert RAN == {"Book": 1}

    with pytest.raises(ApprovalPendingError, match="Refund-1"):
        await agent(executor)  # re-entered before the decision: the same call waits again
    assert RAN == {"Book": 1}

    recorded = await executor.approve("chat", "Refund-1", by="alice")
    assert recorded.status is SagaStatus.WAITING  # a dynamic saga: only the decision is recorded
    assert RAN == {"Book": 1}
    assert await agent(executor) == {"refunded": 9000}
    assert RAN == {"Book": 2, "Refund": 1}
    done = await store.get_saga("chat")
    assert done is not None
    assert done.status is SagaStatus.SUCCESS
    assert done.approvals[0].decided_by == "alice"
    assert await store.verify_saga("chat")


async def test_a_rejected_call_raises_and_the_code_may_go_on(stores: Stores, kind: str) -> None:
    """Rejected, the call raises ApprovalRejectedError (by, note) on re-entry; caught, the saga goes on."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    with pytest.raises(ApprovalPendingError):
        await agent(executor)
    await executor.reject("chat", "Refund-1", by="bob", note="over the limit")
    async with executor.saga(saga_id="chat") as saga:
        await saga.call("Book", what="hotel")
        with pytest.raises(ApprovalRejectedError) as caught:
            await saga.call("Refund", amount=9000)
        assert (caught.value.by, caught.value.note) == ("bob", "over the limit")
        await saga.call("Email", to="customer")
    assert saga.result is not None
    assert saga.result.status is SagaStatus.SUCCESS
    assert [s.status for s in saga.result.steps] == [StepStatus.SUCCESS, StepStatus.REJECTED, StepStatus.SUCCESS]
    assert RAN == {"Book": 1, "Email": 1}
    assert await store.verify_saga("chat")

    async with executor.saga(saga_id="chat") as replayed:  # finished: served from the record, refused again
        await replayed.call("Book", what="hotel")
        with pytest.raises(ApprovalRejectedError, match="rejected by bob"):
            await replayed.call("Refund", amount=9000)
    assert RAN == {"Book": 1, "Email": 1}


async def test_a_rejection_left_uncaught_compensates_the_calls_before_it(stores: Stores, kind: str) -> None:
    """ApprovalRejectedError leaving the block compensates the calls that ran; the refused one never ran."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    with pytest.raises(ApprovalPendingError):
        await agent(executor)
    await executor.reject("chat", "Refund-1", by="bob")
    with pytest.raises(ApprovalRejectedError):
        await agent(executor)
    result = await store.get_saga("chat")
    assert result is not None
    assert result.status is SagaStatus.COMPENSATED
    assert [s.status for s in result.steps] == [StepStatus.COMPENSATED, StepStatus.REJECTED]
    assert RAN == {"Book": 1, "unbook": 1}


async def test_approval_required_gates_a_tool_and_a_group_keeps_its_other_calls(stores: Stores, kind: str) -> None:
    """executor.saga(approval_required=...) gates a tool; with return_exceptions a refused call takes its slot."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)

    async def turn() -> list[Any]:
        async with executor.saga(saga_id="turn", approval_required={"Email"}) as saga:
            outcomes: list[Any] = await saga.group(
                [("Email", {"to": "a"}), ("Book", {"what": "b"})], return_exceptions=True
            )
        return outcomes

    with pytest.raises(ApprovalPendingError, match="Email-0"):
        await turn()
    assert RAN == {}  # nothing of the group ran
    await executor.reject("turn", "Email-0", by="carol")
    refused, booked = await turn()
    assert isinstance(refused, ApprovalRejectedError)
    assert refused.by == "carol"
    assert booked == {"booked": "b"}
    assert RAN == {"Book": 1}
