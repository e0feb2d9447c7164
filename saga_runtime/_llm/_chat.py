"""The OpenAI Chat Completions API, and any server speaking it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from saga_runtime._llm._adapter import Adapter, ToolReply, get, plain, turn
from saga_runtime._planning import usage_from_openai
from saga_runtime._tools import ToolSpec
from saga_runtime._tools._schemas import openai_tools

__all__ = ["ChatAdapter"]


class ChatAdapter(Adapter):
    """Messages in, a choice's message out; results go back as `role: tool` messages."""

    api = "chat"
    endpoint_path = ("chat", "completions", "create")
    conversation_key = "messages"

    def tools(self, specs: Iterable[ToolSpec], *, strict: bool) -> list[dict[str, Any]]:
        """Return Chat Completions function tools."""
        return openai_tools(specs, strict=strict, api="chat")

    def conversation(self, prompt: str | list[Any], system: str | None) -> list[Any]:
        """Return the system message, then the prompt as a user message or the messages given."""
        messages: list[Any] = [{"role": "system", "content": system}] if system is not None else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages.extend(prompt)
        return messages

    def record(self, response: Any, model: str) -> dict[str, Any]:
        """Return a chat completion's turn, from its first choice."""
        choices = get(response, "choices", [])
        choice = choices[0] if choices else None
        message = get(choice, "message")
        calls = [
            {
                "id": get(call, "id"),
                "name": get(get(call, "function"), "name"),
                "arguments": plain(get(get(call, "function"), "arguments")),
            }
            for call in get(message, "tool_calls", [])
        ]
        content = get(message, "content")
        assistant = {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls
            ],
        }
        return turn(
            self.api,
            str(get(response, "model", model)),
            usage_from_openai(response),
            finish_reason=get(choice, "finish_reason"),
            refusal=get(message, "refusal"),
            text=content if isinstance(content, str) else None,
            calls=calls,
            output=[assistant],
        )

    def replies(self, replies: list[ToolReply]) -> list[dict[str, Any]]:
        """Return one `role: tool` message per call."""
        return [{"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in replies]
