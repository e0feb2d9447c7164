"""The LLM runner and approvals on every store (API.md §9): a model's call that needs a person ends the run WAITING;
run again after the decision, an approved call runs once, a rejected one is told to the model, and the loop goes on.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from saga_runtime import LLMRunner, MockLLMClient, PlanPolicy, SagaExecutor, SagaStatus, StepStatus, ToolRegistry

from .conftest import Stores

RAN: Counter[str] = Counter()

registry = ToolRegistry()


@registry.tool(approval=True)
class RefundCard:
    """Refund a card payment."""

    async def execute(self, order_id: str, amount_cents: int) -> dict[str, Any]:
        RAN["RefundCard"] += 1
        return {"refunded": amount_cents}


@registry.tool
class LookUpOrder:
    """Look an order up."""

    async def execute(self, order_id: str) -> dict[str, Any]:
        RAN["LookUpOrder"] += 1
        return {"order_id": order_id, "paid_cents": 90000}


SCRIPT: list[Any] = [("LookUpOrder", {"order_id": "A7"}), ("RefundCard", {"order_id": "A7", "amount_cents": 90000})]
PROMPT = "refund order A7 in full"


@pytest.fixture(autouse=True)
def _count_from_zero() -> None:
    """Count every test's tool calls from zero."""
    RAN.clear()


def tool_messages(client: MockLLMClient) -> list[dict[str, Any]]:
    """Return the tool results the model was sent in its last request."""
    return [json.loads(m["content"]) for m in client.requests[-1]["messages"] if m.get("role") == "tool"]


async def test_an_approved_call_runs_once_when_the_run_goes_on(stores: Stores, kind: str) -> None:
    """The run ends WAITING at the refund (answer recorded); approved and run again, it refunds once and finishes."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    client = MockLLMClient(tool_sequence=SCRIPT, final_answer="Refunded.")
    runner = LLMRunner(client, "mock-1", registry, executor)
    waiting = await runner.run(PROMPT, saga_id="agent")
    assert waiting.status is SagaStatus.WAITING
    (request,) = waiting.pending_approvals
    assert (request.tool_name, request.args) == ("RefundCard", {"order_id": "A7", "amount_cents": 90000})
    assert RAN == {"LookUpOrder": 1}
    assert len(client.requests) == 2

    await executor.approve("agent", request.step_id, by="alice")
    done = await runner.run(PROMPT, saga_id="agent")
    assert done.status is SagaStatus.SUCCESS
    assert done.metadata["answer"] == "Refunded."
    assert RAN == {"LookUpOrder": 1, "RefundCard": 1}
    assert len(client.requests) == 3  # the recorded answers were not asked for again
    assert tool_messages(client)[-1] == {"result": {"refunded": 90000}}
    assert await store.verify_saga("agent")


async def test_a_rejected_call_is_told_to_the_model_and_the_loop_goes_on(stores: Stores, kind: str) -> None:
    """Rejected, the refund never runs; the model gets who refused it and why as the call's result, and answers."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    client = MockLLMClient(tool_sequence=SCRIPT, final_answer="I could not refund it.")
    runner = LLMRunner(client, "mock-1", registry, executor)
    waiting = await runner.run(PROMPT, saga_id="agent")
    await executor.reject("agent", waiting.pending_approvals[0].step_id, by="bob", note="over the limit")
    done = await runner.run(PROMPT, saga_id="agent")
    assert done.status is SagaStatus.SUCCESS
    assert done.metadata["answer"] == "I could not refund it."
    assert [s.status for s in done.steps] == [StepStatus.SUCCESS, StepStatus.REJECTED]
    assert RAN == {"LookUpOrder": 1}
    assert tool_messages(client)[-1] == {"error": "refused by bob: over the limit; the call was not made"}


async def test_a_policy_gates_the_models_calls_of_a_tool(stores: Stores, kind: str) -> None:
    """LLMRunner(policy=PlanPolicy(approval_required=...)) makes the model's calls of that tool wait."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry, store=store)
    client = MockLLMClient(tool_sequence=SCRIPT[:1], final_answer="Found it.")
    policy = PlanPolicy(approval_required={"LookUpOrder"})
    runner = LLMRunner(client, "mock-1", registry, executor, policy=policy)
    waiting = await runner.run(PROMPT, saga_id="agent")
    assert waiting.status is SagaStatus.WAITING
    assert RAN == {}
    await executor.approve("agent", waiting.pending_approvals[0].step_id, by="alice")
    assert (await runner.run(PROMPT, saga_id="agent")).status is SagaStatus.SUCCESS
    assert RAN == {"LookUpOrder": 1}
