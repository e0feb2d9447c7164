"""The OpenAI Responses API: input items in, output items out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from saga_runtime._llm._adapter import Adapter, ToolReply, get, plain, turn
from saga_runtime._planning import usage_from_openai
from saga_runtime._tools import ToolSpec
from saga_runtime._tools._schemas import openai_tools

__all__ = ["ResponsesAdapter"]


class ResponsesAdapter(Adapter):
    """Output items go back as they came; results follow as `function_call_output` items."""

    api = "responses"
    endpoint_path = ("responses", "create")
    conversation_key = "input"
    system_key = "instructions"

    def tools(self, specs: Iterable[ToolSpec], *, strict: bool) -> list[dict[str, Any]]:
        """Return the Responses API's function tools."""
        return openai_tools(specs, strict=strict, api="responses")

    def conversation(self, prompt: str | list[Any], system: str | None) -> list[Any]:
        """Return the prompt as a user message, or the input items given."""
        return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)

    def record(self, response: Any, model: str) -> dict[str, Any]:
        """Return a response's turn."""
        output = [plain(item) for item in get(response, "output", [])]
        calls: list[dict[str, Any]] = []
        texts: list[str] = []
        refusals: list[str] = []
        for item in output:
            kind = item.get("type")
            if kind == "function_call":
                calls.append({"id": item.get("call_id"), "name": item.get("name"), "arguments": item.get("arguments")})
            elif kind == "message":
                for part in item.get("content") or []:
                    if part.get("type") == "output_text":
                        texts.append(str(part.get("text", "")))
                    elif part.get("type") == "refusal":
                        refusals.append(str(part.get("refusal", "")))
        status = get(response, "status")
        reason = get(get(response, "incomplete_details"), "reason") if status == "incomplete" else None
        return turn(
            self.api,
            str(get(response, "model", model)),
            usage_from_openai(response),
            finish_reason=reason or status,
            refusal="".join(refusals) if refusals else None,
            text="".join(texts) if texts else None,
            calls=calls,
            output=output,
        )

    def replies(self, replies: list[ToolReply]) -> list[dict[str, Any]]:
        """Return one `function_call_output` item per call."""
        return [{"type": "function_call_output", "call_id": r.call_id, "output": r.content} for r in replies]
