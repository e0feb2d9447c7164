"""LLMRunner: the function-calling loop run as a saga, against the scripted MockLLMClient and duck-typed clients."""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import anyio
import pydantic
import pytest
import shop_tools
from cancelling import cancel_once

from saga_runtime import (
    Budget,
    IdempotencyConflictError,
    LLMRunner,
    MockLLMClient,
    PlanPolicy,
    ReplayDivergenceError,
    RetryPolicy,
    SagaExecutor,
    SagaResult,
    SagaStatus,
    StepStatus,
    ToolRegistry,
)

# A handshake that never completes would hang a broken runner; this bound turns the hang into a failure.
HANDSHAKE = 2.0
MODEL = "mock-1"


class Ledger(shop_tools.Ledger):
    """What the tools of one test did, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.both_started = anyio.Event()
        self.started = 0
        self.hanging = anyio.Event()


def make_registry(ledger: Ledger) -> ToolRegistry:
    """Return a registry of small tools that report to `ledger`."""
    registry = shop_tools.shop_registry(ledger, "Book", "Ship", "Fail", "Spend")

    @registry.tool
    class Meet:
        """Wait until another Meet call has started too (shows that a turn's calls run concurrently)."""

        async def execute(self, who: str) -> str:
            ledger.executed.append(("Meet", who))
            ledger.started += 1
            if ledger.started == 2:
                ledger.both_started.set()
            with anyio.fail_after(HANDSHAKE):
                await ledger.both_started.wait()
            return f"met {who}"

    @registry.tool
    class Hang:
        """Run until cancelled."""

        async def execute(self, what: str) -> None:
            ledger.executed.append(("Hang", what))
            ledger.hanging.set()
            await anyio.sleep_forever()

        async def compensate(self, result: Any) -> None:
            ledger.compensated.append(("Hang", result))

    return registry


class Harness:
    """An OpenAI-compatible client in front of a mock: it snapshots each request, and can raise or hang on a turn."""

    def __init__(
        self,
        mock: MockLLMClient,
        *,
        turn: int | None = None,
        error: Exception | None = None,
    ) -> None:
        self.mock = mock
        self.turn = turn
        self.error = error
        self.sent: list[dict[str, Any]] = []
        self.waiting = anyio.Event()
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    async def create(self, **request: Any) -> Any:
        """Answer as the mock does, keeping a copy of what was sent at the time it was sent."""
        turn = len(self.sent)
        self.sent.append(copy.deepcopy(request))
        if turn == self.turn:
            if self.error is not None:
                raise self.error
            self.waiting.set()
            await anyio.sleep_forever()
        return await self.mock.chat.completions.create(**request)


@pytest.fixture
def ledger() -> Ledger:
    """Return a fresh ledger."""
    return Ledger()


@pytest.fixture
def registry(ledger: Ledger) -> ToolRegistry:
    """Return the ledger's tools."""
    return make_registry(ledger)


@pytest.fixture
def executor(registry: ToolRegistry) -> SagaExecutor:
    """Return an executor over a private memory store."""
    return SagaExecutor(registry)


def statuses(result: SagaResult) -> dict[str, StepStatus]:
    """Return each step's status by step id."""
    return {step.step_id: step.status for step in result.steps}


def tool_replies(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the decoded content of every tool message, by tool_call_id."""
    return {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


# -- the loop --------------------------------------------------------------------------------------------------


async def test_sequential_turns_run_each_call_then_end_with_the_answer(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """Each turn's call runs as its own group under the provider's call id; the text answer ends a SUCCESS saga."""
    mock = MockLLMClient(
        tool_sequence=[("Book", {"item": "desk"}), ("Ship", {"to": "Seoul"})], final_answer="Booked and shipped."
    )
    result = await LLMRunner(mock, MODEL, registry, executor).run("Buy me a desk", saga_id="chat-1")

    assert result.status is SagaStatus.SUCCESS
    assert result.error is None
    assert result.metadata["answer"] == "Booked and shipped."
    assert result.metadata["turns"] == 3
    assert result.metadata["model"] == MODEL
    assert result.metadata["prompt"] == "Buy me a desk"
    assert [(s.step_id, s.group, s.tool_name) for s in result.steps] == [
        ("call_0_0", 0, "Book"),
        ("call_1_0", 1, "Ship"),
    ]
    assert result.result_of("call_1_0") == {"tracking": "T-Seoul"}
    assert ledger.executed == [("Book", "desk"), ("Ship", "Seoul")]
    assert ledger.compensated == []
    assert len(mock.requests) == 3
    stored = await executor.store.get_saga("chat-1")
    assert stored is not None
    assert stored.status is SagaStatus.SUCCESS
    assert stored.metadata["answer"] == "Booked and shipped."


async def test_each_turn_sends_the_assistant_tool_calls_and_their_results_by_id(
    executor: SagaExecutor, registry: ToolRegistry
) -> None:
    """The messages of turn n+1 hold turn n's assistant tool_calls and one tool message per call id, with results."""
    mock = MockLLMClient(tool_sequence=[("Book", {"item": "desk"}), ("Ship", {"to": "Seoul"})])
    client = Harness(mock)
    await LLMRunner(client, MODEL, registry, executor, system="You book things.").run("Buy me a desk")

    first, second, third = (request["messages"] for request in client.sent)
    assert first == [{"role": "system", "content": "You book things."}, {"role": "user", "content": "Buy me a desk"}]
    assert second[:2] == first
    assert second[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_0_0", "type": "function", "function": {"name": "Book", "arguments": '{"item": "desk"}'}}
        ],
    }
    assert second[3] == {
        "role": "tool",
        "tool_call_id": "call_0_0",
        "content": json.dumps({"result": {"booked": "desk"}}),
    }
    assert len(second) == 4
    assert third[:4] == second
    assert third[4]["tool_calls"][0]["id"] == "call_1_0"
    assert third[4]["tool_calls"][0]["function"]["name"] == "Ship"
    assert third[5:] == [
        {"role": "tool", "tool_call_id": "call_1_0", "content": json.dumps({"result": {"tracking": "T-Seoul"}})}
    ]
    assert all(request["model"] == MODEL for request in client.sent)


async def test_a_turn_of_parallel_calls_runs_as_one_concurrent_group(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """The calls of one turn run concurrently in one group, and each result goes back under its own call id."""
    mock = MockLLMClient(tool_sequence=[[("Meet", {"who": "ana"}), ("Meet", {"who": "bo"})], ("Book", {"item": "x"})])
    client = Harness(mock)
    result = await LLMRunner(client, MODEL, registry, executor).run("Meet both")

    assert result.status is SagaStatus.SUCCESS, result.error
    assert [(s.step_id, s.group) for s in result.steps] == [("call_0_0", 0), ("call_0_1", 0), ("call_1_0", 1)]
    messages = client.sent[1]["messages"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_0_0", "call_0_1"]
    assert [m["tool_call_id"] for m in messages[2:]] == ["call_0_0", "call_0_1"]
    assert tool_replies(messages) == {"call_0_0": {"result": "met ana"}, "call_0_1": {"result": "met bo"}}


async def test_the_tools_sent_are_the_registry_definitions(executor: SagaExecutor, registry: ToolRegistry) -> None:
    """Every request carries registry.to_openai_tools(), or its strict form with strict_tools=True."""
    loose = MockLLMClient(tool_sequence=[("Book", {"item": "x"})])
    await LLMRunner(loose, MODEL, registry, executor).run("go")
    strict = MockLLMClient(tool_sequence=[("Book", {"item": "y"})])
    await LLMRunner(strict, MODEL, registry, executor, strict_tools=True).run("go")

    assert [r["tools"] for r in loose.requests] == [registry.to_openai_tools()] * 2
    assert [r["tools"] for r in strict.requests] == [registry.to_openai_tools(strict=True)] * 2
    assert registry.to_openai_tools() != registry.to_openai_tools(strict=True)


async def test_mock_requests_keep_what_each_turn_sent(executor: SagaExecutor, registry: ToolRegistry) -> None:
    """MockLLMClient.requests[n] holds the messages as they were when turn n was asked, not as they grew later."""
    mock = MockLLMClient(tool_sequence=[("Book", {"item": "desk"})])
    await LLMRunner(mock, MODEL, registry, executor).run("Buy me a desk")

    assert [len(r["messages"]) for r in mock.requests] == [1, 3]


async def test_a_failed_tool_is_reported_to_the_model_and_the_loop_goes_on(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """A tool's error goes back as {"error": ...} under its call id, its sibling's result too, and the loop goes on."""
    mock = MockLLMClient(
        tool_sequence=[[("Book", {"item": "desk"}), ("Fail", {"reason": "out of stock"})], ("Ship", {"to": "Seoul"})],
        final_answer="The desk is on its way; the other item was out of stock.",
    )
    client = Harness(mock)
    result = await LLMRunner(client, MODEL, registry, executor).run("Buy two things")

    assert result.status is SagaStatus.SUCCESS
    assert result.metadata["answer"].startswith("The desk is on its way")
    assert statuses(result) == {
        "call_0_0": StepStatus.SUCCESS,
        "call_0_1": StepStatus.FAILED,
        "call_1_0": StepStatus.SUCCESS,
    }
    replies = tool_replies(client.sent[1]["messages"])
    assert replies["call_0_0"] == {"result": {"booked": "desk"}}
    assert set(replies["call_0_1"]) == {"error"}
    assert "ValueError: out of stock" in replies["call_0_1"]["error"]
    assert ledger.compensated == []


async def test_a_sync_client_is_called_in_a_worker_thread(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """A sync client (MockLLMClient(sync=True)) works, each call made off the event loop's thread."""
    mock = MockLLMClient(tool_sequence=[("Book", {"item": "desk"})], final_answer="Sync done.", sync=True)
    threads: list[int] = []
    create = mock.chat.completions.create

    def spy(**request: Any) -> Any:
        threads.append(threading.get_ident())
        return create(**request)

    mock.chat.completions.create = spy  # type: ignore[method-assign]
    result = await LLMRunner(mock, MODEL, registry, executor).run("go")

    assert result.status is SagaStatus.SUCCESS
    assert result.metadata["answer"] == "Sync done."
    assert ledger.executed == [("Book", "desk")]
    assert len(threads) == 2
    assert threading.get_ident() not in threads


# -- usage and budgets -----------------------------------------------------------------------------------------


async def test_usage_and_cost_are_recorded_per_call_and_summed_into_the_saga(
    executor: SagaExecutor, registry: ToolRegistry
) -> None:
    """Each model call is recorded (turn, model, tokens, cost from the price table) and charged to cost and tokens."""
    prices = {MODEL: (2.5, 10.0), "other": (100.0, 100.0)}
    mock = MockLLMClient(tool_sequence=[("Book", {"item": "desk"}), [("Ship", {"to": "A"}), ("Ship", {"to": "B"})]])
    result = await LLMRunner(mock, MODEL, registry, executor, prices=prices).run("go", saga_id="priced")

    calls = result.metadata["llm_calls"]
    assert [c["turn"] for c in calls] == [0, 1, 2]
    assert {c["model"] for c in calls} == {MODEL}
    for call in calls:
        assert set(call) == {
            "turn",
            "model",
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "cost",
            "finish_reason",
            "refusal",
        }
        assert call["prompt_tokens"] > 0
        assert call["completion_tokens"] > 0
        assert call["cost"] == pytest.approx((call["prompt_tokens"] * 2.5 + call["completion_tokens"] * 10.0) / 1e6)
    assert calls[2]["prompt_tokens"] > calls[1]["prompt_tokens"] > calls[0]["prompt_tokens"]  # the history grows
    assert [c["finish_reason"] for c in calls] == ["tool_calls", "tool_calls", "stop"]
    assert [c["refusal"] for c in calls] == [None, None, None]
    assert result.cost == pytest.approx(sum(c["cost"] for c in calls))
    assert result.tokens == sum(c["prompt_tokens"] + c["completion_tokens"] for c in calls)
    stored = await executor.store.get_saga("priced")
    assert stored is not None
    assert stored.metadata["llm_calls"] == calls
    assert stored.cost == pytest.approx(result.cost)
    assert stored.tokens == result.tokens


async def test_a_model_missing_from_the_price_table_costs_nothing_but_counts_tokens(
    executor: SagaExecutor, registry: ToolRegistry
) -> None:
    """Without a price for the runner's model, each call costs 0 while its tokens are still counted."""
    mock = MockLLMClient(tool_sequence=[("Book", {"item": "desk"})])
    runner = LLMRunner(mock, MODEL, registry, executor, prices={"someone-else": (1.0, 1.0)})
    result = await runner.run("go")

    assert [c["cost"] for c in result.metadata["llm_calls"]] == [0.0, 0.0]
    assert result.cost == 0
    assert result.tokens > 0
    assert runner.cost_of(1_000_000, 1_000_000) == 0


async def test_a_budget_crossed_by_model_costs_fails_the_loop_and_compensates_in_reverse(
    registry: ToolRegistry, ledger: Ledger
) -> None:
    """The model call whose cost crosses the Budget ends the loop: every call is undone in reverse, run() returns."""
    prices = {MODEL: (1_000.0, 1_000.0)}
    script = [("Book", {"item": "desk"}), ("Ship", {"to": "Seoul"})]
    dry = await LLMRunner(
        MockLLMClient(tool_sequence=script), MODEL, registry, SagaExecutor(registry), prices=prices
    ).run("go")
    costs = [c["cost"] for c in dry.metadata["llm_calls"]]
    assert len(costs) == 3
    ledger.executed.clear()

    executor = SagaExecutor(registry)
    mock = MockLLMClient(tool_sequence=script)
    budget = Budget(max_cost=costs[0] + costs[1] + costs[2] / 2)  # the third model call crosses it
    result = await LLMRunner(mock, MODEL, registry, executor, prices=prices).run("go", saga_id="b", budget=budget)

    assert result.status is SagaStatus.COMPENSATED
    assert result.error is not None
    assert "BudgetExceededError" in result.error
    assert "answer" not in result.metadata
    assert len(result.metadata["llm_calls"]) == 3  # the call that crossed is recorded too
    assert result.cost == pytest.approx(sum(costs))  # and charged
    assert ledger.executed == [("Book", "desk"), ("Ship", "Seoul")]
    assert ledger.compensated == [("Ship", {"tracking": "T-Seoul"}), ("Book", {"booked": "desk"})]
    assert set(statuses(result).values()) == {StepStatus.COMPENSATED}


async def test_a_tool_charge_crossing_the_budget_fails_the_loop_and_compensates(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """A tool's own charge crossing the Budget is no error for the model: the loop fails and everything is undone."""
    mock = MockLLMClient(tool_sequence=[("Book", {"item": "desk"}), ("Spend", {"usd": 5.0}), ("Ship", {"to": "x"})])
    result = await LLMRunner(mock, MODEL, registry, executor).run("go", budget=Budget(max_cost=1.0))

    assert result.status is SagaStatus.COMPENSATED
    assert result.error is not None
    assert "BudgetExceededError" in result.error
    assert len(mock.requests) == 2  # the model was not asked again after the budget was crossed
    assert ledger.executed == [("Book", "desk"), ("Spend", 5.0)]
    assert ledger.compensated == [("Book", {"booked": "desk"})]
    assert result.cost == pytest.approx(5.0)


# -- how a loop fails ------------------------------------------------------------------------------------------


async def test_no_final_answer_within_max_turns_compensates_in_reverse(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """After max_turns turns of tool calls the loop fails with TurnLimitError: run() returns the undone saga."""
    mock = MockLLMClient(
        tool_sequence=[("Book", {"item": "desk"}), ("Ship", {"to": "Seoul"}), ("Book", {"item": "lamp"})]
    )
    result = await LLMRunner(mock, MODEL, registry, executor).run("go", max_turns=2)

    assert result.status is SagaStatus.COMPENSATED
    assert result.error is not None
    assert "TurnLimitError" in result.error
    assert "max_turns=2" in result.error
    assert len(mock.requests) == 2
    assert ledger.executed == [("Book", "desk"), ("Ship", "Seoul")]
    assert ledger.compensated == [("Ship", {"tracking": "T-Seoul"}), ("Book", {"booked": "desk"})]
    assert len(result.metadata["llm_calls"]) == 2


@pytest.mark.parametrize("max_turns", [0, -1, True, 2.0])
async def test_max_turns_must_be_a_positive_int(executor: SagaExecutor, registry: ToolRegistry, max_turns: Any) -> None:
    """A max_turns that is no positive int is refused before the model is asked or a saga stored."""
    mock = MockLLMClient()
    with pytest.raises(ValueError, match="max_turns"):
        await LLMRunner(mock, MODEL, registry, executor).run("go", max_turns=max_turns)
    assert mock.requests == []


async def test_a_client_raising_mid_loop_compensates_and_run_returns(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """The model's API failing on turn 3 (no retry left) undoes turns 1 and 2 in reverse; run() returns, not raises."""
    mock = MockLLMClient(tool_sequence=[("Book", {"item": "desk"}), ("Ship", {"to": "Seoul"})])
    client = Harness(mock, turn=2, error=ConnectionError("the model API is down"))
    runner = LLMRunner(client, MODEL, registry, executor, model_retry=RetryPolicy(max_attempts=1))
    result = await runner.run("go", saga_id="down")

    assert result.status is SagaStatus.COMPENSATED
    assert result.error is not None
    assert "ConnectionError" in result.error
    assert "the model API is down" in result.error
    assert ledger.compensated == [("Ship", {"tracking": "T-Seoul"}), ("Book", {"booked": "desk"})]
    assert len(result.metadata["llm_calls"]) == 2
    stored = await executor.store.get_saga("down")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED


@pytest.mark.parametrize(
    ("policy", "bad_call", "named"),
    [
        (PlanPolicy(allowed_tools={"Book"}), ("Ship", {"to": "Seoul"}), "Ship"),
        (None, ("DropTables", {}), "DropTables"),
        (None, ("Ship", {"address": "Seoul"}), "to"),
    ],
    ids=["outside-the-policy", "unknown-tool", "bad-arguments"],
)
async def test_a_refused_call_is_refused_alone_and_its_siblings_run(
    registry: ToolRegistry,
    ledger: Ledger,
    policy: PlanPolicy | None,
    bad_call: tuple[str, dict[str, Any]],
    named: str,
) -> None:
    """A call the policy or registry refuses runs nothing and gets its own reason back; its sibling runs."""
    executor = SagaExecutor(registry)
    mock = MockLLMClient(
        tool_sequence=[[("Book", {"item": "desk"}), bad_call], ("Book", {"item": "lamp"})],
        final_answer="I booked the desk and the lamp.",
    )
    client = Harness(mock)
    result = await LLMRunner(client, MODEL, registry, executor, policy=policy).run("go")

    assert result.status is SagaStatus.SUCCESS
    assert result.metadata["answer"] == "I booked the desk and the lamp."
    assert ledger.executed == [("Book", "desk"), ("Book", "lamp")]  # the refused call's sibling ran
    assert [s.step_id for s in result.steps] == ["call_0_0", "call_1_0"]
    replies = tool_replies(client.sent[1]["messages"])
    assert replies["call_0_0"] == {"result": {"booked": "desk"}}
    assert set(replies["call_0_1"]) == {"error"}
    assert replies["call_0_1"]["error"].startswith("refused before running")
    assert named in replies["call_0_1"]["error"]
    assert "desk" not in replies["call_0_1"]["error"]  # each call is told its own reason, not its sibling's


async def test_a_call_id_reused_from_an_earlier_turn_is_refused_and_the_model_told(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """A provider repeating a call id in a later turn gets that call refused and told why; the loop goes on."""

    def turn(n: int) -> dict[str, Any]:
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": "Book", "arguments": json.dumps({"item": str(n)})},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {
            "model": MODEL,
            "choices": [{"message": message}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }

    final = {
        "model": MODEL,
        "choices": [{"message": {"role": "assistant", "content": "done"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    client = DictClient([turn(1), turn(2), final])
    result = await LLMRunner(client, MODEL, registry, executor).run("go")

    assert result.status is SagaStatus.SUCCESS
    assert ledger.executed == [("Book", "1")]
    reply = client.requests[2]["messages"][-1]
    assert reply["tool_call_id"] == "call_0"
    assert "'call_0' is already used" in json.loads(reply["content"])["error"]


# -- cancellation ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["model-call", "tool-call"])
async def test_caller_cancellation_compensates_then_propagates(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger, where: str
) -> None:
    """Cancelling run() (during a model call or a tool call) undoes every call made, then the cancellation goes on."""
    if where == "model-call":
        client = Harness(MockLLMClient(tool_sequence=[("Book", {"item": "desk"})]), turn=1)
        blocked = client.waiting
    else:
        client = Harness(MockLLMClient(tool_sequence=[("Book", {"item": "desk"}), ("Hang", {"what": "forever"})]))
        blocked = ledger.hanging
    runner = LLMRunner(client, MODEL, registry, executor)
    await cancel_once(runner.run("go", saga_id="leaving"), blocked)

    stored = await executor.store.get_saga("leaving")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED
    assert stored.error is not None
    assert "cancelled" in stored.error
    if where == "model-call":
        assert ledger.compensated == [("Book", {"booked": "desk"})]
    else:
        assert ledger.compensated == [("Hang", None), ("Book", {"booked": "desk"})]  # its outcome is unknown


# -- a saga id used again --------------------------------------------------------------------------------------


async def test_running_a_finished_saga_id_again_returns_the_recorded_result(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """A finished saga id returns its recorded result: the model is not asked, no tool runs, nothing is written."""
    script = [("Book", {"item": "desk"}), ("Ship", {"to": "Seoul"})]
    prices = {MODEL: (1.0, 1.0)}
    first = await LLMRunner(
        MockLLMClient(tool_sequence=script, final_answer="first"), MODEL, registry, executor, prices=prices
    ).run("go", saga_id="again")
    ledger.executed.clear()

    mock = MockLLMClient(tool_sequence=script, final_answer="second")
    again = await LLMRunner(mock, MODEL, registry, executor, prices=prices).run("go", saga_id="again")

    assert again.status is SagaStatus.SUCCESS
    assert again.metadata["answer"] == "first"
    assert again.metadata["llm_calls"] == first.metadata["llm_calls"]
    assert again.cost == pytest.approx(first.cost)
    assert again.tokens == first.tokens
    assert [s.result for s in again.steps] == [s.result for s in first.steps]
    assert ledger.executed == []
    assert mock.requests == []  # the saga id is the run's idempotency key
    stored = await executor.store.get_saga("again")
    assert stored is not None
    assert stored.metadata["answer"] == "first"


async def test_a_finished_saga_id_asked_for_other_calls_is_not_a_silent_success(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """A finished id run again with a model that now calls other tools raises, or does not ask the model at all."""
    await LLMRunner(MockLLMClient(tool_sequence=[("Book", {"item": "desk"})]), MODEL, registry, executor).run(
        "go", saga_id="diverge"
    )
    mock = MockLLMClient(tool_sequence=[("Ship", {"to": "Mars"})], final_answer="Shipped to Mars.")
    try:
        await LLMRunner(mock, MODEL, registry, executor).run("go", saga_id="diverge")
    except (ReplayDivergenceError, IdempotencyConflictError):
        return
    assert mock.requests == [], "the model was asked again and its diverging calls were silently dropped"


# -- other clients ---------------------------------------------------------------------------------------------


class DictClient:
    """An OpenAI-compatible client of one's own: `chat.completions.create` answers scripted plain dicts."""

    def __init__(self, responses: list[dict[str, Any]], *, wrap: Callable[[Any], Any] | None = None) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []
        create = self.create if wrap is None else wrap(self.create)
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=create))

    async def create(self, **request: Any) -> dict[str, Any]:
        """Return the next scripted response."""
        self.requests.append(copy.deepcopy(request))
        return self.responses.pop(0)


def sdk_style(func: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an async function in a sync one, as the OpenAI SDK's `required_args` decorator wraps `create`."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


@pytest.mark.parametrize("wrap", [None, sdk_style], ids=["async-def", "sync-wrapper-returning-a-coroutine"])
async def test_an_openai_compatible_client_answering_dicts_works(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger, wrap: Callable[[Any], Any] | None
) -> None:
    """A duck-typed client whose create returns dicts (or a coroutine of one) drives the loop like the SDK's."""
    tool_turn = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "compat-model-2025-01-01",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_Ab1",
                            "type": "function",
                            "function": {"name": "Book", "arguments": '{"item":"a"}'},
                        },
                        {"id": "call_Cd2", "type": "function", "function": {"name": "Ship", "arguments": '{"to":"b"}'}},
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
    }
    answer_turn = {
        "id": "chatcmpl-2",
        "model": "compat-model-2025-01-01",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "All set."}}],
        "usage": {"prompt_tokens": 200, "completion_tokens": 5},
    }
    client = DictClient([tool_turn, answer_turn], wrap=wrap)
    runner = LLMRunner(client, "compat-model", registry, executor, prices={"compat-model": (1.0, 4.0)})
    result = await runner.run("go")

    assert result.status is SagaStatus.SUCCESS
    assert result.metadata["answer"] == "All set."
    assert [(s.step_id, s.group) for s in result.steps] == [("call_Ab1", 0), ("call_Cd2", 0)]
    assert sorted(ledger.executed) == [("Book", "a"), ("Ship", "b")]
    assert result.metadata["llm_calls"] == [
        {
            "turn": 0,
            "model": "compat-model-2025-01-01",
            "prompt_tokens": 120,
            "completion_tokens": 30,
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
            "cost": 0.00024,
            "finish_reason": "tool_calls",
            "refusal": None,
        },
        {
            "turn": 1,
            "model": "compat-model-2025-01-01",
            "prompt_tokens": 200,
            "completion_tokens": 5,
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
            "cost": 0.00022,
            "finish_reason": "stop",
            "refusal": None,
        },
    ]
    assert result.tokens == 355
    assert result.cost == pytest.approx(0.00046)
    assert tool_replies(client.requests[1]["messages"]) == {
        "call_Ab1": {"result": {"booked": "a"}},
        "call_Cd2": {"result": {"tracking": "T-b"}},
    }
    assert all(r["model"] == "compat-model" for r in client.requests)


async def test_a_client_without_the_api_endpoint_is_refused(executor: SagaExecutor, registry: ToolRegistry) -> None:
    """A client lacking its API's create method is refused when the runner is made, naming what is missing."""
    with pytest.raises(TypeError, match=r"chat\.completions\.create"):
        LLMRunner(SimpleNamespace(), MODEL, registry, executor)
    with pytest.raises(TypeError, match=r"responses\.create"):
        LLMRunner(MockLLMClient(), MODEL, registry, executor, api="responses")
    anthropic_like = SimpleNamespace(messages=SimpleNamespace(create=lambda **_: None))
    assert LLMRunner(anthropic_like, MODEL, registry, executor).api == "anthropic"
    assert LLMRunner(MockLLMClient(), MODEL, registry, executor).api == "chat"
    with pytest.raises(ValueError, match="api must be one of"):
        LLMRunner(MockLLMClient(), MODEL, registry, executor, api="gemini")


def login_tools(seen: list[str]) -> tuple[ToolRegistry, SagaExecutor, Any]:
    """Return a Login tool taking a SecretStr (noting the real value in `seen`), an executor with a key, its store."""
    from cryptography.fernet import Fernet

    from saga_runtime import MemoryStore

    registry = ToolRegistry()

    @registry.tool
    class Login:
        async def execute(self, user: str, password: pydantic.SecretStr) -> str:
            seen.append(password.get_secret_value())
            return f"hello {user}"

    store = MemoryStore()
    return registry, SagaExecutor(registry, store=store, secret_key=Fernet.generate_key().decode()), store


async def test_a_models_call_with_a_secret_argument_runs_with_the_executors_key() -> None:
    """A model's call to a tool taking a SecretStr runs with the real value when the executor has a key; the
    saga's record holds it only encrypted."""
    seen: list[str] = []
    registry, executor, store = login_tools(seen)
    mock = MockLLMClient(tool_sequence=[("Login", {"user": "ann", "password": "hunter2-plain"})])
    result = await LLMRunner(mock, MODEL, registry, executor).run("Log me in", saga_id="secret-chat")
    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert seen == ["hunter2-plain"]
    assert result.steps[0].args["password"] == "**********"
    assert "hunter2-plain" not in repr(store._steps["secret-chat"]) + repr(store._sagas["secret-chat"])
    assert "hunter2-plain" not in json.dumps(await store.export_saga("secret-chat"))


async def test_a_models_answer_with_a_secret_is_recorded_encrypted_and_replayed_after_an_approval() -> None:
    """The model's answer holding a secret argument is kept encrypted in the saga; run again after the call is
    approved, the runner replays it (the model is not asked again) and the tool gets the real value."""
    seen: list[str] = []
    registry, executor, store = login_tools(seen)
    mock = MockLLMClient(tool_sequence=[("Login", {"user": "ann", "password": "hunter2-plain"})])
    runner = LLMRunner(mock, MODEL, registry, executor, policy=PlanPolicy(approval_required={"Login"}))
    waiting = await runner.run("Log me in", saga_id="gated-chat")
    assert waiting.status is SagaStatus.WAITING
    assert "hunter2-plain" not in json.dumps(await store.export_saga("gated-chat"))
    assert "hunter2-plain" not in repr(store._sagas["gated-chat"])
    asked = len(mock.requests)
    await executor.approve("gated-chat", waiting.pending_approvals[0].step_id, by="alice", resume=False)
    done = await runner.run("Log me in", saga_id="gated-chat")
    assert done.status is SagaStatus.SUCCESS, done.describe()
    assert seen == ["hunter2-plain"]
    assert len(mock.requests) == asked + 1  # only the final answer was asked for: the first turn was replayed
