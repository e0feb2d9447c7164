"""The Anthropic Messages API: content blocks in and out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from saga_runtime._llm._adapter import Adapter, ToolReply, get, plain, turn
from saga_runtime._planning import usage_from_anthropic
from saga_runtime._tools import ToolSpec
from saga_runtime._tools._schemas import anthropic_tool

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicAdapter"]

# Required by the API; sent if the caller gives none.
DEFAULT_MAX_TOKENS = 4096
# Fields each block kind takes back as input.
_BLOCK_FIELDS = {
    "text": ("type", "text", "citations"),
    "tool_use": ("type", "id", "name", "input"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
}


def _block(block: Any) -> dict[str, Any]:
    """Return a response's content block as an input block."""
    data = plain(block)
    if not isinstance(data, Mapping):
        raise TypeError(f"an Anthropic content block must be an object, got {type(block).__name__}")
    fields = _BLOCK_FIELDS.get(str(data.get("type")))
    if fields is None:
        return dict(data)
    return {key: data[key] for key in fields if data.get(key) not in (None, [])}


class AnthropicAdapter(Adapter):
    """Blocks go back as they came; results follow in one user message of tool_result blocks."""

    api = "anthropic"
    endpoint_path = ("messages", "create")
    conversation_key = "messages"
    system_key = "system"

    def tools(self, specs: Iterable[ToolSpec], *, strict: bool) -> list[dict[str, Any]]:
        """Return Anthropic tools (there is no strict mode)."""
        return [anthropic_tool(spec) for spec in specs]

    def conversation(self, prompt: str | list[Any], system: str | None) -> list[Any]:
        """Return the prompt as a user message, or the messages given."""
        return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)

    def request(
        self,
        model: str,
        conversation: list[Any],
        tools: list[dict[str, Any]],
        system: str | None,
        options: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Return a request; `max_tokens` defaults to 4096."""
        request = super().request(model, conversation, tools, system, options)
        request.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        return request

    def record(self, response: Any, model: str) -> dict[str, Any]:
        """Return a message's turn."""
        blocks = [_block(block) for block in get(response, "content", [])]
        calls = [
            {"id": b.get("id"), "name": b.get("name"), "arguments": b.get("input")}
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        text = "".join(texts) if texts else None
        stop_reason = get(response, "stop_reason")
        refusal = (text or "the model refused (stop_reason 'refusal')") if stop_reason == "refusal" else None
        return turn(
            self.api,
            str(get(response, "model", model)),
            usage_from_anthropic(response),
            finish_reason=stop_reason,
            refusal=refusal,
            text=text,
            calls=calls,
            output=[{"role": "assistant", "content": blocks}],
        )

    def replies(self, replies: list[ToolReply]) -> list[dict[str, Any]]:
        """Return one user message of tool_result blocks."""
        blocks: list[dict[str, Any]] = []
        for reply in replies:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": reply.call_id, "content": reply.content}
            if reply.is_error:
                block["is_error"] = True
            blocks.append(block)
        return [{"role": "user", "content": blocks}]
