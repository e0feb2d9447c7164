"""The JSON values every store keeps alike, and tools' own copies.

A value (result, arguments, plan, metadata) is stored when:

- its text has no NUL (PostgreSQL refuses it) and no lone surrogate (no database encodes one);
- its integers lie in -2**63 .. 2**64 - 1: MySQL's JSON turns larger ones into floats;
- it nests at most 24 levels: MariaDB refuses 32, and a plan holds arguments five levels down;
- its JSON takes at most 4,000,000 bytes: arguments and result at that limit, fully escaped, fit one
  16 MiB MariaDB packet;
- it is no iterator or generator: storing one consumes it.
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

# Fits MAX_JSON_BYTES whatever it holds: a character is at most six bytes of JSON (`\u001f`).
_SAFE_CHARS = (MAX_JSON_BYTES - 2) // 6
# As the stores write it; only its size is read.
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
    """Return why a value is too large to store, or None."""
    text = _compact(value)
    size = len(text) if text.isascii() else len(text.encode())
    if size <= MAX_JSON_BYTES:
        return None
    return (
        f"its JSON takes {size / 1e6:.1f} MB, more than the {MAX_JSON_BYTES / 1e6:g} MB one stored value may "
        "take; keep large data elsewhere and return a reference to it"
    )


def json_problem(value: Any) -> str | None:
    """Return why a JSON value cannot be stored, or None; never recurses."""
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
    chars = 0  # of strings and keys
    count = 2  # values, keys and brackets
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            return _DEEP
        below: list[Any] = []
        for node in level:
            count += len(node)
            if type(node) is dict:
                try:
                    keys = "".join(node)  # one check for all keys
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
    # Six bytes at most per character, 24 per anything else.
    return None if 6 * chars + 24 * count <= MAX_JSON_BYTES else _size_problem(value)


_LEAVES = frozenset({str, int, float, bool, type(None)})


def _members(node: Any) -> Any:
    """Return a container's (name, value) pairs, `()` if only leaves, None if no container."""
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
    """Return where a value nests past `max_depth` or holds itself (a dotted path), or None.

    Iterative, so a value nested thousands deep is refused, not a `RecursionError`.
    """
    members = _members(value)
    if members is None:
        return None
    # Depth first; `on_path` holds the open containers.
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
                continue
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
    """Raise `ResultNotStorableError` if `value` nests too deep or holds itself."""
    problem = nesting_problem(value)
    if problem is not None:
        raise _refused(what, tool_name, value, problem)


def to_json_value(value: Any, *, what: str, tool_name: str) -> Any:
    """Return `value` as stored JSON (NaN becomes null), else raise `ResultNotStorableError`."""
    kind = type(value)
    if value is None or kind is bool:
        return value
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
            if "surrogates not allowed" in reason:  # from a key
                reason = f"a key holds {_SURROGATE}"
            elif isinstance(exc, RecursionError) or "depth exceeded" in reason:
                reason = nesting_problem(value) or _DEEP  # with where
            elif "Circular reference" in reason:
                reason = nesting_problem(value) or "it holds itself (a cycle), which JSON cannot hold"
            raise _refused(what, tool_name, value, reason) from None
    problem = json_problem(converted)
    if problem is not None:
        if problem is _DEEP:
            problem = nesting_problem(converted) or problem  # with where
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
    """Return a dict or list deep-copied, anything else as it is.

    A tool changing what it is handed must not change the record; only dicts and lists are shared with it.
    What `deepcopy` refuses (too deep, or holding a lock) has only its containers copied.
    """
    if type(value) is not dict and type(value) is not list:
        return value
    try:
        return copy.deepcopy(value)
    except Exception:  # RecursionError, or TypeError: cannot pickle
        return _copy_containers(value)


def _copy_containers(value: dict[Any, Any] | list[Any]) -> Any:
    """Return `value` with every dict and list in it copied once, iteratively."""
    copies: dict[int, Any] = {}  # id(original) -> copy
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
            for key, item in node.items():  # replacing values while iterating is safe
                if type(item) is dict or type(item) is list:
                    node[key] = copied(item)
        else:
            for index, item in enumerate(node):
                if type(item) is dict or type(item) is list:
                    node[index] = copied(item)
    return top


#: The types of argument values a tool cannot change in place: handed to it as they are. Any other value (a dict, a
#: list, a tuple holding one, a set, a model) is deep-copied for each call, so that a tool changing it changes
#: neither the record nor what a retry or a later step is handed.
IMMUTABLE_VALUES = frozenset({str, int, float, bool, type(None), bytes})


def own_values(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Return `kwargs` with every value not of `IMMUTABLE_VALUES`' types deep-copied; the same dict if none is."""
    for value in kwargs.values():
        if type(value) not in IMMUTABLE_VALUES:
            return {name: item if type(item) in IMMUTABLE_VALUES else _own(item) for name, item in kwargs.items()}
    return kwargs


def _own(value: Any) -> Any:
    """Return a deep copy of an argument value; what `deepcopy` refuses (too deep, holding a lock) has only its
    dicts and lists copied (`own_copy`'s way), or is handed as it is if it is neither."""
    try:
        return copy.deepcopy(value)
    except Exception:  # RecursionError, or TypeError: cannot pickle
        return _copy_containers(value) if type(value) is dict or type(value) is list else value
