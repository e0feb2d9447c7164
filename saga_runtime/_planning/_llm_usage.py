"""Token usage of a model call, read from OpenAI and Anthropic responses (SDK objects or dicts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TokenUsage", "usage_from_anthropic", "usage_from_openai"]

_DETAILS = ("cached_tokens", "cache_write_tokens", "reasoning_tokens")


class TokenUsage(tuple[int, int]):
    """The tokens one model call used: what it read (`prompt_tokens`) and what it wrote (`completion_tokens`).

    `prompt_tokens` counts every input token, cached or not; of them, `cached_tokens` were read from the
    provider's prompt cache and `cache_write_tokens` written to it. `reasoning_tokens` are the part of
    `completion_tokens` the model spent thinking. As a tuple it is the pair `(prompt_tokens, completion_tokens)`,
    so `prompt, completion = usage` reads it, and equality compares that pair (compare `as_dict()` for every field).
    """

    # No __slots__: the three details live in the instance's __dict__, beside the pair the tuple holds.
    cached_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int

    def __new__(
        cls,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> TokenUsage:
        """Return the usage of one call; the details default to 0."""
        self = super().__new__(cls, (prompt_tokens, completion_tokens))
        for name, value in zip(_DETAILS, (cached_tokens, cache_write_tokens, reasoning_tokens), strict=True):
            object.__setattr__(self, name, value)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"TokenUsage is immutable; cannot set {name!r}")

    def __getnewargs__(self) -> tuple[int, int, int, int, int]:
        return (*self, self.cached_tokens, self.cache_write_tokens, self.reasoning_tokens)

    def __getstate__(self) -> None:
        return None  # everything travels in __getnewargs__

    @property
    def prompt_tokens(self) -> int:
        """Return every token the model read, cached or not."""
        return self[0]

    @property
    def completion_tokens(self) -> int:
        """Return every token the model wrote, reasoning included."""
        return self[1]

    @property
    def total_tokens(self) -> int:
        """Return every token of the call."""
        return self[0] + self[1]

    @property
    def uncached_tokens(self) -> int:
        """Return the prompt tokens neither read from nor written to the prompt cache."""
        return max(0, self[0] - self.cached_tokens - self.cache_write_tokens)

    def as_dict(self) -> dict[str, int]:
        """Return every field by name (JSON-able)."""
        return {
            "prompt_tokens": self[0],
            "completion_tokens": self[1],
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    def __repr__(self) -> str:
        return "TokenUsage(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenUsage:
        """Return the usage `as_dict()` wrote (missing details count as 0)."""
        return cls(
            int(data.get("prompt_tokens") or 0),
            int(data.get("completion_tokens") or 0),
            *(int(data.get(name) or 0) for name in _DETAILS),
        )


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


def _detail(usage: Any, part: str, name: str) -> int:
    """Return `usage.part.name` (a token count), 0 when the provider did not report it."""
    details = _get(usage, part)
    if details is _MISSING or details is None:
        return 0
    return _count(details, name)


def usage_from_openai(response: Any) -> TokenUsage:
    """Return the tokens of an OpenAI response: a chat completion, a Responses API response, or their `usage`.

    Chat Completions report `prompt_tokens`/`completion_tokens`, the Responses API `input_tokens`/`output_tokens`;
    either way cached prompt tokens are part of the prompt count, and their number is read into `cached_tokens`
    (`prompt_tokens_details` / `input_tokens_details`), as are `reasoning_tokens`. A response without usage counts
    as no tokens; a value that is no response (an assistant message) raises `TypeError`.
    """
    chat = ("prompt_tokens", "completion_tokens")
    responses = ("input_tokens", "output_tokens")
    usage = _usage(response, chat + responses, ("choices", "output", "model", "object"), "OpenAI")
    if usage is None:
        return TokenUsage(0, 0)
    if any(_get(usage, name) is not _MISSING for name in chat):
        return TokenUsage(
            _count(usage, chat[0]),
            _count(usage, chat[1]),
            cached_tokens=_detail(usage, "prompt_tokens_details", "cached_tokens"),
            reasoning_tokens=_detail(usage, "completion_tokens_details", "reasoning_tokens"),
        )
    return TokenUsage(
        _count(usage, responses[0]),
        _count(usage, responses[1]),
        cached_tokens=_detail(usage, "input_tokens_details", "cached_tokens"),
        reasoning_tokens=_detail(usage, "output_tokens_details", "reasoning_tokens"),
    )


def usage_from_anthropic(response: Any) -> TokenUsage:
    """Return the tokens of an Anthropic Messages API response, or of its `usage`.

    Anthropic's `input_tokens` leaves out the prompt tokens written to or read from its prompt cache; they are
    added back (`cache_creation_input_tokens`, `cache_read_input_tokens`), so the prompt count is every token the
    model read, and kept apart as `cache_write_tokens` and `cached_tokens`. A response without usage counts as no
    tokens; a value that is no response raises `TypeError`.
    """
    fields = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    usage = _usage(response, fields, ("model", "stop_reason", "type"), "Anthropic")
    if usage is None:
        return TokenUsage(0, 0)
    written, read = _count(usage, fields[2]), _count(usage, fields[3])
    return TokenUsage(
        _count(usage, fields[0]) + written + read,
        _count(usage, fields[1]),
        cached_tokens=read,
        cache_write_tokens=written,
    )
