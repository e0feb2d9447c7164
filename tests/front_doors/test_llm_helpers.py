"""Pieces for hand-written model loops: tool-result messages, Responses tool definitions, usage details, parsing."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from saga_runtime import (
    BudgetExceededError,
    SagaExecutor,
    StepFailedError,
    TokenUsage,
    ToolRegistry,
    plan_from_openai,
    tool_result_messages,
    usage_from_anthropic,
    usage_from_openai,
)


def make_registry() -> ToolRegistry:
    """Return a registry of one tool that books and one that fails."""
    registry = ToolRegistry()

    @registry.tool
    class Book:
        """Book an item."""

        async def execute(self, item: str) -> dict[str, Any]:
            return {"booked": item}

    @registry.tool
    class Fail:
        """Fail always."""

        async def execute(self, reason: str) -> None:
            raise ValueError(reason)

    return registry


async def test_a_groups_outcomes_become_each_apis_tool_result_messages() -> None:
    """tool_result_messages turns saga.group(..., return_exceptions=True) into chat, responses or anthropic replies."""
    registry = make_registry()
    async with SagaExecutor(registry).saga() as saga:
        outcomes = await saga.group(
            [("Book", {"item": "desk"}, "c1"), ("Fail", {"reason": "no"}, "c2")], return_exceptions=True
        )
    assert isinstance(outcomes[1], StepFailedError)
    ids = ["c1", "c2"]

    chat = tool_result_messages(ids, outcomes)
    assert chat[0] == {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"result": {"booked": "desk"}})}
    assert chat[1]["tool_call_id"] == "c2"
    assert "ValueError: no" in json.loads(chat[1]["content"])["error"]

    responses = tool_result_messages(ids, outcomes, api="responses")
    assert [(m["type"], m["call_id"]) for m in responses] == [
        ("function_call_output", "c1"),
        ("function_call_output", "c2"),
    ]
    assert responses[0]["output"] == chat[0]["content"]

    (anthropic,) = tool_result_messages(ids, outcomes, api="anthropic")
    assert anthropic["role"] == "user"
    assert anthropic["content"][0] == {"type": "tool_result", "tool_use_id": "c1", "content": chat[0]["content"]}
    assert anthropic["content"][1]["is_error"] is True


def test_tool_result_messages_refuses_mismatched_input_and_raises_a_budget_error() -> None:
    """Ids and outcomes must pair up; a BudgetExceededError among the outcomes ends the run: it is raised."""
    with pytest.raises(ValueError, match="one id per outcome"):
        tool_result_messages(["a"], [1, 2])
    with pytest.raises(ValueError, match="api must be one of"):
        tool_result_messages(["a"], [1], api="gemini")
    crossed = BudgetExceededError("over budget")
    with pytest.raises(BudgetExceededError):
        tool_result_messages(["a", "b"], [1, crossed])


def test_responses_tools_are_flat_and_say_strict() -> None:
    """to_openai_tools(api="responses") gives the Responses API's flat function tools, strict said outright."""
    registry = make_registry()
    chat = registry.to_openai_tools()
    flat = registry.to_openai_tools(api="responses")
    assert flat == [{"type": "function", **tool["function"], "strict": False} for tool in chat]
    strict = registry.to_openai_tools(strict=True, api="responses")
    assert [t["parameters"] for t in strict] == [t["function"]["parameters"] for t in registry.to_openai_tools(True)]
    assert {t["strict"] for t in strict} == {True}
    with pytest.raises(ValueError, match="api must be"):
        registry.to_openai_tools(api="anthropic")


def test_usage_details_are_read_from_every_provider() -> None:
    """Cached, cache-written and reasoning tokens are read from Chat Completions, Responses and Anthropic usage."""
    chat = usage_from_openai(
        {
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 40,
                "prompt_tokens_details": {"cached_tokens": 64},
                "completion_tokens_details": {"reasoning_tokens": 30},
            }
        }
    )
    assert chat.as_dict() == {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "cached_tokens": 64,
        "cache_write_tokens": 0,
        "reasoning_tokens": 30,
    }
    assert chat.uncached_tokens == 36
    responses = usage_from_openai(
        {"output": [], "usage": {"input_tokens": 9, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 4}}}
    )
    assert (responses.cached_tokens, responses.reasoning_tokens) == (4, 0)
    anthropic = usage_from_anthropic(
        {
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_read_input_tokens": 70,
                "cache_creation_input_tokens": 20,
            }
        }
    )
    assert anthropic == (100, 5)
    assert (anthropic.cached_tokens, anthropic.cache_write_tokens, anthropic.uncached_tokens) == (70, 20, 10)


def test_token_usage_is_still_the_pair_it_was() -> None:
    """A TokenUsage unpacks and compares as (prompt, completion), keeps its details, and survives pickling."""
    usage = TokenUsage(100, 20, cached_tokens=50, reasoning_tokens=5)
    prompt, completion = usage
    assert (prompt, completion) == (100, 20)
    assert usage == (100, 20)
    assert usage.total_tokens == 120
    assert TokenUsage.from_dict(usage.as_dict()).as_dict() == usage.as_dict()
    assert pickle.loads(pickle.dumps(usage)).as_dict() == usage.as_dict()
    with pytest.raises(AttributeError):
        usage.cached_tokens = 1  # type: ignore[misc]


def test_plan_from_openai_reads_langchain_tool_calls() -> None:
    """LangChain's tool calls ({"name", "args", "id", "type": "tool_call"}) are read as calls, not as no call."""
    calls = [
        {"name": "Book", "args": {"item": "desk"}, "id": "call_1", "type": "tool_call"},
        {"name": "Book", "args": {"item": "lamp"}, "id": "call_2"},
    ]
    assert plan_from_openai(calls) == [
        [
            {"tool": "Book", "args": {"item": "desk"}, "id": "call_1"},
            {"tool": "Book", "args": {"item": "lamp"}, "id": "call_2"},
        ]
    ]
