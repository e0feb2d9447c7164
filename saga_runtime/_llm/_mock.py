"""MockLLMClient: a scripted OpenAI-compatible model for tests and examples."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MockLLMClient"]

ToolCall = tuple[str, Mapping[str, Any]]


@dataclass
class _Function:
    name: str
    arguments: str


@dataclass
class _ToolCall:
    id: str
    function: _Function
    type: str = "function"


@dataclass
class _Message:
    content: str | None
    tool_calls: list[_ToolCall] | None = None
    role: str = "assistant"


@dataclass
class _Choice:
    message: _Message
    finish_reason: str
    index: int = 0


@dataclass
class _Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class _Completion:
    id: str
    model: str
    choices: list[_Choice]
    usage: _Usage
    object: str = "chat.completion"


def _tokens(text: str) -> int:
    """Return a rough token count (4 characters a token)."""
    return max(1, len(text) // 4)


@dataclass
class _Completions:
    owner: MockLLMClient

    def _answer(self, **request: Any) -> _Completion:
        owner = self.owner
        owner.requests.append(request)
        turn = len(owner.requests) - 1
        prompt = json.dumps(request.get("messages", []), default=str)
        if turn < len(owner.tool_sequence):
            step = owner.tool_sequence[turn]
            calls = step if isinstance(step, list) else [step]
            tool_calls = [
                _ToolCall(id=f"call_{turn}_{i}", function=_Function(name, json.dumps(dict(args))))
                for i, (name, args) in enumerate(calls)
            ]
            message = _Message(content=None, tool_calls=tool_calls)
            written = json.dumps([[c.function.name, c.function.arguments] for c in tool_calls])
            choice = _Choice(message, "tool_calls")
        else:
            message = _Message(content=owner.final_answer)
            written = owner.final_answer
            choice = _Choice(message, "stop")
        return _Completion(
            id=f"chatcmpl-mock-{turn}",
            model=str(request.get("model", "mock")),
            choices=[choice],
            usage=_Usage(_tokens(prompt), _tokens(written)),
        )


class _AsyncCompletions(_Completions):
    async def create(self, **request: Any) -> _Completion:
        """Answer like the async OpenAI client's `chat.completions.create`."""
        return self._answer(**request)


class _SyncCompletions(_Completions):
    def create(self, **request: Any) -> _Completion:
        """Answer like the sync OpenAI client's `chat.completions.create`."""
        return self._answer(**request)


@dataclass
class _Chat:
    completions: _Completions


@dataclass
class MockLLMClient:
    """Script a model's turns: each item of `tool_sequence` is one turn's calls, then it answers in text.

    An item is `(name, args)`, or a list for parallel calls. Mimics the OpenAI client (async, or `sync=True`);
    `requests` keeps every request.
    """

    tool_sequence: Sequence[ToolCall | list[ToolCall]] = ()
    final_answer: str = "Done."
    sync: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for turn, step in enumerate(self.tool_sequence):
            for call in step if isinstance(step, list) else [step]:
                if not (isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], str)):
                    raise TypeError(f"tool_sequence[{turn}]: expected (name, args) or a list of them, got {call!r}")
        completions = _SyncCompletions(self) if self.sync else _AsyncCompletions(self)
        self.chat = _Chat(completions)
