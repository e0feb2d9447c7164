"""Arguments: validated against execute's type hints (pydantic, lax mode) before anything is stored or run."""

import enum
from typing import Any

import pydantic
import pytest

from saga_runtime import (
    PlanValidationError,
    SagaExecutor,
    SagaStatus,
    StepContext,
    ToolRegistry,
    UnknownToolError,
)


class Color(enum.StrEnum):
    RED = "red"
    GREEN = "green"


class Address(pydantic.BaseModel):
    street: str
    zip_code: int


class Customer(pydantic.BaseModel):
    name: str
    address: Address
    tags: list[str] = []


def make_registry(calls: list[tuple[str, dict[str, Any]]]) -> ToolRegistry:
    """Return a registry of tools that record (tool, kwargs) in `calls`."""
    registry = ToolRegistry()

    @registry.tool
    class Count:
        def execute(self, n: int) -> int:
            calls.append(("Count", {"n": n}))
            return n

    @registry.tool
    class Greet:
        async def execute(self, name: str, greeting: str = "hello", times: int = 1) -> str:
            calls.append(("Greet", {"name": name, "greeting": greeting, "times": times}))
            return f"{greeting} {name}" * times

    @registry.tool
    class Register:
        async def execute(
            self,
            customer: Customer,
            color: Color,
            ctx: StepContext,
            numbers: list[int],
            note: str | None = None,
        ) -> str:
            calls.append(("Register", {"customer": customer, "color": color, "numbers": numbers, "note": note}))
            return customer.name

    return registry


@pytest.fixture
def calls() -> list[tuple[str, dict[str, Any]]]:
    """Return the list the tools record their calls in."""
    return []


@pytest.fixture
def executor(calls: list[tuple[str, dict[str, Any]]]) -> SagaExecutor:
    """Return an executor (on a private memory store) over the recording tools."""
    return SagaExecutor(make_registry(calls))


async def test_lax_mode_turns_a_numeric_string_into_an_int(executor: SagaExecutor, calls: list) -> None:
    """Lax validation: "5" for an int parameter reaches the tool as the int 5."""
    result = await executor.run([{"tool": "Count", "args": {"n": "5"}}])
    assert result.status is SagaStatus.SUCCESS
    assert calls == [("Count", {"n": 5})]
    assert type(calls[0][1]["n"]) is int


async def test_lax_mode_accepts_an_integral_float_for_an_int(executor: SagaExecutor, calls: list) -> None:
    """Lax validation: 5.0 for an int parameter reaches the tool as 5."""
    await executor.run([{"tool": "Count", "args": {"n": 5.0}}])
    assert calls == [("Count", {"n": 5})]
    assert type(calls[0][1]["n"]) is int


@pytest.mark.parametrize("value", ["lots", "5.5", 5.5, None, [5], {"n": 5}])
async def test_values_that_are_not_ints_are_refused(executor: SagaExecutor, calls: list, value: object) -> None:
    """ "lots", fractional numbers, None, lists and dicts are never an int: the plan is refused, nothing runs."""
    with pytest.raises(PlanValidationError) as info:
        await executor.run([{"tool": "Count", "args": {"n": value}}])
    assert len(info.value.problems) == 1
    assert "'n'" in info.value.problems[0]
    assert calls == []
    assert await executor.store.list_sagas() == []


async def test_unknown_argument_names_are_refused(executor: SagaExecutor, calls: list) -> None:
    """An argument execute does not declare is refused, and the problem names it."""
    with pytest.raises(PlanValidationError) as info:
        await executor.run([{"tool": "Count", "args": {"n": 1, "extra": 2}}])
    assert len(info.value.problems) == 1
    assert "'extra'" in info.value.problems[0]
    assert calls == []


async def test_missing_required_argument_is_refused(executor: SagaExecutor, calls: list) -> None:
    """A required argument left out is refused, and the problem names it."""
    with pytest.raises(PlanValidationError) as info:
        await executor.run([{"tool": "Greet", "args": {"greeting": "hi"}}])
    assert len(info.value.problems) == 1
    assert "'name'" in info.value.problems[0]
    assert "required" in info.value.problems[0].lower()
    assert calls == []


async def test_step_context_is_not_an_argument(executor: SagaExecutor, calls: list) -> None:
    """Passing the StepContext parameter's name as an argument is refused like any unknown argument."""
    plan = [
        {
            "tool": "Register",
            "args": {
                "customer": {"name": "Ann", "address": {"street": "Main", "zip_code": 1}},
                "color": "red",
                "numbers": [],
                "ctx": {"saga_id": "x"},
            },
        }
    ]
    with pytest.raises(PlanValidationError, match="'ctx'"):
        await executor.run(plan)
    assert calls == []


async def test_defaults_are_applied(executor: SagaExecutor, calls: list) -> None:
    """Arguments left out take execute's defaults."""
    result = await executor.run([{"tool": "Greet", "args": {"name": "Ann"}}])
    assert calls == [("Greet", {"name": "Ann", "greeting": "hello", "times": 1})]
    assert result.steps[0].result == "hello Ann"


async def test_args_default_to_an_empty_dict(calls: list) -> None:
    """A step without "args" calls the tool with no arguments (every one takes its default)."""
    registry = ToolRegistry()

    @registry.tool
    class Defaults:
        def execute(self, a: int = 1, b: str = "b") -> None:
            calls.append(("Defaults", {"a": a, "b": b}))

    await SagaExecutor(registry).run([{"tool": "Defaults"}])
    assert calls == [("Defaults", {"a": 1, "b": "b"})]


async def test_nested_models_enums_optionals_and_lists_are_validated_and_built(
    executor: SagaExecutor, calls: list
) -> None:
    """Nested pydantic models, enums, `X | None` and list[int] are validated; the tool gets model/enum instances."""
    customer = {"name": "Ann", "address": {"street": "Main St", "zip_code": "12345"}, "tags": ["vip"]}
    result = await executor.run(
        [{"tool": "Register", "args": {"customer": customer, "color": "green", "numbers": ["1", 2, 3.0]}}]
    )
    assert result.status is SagaStatus.SUCCESS
    assert len(calls) == 1
    tool, kwargs = calls[0]
    assert tool == "Register"
    assert isinstance(kwargs["customer"], Customer)
    assert isinstance(kwargs["customer"].address, Address)
    assert kwargs["customer"] == Customer(name="Ann", address=Address(street="Main St", zip_code=12345), tags=["vip"])
    assert kwargs["color"] is Color.GREEN
    assert kwargs["numbers"] == [1, 2, 3]
    assert all(type(n) is int for n in kwargs["numbers"])
    assert kwargs["note"] is None


async def test_optional_argument_accepts_a_value_and_null(executor: SagaExecutor, calls: list) -> None:
    """An `str | None` argument takes a string or an explicit null."""
    customer = {"name": "Ann", "address": {"street": "Main", "zip_code": 1}}
    await executor.run(
        [
            [
                {"tool": "Register", "args": {"customer": customer, "color": "red", "numbers": [], "note": "hi"}},
                {"tool": "Register", "args": {"customer": customer, "color": "red", "numbers": [], "note": None}},
            ]
        ]
    )
    assert sorted((kwargs["note"] or "") for _, kwargs in calls) == ["", "hi"]


async def test_model_instances_in_a_plan_are_accepted(executor: SagaExecutor, calls: list) -> None:
    """A pydantic model instance given as an argument value is accepted and reaches the tool as that model."""
    customer = Customer(name="Bo", address=Address(street="Side", zip_code=9))
    await executor.run([{"tool": "Register", "args": {"customer": customer, "color": Color.RED, "numbers": [4]}}])
    assert calls[0][1]["customer"] == customer
    assert calls[0][1]["color"] is Color.RED


@pytest.mark.parametrize(
    ("args", "where"),
    [
        ({"customer": {"name": "Ann", "address": {"street": "Main"}}, "color": "red", "numbers": []}, "zip_code"),
        (
            {"customer": {"name": "Ann", "address": {"street": "M", "zip_code": "x"}}, "color": "red", "numbers": []},
            "zip_code",
        ),
        (
            {"customer": {"name": "Ann", "address": {"street": "M", "zip_code": 1}}, "color": "blue", "numbers": []},
            "color",
        ),
        (
            {"customer": {"name": "Ann", "address": {"street": "M", "zip_code": 1}}, "color": "red", "numbers": ["a"]},
            "numbers.0",
        ),
        (
            {"customer": {"name": "Ann", "address": {"street": "M", "zip_code": 1}}, "color": "red", "numbers": 3},
            "numbers",
        ),
    ],
)
async def test_nested_problems_are_refused_and_located(
    executor: SagaExecutor, calls: list, args: dict[str, Any], where: str
) -> None:
    """A problem deep inside a model, enum or list is refused and its location named."""
    with pytest.raises(PlanValidationError) as info:
        await executor.run([{"tool": "Register", "args": args}])
    assert len(info.value.problems) == 1
    assert where in info.value.problems[0]
    assert calls == []


async def test_every_problem_of_every_step_is_reported_at_once_and_nothing_runs(
    executor: SagaExecutor, calls: list
) -> None:
    """A refused plan lists every problem of every step in one PlanValidationError; no tool runs, nothing stored."""
    plan = [
        {"tool": "Count", "args": {"n": 1}, "id": "fine"},
        [
            {"tool": "Count", "args": {"n": "lots"}, "id": "bad_int"},
            {"tool": "Greet", "args": {"times": "x", "shout": True}, "id": "three_problems"},
        ],
        {"tool": "Count", "args": {"n": 2}, "id": "also_fine"},
        {"tool": "Register", "args": {"customer": {"name": 1}, "color": "blue", "numbers": []}, "id": "nested"},
    ]
    with pytest.raises(PlanValidationError) as info:
        await executor.run(plan, saga_id="refused")
    problems = info.value.problems
    text = str(info.value)

    def problems_of(step_id: str) -> list[str]:
        return [p for p in problems if repr(step_id) in p]

    assert len(problems_of("bad_int")) == 1
    assert "'n'" in problems_of("bad_int")[0]
    three = problems_of("three_problems")
    assert len(three) == 3
    assert any("'name'" in p for p in three)  # missing
    assert any("'times'" in p for p in three)  # not an int
    assert any("'shout'" in p for p in three)  # unknown
    nested = problems_of("nested")
    assert any("customer.name" in p for p in nested)
    assert any("customer.address" in p for p in nested)
    assert any("color" in p for p in nested)
    assert problems_of("fine") == problems_of("also_fine") == []
    assert len(problems) == 1 + 3 + len(nested)
    assert all(p in text for p in problems)
    assert calls == []
    assert await executor.store.list_sagas() == []
    assert await executor.store.get_saga("refused") is None


async def test_unknown_tool_error_is_a_plan_validation_error_listing_available_tools(
    executor: SagaExecutor, calls: list
) -> None:
    """An unknown tool raises UnknownToolError (a PlanValidationError) whose message lists the registered tools."""
    with pytest.raises(UnknownToolError) as info:
        await executor.run([{"tool": "Count", "args": {"n": 1}}, {"tool": "Teleport", "args": {"to": "Mars"}}])
    error = info.value
    assert isinstance(error, PlanValidationError)
    message = str(error)
    assert "Teleport" in message
    for name in ["Count", "Greet", "Register"]:
        assert name in message
    assert calls == []
    assert await executor.store.list_sagas() == []


async def test_unknown_tool_and_other_problems_are_reported_together(executor: SagaExecutor, calls: list) -> None:
    """An unknown tool does not hide the other problems of the plan; the error is still an UnknownToolError."""
    with pytest.raises(UnknownToolError) as info:
        await executor.run([[{"tool": "Nope"}, {"tool": "Count", "args": {"n": "lots"}}], {"tool": "AlsoNope"}])
    problems = info.value.problems
    assert len(problems) == 3
    assert any("'Nope'" in p for p in problems)
    assert any("'AlsoNope'" in p for p in problems)
    assert any("'n'" in p for p in problems)
    assert calls == []


async def test_args_that_are_not_a_dict_are_refused(executor: SagaExecutor, calls: list) -> None:
    """ "args" must be a dict of names to values: a list is refused."""
    with pytest.raises(PlanValidationError, match="args"):
        await executor.run([{"tool": "Count", "args": [1]}])
    assert calls == []


def test_an_unresolvable_annotation_is_refused_at_registration() -> None:
    """A forward reference that cannot be resolved is refused by name, instead of silently disabling validation."""
    registry = ToolRegistry()

    def make_tool() -> type:
        class Local(pydantic.BaseModel):
            x: int

        class Tool:
            def execute(self, n: "int", extra: "Local | None" = None) -> None:
                return None

        return Tool

    with pytest.raises(TypeError, match="'extra'"):
        registry.tool(make_tool())
    assert "Tool" not in registry


async def test_string_annotations_that_resolve_are_validated(calls: list) -> None:
    """A tool written with string annotations still has "lots" refused for an int."""
    registry = ToolRegistry()

    class Tool:
        def execute(self, n: "int") -> None:
            calls.append(("Tool", {"n": n}))

    registry.tool(Tool)
    with pytest.raises(PlanValidationError, match="'n'"):
        await SagaExecutor(registry).run([{"tool": "Tool", "args": {"n": "lots"}}])
    assert calls == []
