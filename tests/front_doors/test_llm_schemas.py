"""Tool definitions for LLM providers: OpenAI (plain and strict mode) and Anthropic, from the argument models."""

from __future__ import annotations

import datetime
import enum
from typing import Annotated, Any, Literal

import pydantic
import pytest
from pydantic import BaseModel, Field

from saga_runtime import ToolRegistry


class Color(enum.StrEnum):
    """A paint color."""

    RED = "red"
    GREEN = "green"


class Address(BaseModel):
    """Where a parcel goes."""

    street: str
    city: str
    zip: str | None = None


class Item(BaseModel):
    sku: str
    quantity: int = 1
    color: Color = Color.RED


class Node(BaseModel):
    """A tree node."""

    name: str
    children: list[Node] = []


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


def make_registry() -> ToolRegistry:
    """Return a registry of tools with nested models, enums, optionals, defaults and lists."""
    registry = ToolRegistry()

    @registry.tool(name="place_order")
    class PlaceOrder:
        """Place an order for a customer."""

        async def execute(
            self,
            customer: str,
            items: list[Item],
            address: Address,
            priority: Literal["low", "high"] = "low",
            note: str | None = None,
            gift_address: Address | None = None,
            tags: list[str] = [],  # noqa: B006 - a default the schema shows, never mutated
            color: Color | None = None,
            copies: Annotated[int, Field(ge=1, description="How many copies")] = 2,
        ) -> dict[str, Any]:
            return {"order": customer}

        async def compensate(self, result: dict[str, Any]) -> None:
            return None

    @registry.tool
    class Ping:
        def execute(self) -> str:
            return "pong"

    return registry


# The exact strict-mode definition of place_order: every property required at every level, no extra properties,
# None-accepting fields nullable, other defaults named in the description, nested models inlined.
ADDRESS_STRICT = {
    "type": "object",
    "description": "Where a parcel goes.",
    "properties": {"street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": ["string", "null"]}},
    "required": ["street", "city", "zip"],
    "additionalProperties": False,
}
PLACE_ORDER_STRICT = {
    "type": "function",
    "function": {
        "name": "place_order",
        "description": "Place an order for a customer.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "customer": {"type": "string"},
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "sku": {"type": "string"},
                            "quantity": {"type": "integer", "description": "default: 1"},
                            "color": {
                                "type": "string",
                                "enum": ["red", "green"],
                                "description": 'A paint color. (default: "red")',
                            },
                        },
                        "required": ["sku", "quantity", "color"],
                        "additionalProperties": False,
                    },
                },
                "address": ADDRESS_STRICT,
                "priority": {"type": "string", "enum": ["low", "high"], "description": 'default: "low"'},
                "note": {"type": ["string", "null"]},
                "gift_address": {"anyOf": [ADDRESS_STRICT, {"type": "null"}]},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "default: []"},
                "color": {
                    "anyOf": [
                        {"type": "string", "enum": ["red", "green"], "description": "A paint color."},
                        {"type": "null"},
                    ]
                },
                "copies": {"type": "integer", "minimum": 1, "description": "How many copies (default: 2)"},
            },
            "required": [
                "customer",
                "items",
                "address",
                "priority",
                "note",
                "gift_address",
                "tags",
                "color",
                "copies",
            ],
            "additionalProperties": False,
        },
    },
}

# Keywords OpenAI's strict mode refuses, or that pydantic writes and strict mode has no use for.
FORBIDDEN = {"default", "title", "oneOf", "allOf", "const", "discriminator", "minLength", "maxLength", "uniqueItems"}


def titles(schema: Any) -> Any:
    """Yield every `title` keyword of a schema (not a property named title)."""
    if isinstance(schema, dict):
        if "title" in schema:
            yield schema["title"]
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                for sub in value.values():
                    yield from titles(sub)
            elif key in ("items", "anyOf", "additionalProperties"):
                yield from titles(value)
    elif isinstance(schema, list):
        for sub in schema:
            yield from titles(sub)


def assert_strict(schema: Any, where: str = "parameters") -> None:
    """Assert that a schema keeps OpenAI's strict-mode rules at every level."""
    assert isinstance(schema, dict), where
    assert not FORBIDDEN & set(schema), f"{where}: {sorted(FORBIDDEN & set(schema))}"
    if "$ref" in schema:
        assert set(schema) == {"$ref"}, f"{where}: keywords beside a $ref"
    if schema.get("type") == "object":
        assert schema["additionalProperties"] is False, where
        assert schema["required"] == list(schema["properties"]), where
        for name, sub in schema["properties"].items():
            assert_strict(sub, f"{where}.{name}")
    elif "type" not in schema:
        assert "anyOf" in schema or "$ref" in schema or "enum" in schema, f"{where}: a schema without a type"
    if "items" in schema:
        assert_strict(schema["items"], f"{where}[]")
    for i, sub in enumerate(schema.get("anyOf", [])):
        assert_strict(sub, f"{where}|{i}")
    for name, sub in schema.get("$defs", {}).items():
        assert_strict(sub, f"$defs.{name}")


def test_strict_openai_definition_has_the_exact_strict_shape() -> None:
    """strict=True gives the documented strict-mode definition of a tool with nested models, enums and defaults."""
    (place_order, _) = make_registry().to_openai_tools(strict=True)
    assert place_order == PLACE_ORDER_STRICT
    assert_strict(place_order["function"]["parameters"])


def test_strict_schema_accepts_only_what_the_tool_accepts() -> None:
    """Arguments the strict schema allows (null for every nullable field, a value for every other) pass validation."""
    registry = make_registry()
    address = {"street": "1 Main St", "city": "Seoul", "zip": None}
    args = {
        "customer": "c-1",
        "items": [{"sku": "A", "quantity": 3, "color": "green"}],
        "address": address,
        "priority": "high",
        "note": None,
        "gift_address": None,
        "tags": [],
        "color": None,
        "copies": 1,
    }
    assert registry.get("place_order").check_args(args) == []
    assert registry.get("place_order").check_args({**args, "gift_address": address, "color": "red"}) == []


def test_strict_definition_of_a_tool_without_arguments() -> None:
    """A tool without arguments gets an empty, closed object schema in strict mode."""
    tools = make_registry().to_openai_tools(strict=True)
    assert tools[1] == {
        "type": "function",
        "function": {
            "name": "Ping",
            "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
            "strict": True,
        },
    }


def test_plain_openai_definition_is_the_argument_schema_without_titles() -> None:
    """strict=False gives the pydantic schema minus titles, defaults and $defs kept, and no strict flag."""
    registry = make_registry()
    (place_order, ping) = registry.to_openai_tools()
    function = place_order["function"]
    assert place_order["type"] == "function"
    assert set(function) == {"name", "description", "parameters"}
    assert function["name"] == "place_order"
    assert function["description"] == "Place an order for a customer."
    parameters = function["parameters"]
    assert parameters["required"] == ["customer", "items", "address"]
    assert parameters["properties"]["priority"] == {"type": "string", "enum": ["low", "high"], "default": "low"}
    assert parameters["properties"]["address"] == {"$ref": "#/$defs/Address"}
    assert parameters["$defs"]["Color"] == {"type": "string", "enum": ["red", "green"], "description": "A paint color."}
    assert not list(titles(parameters))
    assert ping == {
        "type": "function",
        "function": {
            "name": "Ping",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    }


def test_anthropic_definitions_carry_name_description_and_input_schema() -> None:
    """to_anthropic_tools gives {name, description, input_schema} with the same schema as the plain OpenAI one."""
    registry = make_registry()
    anthropic = registry.to_anthropic_tools()
    openai = registry.to_openai_tools()
    assert [tool["name"] for tool in anthropic] == ["place_order", "Ping"]
    assert set(anthropic[0]) == {"name", "description", "input_schema"}
    assert anthropic[0]["description"] == "Place an order for a customer."
    assert "description" not in anthropic[1]
    assert [tool["input_schema"] for tool in anthropic] == [tool["function"]["parameters"] for tool in openai]
    assert anthropic[0]["input_schema"]["type"] == "object"


def test_definitions_are_fresh_copies() -> None:
    """Changing a returned definition does not change the next one."""
    registry = make_registry()
    first = registry.to_openai_tools(strict=True)
    first[0]["function"]["parameters"]["properties"].clear()
    registry.to_anthropic_tools()[0]["input_schema"]["properties"].clear()
    assert registry.to_openai_tools(strict=True)[0] == PLACE_ORDER_STRICT
    assert registry.to_anthropic_tools()[0]["input_schema"]["properties"]


def test_a_property_called_title_survives() -> None:
    """Only pydantic's `title` annotations are dropped, never an argument named `title`."""
    registry = ToolRegistry()

    @registry.tool
    class Publish:
        def execute(self, title: str, body: str = "") -> None:
            return None

    plain = registry.to_anthropic_tools()[0]["input_schema"]
    assert plain["properties"]["title"] == {"type": "string"}
    strict = registry.to_openai_tools(strict=True)[0]["function"]["parameters"]
    assert strict["properties"]["title"] == {"type": "string"}
    assert strict["required"] == ["title", "body"]


def test_recursive_models_stay_as_defs_in_strict_mode() -> None:
    """A recursive model is kept once in $defs and referenced by a bare $ref; everything else is inlined."""
    registry = ToolRegistry()

    @registry.tool
    class Plant:
        def execute(self, root: Node, parent: Annotated[Node | None, Field(description="Parent")] = None) -> None:
            return None

    parameters = registry.to_openai_tools(strict=True)[0]["function"]["parameters"]
    assert_strict(parameters)
    node = {
        "type": "object",
        "description": "A tree node.",
        "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "description": "default: []"},
        },
        "required": ["name", "children"],
        "additionalProperties": False,
    }
    assert parameters["properties"]["root"] == node
    assert parameters["properties"]["parent"] == {"anyOf": [node, {"type": "null"}], "description": "Parent"}
    assert parameters["$defs"] == {"Node": node}


def test_discriminated_unions_become_any_of() -> None:
    """A discriminated union (pydantic's oneOf) is written anyOf, its Literal tags as one-value enums."""
    registry = ToolRegistry()

    @registry.tool
    class Adopt:
        def execute(self, pet: Annotated[Cat | Dog, Field(discriminator="kind")]) -> None:
            return None

    pet = registry.to_openai_tools(strict=True)[0]["function"]["parameters"]["properties"]["pet"]
    assert_strict(pet)
    assert [variant["properties"]["kind"] for variant in pet["anyOf"]] == [
        {"type": "string", "enum": ["cat"]},
        {"type": "string", "enum": ["dog"]},
    ]
    assert pet["anyOf"][1]["required"] == ["kind", "good"]


def test_unsupported_keywords_move_into_the_description() -> None:
    """Constraints strict mode refuses become description notes; supported ones and formats stay keywords."""
    registry = ToolRegistry()

    @registry.tool
    class Book:
        def execute(
            self,
            code: Annotated[str, Field(min_length=3, max_length=8, pattern="^[A-Z]+$")],
            at: datetime.datetime,
            seats: Annotated[list[int], Field(min_length=1, max_length=4)],
            site: pydantic.AnyUrl | None = None,
        ) -> None:
            return None

    properties = registry.to_openai_tools(strict=True)[0]["function"]["parameters"]["properties"]
    assert properties["code"] == {"type": "string", "pattern": "^[A-Z]+$", "description": "maxLength: 8; minLength: 3"}
    assert properties["at"] == {"type": "string", "format": "date-time"}
    assert properties["seats"] == {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4}
    assert properties["site"]["type"] == ["string", "null"]
    assert "format" not in properties["site"]
    assert "format: uri" in properties["site"]["description"]


def test_strict_mode_refuses_what_it_cannot_express_naming_every_argument() -> None:
    """Any, free-form dicts and tuples raise one ValueError naming each tool and argument; plain mode takes them."""
    registry = ToolRegistry()

    @registry.tool
    class Loose:
        def execute(self, anything: Any, mapping: dict[str, int], pair: tuple[int, str], fine: int = 0) -> None:
            return None

    @registry.tool
    class Untyped:
        def execute(self, blob: dict, rows: list) -> None:  # type: ignore[type-arg]
            return None

    with pytest.raises(ValueError) as info:
        registry.to_openai_tools(strict=True)
    lines = str(info.value).splitlines()
    assert len(lines) == 5
    for tool, argument in [("Loose", "anything"), ("Loose", "mapping"), ("Loose", "pair"), ("Untyped", "blob")]:
        assert any(f"tool {tool!r}: argument {argument!r}" in line for line in lines), (tool, argument)
    assert any("'rows.items'" in line for line in lines)
    assert all("strict=False" in line for line in lines)
    assert len(registry.to_openai_tools()) == len(registry.to_anthropic_tools()) == 2


def test_kwargs_tools_offer_their_declared_arguments_in_strict_mode() -> None:
    """A tool taking **kwargs shows its declared arguments, closed; one taking only **kwargs is refused."""
    registry = ToolRegistry()

    @registry.tool
    class Tag:
        def execute(self, key: str, **labels: Any) -> None:
            return None

    parameters = registry.to_openai_tools(strict=True)[0]["function"]["parameters"]
    assert parameters == {
        "type": "object",
        "properties": {"key": {"type": "string"}},
        "required": ["key"],
        "additionalProperties": False,
    }

    @registry.tool
    class Anything:
        def execute(self, **labels: Any) -> None:
            return None

    with pytest.raises(ValueError, match="tool 'Anything': argument '\\(arguments\\)' is a mapping with free keys"):
        registry.to_openai_tools(strict=True)


def test_description_comes_from_the_docstring() -> None:
    """The class docstring (else execute's) is the description; a tool with neither has no description key."""
    registry = ToolRegistry()

    @registry.tool
    class Documented:
        """Do the documented thing."""

        def execute(self) -> None:
            return None

    @registry.tool
    class MethodDocumented:
        def execute(self) -> None:
            """Do the thing execute says."""

    @registry.tool
    class Bare:
        def execute(self) -> None:
            return None

    descriptions = [tool["function"].get("description") for tool in registry.to_openai_tools(strict=True)]
    assert descriptions == ["Do the documented thing.", "Do the thing execute says.", None]
    assert [tool.get("description") for tool in registry.to_anthropic_tools()] == descriptions
