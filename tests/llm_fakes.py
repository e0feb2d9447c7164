"""Model APIs served in process for the real openai and anthropic SDKs: scripted answers over a mock transport.

No network: each SDK client gets an HTTP client whose transport answers from a script (a JSON body, or an HTTP
error) and keeps every request body. Also imported by child processes of the crash tests (copied beside them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

try:  # the SDKs moved to httpx2; older ones take an httpx client
    import httpx2 as http
except ImportError:  # pragma: no cover - depends on the installed SDKs
    import httpx as http  # type: ignore[no-redef]

APIS = ("chat", "responses", "anthropic")
MODELS = {
    "chat": "gpt-4o-mini",
    "responses": "gpt-4.1-mini",
    "anthropic": "claude-unit-1",
}  # not a real model: the SDK warns of retired ones

Call = tuple[str, str, Any]  # (call id, tool name, arguments: JSON text for OpenAI, an object for Anthropic)


def call_id(api: str, n: int) -> str:
    """Return the n-th call id as the provider writes them."""
    return f"toolu_{n:02d}" if api == "anthropic" else f"call_{n:02d}"


def args_of(api: str, args: dict[str, Any]) -> Any:
    """Return tool arguments as the provider sends them."""
    return args if api == "anthropic" else json.dumps(args)


def usage(
    api: str, prompt: int = 50, completion: int = 10, cached: int = 0, written: int = 0, reasoning: int = 0
) -> Any:
    """Return a usage object as the API reports it (`prompt` counts every input token, cached or not)."""
    if api == "chat":
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        }
    if api == "responses":
        return {
            "input_tokens": prompt,
            "output_tokens": completion,
            "total_tokens": prompt + completion,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens_details": {"reasoning_tokens": reasoning},
        }
    return {
        "input_tokens": prompt - cached - written,
        "output_tokens": completion,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": written,
    }


def response(api: str, n: int, stop: str, body: Any, *, model: str | None = None, use: Any = None) -> dict[str, Any]:
    """Return the n-th response as the API sends it, around `body`: chat's message, responses' output or Anthropic's
    content; `stop` is chat's finish_reason or Anthropic's stop_reason."""
    model = model or MODELS[api]
    use = use or usage(api)
    if api == "chat":
        choice = {"index": 0, "finish_reason": stop, "message": body}
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [choice],
            "usage": use,
        }
    if api == "responses":
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 0,
            "model": model,
            "status": "completed",
            "output": body,
            "usage": use,
        }
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": body,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": use,
    }


def tool_turn(api: str, calls: list[Call], *, model: str | None = None, use: Any = None) -> dict[str, Any]:
    """Return a response asking for `calls`."""
    if api == "chat":
        tool_calls = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}} for cid, name, args in calls
        ]
        message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
        return response(api, 1, "tool_calls", message, model=model, use=use)
    if api == "responses":
        output = [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            *(
                {
                    "type": "function_call",
                    "id": f"fc_{cid}",
                    "call_id": cid,
                    "name": name,
                    "arguments": args,
                    "status": "completed",
                }
                for cid, name, args in calls
            ),
        ]
        return response(api, 1, "", output, model=model, use=use)
    content = [{"type": "text", "text": "Let me do that."}]
    content += [{"type": "tool_use", "id": cid, "name": name, "input": args} for cid, name, args in calls]
    return response(api, 1, "tool_use", content, model=model, use=use)


def text_turn(api: str, text: str, *, model: str | None = None, use: Any = None) -> dict[str, Any]:
    """Return a response answering in text."""
    if api == "chat":
        message = {"role": "assistant", "content": text, "refusal": None}
        return response(api, 2, "stop", message, model=model, use=use)
    if api == "responses":
        message = {
            "type": "message",
            "id": "msg_2",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        return response(api, 2, "", [message], model=model, use=use)
    return response(api, 2, "end_turn", [{"type": "text", "text": text}], model=model, use=use)


class BrokenModel:
    """A client of the shape of OpenAI's whose every chat completion raises ValueError."""

    class chat:  # the attribute path of an OpenAI client
        class completions:
            @staticmethod
            async def create(**request: Any) -> Any:
                raise ValueError("the model is confused")


@dataclass
class Failure:
    """An HTTP error the server answers instead of a turn."""

    status: int
    message: str = "simulated"


@dataclass
class FakeAPI:
    """One model API in process: each request gets the next scripted item; every request body is kept."""

    api: str
    script: list[dict[str, Any] | Failure]
    bodies: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def handle(self, request: Any) -> Any:
        """Answer one HTTP request from the script."""
        self.bodies.append(json.loads(request.content))
        self.paths.append(request.url.path)
        if not self.script:
            return http.Response(500, json={"error": {"message": "the script has no more turns"}})
        item = self.script.pop(0)
        if isinstance(item, Failure):
            error = {"type": "error", "error": {"type": "api_error", "message": item.message}}
            return http.Response(item.status, json=error, headers={"retry-after": "0"})
        return http.Response(200, json=item)

    def client(self, *, sync: bool = False) -> Any:
        """Return the official SDK client of this API (retries off: the runner's own are under test)."""
        transport = http.MockTransport(self.handle)
        if self.api == "anthropic":
            if sync:
                return anthropic.Anthropic(api_key="k", max_retries=0, http_client=http.Client(transport=transport))
            return anthropic.AsyncAnthropic(
                api_key="k", max_retries=0, http_client=http.AsyncClient(transport=transport)
            )
        if sync:
            return openai.OpenAI(api_key="k", max_retries=0, http_client=http.Client(transport=transport))
        return openai.AsyncOpenAI(api_key="k", max_retries=0, http_client=http.AsyncClient(transport=transport))
