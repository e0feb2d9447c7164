"""`$ref` arguments: `{"$ref": "<id>"}` or `{"$ref": "<id>.<key>.<index>"}`, replaced by earlier results."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from saga_runtime._records import json_problem

__all__ = ["RefError", "find_refs", "is_ref", "ref_target", "resolve_refs"]

REF_KEY = "$ref"


class RefError(ValueError):
    """A `$ref` that cannot be resolved; the message says which and why."""


def is_ref(value: Any) -> bool:
    """Tell whether `value` is a `$ref` object."""
    return type(value) is dict and REF_KEY in value


def ref_target(ref: Any) -> tuple[str, list[str]]:
    """Return the id and path a `$ref` object points at; raise `RefError` if it is malformed."""
    if len(ref) != 1:
        raise RefError(f"a $ref object holds only the '$ref' key, got keys {sorted(ref)}")
    target = ref[REF_KEY]
    if not isinstance(target, str) or not target or any(part == "" for part in target.split(".")):
        raise RefError(f"$ref must be '<id>' or '<id>.<key>...', got {target!r}")
    head, *path = target.split(".")
    return head, path


def find_refs(value: Any) -> Iterator[dict[str, Any]]:
    """Yield every `$ref` object inside a JSON value."""
    if is_ref(value):
        yield value
    elif type(value) is dict:
        for item in value.values():
            yield from find_refs(item)
    elif type(value) is list:
        for item in value:
            yield from find_refs(item)


def _follow(value: Any, target: str, path: list[str]) -> Any:
    for part in path:
        if isinstance(value, dict):
            if part not in value:
                raise RefError(f"$ref {target!r}: no key {part!r} (keys: {sorted(value)})")
            value = value[part]
        elif isinstance(value, list):
            if not part.lstrip("-").isdigit() or not -len(value) <= int(part) < len(value):
                raise RefError(f"$ref {target!r}: {part!r} is not an index of a list of {len(value)}")
            value = value[int(part)]
        else:
            raise RefError(f"$ref {target!r}: cannot take {part!r} of a {type(value).__name__}")
    return value


def resolve_refs(value: Any, lookup: Callable[[str], Any]) -> Any:
    """Return `value` with every `$ref` replaced; `lookup(id)` returns an id's result or raises `RefError`.

    Raise `RefError` too if the value with its results in place is more than a store can hold (results each
    within the limits, several of them together, or one placed deep in the arguments, may not be).
    """
    resolved = _resolve(value, lookup)
    problem = json_problem(resolved)
    if problem is not None:
        raise RefError(f"the arguments with their $refs resolved cannot be stored: {problem}")
    return resolved


def _resolve(value: Any, lookup: Callable[[str], Any]) -> Any:
    if is_ref(value):
        head, path = ref_target(value)
        return _follow(lookup(head), value[REF_KEY], path)
    if type(value) is dict:
        return {key: _resolve(item, lookup) for key, item in value.items()}
    if type(value) is list:
        return [_resolve(item, lookup) for item in value]
    return value
