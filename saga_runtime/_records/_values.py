"""What a store can hold: the one rule every store keeps for JSON values, and the copies tools are handed.

Every store keeps the same values, so a saga behaves the same whichever store it runs on. A value (a result, a
step's arguments, a saga's plan or metadata) is stored as JSON when:

- its text is Unicode without NUL, in strings and keys alike: no database encodes a lone surrogate, and
  PostgreSQL refuses NUL (`\\x00`) in text and JSON;
- its integers lie from `MIN_JSON_INT` (-2**63) to `MAX_JSON_INT` (2**64 - 1): MySQL's JSON keeps integers as
  64-bit numbers (a larger one silently becomes a float), and Python reads back no integer of more than 4,300
  digits. Larger numbers are stored as strings;
- its containers nest at most `MAX_JSON_DEPTH` (24) levels: MariaDB refuses JSON nested 32 deep, and a stored
  plan holds arguments five levels further down;
- its JSON text takes at most `MAX_JSON_BYTES` (4,000,000) bytes in UTF-8: a step row holds its arguments and its
  result, and the two at that limit, every character escaped, still fit in one packet of MariaDB's default
  `max_allowed_packet` (16 MiB);
- it is not an iterator or a generator: storing one consumes it, so the record would not hold what the tool
  returned.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import pydantic
import pydantic_core

from saga_runtime._exceptions import ResultNotStorableError

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_JSON_INT",
    "MIN_JSON_INT",
    "check_nesting",
    "json_problem",
    "nesting_problem",
    "own_copy",
    "own_values",
    "to_json_value",
]

MAX_JSON_BYTES = 4_000_000
MAX_JSON_DEPTH = 24
MIN_JSON_INT = -(2**63)
MAX_JSON_INT = 2**64 - 1

# A string of at most this many characters fits MAX_JSON_BYTES whatever it holds (a character takes at most six
# bytes of JSON: `\u001f`); only a longer one has its JSON measured.
_SAFE_CHARS = (MAX_JSON_BYTES - 2) // 6
# Compact JSON, as the stores write it: only its size is read.
_compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False).encode

_NUL = "a NUL character (\\x00), which PostgreSQL cannot store"
_DEEP = f"its containers nest more than {MAX_JSON_DEPTH} levels deep (MariaDB refuses JSON nested 32 deep)"
_SURROGATE = "a lone surrogate, which is no Unicode text (no database can encode it)"


def _text_problem(text: str) -> str | None:
    """Return why a string cannot be stored (NUL, a lone surrogate), or None."""
    if "\x00" in text:
        return _NUL
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return _SURROGATE
    return None


def _int_problem(number: int) -> str:
    return (
        f"an integer of {number.bit_length()} bits, outside {MIN_JSON_INT} .. {MAX_JSON_INT}, the integers every "
        "store keeps exactly (store larger numbers as strings)"
    )


def _size_problem(value: Any) -> str | None:
    """Return why a value is too large to store, or None; measures its JSON (only done for large values)."""
    text = _compact(value)
    size = len(text) if text.isascii() else len(text.encode())
    if size <= MAX_JSON_BYTES:
        return None
    return (
        f"its JSON takes {size / 1e6:.1f} MB, more than the {MAX_JSON_BYTES / 1e6:g} MB one stored value may "
        "take; keep large data elsewhere and return a reference to it"
    )


def json_problem(value: Any) -> str | None:
    """Return why a JSON value (dicts, lists, str, int, float, bool, None) cannot be stored, or None if it can.

    Walks containers level by level, never recursing, and stops at the first level past `MAX_JSON_DEPTH`.
    """
    kind = type(value)
    if kind is str:
        problem = _text_problem(value)
        return problem if problem is not None or len(value) <= _SAFE_CHARS else _size_problem(value)
    if kind is int:
        return None if MIN_JSON_INT <= value <= MAX_JSON_INT else _int_problem(value)
    if kind is not dict and kind is not list:
        return None
    level: list[Any] = [value]
    depth = 0
    chars = 0  # characters of the strings and keys seen
    count = 2  # the values and keys seen, and the brackets
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            return _DEEP
        below: list[Any] = []
        for node in level:
            count += len(node)
            if type(node) is dict:
                try:
                    keys = "".join(node)  # every key at once: one check each for NUL and non-ASCII text
                except TypeError:
                    return "a key that is not a string; JSON keys are strings"
                if "\x00" in keys or not keys.isascii():
                    problem = _text_problem(keys)
                    if problem is not None:
                        return f"a key holds {problem}"
                chars += len(keys)
                count += len(node)
                items: Any = node.values()
            else:
                items = node
            for item in items:
                kind = type(item)
                if kind is str:
                    if "\x00" in item or not item.isascii():
                        problem = _text_problem(item)
                        if problem is not None:
                            return f"a string holds {problem}"
                    chars += len(item)
                elif kind is int:
                    if not MIN_JSON_INT <= item <= MAX_JSON_INT:
                        return _int_problem(item)
                elif kind is dict or kind is list:
                    below.append(item)
        level = below
    # A character takes at most six bytes of JSON, anything else (quotes, separators, a number) at most 24.
    return None if 6 * chars + 24 * count <= MAX_JSON_BYTES else _size_problem(value)


_LEAVES = frozenset({str, int, float, bool, type(None)})


def _members(node: Any) -> Any:
    """Return the (name, value) pairs a container holds (`()` if it holds no container), or None if no container."""
    kind = type(node)
    if kind is dict:
        return () if _LEAVES.issuperset(map(type, node.values())) else node.items()
    if kind is list:
        return () if _LEAVES.issuperset(map(type, node)) else enumerate(node)
    if kind in _LEAVES:
        return None
    if isinstance(node, Mapping):
        return node.items()
    if isinstance(node, list | tuple):
        return enumerate(node)
    if isinstance(node, set | frozenset):
        return (("*", item) for item in node)
    if isinstance(node, pydantic.BaseModel):
        return vars(node).items()
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return ((field.name, getattr(node, field.name, None)) for field in dataclasses.fields(node))
    return None


def nesting_problem(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Return where a value's containers nest more than `max_depth` levels or hold themselves, or None.

    Walks mappings, lists, tuples, sets, pydantic models and dataclasses without recursing (a value nested
    thousands deep, or cyclic, is refused rather than raising `RecursionError`); the path is dotted, as in `$ref`.
    """
    members = _members(value)
    if members is None:
        return None
    # Depth first, each frame an iterator over its container's members; `on_path` holds the open containers.
    frames: list[tuple[Any, Any]] = [(value, iter(members))]
    path: list[str] = []
    on_path = {id(value)}
    while frames:
        node, items = frames[-1]
        for name, item in items:
            if type(item) in _LEAVES:
                continue
            inner = _members(item)
            if inner is None:
                continue
            if id(item) in on_path:
                return f"it holds itself at {'.'.join([*path, str(name)])!r} (a cycle), which JSON cannot hold"
            if len(frames) >= max_depth:
                return f"{_DEEP}, at {'.'.join([*path, str(name)])!r}"
            if inner == ():
                continue  # a container of scalars: nothing below it
            frames.append((item, iter(inner)))
            path.append(str(name))
            on_path.add(id(item))
            break
        else:
            frames.pop()
            on_path.discard(id(node))
            if path:
                path.pop()
    return None


def check_nesting(value: Any, *, what: str, tool_name: str) -> None:
    """Raise `ResultNotStorableError` if `value` nests too deep for any store or holds itself (see above)."""
    problem = nesting_problem(value)
    if problem is not None:
        raise _refused(what, tool_name, value, problem)


def to_json_value(value: Any, *, what: str, tool_name: str) -> Any:
    """Return `value` as the JSON-able structure it is stored as; raise `ResultNotStorableError` if it has none.

    Pydantic models, dataclasses, datetimes, Decimals, UUIDs, enums, sets and tuples convert; NaN and infinities
    become null, as in JSON. What no store can hold is refused, the same on every store (see the module docstring).
    """
    kind = type(value)
    if value is None or kind is bool:
        return value  # already JSON, as pydantic would return it
    if kind is str:
        if len(value) <= _SAFE_CHARS and "\x00" not in value and (value.isascii() or _text_problem(value) is None):
            return value
        converted: Any = value
    elif kind is int:
        if MIN_JSON_INT <= value <= MAX_JSON_INT:
            return value
        converted = value
    else:
        if kind is not dict and kind is not list and getattr(kind, "__next__", None) is not None:
            raise _refused(
                what,
                tool_name,
                value,
                "an iterator or generator is consumed by storing it, so the record would not hold what was "
                "returned; return a list",
            )
        try:
            converted = pydantic_core.to_jsonable_python(value, inf_nan_mode="null")
        except (pydantic_core.PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
            reason = str(exc)
            if "surrogates not allowed" in reason:  # pydantic encodes keys to UTF-8 as it converts them
                reason = f"a key holds {_SURROGATE}"
            elif isinstance(exc, RecursionError) or "depth exceeded" in reason:
                reason = nesting_problem(value) or _DEEP  # says where
            elif "Circular reference" in reason:
                reason = nesting_problem(value) or "it holds itself (a cycle), which JSON cannot hold"
            raise _refused(what, tool_name, value, reason) from None
    problem = json_problem(converted)
    if problem is not None:
        if problem is _DEEP:
            problem = nesting_problem(converted) or problem  # says where
        raise _refused(what, tool_name, value, problem)
    return converted


def _refused(what: str, tool_name: str, value: Any, reason: str) -> ResultNotStorableError:
    type_name = type(value).__qualname__
    return ResultNotStorableError(
        f"{what} of tool {tool_name!r} cannot be stored as JSON: {type_name} ({reason}). Return JSON-like values, "
        "pydantic models or dataclasses",
        tool_name=tool_name,
        type_name=type_name,
    )


def own_copy(value: Any) -> Any:
    """Return a JSON container (dict or list) deep-copied, anything else as it is.

    What a tool is handed is its own: a tool changing its arguments (or the result its compensation gets) in
    place must not change the record (a stored result another step's `$ref` points to, a row's sealed args).
    Only dicts and lists can be shared with records; scalars are immutable and validated models are new objects.
    A value `copy.deepcopy` cannot copy (nested past the recursion limit, or holding a lock or a socket: a result
    refused for storing, handed to `compensate`) has its dicts and lists copied, the objects in them shared.
    """
    if type(value) is not dict and type(value) is not list:
        return value
    try:
        return copy.deepcopy(value)
    except Exception:  # RecursionError, or an object that refuses copying (TypeError: cannot pickle ...)
        return _copy_containers(value)


def _copy_containers(value: dict[Any, Any] | list[Any]) -> Any:
    """Return `value` with every dict and list in it copied (shared ones copied once), iteratively."""
    copies: dict[int, Any] = {}  # id of an original container -> its copy
    pending: list[Any] = []

    def copied(node: Any) -> Any:
        found = copies.get(id(node))
        if found is None:
            found = copies[id(node)] = dict(node) if type(node) is dict else list(node)
            pending.append(found)
        return found

    top = copied(value)
    while pending:
        node = pending.pop()
        if type(node) is dict:
            for key, item in node.items():  # replacing values (no key added or removed) is safe while iterating
                if type(item) is dict or type(item) is list:
                    node[key] = copied(item)
        else:
            for index, item in enumerate(node):
                if type(item) is dict or type(item) is list:
                    node[index] = copied(item)
    return top


def own_values(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Return `kwargs` with every dict or list value deep-copied (see `own_copy`); the same dict if none is."""
    for value in kwargs.values():
        if type(value) is dict or type(value) is list:
            return {name: own_copy(item) for name, item in kwargs.items()}
    return kwargs
