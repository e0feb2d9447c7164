"""Token usage of a model call, read from OpenAI and Anthropic responses (SDK objects or dicts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["TokenUsage", "usage_from_anthropic", "usage_from_openai"]


class TokenUsage(NamedTuple):
    """The tokens one model call used: what it read (`prompt_tokens`) and what it wrote (`completion_tokens`)."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """Return every token of the call."""
        return self.prompt_tokens + self.completion_tokens


_MISSING: Any = object()


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, _MISSING)
    return getattr(obj, name, _MISSING)


def _usage(response: Any, fields: tuple[str, ...], markers: tuple[str, ...], provider: str) -> Any:
    """Return the usage part of `response`, or `response` itself when it is one; `None` when none was reported.

    `markers` are keys only a response has: a response without usage (some compatible servers send none) counts
    as no tokens, while anything else (a message, most likely) is refused.
    """
    usage = _get(response, "usage")
    if usage is not _MISSING:
        return usage
    if any(_get(response, name) is not _MISSING for name in fields):
        return response
    if any(_get(response, name) is not _MISSING for name in markers):
        return None
    raise TypeError(
        f"{type(response).__name__} is no {provider} response: it has no 'usage'. Pass the response the client "
        "returned (not its message), or its usage"
    )


def _count(usage: Any, name: str) -> int:
    value = _get(usage, name)
    if value is _MISSING or value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"usage field {name!r} must be a token count (an int of at least 0), got {value!r}")
    return value


def usage_from_openai(response: Any) -> TokenUsage:
    """Return the tokens of an OpenAI response: a chat completion, a Responses API response, or their `usage`.

    Chat Completions report `prompt_tokens`/`completion_tokens`, the Responses API `input_tokens`/`output_tokens`;
    either way cached prompt tokens are part of the prompt count. A response without usage counts as no tokens;
    a value that is no response (an assistant message) raises `TypeError`.
    """
    chat = ("prompt_tokens", "completion_tokens")
    responses = ("input_tokens", "output_tokens")
    usage = _usage(response, chat + responses, ("choices", "output", "model", "object"), "OpenAI")
    if usage is None:
        return TokenUsage(0, 0)
    if any(_get(usage, name) is not _MISSING for name in chat):
        return TokenUsage(_count(usage, chat[0]), _count(usage, chat[1]))
    return TokenUsage(_count(usage, responses[0]), _count(usage, responses[1]))


def usage_from_anthropic(response: Any) -> TokenUsage:
    """Return the tokens of an Anthropic Messages API response, or of its `usage`.

    Anthropic's `input_tokens` leaves out the prompt tokens written to or read from its prompt cache; they are
    added back (`cache_creation_input_tokens`, `cache_read_input_tokens`), so the prompt count is every token the
    model read. A response without usage counts as no tokens; a value that is no response raises `TypeError`.
    """
    fields = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    usage = _usage(response, fields, ("model", "stop_reason", "type"), "Anthropic")
    if usage is None:
        return TokenUsage(0, 0)
    prompt = sum(_count(usage, name) for name in (fields[0], fields[2], fields[3]))
    return TokenUsage(prompt, _count(usage, fields[1]))
