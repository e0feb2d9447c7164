"""Shared by model API adapters: reading SDK objects, the recorded turn, the adapter interface.

The loop reads only turns, so replay needs no SDK and takes the same path.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from saga_runtime._planning import TokenUsage
from saga_runtime._records import MAX_JSON_DEPTH
from saga_runtime._tools import ToolSpec

__all__ = ["Adapter", "ToolReply", "get", "plain", "turn"]


def get(obj: Any, name: str, default: Any = None) -> Any:
    """Return `obj[name]` or `obj.name` (`default` when absent or None)."""
    value = obj.get(name, default) if isinstance(obj, Mapping) else getattr(obj, name, default)
    return default if value is None else value


def plain(value: Any, _depth: int = 0) -> Any:
    """Return an SDK object as plain JSON; raise `ValueError` if too deep or cyclic."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if _depth >= MAX_JSON_DEPTH:
        raise ValueError(
            f"the model's answer (or the prompt) nests more than {MAX_JSON_DEPTH} levels deep, or holds itself: it "
            "cannot be recorded"
        )
    _depth += 1
    if isinstance(value, Mapping):
        return {str(k): plain(v, _depth) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [plain(v, _depth) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return plain(dump(mode="json", exclude_none=True), _depth - 1)  # same level
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        return {name: plain(getattr(value, name), _depth) for name in fields if getattr(value, name) is not None}
    raise TypeError(f"cannot record a {type(value).__name__} of the model's answer as JSON")


@dataclass(frozen=True, slots=True)
class ToolReply:
    """A tool call's reply to the model."""

    call_id: str
    content: str
    is_error: bool = False


def turn(
    api: str,
    model: str,
    usage: TokenUsage,
    *,
    finish_reason: Any,
    refusal: str | None,
    text: str | None,
    calls: list[dict[str, Any]],
    output: list[Any],
) -> dict[str, Any]:
    """Return a recorded turn (plain JSON)."""
    return {
        "api": api,
        "model": model,
        "usage": usage.as_dict(),
        "finish_reason": None if finish_reason is None else str(finish_reason),
        "refusal": refusal,
        "text": text,
        "calls": calls,
        "output": output,
    }


class Adapter(ABC):
    """One model API: endpoint, request and tool formats, and its answers."""

    api: ClassVar[str]
    endpoint_path: ClassVar[tuple[str, ...]]
    conversation_key: ClassVar[str]
    system_key: ClassVar[str | None] = None  # the system prompt's parameter

    def endpoint(self, client: Any) -> Callable[..., Any] | None:
        """Return the client's method asking the model, or None."""
        found: Any = client
        for name in self.endpoint_path:
            found = get(found, name)
        return found if callable(found) else None

    @abstractmethod
    def tools(self, specs: Iterable[ToolSpec], *, strict: bool) -> list[dict[str, Any]]:
        """Return `specs` as this API's tools."""

    @abstractmethod
    def conversation(self, prompt: str | list[Any], system: str | None) -> list[Any]:
        """Return a run's first conversation from the prompt."""

    def request(
        self,
        model: str,
        conversation: list[Any],
        tools: list[dict[str, Any]],
        system: str | None,
        options: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Return one model call's keyword arguments (the conversation copied)."""
        request: dict[str, Any] = {"model": model, self.conversation_key: list(conversation)}
        if tools:
            request["tools"] = tools
        if system is not None and self.system_key is not None:
            request[self.system_key] = system
        request.update(options)
        return request

    def reserved(self, system: str | None) -> set[str]:
        """Return the request parameters the runner sets itself."""
        keys = {"model", "tools", "stream", self.conversation_key}
        if system is not None and self.system_key is not None:
            keys.add(self.system_key)
        return keys

    @abstractmethod
    def record(self, response: Any, model: str) -> dict[str, Any]:
        """Return a response's recorded turn."""

    @abstractmethod
    def replies(self, replies: list[ToolReply]) -> list[dict[str, Any]]:
        """Return the messages giving the model its tool calls' results."""
