"""LLMRunner with the real openai and anthropic SDKs (Chat Completions, Responses, Messages) over a mock transport.

No network: `llm_fakes.FakeAPI` answers each HTTP request from a script and keeps its body, so these tests pin the
request bodies the SDKs send for the runner, and the runner's reading of what the SDKs parse.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from llm_fakes import APIS, MODELS, Failure, FakeAPI, args_of, call_id, text_turn, tool_turn, usage
from shop_tools import Ledger, shop_registry

from saga_runtime import (
    LLMRunner,
    PlanPolicy,
    RetryPolicy,
    SagaExecutor,
    SagaStatus,
    StepStatus,
    ToolRegistry,
)

NO_WAIT = RetryPolicy(max_attempts=3, initial_interval=0, jitter=False)


@pytest.fixture
def registry(ledger: Ledger) -> ToolRegistry:
    """Return tools that book, ship and fail, reporting to the ledger."""
    return shop_registry(ledger, "Book", "Ship", "Fail")


@pytest.fixture
def executor(registry: ToolRegistry) -> SagaExecutor:
    """Return an executor over a memory store."""
    return SagaExecutor(registry)


def call(api: str, n: int, name: str, **args: Any) -> tuple[str, str, Any]:
    """Return the n-th tool call of a scripted turn."""
    return call_id(api, n), name, args_of(api, args)


def conversation(api: str, body: dict[str, Any]) -> list[Any]:
    """Return the conversation a request body carries."""
    return body["input"] if api == "responses" else body["messages"]


def results(api: str, body: dict[str, Any]) -> dict[str, tuple[Any, bool]]:
    """Return every tool result a request sends back: call id to (decoded content, flagged as an error)."""
    found: dict[str, tuple[Any, bool]] = {}
    for item in conversation(api, body):
        if api == "chat" and item.get("role") == "tool":
            found[item["tool_call_id"]] = (json.loads(item["content"]), False)
        elif api == "responses" and item.get("type") == "function_call_output":
            found[item["call_id"]] = (json.loads(item["output"]), False)
        elif api == "anthropic" and item["role"] == "user" and isinstance(item["content"], list):
            for block in item["content"]:
                found[block["tool_use_id"]] = (json.loads(block["content"]), bool(block.get("is_error")))
    return found


def tool_names(api: str, body: dict[str, Any]) -> list[str]:
    """Return the names of the tools a request offers."""
    return [tool["function"]["name"] if api == "chat" else tool["name"] for tool in body.get("tools", [])]


# -- the loop --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sync", [False, True], ids=["async-client", "sync-client"])
@pytest.mark.parametrize("api", APIS)
async def test_a_three_turn_loop_runs_parallel_calls_tells_a_failure_and_ends_with_the_answer(
    api: str, sync: bool, executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """Turn 1's two calls run as one group, turn 2's failure goes back to the model, turn 3's text ends the saga."""
    fake = FakeAPI(
        api,
        [
            tool_turn(api, [call(api, 1, "Book", item="desk"), call(api, 2, "Ship", to="Seoul")]),
            tool_turn(api, [call(api, 3, "Fail", reason="out of stock")]),
            text_turn(api, "The desk ships to Seoul; the rest was out of stock."),
        ],
    )
    runner = LLMRunner(fake.client(sync=sync), MODELS[api], registry, executor, api=api, system="You book.")
    result = await runner.run("Buy a desk", saga_id=f"three-{api}")

    assert result.status is SagaStatus.SUCCESS, result.error
    assert result.metadata["answer"] == "The desk ships to Seoul; the rest was out of stock."
    assert result.metadata["turns"] == 3
    assert [(s.step_id, s.group, s.status) for s in result.steps] == [
        (call_id(api, 1), 0, StepStatus.SUCCESS),
        (call_id(api, 2), 0, StepStatus.SUCCESS),
        (call_id(api, 3), 1, StepStatus.FAILED),
    ]
    assert sorted(ledger.executed) == [("Book", "desk"), ("Fail", "out of stock"), ("Ship", "Seoul")]
    assert len(fake.bodies) == 3
    assert (
        fake.paths
        == [{"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}[api]] * 3
    )
    first, second, third = fake.bodies
    assert all(body["model"] == MODELS[api] for body in fake.bodies)
    if api == "chat":
        assert conversation(api, first) == [
            {"role": "system", "content": "You book."},
            {"role": "user", "content": "Buy a desk"},
        ]
    else:
        assert conversation(api, first) == [{"role": "user", "content": "Buy a desk"}]
        assert first["instructions" if api == "responses" else "system"] == "You book."
    assert results(api, second) == {
        call_id(api, 1): ({"result": {"booked": "desk"}}, False),
        call_id(api, 2): ({"result": {"tracking": "T-Seoul"}}, False),
    }
    failure, flagged = results(api, third)[call_id(api, 3)]
    assert "ValueError: out of stock" in failure["error"]
    assert flagged is (api == "anthropic")  # Anthropic marks an error result as such
    # What the model answered goes back into the conversation as it came, before the results.
    earlier = conversation(api, second)
    if api == "chat":
        assert [c["id"] for c in earlier[2]["tool_calls"]] == [call_id(api, 1), call_id(api, 2)]
    elif api == "responses":
        assert [item["type"] for item in earlier[1:]] == [
            "reasoning",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
        ]
    else:
        assert earlier[1]["role"] == "assistant"
        assert [b["type"] for b in earlier[1]["content"]] == ["text", "tool_use", "tool_use"]
        assert earlier[1]["content"][1] == {
            "type": "tool_use",
            "id": call_id(api, 1),
            "name": "Book",
            "input": {"item": "desk"},
        }
    finish = {"chat": ["tool_calls", "tool_calls", "stop"], "responses": ["completed"] * 3}
    assert [c["finish_reason"] for c in result.metadata["llm_calls"]] == finish.get(
        api, ["tool_use", "tool_use", "end_turn"]
    )
    exported = await executor.store.export_saga(f"three-{api}")
    assert json.dumps(exported).count('"finish_reason"') >= 3  # the record shows each call's finish reason


@pytest.mark.parametrize("api", APIS)
async def test_options_go_into_every_request_body(api: str, executor: SagaExecutor, registry: ToolRegistry) -> None:
    """Options given to run() (temperature, tool_choice, parallel calls, a token limit, ...) reach every request."""
    fake = FakeAPI(api, [tool_turn(api, [call(api, 1, "Book", item="x")]), text_turn(api, "ok")])
    runner = LLMRunner(fake.client(), MODELS[api], registry, executor, api=api)
    if api == "anthropic":
        options: dict[str, Any] = {
            "stop_sequences": ["END"],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
            "max_tokens": 512,
            "metadata": {"user_id": "u-1"},
        }
    else:
        options = {"temperature": 0, "tool_choice": "auto", "parallel_tool_calls": False}
        options["max_tokens" if api == "chat" else "max_output_tokens"] = 512
    result = await runner.run("go", **options)

    assert result.status is SagaStatus.SUCCESS, result.error
    assert len(fake.bodies) == 2
    for body in fake.bodies:
        assert {key: body[key] for key in options} == options


async def test_anthropic_requests_get_max_tokens_4096_unless_given(
    executor: SagaExecutor, registry: ToolRegistry
) -> None:
    """The Messages API needs max_tokens: without one in the options, the runner sends 4096."""
    fake = FakeAPI("anthropic", [text_turn("anthropic", "hi")])
    await LLMRunner(fake.client(), MODELS["anthropic"], registry, executor).run("go")
    assert fake.bodies[0]["max_tokens"] == 4096


@pytest.mark.parametrize("api", APIS)
async def test_options_the_runner_sets_itself_are_refused(
    api: str, executor: SagaExecutor, registry: ToolRegistry
) -> None:
    """model, tools, the conversation and stream are the runner's: passing one raises TypeError, no request made."""
    fake = FakeAPI(api, [])
    runner = LLMRunner(fake.client(), MODELS[api], registry, executor, api=api)
    key = "input" if api == "responses" else "messages"
    for option in ("model", "tools", key, "stream"):
        with pytest.raises(TypeError, match=option):
            await runner.run("go", **{option: None})
    assert fake.bodies == []


@pytest.mark.parametrize("api", APIS)
async def test_a_list_prompt_is_the_conversation_the_model_continues(
    api: str, executor: SagaExecutor, registry: ToolRegistry
) -> None:
    """A list of messages as prompt is sent as the conversation, in the API's own format, and recorded as given."""
    history = [
        {"role": "user", "content": "I want a desk."},
        {"role": "assistant", "content": "Which one?"},
        {"role": "user", "content": "The oak one."},
    ]
    fake = FakeAPI(api, [text_turn(api, "Done.")])
    result = await LLMRunner(fake.client(), MODELS[api], registry, executor, api=api).run(history, saga_id="conv")

    assert conversation(api, fake.bodies[0]) == history
    assert result.metadata["prompt"] == history


@pytest.mark.parametrize("api", APIS)
async def test_only_the_tools_the_policy_allows_are_sent(
    api: str, executor: SagaExecutor, registry: ToolRegistry
) -> None:
    """With PlanPolicy(allowed_tools={"Book"}) the request offers Book alone, in the API's tool format."""
    fake = FakeAPI(api, [text_turn(api, "ok")])
    runner = LLMRunner(
        fake.client(), MODELS[api], registry, executor, api=api, policy=PlanPolicy(allowed_tools={"Book"})
    )
    await runner.run("go")

    assert tool_names(api, fake.bodies[0]) == ["Book"]
    (tool,) = fake.bodies[0]["tools"]
    if api == "chat":
        assert tool == registry.to_openai_tools()[0]
    elif api == "responses":
        assert tool == registry.to_openai_tools(api="responses")[0]
        assert tool["strict"] is False  # said outright: the Responses API takes a tool without it as strict
    else:
        assert tool == registry.to_anthropic_tools()[0]


@pytest.mark.parametrize("api", APIS)
async def test_one_bad_call_is_refused_alone_and_the_good_ones_run(
    api: str, executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """Malformed arguments (or an unknown tool) refuse that call only: its siblings run, each gets its own reply."""
    if api == "anthropic":
        bad = (call_id(api, 2), "Teleport", {"to": "Mars"})  # Anthropic sends parsed input: an unknown tool instead
    else:
        bad = (call_id(api, 2), "Ship", '{"to": "Mars"')
    fake = FakeAPI(
        api,
        [
            tool_turn(api, [call(api, 1, "Book", item="desk"), bad, call(api, 3, "Ship", to="Seoul")]),
            text_turn(api, "Two of three done."),
        ],
    )
    result = await LLMRunner(fake.client(), MODELS[api], registry, executor, api=api).run("go")

    assert result.status is SagaStatus.SUCCESS, result.error
    assert sorted(ledger.executed) == [("Book", "desk"), ("Ship", "Seoul")]
    assert [s.step_id for s in result.steps] == [call_id(api, 1), call_id(api, 3)]
    replies = results(api, fake.bodies[1])
    assert list(replies) == [call_id(api, 1), call_id(api, 2), call_id(api, 3)]  # in the order the model wrote them
    assert replies[call_id(api, 1)][0] == {"result": {"booked": "desk"}}
    assert replies[call_id(api, 3)][0] == {"result": {"tracking": "T-Seoul"}}
    refusal = replies[call_id(api, 2)][0]["error"]
    assert refusal.startswith("refused before running")
    assert ("Teleport" if api == "anthropic" else "not valid JSON") in refusal


# -- failures of the model API ---------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_a_429_is_tried_again_and_the_loop_goes_on(
    api: str, executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """A rate limit (429) then a 503 on one turn are retried by model_retry; the saga ends SUCCESS, nothing undone."""
    fake = FakeAPI(
        api,
        [tool_turn(api, [call(api, 1, "Book", item="desk")]), Failure(429), Failure(503), text_turn(api, "Booked.")],
    )
    runner = LLMRunner(fake.client(), MODELS[api], registry, executor, api=api, model_retry=NO_WAIT)
    result = await runner.run("go")

    assert result.status is SagaStatus.SUCCESS, result.error
    assert result.metadata["answer"] == "Booked."
    assert len(fake.bodies) == 4
    assert fake.bodies[1] == fake.bodies[2] == fake.bodies[3]  # the same request, tried again
    assert ledger.compensated == []
    assert len(result.metadata["llm_calls"]) == 2  # failed attempts are no model calls: nothing charged


@pytest.mark.parametrize("api", APIS)
async def test_a_401_fails_at_once_and_compensates(
    api: str, executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """An authentication error (401) is not retried: the loop fails and the booking made is undone."""
    fake = FakeAPI(api, [tool_turn(api, [call(api, 1, "Book", item="desk")]), Failure(401), text_turn(api, "never")])
    runner = LLMRunner(fake.client(), MODELS[api], registry, executor, api=api, model_retry=NO_WAIT)
    result = await runner.run("go", saga_id=f"denied-{api}")

    assert result.status is SagaStatus.COMPENSATED
    assert result.error is not None
    assert "AuthenticationError" in result.error
    assert len(fake.bodies) == 2
    assert ledger.compensated == [("Book", {"booked": "desk"})]


async def test_retries_give_up_after_model_retry_attempts(
    executor: SagaExecutor, registry: ToolRegistry, ledger: Ledger
) -> None:
    """A model API that stays overloaded fails the loop after max_attempts calls, and everything is undone."""
    api = "anthropic"
    fake = FakeAPI(api, [tool_turn(api, [call(api, 1, "Book", item="desk")]), *[Failure(529)] * 3, text_turn(api, "x")])
    runner = LLMRunner(fake.client(), MODELS[api], registry, executor, model_retry=NO_WAIT)
    result = await runner.run("go")

    assert result.status is SagaStatus.COMPENSATED
    assert len(fake.bodies) == 4  # turn 1, then three attempts of turn 2
    assert ledger.compensated == [("Book", {"booked": "desk"})]
    assert runner.api == "anthropic"  # picked from the client's shape


def test_the_default_model_retry_tries_four_times(executor: SagaExecutor, registry: ToolRegistry) -> None:
    """Without model_retry, a runner tries a model call up to 4 times, with backoff between them."""
    runner = LLMRunner(FakeAPI("chat", []).client(), "m", registry, executor)
    assert runner.model_retry.max_attempts == 4
    assert runner.model_retry.delay(1) > 0


# -- usage and cost --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "use", "prices", "cost"),
    [
        # 64 of 100 prompt tokens cached at half price: 36 * 0.15 + 64 * 0.075 + 10 * 0.6 (per million).
        (
            "chat",
            usage("chat", 100, 10, cached=64),
            {"gpt-4o-mini": {"input": 0.15, "output": 0.6, "cached_input": 0.075}},
            16.2e-6,
        ),
        # Reasoning tokens are output tokens: billed at the output price, and recorded.
        (
            "responses",
            usage("responses", 100, 30, cached=64, reasoning=20),
            {"gpt-4.1": {"input": 2.0, "output": 8.0, "cached_input": 0.5}},
            344e-6,
        ),
        # Anthropic: 100 uncached, 1000 read from the cache, 200 written to it, 50 out: 300 + 300 + 750 + 750.
        (
            "anthropic",
            usage("anthropic", 1300, 50, cached=1000, written=200),
            {"claude-unit": {"input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write": 3.75}},
            2100e-6,
        ),
    ],
)
async def test_usage_with_cache_tokens_is_recorded_and_priced_apart(
    api: str, use: Any, prices: dict[str, Any], cost: float, executor: SagaExecutor, registry: ToolRegistry
) -> None:
    """Cached, cache-written and reasoning tokens are recorded; a dated model uses its family's price, cache apart."""
    dated = {
        "chat": "gpt-4o-mini-2024-07-18",
        "responses": "gpt-4.1-mini-2025-04-14",
        "anthropic": "claude-unit-1-20250929",
    }[api]
    fake = FakeAPI(api, [text_turn(api, "hi", model=dated, use=use)])
    result = await LLMRunner(fake.client(), MODELS[api], registry, executor, api=api, prices=prices).run("go")

    (logged,) = result.metadata["llm_calls"]
    assert logged["model"] == dated
    expected = {
        "chat": (100, 10, 64, 0, 0),
        "responses": (100, 30, 64, 0, 20),
        "anthropic": (1300, 50, 1000, 200, 0),
    }[api]
    fields = ("prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens", "reasoning_tokens")
    assert tuple(logged[f] for f in fields) == expected
    assert logged["cost"] == pytest.approx(cost)
    assert result.cost == pytest.approx(cost)
    assert result.tokens == expected[0] + expected[1]


async def test_a_model_without_a_price_costs_nothing_and_is_logged_once(
    executor: SagaExecutor, registry: ToolRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    """A model the price table has no entry (nor family) for costs 0, with one WARNING however many calls it makes."""
    api = "chat"
    fake = FakeAPI(
        api, [tool_turn(api, [call(api, 1, "Book", item="x")], model="o9"), text_turn(api, "ok", model="o9")]
    )
    with caplog.at_level(logging.WARNING, logger="saga_runtime"):
        result = await LLMRunner(fake.client(), "o9", registry, executor, prices={"gpt-4o": (1, 1)}).run("go")
    assert [c["cost"] for c in result.metadata["llm_calls"]] == [0.0, 0.0]
    assert [r.message for r in caplog.records].count(
        "model 'o9' has no price in the price table: its calls are counted at 0 USD"
    ) == 1


@pytest.mark.parametrize("api", APIS)
async def test_a_refusal_is_recorded(api: str, executor: SagaExecutor, registry: ToolRegistry) -> None:
    """The model's refusal text and its finish reason are recorded with the call."""
    if api == "chat":
        response = text_turn(api, "")
        response["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    elif api == "responses":
        response = text_turn(api, "")
        response["output"][0]["content"] = [{"type": "refusal", "refusal": "I can't help with that."}]
    else:
        response = text_turn(api, "I can't help with that.")
        response["stop_reason"] = "refusal"
    fake = FakeAPI(api, [response])
    result = await LLMRunner(fake.client(), MODELS[api], registry, executor, api=api).run("go")

    (logged,) = result.metadata["llm_calls"]
    assert logged["refusal"] == "I can't help with that."
    assert logged["finish_reason"] == {"chat": "stop", "responses": "completed", "anthropic": "refusal"}[api]
