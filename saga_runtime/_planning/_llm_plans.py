"""Plans from model output: the tool calls of one assistant turn, OpenAI's or Anthropic's, as one parallel group.

Model output is untrusted input. The parsers read provider payloads as dicts or as SDK objects (attributes), check
every call, and raise one `PlanValidationError` naming each faulty call; what they return still goes through
`build_plan` (tools exist, arguments valid, policy) when it is run. The provider's call id becomes the step id,
so the tool results can be sent back to the model under the ids it gave.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from saga_runtime._exceptions import PlanValidationError

__all__ = ["plan_from_anthropic", "plan_from_openai"]

# Step ids are stored in indexed columns of limited width (512 bytes on MySQL); provider ids are short ASCII.
MAX_CALL_ID_BYTES = 200
_PREVIEW = 80
# Model output shows in messages only as a bounded preview: never a megabyte, never a recursion too deep.
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple = 2, 4, 4, 4
_REPR.maxstring = _REPR.maxother = _PREVIEW

_MISSING: Any = object()


def _get(obj: Any, name: str) -> Any:
    """Return `obj[name]` of a mapping or `obj.name` of an object; `_MISSING` when it has none."""
    try:
        if isinstance(obj, Mapping):
            return obj.get(name, _MISSING)
        return getattr(obj, name, _MISSING)
    except Exception:  # a property of a foreign object that fails to compute counts as absent
        return _MISSING


def _is_list(value: Any) -> bool:
    return isinstance(value, list | tuple)


def _preview(value: Any) -> str:
    try:
        return _REPR.repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


@dataclass(slots=True)
class _Call:
    """One tool call as the provider wrote it, before it is checked."""

    position: int  # 1-based, among the items the model output
    id: Any
    name: Any
    arguments: Any

    @property
    def label(self) -> str:
        text = f"tool call #{self.position}"
        if isinstance(self.id, str) and self.id:
            text += f" {_preview(self.id)}"
        if isinstance(self.name, str) and self.name:
            text += f" ({_preview(self.name)[1:-1]})"
        return text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice")
        out[key] = value
    return out


def _parse_arguments(raw: Any, problems: list[str], label: str) -> dict[str, Any] | None:
    """Return a call's arguments as a dict; `None` (an absent value) and `""` stand for no arguments."""
    if raw is _MISSING or raw is None:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if not isinstance(raw, str):
        problems.append(f"{label}: arguments must be a JSON object (or its text), got {type(raw).__name__}")
        return None
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        problems.append(f"{label}: arguments are not valid JSON ({reason}): {_preview(raw)}")
        return None
    if not isinstance(value, dict):
        kind = "array" if isinstance(value, list) else type(value).__name__ if value is not None else "null"
        problems.append(f"{label}: arguments must be a JSON object of argument names to values, got a JSON {kind}")
        return None
    return value


def _is_unicode(value: Any) -> bool:
    """Tell whether every string in a JSON value is valid Unicode text."""
    # A JSON escape can spell a lone surrogate ("\\ud800"), which no UTF-8 encoder, and so no store, accepts.
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    except (TypeError, ValueError, RecursionError):
        pass  # not JSON at all, which build_plan reports
    return True


def _check_id(call: _Call, seen: dict[str, int], problems: list[str]) -> bool:
    label, call_id = call.label, call.id
    if call_id is _MISSING or call_id is None:
        problems.append(f"{label}: it has no id; the provider's call id becomes the step id")
    elif not isinstance(call_id, str):
        problems.append(f"{label}: its id must be a string, got {type(call_id).__name__}")
    elif not call_id:
        problems.append(f"{label}: its id is empty")
    elif "." in call_id:
        problems.append(
            f"{label}: its id contains '.', which step ids may not hold ($ref paths use it); the provider's id is "
            "kept unchanged so results go back under it, so this call cannot be taken"
        )
    elif not _is_unicode(call_id):
        problems.append(f"{label}: its id holds a lone surrogate, which is not Unicode text and cannot be stored")
    elif len(call_id.encode()) > MAX_CALL_ID_BYTES:
        problems.append(
            f"{label}: its id is {len(call_id.encode())} bytes long; at most {MAX_CALL_ID_BYTES} are allowed"
        )
    elif call_id in seen:
        problems.append(f"{label}: its id {call_id!r} is also the id of tool call #{seen[call_id]}; ids are unique")
    else:
        seen[call_id] = call.position
        return True
    return False


def _plan(entries: list[_Call | str], problems: list[str], what: str) -> list[list[dict[str, Any]]]:
    """Check every call; return the plan of one group, or raise `PlanValidationError` with every problem.

    `entries` holds, in the order the model wrote them, the calls found and the problems of items that are
    tool calls of no usable kind.
    """
    seen: dict[str, int] = {}
    steps: list[dict[str, Any]] = []
    for call in entries:
        if isinstance(call, str):
            problems.append(call)
            continue
        ok = _check_id(call, seen, problems)
        if call.name is _MISSING or call.name is None:
            problems.append(f"{call.label}: it names no tool")
            ok = False
        elif not isinstance(call.name, str) or not call.name:
            problems.append(f"{call.label}: the tool name must be a non-empty string, got {_preview(call.name)}")
            ok = False
        elif not _is_unicode(call.name):
            problems.append(f"{call.label}: the tool name holds a lone surrogate, which is not Unicode text")
            ok = False
        args = _parse_arguments(call.arguments, problems, call.label)
        if args is not None and not _is_unicode(args):
            problems.append(
                f"{call.label}: the arguments hold a lone surrogate (such as '\\ud800'), which is not Unicode text "
                "and cannot be stored"
            )
            args = None
        if ok and args is not None:
            steps.append({"tool": call.name, "args": args, "id": call.id})
    if not entries and not problems:
        problems.append(f"{what} holds no tool calls (the model answered without calling a tool): nothing to run")
    if problems:
        raise PlanValidationError(problems)
    return [steps]


# -- OpenAI ----------------------------------------------------------------------------------------------------

_OPENAI_SHAPES = (
    "an OpenAI assistant message (Chat Completions), its tool_calls, a chat completion, a Responses API response "
    "or its output list"
)


def _openai_items(source: Any, problems: list[str]) -> list[Any]:
    """Return the tool calls (or Responses output items) a Chat Completions or Responses payload holds."""
    if _is_list(source):
        return list(source)
    if isinstance(source, str | bytes) or source is None:
        problems.append(f"expected {_OPENAI_SHAPES}, got {type(source).__name__}")
        return []
    tool_calls = _get(source, "tool_calls")
    if tool_calls is not _MISSING:
        if tool_calls is None or _is_list(tool_calls):
            return list(tool_calls or ())
        problems.append(f"the message's tool_calls must be a list, got {type(tool_calls).__name__}")
        return []
    output = _get(source, "output")
    if _is_list(output):
        return list(output)
    choices = _get(source, "choices")
    if _is_list(choices):
        if len(choices) != 1:
            problems.append(
                f"the chat completion has {len(choices)} choices; pass the message of the one to run "
                "(completion.choices[i].message)"
            )
            return []
        message = _get(choices[0], "message")
        if message is _MISSING:
            problems.append("the chat completion's choice holds no message")
            return []
        return _openai_items(message, problems)
    if _get(source, "content") is not _MISSING or _get(source, "role") is not _MISSING:
        return []  # a message that answers in text only
    problems.append(f"expected {_OPENAI_SHAPES}, got {type(source).__name__}")
    return []


def _openai_call(item: Any, position: int) -> _Call | str | None:
    """Return the call an item holds, the problem with it, or `None` for an item that is no call for a tool."""
    kind = _get(item, "type")
    function = _get(item, "function")
    if kind == "function_call":  # Responses API: the call id is `call_id`; `id` is the output item's own
        return _Call(position, _get(item, "call_id"), _get(item, "name"), _get(item, "arguments"))
    if kind == "function" or (kind is _MISSING and function is not _MISSING):  # Chat Completions
        if function is _MISSING or function is None:
            return f"tool call #{position}: it has no 'function' (name and arguments)"
        return _Call(position, _get(item, "id"), _get(function, "name"), _get(function, "arguments"))
    if kind == "tool_call" or (kind is _MISSING and _get(item, "args") is not _MISSING):
        # LangChain's ToolCall (`ai_message.tool_calls`): name, args (already parsed) and id.
        return _Call(position, _get(item, "id"), _get(item, "name"), _get(item, "args"))
    if kind == "tool_use":
        return f"item #{position} is an Anthropic tool_use block; read Anthropic output with plan_from_anthropic"
    if kind in ("custom", "custom_tool_call"):
        return (
            f"item #{position} is a custom tool call (free-form input); saga tools take JSON arguments, so define "
            "them as function tools (registry.to_openai_tools())"
        )
    if not isinstance(kind, str):
        return f"item #{position} is not a tool call: expected a tool call or an output item, got {_preview(item)}"
    # Other output items (message, reasoning, calls of OpenAI's hosted tools) are not for saga tools to run.
    return None


def plan_from_openai(message_or_tool_calls: Any) -> list[list[dict[str, Any]]]:
    """Return the plan of one OpenAI assistant turn: its tool calls as one group; raise `PlanValidationError`.

    Accepts a Chat Completions assistant message, its `tool_calls`, a chat completion with one choice, a Responses
    API response or its `output` list (message and reasoning items are skipped), as dicts or SDK objects, and
    LangChain's tool calls (`ai_message.tool_calls`, or the AIMessage itself). Each
    call becomes `{"tool": name, "args": arguments, "id": call_id}`; JSON arguments are parsed (an empty string
    means no arguments). Every faulty call is reported at once: malformed JSON, arguments that are not an object,
    a missing name or id, an id with a '.' or over 200 bytes, a repeated id, text that is not Unicode (a lone
    surrogate); so is a turn without any tool call.
    """
    problems: list[str] = []
    entries: list[_Call | str] = []
    for position, item in enumerate(_openai_items(message_or_tool_calls, problems), start=1):
        entry = _openai_call(item, position)
        if entry is not None:
            entries.append(entry)
    return _plan(entries, problems, "the OpenAI output")


# -- Anthropic -------------------------------------------------------------------------------------------------


def _anthropic_blocks(source: Any, problems: list[str]) -> list[Any]:
    if _is_list(source):
        return list(source)
    if not isinstance(source, str | bytes) and source is not None:
        content = _get(source, "content")
        if _is_list(content):
            return list(content)
        if isinstance(content, str):
            return []  # a reply in text only
    problems.append(f"expected an Anthropic message or its content blocks, got {type(source).__name__}")
    return []


def plan_from_anthropic(message_or_content: Any) -> list[list[dict[str, Any]]]:
    """Return the plan of one Anthropic assistant turn: its tool_use blocks as one group.

    Accepts a Messages API message or its `content` list, as dicts or SDK objects; text and thinking blocks (and
    Anthropic's own server tools) are skipped. Each `tool_use` block becomes `{"tool": name, "args": input,
    "id": block_id}`. Every faulty block is reported at once in one `PlanValidationError`, as is a turn without
    any tool_use block.
    """
    problems: list[str] = []
    entries: list[_Call | str] = []
    for position, block in enumerate(_anthropic_blocks(message_or_content, problems), start=1):
        kind = _get(block, "type")
        if kind == "tool_use":
            entries.append(_Call(position, _get(block, "id"), _get(block, "name"), _get(block, "input")))
        elif kind in ("function", "function_call") or _get(block, "function") is not _MISSING:
            entries.append(f"block #{position} is an OpenAI tool call; read OpenAI output with plan_from_openai")
        elif not isinstance(kind, str):
            entries.append(f"block #{position} is not a content block: {_preview(block)}")
    return _plan(entries, problems, "the Anthropic message")
