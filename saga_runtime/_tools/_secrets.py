"""Which tool arguments are secrets, found once at registration in the argument model.

At any depth, a field is secret if typed `SecretStr`, `SecretBytes` or `Secret[...]`, or marked
`Annotated[str, Secret]` or `Field(json_schema_extra={"secret": True})`. The records layer walks the paths.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

__all__ = ["Secret", "secret_paths", "unwrap_secrets"]


class Secret:
    """Mark a tool argument (or model field) secret: `api_key: Annotated[str, Secret]`.

    Stored encrypted with the executor's key and shown masked; the tool gets the value as declared.
    """


def _marked(items: Sequence[Any]) -> bool:
    return any(item is Secret or isinstance(item, Secret) for item in items)


def _secret_type(annotation: Any) -> bool:
    secret_generic = getattr(pydantic, "Secret", None)
    origin = typing.get_origin(annotation) or annotation
    if not isinstance(origin, type):
        return False
    kinds: tuple[type, ...] = (pydantic.SecretStr, pydantic.SecretBytes)
    if isinstance(secret_generic, type):
        kinds += (secret_generic,)
    return issubclass(origin, kinds)


def _merge(nodes: list[Any]) -> Any:
    if any(node is True for node in nodes):
        return True
    merged: dict[str, Any] = {}
    for node in nodes:
        if isinstance(node, dict):
            for name, sub in node.items():
                merged[name] = _merge([merged[name], sub]) if name in merged else sub
    return merged or None


def _node(annotation: Any, stack: tuple[type, ...]) -> Any:
    """Return the secret paths inside an `annotation`: True, a dict of paths, or None."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extras = typing.get_args(annotation)
        if _marked(extras) or any(
            isinstance(extra, pydantic.fields.FieldInfo) and _field_secret(extra) for extra in extras
        ):
            return True
        return _node(inner, stack)
    if _secret_type(annotation):
        return True
    if origin is typing.Union or origin is types.UnionType:
        return _merge([_node(arg, stack) for arg in typing.get_args(annotation)])
    if origin in (list, tuple, set, frozenset) or (isinstance(origin, type) and issubclass(origin, Sequence)):
        items = [_node(arg, stack) for arg in typing.get_args(annotation) if arg is not Ellipsis]
        item = _merge(items)
        return None if item is None else {"*": item}
    if origin is dict or (isinstance(origin, type) and issubclass(origin, Mapping)):
        args = typing.get_args(annotation)
        value = _node(args[1], stack) if len(args) == 2 else None
        return None if value is None else {"*": value}
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel) and annotation not in stack:
        return _model_paths(annotation, (*stack, annotation))
    return None


def _field_secret(info: pydantic.fields.FieldInfo) -> bool:
    extra = info.json_schema_extra
    return (isinstance(extra, dict) and extra.get("secret") is True) or _marked(info.metadata)


def _model_paths(model: type[pydantic.BaseModel], stack: tuple[type, ...]) -> dict[str, Any] | None:
    paths: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        node = True if _field_secret(info) else _node(info.annotation, stack)
        if node is not None:
            paths[info.alias or name] = node
    return paths or None


def secret_paths(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """Return where the secrets stand in `model`'s arguments (empty if none)."""
    return _model_paths(model, (model,)) or {}


# A backstop: callers refuse values nested past 24 first.
_MAX_DEPTH = 100


def unwrap_secrets(value: Any, _depth: int = 0) -> Any:
    """Return a value with each pydantic secret object replaced by what it holds (else stored masked).

    Raise `ValueError` past 100 levels (or a cycle).
    """
    if _depth > _MAX_DEPTH:
        raise ValueError(f"the value nests more than {_MAX_DEPTH} levels deep, or holds itself")
    _depth += 1
    if isinstance(value, pydantic.SecretStr | pydantic.SecretBytes):
        return value.get_secret_value()
    secret_generic: Any = getattr(pydantic, "Secret", None)
    if isinstance(secret_generic, type) and isinstance(value, secret_generic):
        return typing.cast(Any, value).get_secret_value()
    if type(value) is dict:
        for item in value.values():
            if type(item) is not str and type(item) is not int and item is not None:
                break
        else:
            return value
        return {key: unwrap_secrets(item, _depth) for key, item in value.items()}
    if type(value) is list or type(value) is tuple:
        return [unwrap_secrets(item, _depth) for item in value]
    if isinstance(value, pydantic.BaseModel):
        return unwrap_secrets(value.model_dump(), _depth)
    return value
