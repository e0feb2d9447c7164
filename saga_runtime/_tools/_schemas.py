"""Tool definitions for OpenAI (plain or strict) and Anthropic.

The strict schema stays truthful: all the model can send under it passes the tool's validation. Every
object requires all its properties and forbids others; a field accepting None is nullable, one with another
default is required, its default noted (strict mode has no `default`); refused keywords (`minLength`, ...)
become notes; recursive models stay in `$defs`; what cannot be expressed (`Any`, free dicts, tuples) raises
`ValueError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from saga_runtime._tools._spec import ToolSpec

__all__ = ["anthropic_tool", "openai_tool", "openai_tools", "plain_schema", "strict_schema"]

# OpenAI's "Supported schemas".
_STRICT_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})
# Kept as they are; structural ones are handled one by one.
_STRICT_KEEP = frozenset(
    {
        "type",
        "description",
        "enum",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
# Dropped without a note.
_ANNOTATIONS = frozenset(
    {"title", "$schema", "$id", "$comment", "examples", "discriminator", "readOnly", "writeOnly", "deprecated"}
)
# Dealt with by `convert`.
_STRUCTURE = frozenset({"properties", "required", "additionalProperties", "items", "$defs", "definitions"})
_SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})
# Where a schema holds schemas: a dict of them, a list, or one.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = (
    "items",
    "additionalProperties",
    "not",
    "contains",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)


def _without_titles(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _without_titles(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_without_titles(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = _without_titles(value)
        else:
            out[key] = value
    return out


def plain_schema(spec: ToolSpec) -> dict[str, Any]:
    """Return a tool's argument schema without `title`s."""
    schema: dict[str, Any] = _without_titles(spec.args_schema)
    schema.setdefault("properties", {})
    return schema


def _note(description: Any, notes: list[str]) -> str | None:
    if not notes:
        return description if isinstance(description, str) else None
    text = "; ".join(notes)
    return f"{description} ({text})" if isinstance(description, str) and description else text


class _Strict:
    """Convert a tool's argument schema to strict mode, collecting problems."""

    def __init__(self, spec: ToolSpec) -> None:
        self.tool = spec.name
        self.root: dict[str, Any] = spec.args_schema
        self.defs: dict[str, Any] = self.root.get("$defs", {})
        self.problems: list[str] = []
        self.needed: list[str] = []  # recursive models

    def refuse(self, path: tuple[str, ...], what: str) -> dict[str, Any]:
        where = ".".join(path) or "(arguments)"
        self.problems.append(
            f"tool {self.tool!r}: argument {where!r} is {what}, which OpenAI strict mode cannot express; give it "
            "a precise type (a pydantic model for structured values) or use strict=False"
        )
        return {}

    def run(self) -> dict[str, Any]:
        schema = self.convert(self.root, (), (), root=True)
        kept: dict[str, Any] = {}
        while len(kept) < len(self.needed):
            name = next(n for n in self.needed if n not in kept)
            kept[name] = self.convert(self.defs[name], (name,), (name,))
        if kept:
            schema["$defs"] = kept
        return schema

    def resolve(self, node: dict[str, Any], path: tuple[str, ...], stack: tuple[str, ...]) -> dict[str, Any]:
        """Inline `node`'s `$ref` (its own keys win), or keep it for a recursive model."""
        node = dict(node)
        ref = node.pop("$ref")
        prefix = "#/$defs/"
        name = ref[len(prefix) :] if isinstance(ref, str) and ref.startswith(prefix) else None
        if name is None or not isinstance(self.defs.get(name), dict):
            return self.refuse(path, f"a reference ({ref!r}) to no definition")
        if name in stack:
            if name not in self.needed:
                self.needed.append(name)
            siblings = self.convert({k: v for k, v in node.items() if k != "type"}, path, stack, bare=True)
            target = {"$ref": prefix + name}
            # Strict mode allows keywords beside an `anyOf`, not a `$ref`.
            return {"anyOf": [target], **siblings} if siblings else target
        return self.convert({**self.defs[name], **node}, path, (*stack, name))

    def convert(
        self,
        node: Any,
        path: tuple[str, ...],
        stack: tuple[str, ...],
        *,
        root: bool = False,
        bare: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(node, dict):
            return self.refuse(path, "a value of any type")
        if "$ref" in node:
            return self.resolve(node, path, stack)
        node = dict(node)
        all_of = node.pop("allOf", None)
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
            return self.convert({**all_of[0], **node}, path, stack)
        if all_of is not None:
            return self.refuse(path, "an intersection (allOf)")
        out: dict[str, Any] = {}
        notes: list[str] = []
        if "default" in node:
            default = node.pop("default")
            if default is not None:
                notes.append(f"default: {json.dumps(default, ensure_ascii=False, default=str)}")
        if "const" in node and "enum" not in node:
            node["enum"] = [node.pop("const")]
        node.pop("const", None)
        variants = node.pop("anyOf", None)
        if variants is None:
            variants = node.pop("oneOf", None)  # discriminated: variants already exclusive
        if "prefixItems" in node:
            return self.refuse(path, "a tuple")
        kind = node.get("type")
        if kind == "object" or "properties" in node:
            self.object(node, out, path, stack, root=root)
        elif kind == "array":
            out["type"] = "array"
            items = node.get("items")
            out["items"] = (
                self.refuse((*path, "items"), "a list of any values")
                if items is None or items is True or items == {}
                else self.convert(items, (*path, "items"), stack)
            )
        elif kind is None and variants is None and "enum" not in node and not bare:
            return self.refuse(path, "a value of any type")
        if isinstance(variants, list):
            out["anyOf"] = [self.convert(v, path, stack) for v in variants]
        for key, value in node.items():
            if key in _STRUCTURE or key in _ANNOTATIONS:
                continue
            if key == "format" and value not in _STRICT_FORMATS:
                notes.append(f"format: {value}")
            elif key in _STRICT_KEEP or key == "format":
                out.setdefault(key, value)
            else:
                notes.append(f"{key}: {json.dumps(value, ensure_ascii=False, default=str)}")
        description = _note(out.pop("description", None), notes)
        if description is not None:
            out["description"] = description
        return _collapse_nullable(out)

    def object(
        self,
        node: dict[str, Any],
        out: dict[str, Any],
        path: tuple[str, ...],
        stack: tuple[str, ...],
        *,
        root: bool,
    ) -> None:
        properties = node.get("properties")
        extra = node.get("additionalProperties")
        if not isinstance(properties, dict):  # `dict[str, X]`: free keys
            properties = {}
            if not root:
                self.refuse(path, "a mapping with free keys")
        elif extra not in (None, False) and (not root or not properties):
            self.refuse(path, "a mapping with free keys")
        # **kwargs left out: still a truthful subset.
        out["type"] = "object"
        out["properties"] = {name: self.convert(sub, (*path, name), stack) for name, sub in properties.items()}
        out["required"] = list(properties)
        out["additionalProperties"] = False


def _collapse_nullable(out: dict[str, Any]) -> dict[str, Any]:
    """Write a nullable scalar's `anyOf` as `"type": [T, "null"]`."""
    variants = out.get("anyOf")
    if not (isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants):
        return out
    (other,) = [v for v in variants if v != {"type": "null"}] or [None]
    if not isinstance(other, dict) or other.get("type") not in _SCALAR_TYPES or "enum" in other:
        return out
    merged = {**other, **{k: v for k, v in out.items() if k != "anyOf"}}
    merged["type"] = [other["type"], "null"]
    return merged


def strict_schema(spec: ToolSpec) -> dict[str, Any]:
    """Return a tool's argument schema in strict mode, else raise `ValueError`."""
    converter = _Strict(spec)
    schema = converter.run()
    if converter.problems:
        raise ValueError("\n".join(converter.problems))
    return schema


OPENAI_APIS = ("chat", "responses")


def openai_tool(spec: ToolSpec, *, strict: bool = False, api: str = "chat") -> dict[str, Any]:
    """Return a tool as an OpenAI function tool, in strict mode if `strict`.

    `api`: "chat" (Chat Completions) or "responses" (flat, always saying `strict`: missing means strict there).
    """
    if api not in OPENAI_APIS:
        raise ValueError(f"api must be 'chat' or 'responses', got {api!r}")
    function: dict[str, Any] = {"name": spec.name}
    if spec.description:
        function["description"] = spec.description
    function["parameters"] = strict_schema(spec) if strict else plain_schema(spec)
    if api == "responses":
        return {"type": "function", **function, "strict": strict}
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def openai_tools(specs: Iterable[ToolSpec], *, strict: bool = False, api: str = "chat") -> list[dict[str, Any]]:
    """Return OpenAI function tools; with `strict`, one `ValueError` names every problem."""
    if api not in OPENAI_APIS:
        raise ValueError(f"api must be 'chat' or 'responses', got {api!r}")
    tools: list[dict[str, Any]] = []
    problems: list[str] = []
    for spec in specs:
        try:
            tools.append(openai_tool(spec, strict=strict, api=api))
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("\n".join(problems))
    return tools


def anthropic_tool(spec: ToolSpec) -> dict[str, Any]:
    """Return a tool as an Anthropic Messages API tool."""
    tool: dict[str, Any] = {"name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["input_schema"] = plain_schema(spec)
    return tool
