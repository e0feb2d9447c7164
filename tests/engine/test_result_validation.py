"""Results are checked before they are trusted (API.md §8): execute's return annotation, and the tool's validate().

A refused result fails the attempt with ResultValidationError; the attempt's effect happened, so it is
compensated at once with the raw value, and the tool's retry policy decides what comes next. The next step never
sees the refused value.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio.lowlevel
import pydantic
import pytest

from saga_runtime import (
    ResultValidationError,
    RetryPolicy,
    SagaError,
    SagaExecutor,
    SagaStatus,
    StepContext,
    StepFailedError,
    StepStatus,
    ToolRegistry,
)

FAST = {"initial_interval": 0.001, "jitter": False}


class PriceQuote(pydantic.BaseModel):
    """A typed result: a price in cents and its currency."""

    cents: int
    currency: str


class Lab:
    """Tools that return, attempt by attempt, the values a test scripts for them; every call is logged."""

    def __init__(self, retry: RetryPolicy | None = None, *, undo_fails: bool = False) -> None:
        self.outputs: dict[str, list[Any]] = {}
        self.log: list[tuple[Any, ...]] = []
        self.validated: list[Any] = []
        self.registry = ToolRegistry()
        lab = self
        options: dict[str, Any] = {"compensation_retry": RetryPolicy(max_attempts=1)}
        if retry is not None:
            options["retry"] = retry

        def emit(name: str, ctx: StepContext) -> Any:
            value = lab.outputs[name][ctx.attempt - 1]
            lab.log.append(("do", name, ctx.attempt, value))
            return value

        def undo(result: Any, ctx: StepContext) -> None:
            lab.log.append(("undo", ctx.args["name"], result))
            if undo_fails:
                raise ConnectionError("the refund service is down")

        @self.registry.tool(**options)
        class Count:
            """Returns an int, by its annotation."""

            async def execute(self, name: str, ctx: StepContext) -> int:
                return emit(name, ctx)

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                undo(result, ctx)

        @self.registry.tool(**options)
        class Positive:
            """Returns an int that its sync validate() wants positive."""

            async def execute(self, name: str, ctx: StepContext) -> int:
                return emit(name, ctx)

            def validate(self, result: int) -> None:
                lab.validated.append(result)
                if result <= 0:
                    raise ValueError(f"{result} is not a positive amount")

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                undo(result, ctx)

        @self.registry.tool(**options)
        class Checked:
            """Returns anything; its async validate() refuses what holds an "error" key."""

            async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
                return emit(name, ctx)

            async def validate(self, result: dict[str, Any]) -> None:
                await anyio.lowlevel.checkpoint()
                lab.validated.append(result)
                if "error" in result:
                    raise LookupError(f"the provider answered an error: {result['error']}")

            def compensate(self, result: Any, ctx: StepContext) -> None:
                undo(result, ctx)

        @self.registry.tool(**options)
        class Priced:
            """Returns a PriceQuote, by its annotation."""

            async def execute(self, name: str, ctx: StepContext) -> PriceQuote:
                return emit(name, ctx)

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                undo(result, ctx)

        @self.registry.tool
        class Loose:
            """Annotated int, but cannot compensate."""

            async def execute(self, name: str, ctx: StepContext) -> int:
                return emit(name, ctx)

        @self.registry.tool
        class Untyped:
            """No return annotation: anything goes."""

            async def execute(self, name: str, ctx: StepContext):  # no return annotation, on purpose
                return emit(name, ctx)

        @self.registry.tool
        class Hold:
            """An earlier effect a failing saga undoes."""

            async def execute(self, name: str) -> str:
                lab.log.append(("do", name, 1, name))
                return name

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                lab.log.append(("undo", ctx.args["name"], result))

        @self.registry.tool
        class Use:
            """A later step: logs the value its $ref gave it."""

            async def execute(self, value: Any) -> Any:
                lab.log.append(("use", value))
                return value

        @self.registry.tool(retry_scope="step", **options)
        class Optional:
            """Returns an int, by its annotation; its failure does not fail the saga."""

            async def execute(self, name: str, ctx: StepContext) -> int:
                return emit(name, ctx)

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                undo(result, ctx)

    def entries(self, kind: str) -> list[tuple[Any, ...]]:
        """Return the log entries of one kind ("do", "undo", "use"), without the kind."""
        return [entry[1:] for entry in self.log if entry[0] == kind]


def chain(tool: str, *, ref: str = "x") -> list[Any]:
    """Return a plan: Hold, then the step `x` of `tool`, then a Use of its result."""
    return [
        {"id": "hold", "tool": "Hold", "args": {"name": "hold"}},
        {"id": "x", "tool": tool, "args": {"name": "x"}},
        {"id": "use", "tool": "Use", "args": {"value": {"$ref": ref}}},
    ]


# -- one attempt ------------------------------------------------------------------------------------------------


async def test_result_refused_by_its_annotation_fails_the_step_and_is_undone_with_the_raw_value() -> None:
    """A result its return annotation refuses: ResultValidationError, undone at once with the raw value, FAILED."""
    lab = Lab()
    lab.outputs["x"] = ["lots"]

    result = await SagaExecutor(lab.registry).run(chain("Count"))

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    step = result.step("x")
    assert step.status is StepStatus.FAILED
    assert step.error_type == "ResultValidationError"
    assert step.error is not None
    assert "Count returned a result its return annotation refuses" in step.error
    assert "valid integer" in step.error
    assert step.result is None
    assert step.compensation_attempts == 1
    assert lab.entries("undo") == [("x", "lots"), ("hold", "hold")]  # the refused attempt first, then the saga
    assert lab.entries("use") == []
    assert result.step("use").status is StepStatus.PENDING
    assert result.step("hold").status is StepStatus.COMPENSATED


async def test_annotation_is_checked_in_lax_mode_and_the_validated_value_is_stored() -> None:
    """A result pydantic can coerce in lax mode ("5" for int) is accepted, stored and passed on as coerced."""
    lab = Lab()
    lab.outputs["x"] = ["5"]

    result = await SagaExecutor(lab.registry).run(chain("Count"))

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert result.step("x").result == 5
    assert lab.entries("use") == [(5,)]
    assert lab.entries("undo") == []


async def test_sync_validate_refusing_fails_the_step_and_the_raw_value_is_undone() -> None:
    """A sync validate() that raises refuses the result: FAILED with ResultValidationError, undone, saga undone."""
    lab = Lab()
    lab.outputs["x"] = [-3]

    result = await SagaExecutor(lab.registry).run(chain("Positive"))

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    step = result.step("x")
    assert step.status is StepStatus.FAILED
    assert step.error_type == "ResultValidationError"
    assert step.error == (
        "ResultValidationError: Positive.validate() refused the result: ValueError: -3 is not a positive amount "
        "(after 1 attempt)"
    )
    assert lab.entries("undo") == [("x", -3), ("hold", "hold")]
    assert lab.entries("use") == []


async def test_async_validate_refusing_fails_the_step_and_the_raw_value_is_undone() -> None:
    """An async validate() that raises refuses the result the same way."""
    lab = Lab()
    lab.outputs["x"] = [{"error": "rate limited"}]

    result = await SagaExecutor(lab.registry).run(chain("Checked"))

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    step = result.step("x")
    assert step.status is StepStatus.FAILED
    assert step.error_type == "ResultValidationError"
    assert step.error is not None
    assert "Checked.validate() refused the result: LookupError: the provider answered an error: rate limited" in (
        step.error
    )
    assert lab.validated == [{"error": "rate limited"}]
    assert lab.entries("undo") == [("x", {"error": "rate limited"}), ("hold", "hold")]
    assert lab.entries("use") == []


async def test_validate_sees_the_value_as_the_annotation_made_it() -> None:
    """validate() runs after the annotation check, on the coerced value; an accepted result flows on."""
    lab = Lab()
    lab.outputs["x"] = ["7"]

    result = await SagaExecutor(lab.registry).run(chain("Positive"))

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert lab.validated == [7]
    assert lab.entries("use") == [(7,)]


async def test_annotation_refusal_comes_before_validate() -> None:
    """A result the annotation refuses never reaches validate()."""
    lab = Lab()
    lab.outputs["x"] = ["minus one"]

    result = await SagaExecutor(lab.registry).run(chain("Positive"))

    assert result.step("x").error_type == "ResultValidationError"
    assert lab.validated == []


async def test_pydantic_model_annotation_accepts_matching_data_and_stores_it_as_json() -> None:
    """A pydantic model return annotation accepts matching data (lax), stored as the model's JSON."""
    lab = Lab()
    lab.outputs["x"] = [{"cents": "1250", "currency": "EUR"}]

    result = await SagaExecutor(lab.registry).run(chain("Priced", ref="x.cents"))

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert result.step("x").result == {"cents": 1250, "currency": "EUR"}
    assert lab.entries("use") == [(1250,)]


async def test_pydantic_model_annotation_refuses_data_missing_a_field() -> None:
    """A result lacking a field of the annotated model is refused, naming the field, and undone with the raw value."""
    lab = Lab()
    lab.outputs["x"] = [{"cents": 1250}]

    result = await SagaExecutor(lab.registry).run(chain("Priced"))

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    step = result.step("x")
    assert step.error_type == "ResultValidationError"
    assert step.error is not None
    assert "currency: Field required" in step.error
    assert lab.entries("undo") == [("x", {"cents": 1250}), ("hold", "hold")]


async def test_model_instance_results_pass_their_annotation() -> None:
    """A tool returning an instance of its annotated model is accepted."""
    lab = Lab()
    lab.outputs["x"] = [PriceQuote(cents=99, currency="KRW")]

    result = await SagaExecutor(lab.registry).run(chain("Priced"))

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert lab.entries("use") == [({"cents": 99, "currency": "KRW"},)]


async def test_without_a_return_annotation_any_result_is_accepted() -> None:
    """A tool with no return annotation has nothing to check its result against."""
    lab = Lab()
    lab.outputs["x"] = ["anything"]

    result = await SagaExecutor(lab.registry).run(chain("Untyped"))

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert lab.entries("use") == [("anything",)]


async def test_refused_result_of_a_tool_without_compensate_fails_with_nothing_to_undo() -> None:
    """A refused result of a tool that cannot compensate fails the step; nothing of it is undone."""
    lab = Lab()
    lab.outputs["x"] = ["lots"]

    result = await SagaExecutor(lab.registry).run(chain("Loose"))

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert result.step("x").status is StepStatus.FAILED
    assert result.step("x").error_type == "ResultValidationError"
    assert lab.entries("undo") == [("hold", "hold")]


# -- retries ----------------------------------------------------------------------------------------------------


async def test_refused_result_is_retried_per_policy_then_the_good_one_flows_on() -> None:
    """A refused attempt is undone, then retried per the tool's policy; the next step sees only the good result."""
    lab = Lab(RetryPolicy(max_attempts=3, **FAST))
    lab.outputs["x"] = ["lots", "many", 12]

    result = await SagaExecutor(lab.registry).run(chain("Count"))

    assert result.status is SagaStatus.SUCCESS, result.describe()
    step = result.step("x")
    assert step.status is StepStatus.SUCCESS
    assert step.attempts == 3
    assert step.result == 12
    assert step.error is None
    assert step.compensation_attempts == 2
    assert lab.entries("do")[1:] == [("x", 1, "lots"), ("x", 2, "many"), ("x", 3, 12)]
    assert lab.entries("undo") == [("x", "lots"), ("x", "many")]
    assert lab.entries("use") == [(12,)]


async def test_every_attempt_refused_ends_failed_each_undone_once_and_not_again_with_the_saga() -> None:
    """Exhausted retries of refused results: FAILED, each attempt undone with its raw value, none undone twice."""
    lab = Lab(RetryPolicy(max_attempts=3, **FAST))
    lab.outputs["x"] = [-1, -2, -3]

    result = await SagaExecutor(lab.registry).run(chain("Positive"))

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    step = result.step("x")
    assert step.status is StepStatus.FAILED
    assert step.attempts == 3
    assert step.error_type == "ResultValidationError"
    assert step.error is not None
    assert step.error.endswith("-3 is not a positive amount (after 3 attempts)")
    assert step.compensation_attempts == 3
    assert lab.entries("undo") == [("x", -1), ("x", -2), ("x", -3), ("hold", "hold")]
    assert lab.entries("use") == []


async def test_result_validation_error_can_be_made_non_retryable() -> None:
    """With ResultValidationError in non_retryable, a refused result fails at once, undone, without a retry."""
    lab = Lab(RetryPolicy(max_attempts=3, non_retryable=(ResultValidationError,), **FAST))
    lab.outputs["x"] = ["lots", 1, 2]

    result = await SagaExecutor(lab.registry).run(chain("Count"))

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert result.step("x").attempts == 1
    assert lab.entries("do")[1:] == [("x", 1, "lots")]
    assert lab.entries("undo") == [("x", "lots"), ("hold", "hold")]


async def test_a_failed_undo_of_a_refused_result_is_compensation_failed() -> None:
    """When undoing a refused result fails, the step ends COMPENSATION_FAILED and so does the saga."""
    lab = Lab(undo_fails=True)
    lab.outputs["x"] = ["lots"]

    result = await SagaExecutor(lab.registry).run([{"id": "x", "tool": "Count", "args": {"name": "x"}}])

    assert result.status is SagaStatus.COMPENSATION_FAILED, result.describe()
    step = result.step("x")
    assert step.status is StepStatus.COMPENSATION_FAILED
    assert step.error_type == "ResultValidationError"
    assert step.compensation_error is not None
    assert step.compensation_error.startswith("undoing refused attempt 1: ConnectionError: the refund service is down")
    assert lab.entries("undo") == [("x", "lots")]


async def test_a_refused_result_that_could_not_be_undone_is_not_retried_and_fails_the_saga() -> None:
    """Bug: a failed undo then a good retry ended SUCCESS; now no retry follows, the saga ends COMPENSATION_FAILED."""
    lab = Lab(RetryPolicy(max_attempts=3, **FAST), undo_fails=True)
    lab.outputs["x"] = ["lots", 5, 6]

    result = await SagaExecutor(lab.registry).run(chain("Count"))

    assert result.status is SagaStatus.COMPENSATION_FAILED, result.describe()
    step = result.step("x")
    assert (step.status, step.attempts, step.error_type) == (StepStatus.COMPENSATION_FAILED, 1, "ResultValidationError")
    assert step.compensation_error is not None
    assert step.compensation_error.startswith("undoing refused attempt 1: ConnectionError")
    assert result.error is not None
    assert "could not be undone" in result.error
    assert lab.entries("do") == [("hold", 1, "hold"), ("x", 1, "lots")]  # no attempt piled on the stuck effect
    assert lab.entries("undo") == [("x", "lots"), ("hold", "hold")]  # the rest of the saga is undone
    assert lab.entries("use") == []


async def test_a_refused_result_that_could_not_be_undone_fails_the_saga_even_in_step_scope() -> None:
    """retry_scope="step" does not hide an effect left behind: the saga fails, compensates, ends COMPENSATION_FAILED."""
    lab = Lab(RetryPolicy(max_attempts=3, **FAST), undo_fails=True)
    lab.outputs["x"] = ["lots", 5]
    plan = [
        {"id": "hold", "tool": "Hold", "args": {"name": "hold"}},
        {"id": "x", "tool": "Optional", "args": {"name": "x"}},
        {"id": "after", "tool": "Hold", "args": {"name": "after"}},
    ]

    result = await SagaExecutor(lab.registry).run(plan)

    assert result.status is SagaStatus.COMPENSATION_FAILED, result.describe()
    assert result.step("x").status is StepStatus.COMPENSATION_FAILED
    assert result.step("after").status is StepStatus.PENDING
    assert lab.entries("undo") == [("x", "lots"), ("hold", "hold")]


async def test_no_attempt_follows_a_refused_result_that_could_not_be_undone() -> None:
    """Bug: a timed-out attempt after a failed undo was never compensated; now no attempt follows the stuck effect."""
    log: list[tuple[str, Any]] = []
    registry = ToolRegistry()

    @registry.tool(
        retry=RetryPolicy(max_attempts=2, **FAST), timeout=0.5, compensation_retry=RetryPolicy(max_attempts=1)
    )
    class Quote:
        async def execute(self, ctx: StepContext) -> int:
            log.append(("do", ctx.attempt))
            if ctx.attempt == 1:
                return "junk"  # type: ignore[return-value]  # refused by the annotation
            await anyio.sleep(30)  # would time out: an effect of unknown outcome
            return 1

        async def compensate(self, result: Any) -> None:
            log.append(("undo", result))
            raise ConnectionError("the refund service is down")

    result = await SagaExecutor(registry).run([{"id": "q", "tool": "Quote"}])

    assert result.status is SagaStatus.COMPENSATION_FAILED, result.describe()
    assert (result.step("q").status, result.step("q").attempts) == (StepStatus.COMPENSATION_FAILED, 1)
    assert log == [("do", 1), ("undo", "junk")]


# -- where the step goes on -------------------------------------------------------------------------------------


async def test_step_scope_refusal_lets_the_saga_go_on_but_a_ref_to_it_cannot_start() -> None:
    """retry_scope="step": the refused step is FAILED and undone, the saga goes on, and no $ref reads its value."""
    lab = Lab()
    lab.outputs["x"] = ["lots"]
    plan = [
        {"id": "x", "tool": "Optional", "args": {"name": "x"}},
        {"id": "after", "tool": "Hold", "args": {"name": "after"}},
    ]

    result = await SagaExecutor(lab.registry).run(plan)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert result.step("x").status is StepStatus.FAILED
    assert result.step("x").error_type == "ResultValidationError"
    assert result.step("after").status is StepStatus.SUCCESS
    assert lab.entries("undo") == [("x", "lots")]

    lab.log.clear()
    refusing = await SagaExecutor(lab.registry).run(
        [
            {"id": "x", "tool": "Optional", "args": {"name": "x"}},
            {"id": "use", "tool": "Use", "args": {"value": {"$ref": "x"}}},
        ]
    )

    assert refusing.step("use").status is StepStatus.FAILED
    assert refusing.step("use").error is not None
    assert refusing.step("use").error.startswith("the step could not start")
    assert lab.entries("use") == []


async def test_a_refused_result_does_not_win_a_first_race() -> None:
    """In a `first` group, a member whose result is refused is FAILED and undone; a valid result wins."""
    lab = Lab()
    lab.outputs.update(a=["junk"], b=[40])
    plan = [
        {
            "group": [{"id": n, "tool": "Count", "args": {"name": n}} for n in "ab"],
            "join": "first",
            "id": "q",
        },
        {"id": "use", "tool": "Use", "args": {"value": {"$ref": "q"}}},
    ]

    result = await SagaExecutor(lab.registry).run(plan)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert result.step("a").status is StepStatus.FAILED
    assert result.step("a").error_type == "ResultValidationError"
    assert result.step("b").status is StepStatus.SUCCESS
    assert lab.entries("undo") == [("a", "junk")]
    assert lab.entries("use") == [(40,)]
    assert result.result_of("q") == 40


async def test_dynamic_call_with_a_refused_result_raises_after_the_undo() -> None:
    """In a dynamic saga, saga.call raises StepFailedError caused by ResultValidationError, the effect undone."""
    lab = Lab()
    lab.outputs["x"] = [{"error": "quota"}]
    executor = SagaExecutor(lab.registry)

    async with executor.saga("dyn-refused") as saga:
        with pytest.raises(StepFailedError) as caught:
            await saga.call("Checked", name="x")
        assert lab.entries("undo") == [("x", {"error": "quota"})]
        assert await saga.call("Hold", name="after") == "after"

    assert caught.value.error_type == "ResultValidationError"
    cause = caught.value.__cause__
    assert isinstance(cause, ResultValidationError)
    assert isinstance(cause, SagaError)
    assert cause.tool_name == "Checked"
    assert cause.step_id == "Checked-0"
    assert saga.result is not None
    assert saga.result.status is SagaStatus.SUCCESS
    assert saga.result.step("Checked-0").status is StepStatus.FAILED
    assert lab.entries("undo") == [("x", {"error": "quota"})]


async def test_a_dynamic_saga_that_catches_a_stuck_refused_call_still_ends_compensation_failed() -> None:
    """A block catching the failure of a call whose refused effect could not be undone does not end SUCCESS."""
    lab = Lab(undo_fails=True)
    lab.outputs.update({"x": ["lots"], "y": [7]})
    executor = SagaExecutor(lab.registry)
    async with executor.saga(saga_id="caught") as saga:
        with pytest.raises(StepFailedError):
            await saga.call("Count", name="x")
        await saga.call("Count", name="y")  # the agent goes on, as agents do

    assert saga.result is not None
    assert saga.result.status is SagaStatus.COMPENSATION_FAILED, saga.result.describe()
    assert "could not be undone" in (saga.result.error or "")
    assert lab.entries("undo") == [("x", "lots"), ("y", 7)]  # y is compensated with the saga


async def test_scalar_annotations_keep_their_conversions_for_other_types() -> None:
    """A result of exactly its scalar annotation's type is stored as returned; any other type is still converted."""
    registry = ToolRegistry()

    @registry.tool
    class AsInt:
        async def execute(self, value: Any) -> int:
            return value

    @registry.tool
    class AsFloat:
        async def execute(self, value: Any) -> float:
            return value

    @registry.tool
    class AsStr:
        async def execute(self, value: Any) -> str:
            return value

    plan = [
        {"id": "int", "tool": "AsInt", "args": {"value": 7}},
        {"id": "bool", "tool": "AsInt", "args": {"value": True}},
        {"id": "float", "tool": "AsFloat", "args": {"value": 2.5}},
        {"id": "int_float", "tool": "AsFloat", "args": {"value": 3}},
        {"id": "str", "tool": "AsStr", "args": {"value": "s"}},
    ]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    stored = {step_id: result.step(step_id).result for step_id in ("int", "bool", "float", "int_float", "str")}
    assert stored == {"int": 7, "bool": 1, "float": 2.5, "int_float": 3.0, "str": "s"}
    assert [type(value) for value in stored.values()] == [int, int, float, float, str]


async def test_a_refused_result_being_undone_when_a_first_race_is_won_is_undone_once() -> None:
    """A `first` member whose refused result is still being undone when another wins is undone once, not again."""
    registry = ToolRegistry()
    log: list[tuple[str, Any]] = []

    @registry.tool
    class Quote:
        async def execute(self, name: str, delay: float) -> int:
            await anyio.sleep(delay)
            return "junk" if name == "a" else 40  # type: ignore[return-value]

        async def compensate(self, result: int | None) -> None:
            log.append(("undo", result))
            await anyio.sleep(0.05)  # the winner ends meanwhile

    group = [{"id": n, "tool": "Quote", "args": {"name": n, "delay": d}} for n, d in (("a", 0.0), ("b", 0.01))]
    result = await SagaExecutor(registry).run([{"group": group, "join": "first", "id": "q"}])

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert result.step("a").status is StepStatus.FAILED
    assert result.step("a").compensation_attempts == 1
    assert log == [("undo", "junk")]


async def test_a_refused_result_being_undone_when_the_caller_is_cancelled_is_undone_once() -> None:
    """The caller cancelled (asyncio.timeout) while a refused result is undone: undone once, the step ends FAILED."""
    registry = ToolRegistry()
    log: list[Any] = []

    @registry.tool
    class Charge:
        async def execute(self, n: int) -> int:
            return "junk"  # type: ignore[return-value]

        async def compensate(self, result: int | None) -> None:
            log.append(result)
            await anyio.sleep(0.1)  # the caller's timeout runs out meanwhile

    executor = SagaExecutor(registry)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await executor.run([{"id": "a", "tool": "Charge", "args": {"n": 1}}], saga_id="cut")
    stored = await executor.store.get_saga("cut")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED
    assert stored.step("a").status is StepStatus.FAILED
    assert stored.step("a").error_type == "ResultValidationError"
    assert log == ["junk"]
