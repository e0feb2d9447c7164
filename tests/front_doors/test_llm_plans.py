"""Plans from model output: OpenAI and Anthropic payloads parsed, checked, and run; usage helpers; fuzzing."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from saga_runtime import (
    PlanPolicy,
    PlanValidationError,
    SagaExecutor,
    SagaStatus,
    StepContext,
    StepStatus,
    ToolRegistry,
    UnknownToolError,
)
from saga_runtime._planning._llm_plans import plan_from_anthropic, plan_from_openai
from saga_runtime._planning._llm_usage import TokenUsage, usage_from_anthropic, usage_from_openai

# -- recorded payloads (shapes as the providers' APIs return them) ------------------------------------------------

OPENAI_CHAT_MESSAGE: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "refusal": None,
    "annotations": [],
    "tool_calls": [
        {
            "id": "call_Vb2ZQkE1tnO5sT0hI6mTVpXu",
            "type": "function",
            "function": {"name": "reserve_seat", "arguments": '{"flight": "KE123", "seat": "14C"}'},
        },
        {
            "id": "call_3nQfDd8GJ0W1o7kRr9yLhB2c",
            "type": "function",
            "function": {"name": "charge_card", "arguments": '{"customer": "cus_42", "amount_cents": 129900}'},
        },
    ],
}

OPENAI_CHAT_COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741569952,
    "model": "gpt-4.1-2025-04-14",
    "choices": [{"index": 0, "message": OPENAI_CHAT_MESSAGE, "logprobs": None, "finish_reason": "tool_calls"}],
    "usage": {
        "prompt_tokens": 412,
        "completion_tokens": 58,
        "total_tokens": 470,
        "prompt_tokens_details": {"cached_tokens": 128, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    },
    "service_tier": "default",
    "system_fingerprint": "fp_b42f1d1d3e",
}

OPENAI_RESPONSES_OUTPUT: list[dict[str, Any]] = [
    {"type": "reasoning", "id": "rs_68c1f0d2a4b88190", "summary": [], "encrypted_content": None},
    {
        "type": "function_call",
        "id": "fc_68c1f0d3b0e48190",
        "call_id": "call_kN1xwBq4cS7Zp0aVdLr2YtEh",
        "name": "reserve_seat",
        "arguments": '{"flight":"KE123","seat":"14C"}',
        "status": "completed",
    },
    {
        "type": "function_call",
        "id": "fc_68c1f0d3c1f08190",
        "call_id": "call_Gm5uTj8WqR3eHs1bNc6KoPzA",
        "name": "notify",
        "arguments": '{"to":"ana@example.com","text":"Seat 14C is yours"}',
        "status": "completed",
    },
    {
        "type": "message",
        "id": "msg_68c1f0d4e2c08190",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Booking now.", "annotations": []}],
    },
]

OPENAI_RESPONSE: dict[str, Any] = {
    "id": "resp_68c1f0d1e5f88190",
    "object": "response",
    "status": "completed",
    "model": "o4-mini-2025-04-16",
    "output": OPENAI_RESPONSES_OUTPUT,
    "usage": {
        "input_tokens": 301,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 149,
        "output_tokens_details": {"reasoning_tokens": 64},
        "total_tokens": 450,
    },
}

ANTHROPIC_MESSAGE: dict[str, Any] = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-20250514",
    "content": [
        {"type": "thinking", "thinking": "Reserve, then charge.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
        {"type": "text", "text": "I'll reserve the seat and charge the card."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "reserve_seat",
            "input": {"flight": "KE123", "seat": "14C"},
        },
        {
            "type": "tool_use",
            "id": "toolu_01Bx7TzJ3kQvWm2nRr5sLp8d",
            "name": "charge_card",
            "input": {"customer": "cus_42", "amount_cents": 129900},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 472,
        "cache_creation_input_tokens": 1024,
        "cache_read_input_tokens": 2048,
        "output_tokens": 91,
    },
}


def namespace(value: Any) -> Any:
    """Return a JSON payload as SDK-like objects: dicts become attribute objects, recursively.

    As in the SDKs, a tool_use block's `input` stays a dict.
    """
    if isinstance(value, dict):
        return SimpleNamespace(**{key: item if key == "input" else namespace(item) for key, item in value.items()})
    if isinstance(value, list):
        return [namespace(item) for item in value]
    return value


# -- tools ---------------------------------------------------------------------------------------------------------

Calls = list[tuple[str, str, dict[str, Any]]]


def make_registry(calls: Calls) -> ToolRegistry:
    """Return booking tools that record (tool, step id, arguments) in `calls`."""
    registry = ToolRegistry()

    @registry.tool(name="reserve_seat")
    class ReserveSeat:
        """Reserve a seat on a flight."""

        async def execute(self, flight: str, seat: str, ctx: StepContext) -> dict[str, str]:
            calls.append(("reserve_seat", ctx.step_id, {"flight": flight, "seat": seat}))
            return {"reservation": f"{flight}-{seat}"}

        async def compensate(self, result: dict[str, str] | None, ctx: StepContext) -> None:
            calls.append(("undo reserve_seat", ctx.step_id, {}))

    @registry.tool(name="charge_card")
    class ChargeCard:
        """Charge a customer's card."""

        async def execute(self, customer: str, amount_cents: int, ctx: StepContext) -> dict[str, str]:
            calls.append(("charge_card", ctx.step_id, {"customer": customer, "amount_cents": amount_cents}))
            return {"charge": f"ch_{customer}"}

        async def compensate(self, result: dict[str, str] | None, ctx: StepContext) -> None:
            calls.append(("undo charge_card", ctx.step_id, {}))

    @registry.tool(name="notify", irreversible=True)
    class Notify:
        """Send a message; it cannot be unsent."""

        def execute(self, to: str, text: str, ctx: StepContext) -> None:
            calls.append(("notify", ctx.step_id, {"to": to, "text": text}))

    @registry.tool(name="lookup")
    class Lookup:
        """Read-only: nothing to undo."""

        def execute(self, ctx: StepContext, query: str = "") -> str:
            calls.append(("lookup", ctx.step_id, {"query": query}))
            return "found"

    return registry


@pytest.fixture
def calls() -> Calls:
    """Return the list the tools record their calls in."""
    return []


@pytest.fixture
def executor(calls: Calls) -> SagaExecutor:
    """Return an in-memory executor over the booking tools."""
    return SagaExecutor(make_registry(calls))


CHAT_PLAN = [
    [
        {"tool": "reserve_seat", "args": {"flight": "KE123", "seat": "14C"}, "id": "call_Vb2ZQkE1tnO5sT0hI6mTVpXu"},
        {
            "tool": "charge_card",
            "args": {"customer": "cus_42", "amount_cents": 129900},
            "id": "call_3nQfDd8GJ0W1o7kRr9yLhB2c",
        },
    ]
]
RESPONSES_PLAN = [
    [
        {"tool": "reserve_seat", "args": {"flight": "KE123", "seat": "14C"}, "id": "call_kN1xwBq4cS7Zp0aVdLr2YtEh"},
        {
            "tool": "notify",
            "args": {"to": "ana@example.com", "text": "Seat 14C is yours"},
            "id": "call_Gm5uTj8WqR3eHs1bNc6KoPzA",
        },
    ]
]
ANTHROPIC_PLAN = [
    [
        {"tool": "reserve_seat", "args": {"flight": "KE123", "seat": "14C"}, "id": "toolu_01A09q90qw90lq917835lq9"},
        {
            "tool": "charge_card",
            "args": {"customer": "cus_42", "amount_cents": 129900},
            "id": "toolu_01Bx7TzJ3kQvWm2nRr5sLp8d",
        },
    ]
]


def problems_of(parse: Any, payload: Any) -> list[str]:
    """Return the problems a parser raises for `payload`."""
    with pytest.raises(PlanValidationError) as info:
        parse(payload)
    return info.value.problems


# -- OpenAI --------------------------------------------------------------------------------------------------------


def test_openai_chat_message_becomes_one_group_of_its_parallel_calls() -> None:
    """A Chat Completions message's parallel tool_calls become one group, call ids as step ids, arguments parsed."""
    assert plan_from_openai(OPENAI_CHAT_MESSAGE) == CHAT_PLAN


@pytest.mark.parametrize(
    "payload",
    [
        OPENAI_CHAT_MESSAGE,
        OPENAI_CHAT_MESSAGE["tool_calls"],
        OPENAI_CHAT_COMPLETION,
        namespace(OPENAI_CHAT_MESSAGE),
        namespace(OPENAI_CHAT_MESSAGE).tool_calls,
        namespace(OPENAI_CHAT_COMPLETION),
        tuple(OPENAI_CHAT_MESSAGE["tool_calls"]),
    ],
    ids=["message", "tool_calls", "completion", "sdk-message", "sdk-tool_calls", "sdk-completion", "tuple"],
)
def test_openai_chat_shapes_give_the_same_plan(payload: Any) -> None:
    """A message, its tool_calls, a one-choice completion, as dicts or SDK objects, all give the same plan."""
    assert plan_from_openai(payload) == CHAT_PLAN


@pytest.mark.parametrize(
    "payload",
    [OPENAI_RESPONSES_OUTPUT, OPENAI_RESPONSE, namespace(OPENAI_RESPONSES_OUTPUT), namespace(OPENAI_RESPONSE)],
    ids=["output", "response", "sdk-output", "sdk-response"],
)
def test_openai_responses_output_uses_call_ids_and_skips_other_items(payload: Any) -> None:
    """Responses API function_call items become steps under their call_id; reasoning and message items are skipped."""
    assert plan_from_openai(payload) == RESPONSES_PLAN


def test_parsing_leaves_the_payload_unchanged() -> None:
    """The parser reads the payload without changing it, and the plan shares no dict with it."""
    message = copy.deepcopy(ANTHROPIC_MESSAGE)
    plan = plan_from_anthropic(message)
    plan[0][0]["args"]["seat"] = "1A"
    assert message == ANTHROPIC_MESSAGE


def test_openai_arguments_may_be_empty_or_already_parsed() -> None:
    """An empty arguments string (or null) means no arguments; arguments given as an object are taken as they are."""
    tool_calls = [
        {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": ""}},
        {"id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": None}},
        {"id": "call_c", "type": "function", "function": {"name": "lookup", "arguments": {"query": "x"}}},
    ]
    assert plan_from_openai(tool_calls) == [
        [
            {"tool": "lookup", "args": {}, "id": "call_a"},
            {"tool": "lookup", "args": {}, "id": "call_b"},
            {"tool": "lookup", "args": {"query": "x"}, "id": "call_c"},
        ]
    ]


def test_openai_every_faulty_call_is_reported_at_once() -> None:
    """Malformed JSON, non-object arguments, missing name or id, '.' ids and repeated ids are all reported, by call."""
    tool_calls = [
        {"id": "call_ok", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
        {"id": "call_trunc", "type": "function", "function": {"name": "reserve_seat", "arguments": '{"flight": "KE'}},
        {"id": "call_list", "type": "function", "function": {"name": "lookup", "arguments": "[1, 2]"}},
        {"id": "call_noname", "type": "function", "function": {"arguments": "{}"}},
        {"type": "function", "function": {"name": "lookup", "arguments": "{}"}},
        {"id": "call.dot", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
        {"id": "call_ok", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
        {"id": "call_nan", "type": "function", "function": {"name": "lookup", "arguments": '{"query": NaN}'}},
        {"id": "call_twice", "type": "function", "function": {"name": "lookup", "arguments": '{"a": 1, "a": 2}'}},
        {"id": "call_nofn", "type": "function"},
        {"id": 7, "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
    ]
    problems = problems_of(plan_from_openai, tool_calls)
    assert len(problems) == 10, problems
    expected = [
        ("tool call #2 'call_trunc' (reserve_seat)", "not valid JSON"),
        ("tool call #3 'call_list' (lookup)", "got a JSON array"),
        ("tool call #4 'call_noname'", "names no tool"),
        ("tool call #5 (lookup)", "has no id"),
        ("tool call #6 'call.dot' (lookup)", "'.'"),
        ("tool call #7 'call_ok' (lookup)", "also the id of tool call #1"),
        ("tool call #8 'call_nan' (lookup)", "NaN is not a JSON number"),
        ("tool call #9 'call_twice' (lookup)", "the key 'a' appears twice"),
        ("tool call #10", "no 'function'"),
        ("tool call #11 (lookup)", "must be a string, got int"),
    ]
    for (label, reason), problem in zip(expected, problems, strict=True):
        assert problem.startswith(label + ":"), (label, problem)
        assert reason in problem, (reason, problem)


def test_openai_turn_without_tool_calls_is_refused() -> None:
    """A message that answers in text (tool_calls absent or null), or an empty list, is refused: nothing to run."""
    for payload in (
        {"role": "assistant", "content": "Your seat is booked."},
        {"role": "assistant", "content": "Done.", "tool_calls": None},
        namespace({"role": "assistant", "content": "Done.", "tool_calls": None}),
        [],
        [OPENAI_RESPONSES_OUTPUT[0], OPENAI_RESPONSES_OUTPUT[3]],
    ):
        (problem,) = problems_of(plan_from_openai, payload)
        assert "holds no tool calls" in problem


def test_openai_refuses_what_is_no_openai_output() -> None:
    """Other shapes, Anthropic blocks, custom tool calls and several choices are refused, saying what was expected."""
    assert "expected an OpenAI assistant message" in problems_of(plan_from_openai, "call reserve_seat")[0]
    assert "expected an OpenAI assistant message" in problems_of(plan_from_openai, 42)[0]
    assert "plan_from_anthropic" in problems_of(plan_from_openai, ANTHROPIC_MESSAGE["content"])[0]
    custom = [{"type": "custom_tool_call", "call_id": "call_x", "name": "sql", "input": "SELECT 1"}]
    assert "custom tool call" in problems_of(plan_from_openai, custom)[0]
    two_choices = {**OPENAI_CHAT_COMPLETION, "choices": OPENAI_CHAT_COMPLETION["choices"] * 2}
    assert "2 choices" in problems_of(plan_from_openai, two_choices)[0]
    assert "tool_calls must be a list" in problems_of(plan_from_openai, {"tool_calls": "x"})[0]
    assert "not a tool call" in problems_of(plan_from_openai, [3])[0]


def test_messages_show_a_bounded_preview_of_bad_arguments() -> None:
    """A huge malformed argument string shows in the message only as a short preview."""
    raw = '{"query": "' + "x" * 100_000
    (problem,) = problems_of(plan_from_openai, [{"id": "c", "function": {"name": "lookup", "arguments": raw}}])
    assert "not valid JSON" in problem
    assert len(problem) < 300


def test_deeply_nested_arguments_are_refused_not_crashed() -> None:
    """Arguments nested past the recursion limit are refused as invalid JSON."""
    raw = '{"query": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (problem,) = problems_of(plan_from_openai, [{"id": "c", "function": {"name": "lookup", "arguments": raw}}])
    assert "nested too deeply" in problem


def test_call_ids_too_long_to_store_are_refused() -> None:
    """A call id over 200 bytes (UTF-8), more than every store's step id column holds, is refused."""
    assert plan_from_anthropic([{"type": "tool_use", "id": "t" * 200, "name": "lookup", "input": {}}])
    for call_id in ("t" * 201, "\u4e00" * 67):
        (problem,) = problems_of(plan_from_anthropic, [{"type": "tool_use", "id": call_id, "name": "lookup"}])
        assert "at most 200 are allowed" in problem


def test_lone_surrogates_are_refused_by_the_parsers() -> None:
    """Arguments, ids or names holding a lone surrogate (valid JSON escapes, but no Unicode text) are refused."""
    tool_calls = [
        {"id": "call_1", "function": {"name": "lookup", "arguments": '{"query": "\\ud800"}'}},
        {"id": "call_\udfff", "function": {"name": "lookup", "arguments": "{}"}},
        {"id": "call_3", "function": {"name": "look\ud800", "arguments": "{}"}},
    ]
    problems = problems_of(plan_from_openai, tool_calls)
    assert len(problems) == 3, problems
    assert all("lone surrogate" in problem for problem in problems)
    content = [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"query": "\ud800"}}]
    (problem,) = problems_of(plan_from_anthropic, content)
    assert "lone surrogate" in problem


# -- Anthropic -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        ANTHROPIC_MESSAGE,
        ANTHROPIC_MESSAGE["content"],
        namespace(ANTHROPIC_MESSAGE),
        namespace(ANTHROPIC_MESSAGE).content,
    ],
    ids=["message", "content", "sdk-message", "sdk-content"],
)
def test_anthropic_tool_use_blocks_become_one_group(payload: Any) -> None:
    """An Anthropic message's tool_use blocks become one group under their ids; text and thinking are skipped."""
    assert plan_from_anthropic(payload) == ANTHROPIC_PLAN


def test_anthropic_every_faulty_block_is_reported_at_once() -> None:
    """Bad input, missing name or id, repeated ids and OpenAI-shaped items are all reported, by block."""
    content = [
        {"type": "text", "text": "Working on it."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": ["not", "an", "object"]},
        {"type": "tool_use", "id": "toolu_2", "input": {}},
        {"type": "tool_use", "name": "lookup", "input": {}},
        {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {}},
        {"type": "tool_use", "id": "toolu_3", "name": "lookup", "input": '{"query": '},
        OPENAI_CHAT_MESSAGE["tool_calls"][0],
        {"id": "toolu_4"},
    ]
    problems = problems_of(plan_from_anthropic, content)
    assert len(problems) == 7, problems
    assert problems[0].startswith("tool call #2 'toolu_1' (lookup): arguments must be a JSON object")
    assert problems[1].startswith("tool call #3 'toolu_2': it names no tool")
    assert problems[2].startswith("tool call #4 (lookup): it has no id")
    assert problems[3].startswith("tool call #5 'toolu_2' (lookup): its id 'toolu_2' is also the id of tool call #3")
    assert problems[4].startswith("tool call #6 'toolu_3' (lookup): arguments are not valid JSON")
    assert "plan_from_openai" in problems[5]
    assert problems[6].startswith("block #8 is not a content block")


def test_anthropic_turn_without_tool_use_is_refused() -> None:
    """A reply in text only (blocks or a plain string content), or no message at all, is refused."""
    for payload in (
        {"role": "assistant", "content": [{"type": "text", "text": "Booked."}]},
        {"role": "assistant", "content": "Booked."},
        [],
    ):
        (problem,) = problems_of(plan_from_anthropic, payload)
        assert "holds no tool calls" in problem
    for payload in (None, "text", 3, {"role": "assistant"}):
        (problem,) = problems_of(plan_from_anthropic, payload)
        assert "expected an Anthropic message or its content blocks" in problem


# -- usage ---------------------------------------------------------------------------------------------------------


def test_usage_from_openai_reads_chat_and_responses_usage() -> None:
    """Chat Completions and Responses API usage give (prompt, completion) tokens, from dicts or SDK objects."""
    assert usage_from_openai(OPENAI_CHAT_COMPLETION) == (412, 58)
    assert usage_from_openai(namespace(OPENAI_CHAT_COMPLETION)) == TokenUsage(412, 58)
    assert usage_from_openai(OPENAI_RESPONSE) == (301, 149)
    assert usage_from_openai(namespace(OPENAI_RESPONSE).usage) == (301, 149)
    assert usage_from_openai(OPENAI_CHAT_COMPLETION).total_tokens == 470


def test_usage_from_anthropic_counts_cached_prompt_tokens() -> None:
    """Anthropic usage adds cache writes and reads to input_tokens, since input_tokens leaves them out."""
    assert usage_from_anthropic(ANTHROPIC_MESSAGE) == (472 + 1024 + 2048, 91)
    assert usage_from_anthropic(namespace(ANTHROPIC_MESSAGE)) == (3544, 91)
    sdk_usage = SimpleNamespace(
        input_tokens=10, output_tokens=5, cache_creation_input_tokens=None, cache_read_input_tokens=None
    )
    assert usage_from_anthropic(sdk_usage) == (10, 5)


def test_usage_helpers_without_usage() -> None:
    """No usage reported counts as no tokens; a value that is no response, or a bad count, raises TypeError."""
    assert usage_from_openai({"id": "chatcmpl-1", "usage": None}) == (0, 0)
    assert usage_from_openai({"object": "chat.completion", "choices": []}) == (0, 0)
    assert usage_from_anthropic(SimpleNamespace(usage=None)) == (0, 0)
    assert usage_from_anthropic({"type": "message", "content": []}) == (0, 0)
    with pytest.raises(TypeError, match="not its message"):
        usage_from_openai(OPENAI_CHAT_MESSAGE)
    with pytest.raises(TypeError, match="no Anthropic response"):
        usage_from_anthropic([{"type": "text", "text": "hi"}])
    with pytest.raises(TypeError, match="'output_tokens' must be a token count"):
        usage_from_anthropic({"usage": {"input_tokens": 1, "output_tokens": "many"}})
    with pytest.raises(TypeError, match="'prompt_tokens' must be a token count"):
        usage_from_openai({"usage": {"prompt_tokens": -1, "completion_tokens": 1}})


# -- end to end ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "payload", "plan"),
    [
        (plan_from_openai, OPENAI_CHAT_MESSAGE, CHAT_PLAN),
        (plan_from_openai, namespace(OPENAI_RESPONSE), RESPONSES_PLAN),
        (plan_from_anthropic, namespace(ANTHROPIC_MESSAGE), ANTHROPIC_PLAN),
    ],
    ids=["openai-chat", "openai-responses", "anthropic"],
)
async def test_parsed_plan_runs_under_the_call_ids(
    executor: SagaExecutor, calls: Calls, parse: Any, payload: Any, plan: Any
) -> None:
    """A parsed plan runs as one concurrent group under a policy; step ids and StepContext ids are the call ids."""
    policy = PlanPolicy(allowed_tools={"reserve_seat", "charge_card", "notify"}, max_group_size=2)
    result = await executor.run(parse(payload), policy=policy, saga_id="turn-1")
    assert result.status is SagaStatus.SUCCESS
    ids = [step["id"] for step in plan[0]]
    assert [s.step_id for s in result.steps] == ids
    assert {s.group for s in result.steps} == {0}
    assert all(s.status is StepStatus.SUCCESS for s in result.steps)
    assert sorted(call[1] for call in calls) == sorted(ids)
    assert ("reserve_seat", ids[0], {"flight": "KE123", "seat": "14C"}) in calls
    assert len({s.idempotency_key for s in result.steps}) == 2
    assert result.result_of(ids[0]) == {"reservation": "KE123-14C"}


async def test_policy_refusal_of_a_parsed_plan_reports_every_violation(executor: SagaExecutor, calls: Calls) -> None:
    """PlanPolicy refuses a parsed plan with every violation listed; no tool runs and nothing is stored."""
    content = [
        *ANTHROPIC_MESSAGE["content"],
        {"type": "tool_use", "id": "toolu_01L", "name": "lookup", "input": {"query": "KE123"}},
    ]
    plan = plan_from_anthropic(content)
    policy = PlanPolicy(
        allowed_tools={"reserve_seat", "lookup"}, max_steps=2, max_group_size=2, require_compensation=True
    )
    with pytest.raises(PlanValidationError) as info:
        await executor.run(plan, policy=policy)
    problems = info.value.problems
    assert len(problems) == 4, problems
    assert any("'toolu_01Bx7TzJ3kQvWm2nRr5sLp8d'" in p and "not allowed" in p for p in problems)
    assert any("'toolu_01L'" in p and "no compensate()" in p for p in problems)
    assert any("3 steps" in p and "at most 2" in p for p in problems)
    assert any("group 0 has 3 steps" in p for p in problems)
    assert calls == []
    assert await executor.store.list_sagas() == []


async def test_irreversible_tool_in_a_model_turn_is_allowed_in_its_only_group(
    executor: SagaExecutor, calls: Calls
) -> None:
    """A turn is one group, the plan's last: an irreversible tool may stand in it, under require_compensation too."""
    plan = plan_from_openai(OPENAI_RESPONSES_OUTPUT)
    result = await executor.run(plan, policy=PlanPolicy(require_compensation=True))
    assert result.status is SagaStatus.SUCCESS
    assert sorted(call[0] for call in calls) == ["notify", "reserve_seat"]


async def test_unknown_tools_and_bad_arguments_from_the_model_are_refused(executor: SagaExecutor, calls: Calls) -> None:
    """A call to an unknown tool or with wrong arguments is refused naming the call id; no tool runs."""
    tool_calls = [
        {"id": "call_1", "type": "function", "function": {"name": "delete_everything", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "charge_card", "arguments": '{"customer": 1}'}},
        {
            "id": "call_3",
            "type": "function",
            "function": {"name": "reserve_seat", "arguments": '{"flight": "X", "seat": "1A"}'},
        },
    ]
    with pytest.raises(UnknownToolError) as info:
        await executor.run(plan_from_openai(tool_calls))
    problems = info.value.problems
    assert any("'call_1'" in p and "delete_everything" in p and "available: " in p for p in problems)
    assert any("'call_2'" in p and "amount_cents" in p for p in problems)
    assert calls == []
    assert await executor.store.list_sagas() == []


async def test_a_failing_call_compensates_its_group(calls: Calls) -> None:
    """When one call of a parsed turn fails, the others are compensated under their call ids."""
    registry = make_registry(calls)

    @registry.tool(name="fail")
    class Fail:
        async def execute(self) -> None:
            raise RuntimeError("card declined")

    message = copy.deepcopy(OPENAI_CHAT_MESSAGE)
    message["tool_calls"].append({"id": "call_fail", "type": "function", "function": {"name": "fail", "arguments": ""}})
    result = await SagaExecutor(registry).run(plan_from_openai(message))
    assert result.status is SagaStatus.COMPENSATED
    assert {c[1] for c in calls if c[0].startswith("undo")} <= {
        "call_Vb2ZQkE1tnO5sT0hI6mTVpXu",
        "call_3nQfDd8GJ0W1o7kRr9yLhB2c",
    }
    assert [s.step_id for s in result.steps][-1] == "call_fail"


async def test_a_hand_written_plan_with_a_lone_surrogate_is_refused(executor: SagaExecutor, calls: Calls) -> None:
    """A plan whose arguments hold a lone surrogate is refused with PlanValidationError, not UnicodeEncodeError."""
    with pytest.raises(PlanValidationError):
        await executor.run([{"tool": "lookup", "args": {"query": "\ud800"}, "id": "a"}])
    assert calls == []


# -- fuzzing -------------------------------------------------------------------------------------------------------

TOOL_NAMES = ["count", "count_ro", "send", "nothing", "missing"]
json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=16,
)
names = st.sampled_from(TOOL_NAMES) | st.text(max_size=8) | json_like
ids = st.sampled_from(["call_1", "call_2", "toolu_1", "a.b", ""]) | st.text(max_size=10) | json_like
valid_args = st.fixed_dictionaries({}, optional={"n": st.integers(-3, 3), "to": st.text(max_size=5)})
arguments = (
    valid_args.map(json.dumps)
    | json_like.map(lambda v: json.dumps(v, allow_nan=True))
    | st.text(max_size=20)
    | valid_args
    | json_like
)
chat_call = st.fixed_dictionaries(
    {"function": st.fixed_dictionaries({}, optional={"name": names, "arguments": arguments}) | json_like},
    optional={"id": ids, "type": st.sampled_from(["function", "custom"]) | json_like},
)
responses_item = st.fixed_dictionaries(
    {"type": st.sampled_from(["function_call", "reasoning", "message", "web_search_call"])},
    optional={"call_id": ids, "id": ids, "name": names, "arguments": arguments},
)
anthropic_block = st.fixed_dictionaries(
    {"type": st.sampled_from(["tool_use", "text", "thinking", "server_tool_use"])},
    optional={"id": ids, "name": names, "input": valid_args | arguments, "text": st.text(max_size=5)},
)
# Calls as the providers write them, so that a good share of examples parse and reach the executor.
good_ids = st.sampled_from([f"call_{i}" for i in range(8)] + [f"toolu_{i}" for i in range(8)] + ["fc.1"])
good_names = st.sampled_from(TOOL_NAMES)
# Lone surrogates: valid JSON escapes ("\\ud800"), yet no Unicode text; the parsers refuse them.
surrogates = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=2)
surrogate_args = st.fixed_dictionaries({"to": surrogates})
# Mostly good arguments: one bad call refuses the whole turn, and most turns should reach the executor.
good_args = st.one_of(valid_args, valid_args, valid_args, valid_args, surrogate_args)
good_json_args = st.one_of(good_args.map(json.dumps), st.just(""))
openai_good = st.one_of(
    st.fixed_dictionaries(
        {
            "id": good_ids,
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": good_names, "arguments": good_json_args}),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call"), "call_id": good_ids, "name": good_names, "arguments": good_json_args}
    ),
    st.just({"type": "reasoning", "id": "rs_1", "summary": []}),
)
anthropic_good = st.one_of(
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": good_ids, "name": good_names, "input": good_args}),
    st.just({"type": "text", "text": "On it."}),
)
openai_turns = st.lists(openai_good, min_size=1, max_size=4)
anthropic_turns = st.lists(anthropic_good, min_size=1, max_size=4)
items = st.lists(openai_good | anthropic_good | chat_call | responses_item | anthropic_block | json_like, max_size=4)
payloads = st.one_of(
    json_like,
    items,
    openai_turns,
    openai_turns.map(lambda calls: {"role": "assistant", "content": None, "tool_calls": calls}),
    openai_turns.map(lambda calls: namespace({"choices": [{"message": {"role": "assistant", "tool_calls": calls}}]})),
    openai_turns.map(lambda output: {"output": output, "usage": None}),
    anthropic_turns,
    anthropic_turns.map(lambda content: {"role": "assistant", "content": content, "stop_reason": "tool_use"}),
    anthropic_turns.map(lambda content: namespace({"type": "message", "role": "assistant", "content": content})),
    items.map(lambda calls: {"role": "assistant", "content": None, "tool_calls": calls}),
    items.map(lambda content: namespace({"content": content, "tool_calls": content})),
)


def counting_registry(runs: list[str]) -> ToolRegistry:
    """Return tools that only count their runs."""
    registry = ToolRegistry()

    @registry.tool(name="count")
    class Count:
        async def execute(self, n: int = 1) -> int:
            runs.append("count")
            return n

        async def compensate(self, result: Any) -> None:
            runs.append("undo count")

    @registry.tool(name="count_ro")
    class CountReadOnly:
        def execute(self, n: int = 0) -> int:
            runs.append("count_ro")
            return n

    @registry.tool(name="send", irreversible=True)
    class Send:
        async def execute(self, to: str) -> None:
            runs.append("send")

    @registry.tool(name="nothing")
    class Nothing:
        async def execute(self) -> None:
            runs.append("nothing")

    return registry


async def refusal(run: Any) -> PlanValidationError | Any:
    """Return what awaiting `run` gives, or the PlanValidationError it raises (any other error propagates)."""
    try:
        return await run
    except PlanValidationError as exc:
        return exc


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=payloads, policy=st.sampled_from([None, PlanPolicy(max_group_size=2, require_compensation=True)]))
async def test_fuzzed_model_output_only_ever_raises_plan_validation_error(payload: Any, policy: Any) -> None:
    """Arbitrary JSON-like model output, parsed and run: only PlanValidationError escapes, and refusals run nothing."""
    runs: list[str] = []
    executor = SagaExecutor(counting_registry(runs))
    for parse in (plan_from_openai, plan_from_anthropic):
        try:
            plan = parse(payload)
        except PlanValidationError as exc:
            problems = exc.problems
            event(f"{parse.__name__}: refused")
            assert problems
            continue
        event(f"{parse.__name__}: parsed")
        assert len(plan) == 1
        assert all(isinstance(step["id"], str) and "." not in step["id"] for step in plan[0])
        before = len(runs)
        result = await refusal(executor.run(plan, policy=policy))
        if isinstance(result, PlanValidationError):
            event(f"{parse.__name__}: plan refused by the executor")
            assert result.problems
            assert len(runs) == before
        else:
            event(f"{parse.__name__}: plan ran")
            assert [s.step_id for s in result.steps] == [step["id"] for step in plan[0]]
    # The validator on its own, fed the raw input as a plan.
    runs.clear()
    result = await refusal(executor.run(payload, policy=policy, saga_id="raw"))
    if isinstance(result, PlanValidationError):
        assert result.problems
        assert runs == []
        assert await executor.store.get_saga("raw") is None
