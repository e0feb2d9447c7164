"""A tool whose arguments are plain scalars has them checked without pydantic: the same kwargs, the same errors."""

from __future__ import annotations

from typing import Annotated, Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from saga_runtime import DynamicSaga, SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._planning import stored_as_is, stored_kwargs
from saga_runtime._tools import ToolSpec

registry = ToolRegistry()


@registry.tool
class Plain:
    """Every kind of plain field: required and defaulted, each scalar, Optional and Any."""

    async def execute(
        self,
        n: int,
        text: str,
        x: float = 1.5,
        flag: bool = False,
        maybe: int | None = None,
        anything: Any = "any",
    ) -> int:
        return n


@registry.tool
class Constrained:
    """A constrained field: pydantic checks it, every time."""

    async def execute(self, n: Annotated[int, pydantic.Field(gt=0)]) -> int:
        return n


@registry.tool
class ValidatedDefault:
    """A default validated by pydantic (`validate_default`): converted, or refused, every time."""

    async def execute(
        self,
        n: int = pydantic.Field("5", validate_default=True),
        x: int = pydantic.Field(1.5, validate_default=True),
    ) -> int:
        return n


@registry.tool
class Extra:
    """A tool taking extra arguments."""

    async def execute(self, n: int, **more: Any) -> int:
        return n


VALUES = [0, 1, -7, 2**70, True, False, 1.0, 2.5, float("nan"), float("inf"), "", "1", "x\x00", None, [1], {"a": 1}]
NAMES = ["n", "text", "x", "flag", "maybe", "anything", "other"]


def _pydantic(spec: ToolSpec, args: dict[str, Any]) -> Any:
    """Return what pydantic alone makes of `args` (the kwargs, or its error), for comparison."""
    try:
        model = spec.args_model.__pydantic_validator__.validate_python(args)
    except pydantic.ValidationError as exc:
        return ("error", str(exc), exc.errors(include_url=False))
    kwargs = dict(model.__dict__)
    kwargs.update(model.__pydantic_extra__ or {})
    return ("ok", _typed(kwargs))


def _ours(spec: ToolSpec, args: dict[str, Any]) -> Any:
    try:
        kwargs = spec.validate_args(args)
    except pydantic.ValidationError as exc:
        return ("error", str(exc), exc.errors(include_url=False))
    return ("ok", _typed(kwargs))


def _typed(kwargs: dict[str, Any]) -> list[tuple[str, type, str]]:
    """Each kwarg with its exact type and repr: 1, 1.0 and True differ here."""
    return sorted((name, type(value), repr(value)) for name, value in kwargs.items())


def test_plain_tools_are_recognised_and_others_are_not() -> None:
    """Only a tool of plain scalar fields without constraints skips pydantic."""
    assert registry.get("Plain").plain is not None
    assert registry.get("Extra").plain is not None
    assert registry.get("Constrained").plain is None
    assert registry.get("ValidatedDefault").plain is None


def test_a_validated_default_is_converted_or_refused_as_pydantic_does() -> None:
    """A `validate_default` field's default goes through pydantic: "5" becomes 5, and 1.5 for an int is refused."""
    spec = registry.get("ValidatedDefault")
    assert spec.validate_args({"x": 2}) == {"n": 5, "x": 2}
    with pytest.raises(pydantic.ValidationError, match="x\n  Input should be a valid integer"):
        spec.validate_args({"n": 1})


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=7))
def test_plain_arguments_give_pydantics_kwargs_and_errors(args: dict[str, Any]) -> None:
    """For any arguments, the kwargs (with their exact types) or the error equal what pydantic alone gives."""
    for tool in ("Plain", "Extra", "Constrained", "ValidatedDefault"):
        spec = registry.get(tool)
        assert _ours(spec, dict(args)) == _pydantic(spec, dict(args)), (tool, args)


def test_bad_plain_arguments_still_fail_and_coercions_still_happen() -> None:
    """A wrong type fails as before; a bool for an int and an int for a float are converted as before."""
    spec = registry.get("Plain")
    with pytest.raises(pydantic.ValidationError, match="n\n  Input should be a valid integer"):
        spec.validate_args({"n": "one", "text": "t"})
    with pytest.raises(pydantic.ValidationError, match="Field required"):
        spec.validate_args({"n": 1})
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        spec.validate_args({"n": 1, "text": "t", "other": 2})
    kwargs = spec.validate_args({"n": True, "text": "t", "x": 2})
    assert (type(kwargs["n"]), type(kwargs["x"])) == (int, float)
    with pytest.raises(pydantic.ValidationError, match="greater than 0"):
        registry.get("Constrained").validate_args({"n": 0})


async def test_a_saga_functions_call_with_bad_arguments_fails_as_before() -> None:
    """A saga function's call of a plain tool with a mistyped argument fails, the tool never run."""
    functions = ToolRegistry()
    for spec in registry:
        functions._tools[spec.name] = spec

    @functions.saga
    async def mistyped(saga: DynamicSaga) -> str:
        assert await saga.call("Plain", n=2, text="t") == 2
        try:
            await saga.call("Plain", n="two", text="t")
        except Exception as exc:
            return type(exc).__name__ + ": " + str(exc)
        return "ran"

    result = await SagaExecutor(functions).run(mistyped)
    assert result.status is SagaStatus.SUCCESS, result.error
    assert isinstance(result.output, str)
    assert result.output.startswith("PlanValidationError: "), result.output
    assert "('n',): Input should be a valid integer" in result.output, result.output
    assert [step.step_id for step in result.steps] == ["Plain-0"]


@registry.saga
async def plain_function(saga: DynamicSaga, n: int, text: str = "t", maybe: float | None = None) -> int:
    """A saga function of plain arguments."""
    return n


def _function_by_pydantic(args: dict[str, Any]) -> Any:
    """Return what pydantic alone makes of a saga function's `args`: its problems or its kwargs, typed."""
    model = registry.function("plain_function").args_model
    try:
        kwargs = dict(model.__pydantic_validator__.validate_python(dict(args)).__dict__)
    except pydantic.ValidationError as exc:
        return sorted(str(error["loc"]) + error["msg"] for error in exc.errors(include_url=False))
    return _typed(kwargs)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["n", "text", "maybe", "other"]), st.sampled_from(VALUES), max_size=4))
def test_a_saga_functions_plain_arguments_give_pydantics_kwargs_and_problems(args: dict[str, Any]) -> None:
    """A saga function's arguments check to what pydantic alone gives: the same kwargs, or as many problems."""
    function = registry.function("plain_function")
    assert function.plain is not None
    problems, kwargs = function.check_args(dict(args))
    expected = _function_by_pydantic(args)
    if kwargs is None:
        assert problems
        assert len(problems) == len(expected), (args, problems, expected)
    else:
        assert problems == []
        assert _typed(kwargs) == expected, args


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from([*NAMES, "é", "a\x00"]), st.sampled_from([*VALUES, "é", 2**64]), max_size=7))
def test_stored_kwargs_are_given_only_for_arguments_stored_as_is_and_valid(args: dict[str, Any]) -> None:
    """A call's one-walk check gives kwargs only for arguments stored as they are, and then validate_args' own."""
    spec = registry.get("Plain")
    kwargs = stored_kwargs(spec, dict(args))
    if kwargs is not None:
        assert stored_as_is(args), args
        assert _typed(kwargs) == _ours(spec, dict(args))[1], args


def test_stored_kwargs_take_plain_arguments_and_fill_defaults() -> None:
    """Plain arguments of their fields' types take the one walk, defaults filled; others are left to the long way."""
    spec = registry.get("Plain")
    assert stored_kwargs(spec, {"n": 1, "text": "t"}) == spec.validate_args({"n": 1, "text": "t"})
    assert stored_kwargs(spec, {"n": True, "text": "t"}) is None  # converted by pydantic
    assert stored_kwargs(spec, {"n": 1, "text": "é"}) is None  # not stored as it is
    assert stored_kwargs(spec, {"n": 2**64, "text": "t"}) is None  # beyond a 64-bit integer
    assert stored_kwargs(registry.get("Constrained"), {"n": 1}) is None


async def test_a_saga_functions_arguments_are_recorded_as_given() -> None:
    """Scalar arguments (stored as they are) and others (converted) are recorded as the JSON value they are."""
    executor = SagaExecutor(registry)
    for saga_id, args in [("as-is", {"n": 3, "maybe": 2.5}), ("converted", {"n": 4, "text": "é\u2028"})]:
        result = await executor.run(plain_function, args=args, saga_id=saga_id)
        assert result.status is SagaStatus.SUCCESS, result.error
        stored = await executor.store.load_saga(saga_id)
        assert stored is not None
        recorded = stored[0].plan["args"]
        assert _typed(recorded) == _typed(args)
        assert recorded is not args
