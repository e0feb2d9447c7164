"""ToolRegistry: registration (decorator and instances), what it refuses, tool specs, and StepContext injection."""

import asyncio
import threading

import pytest
from shop_tools import boom_tool

from saga_runtime import (
    PlanValidationError,
    RetryPolicy,
    SagaExecutor,
    SagaStatus,
    StepContext,
    StepStatus,
    ToolRegistry,
    UnknownToolError,
)

# -- the decorator -------------------------------------------------------------------------------------------------


async def test_bare_decorator_registers_under_the_class_name_with_defaults() -> None:
    """@registry.tool (bare) registers the class under its own name, returns the class, and runs it once."""
    registry = ToolRegistry()
    calls: list[int] = []

    class Adder:
        def execute(self, n: int) -> int:
            calls.append(n)
            return n + 1

    assert registry.tool(Adder) is Adder
    assert registry.names() == ["Adder"]
    assert "Adder" in registry
    spec = registry.get("Adder")
    assert spec.name == "Adder"
    assert spec.retry == RetryPolicy()
    assert spec.retry_scope == "saga"
    assert spec.timeout is None
    assert spec.irreversible is False
    assert spec.has_compensate is False

    result = await SagaExecutor(registry).run([{"tool": "Adder", "args": {"n": 1}}])
    assert result.status is SagaStatus.SUCCESS
    assert calls == [1]
    assert result.steps[0].result == 2


def test_decorator_with_every_option_records_them_on_the_spec() -> None:
    """@registry.tool(...) keeps name, retry, retry_scope, timeout, compensation_retry and irreversible."""
    registry = ToolRegistry()
    retry = RetryPolicy(max_attempts=3, initial_interval=0.0)
    compensation_retry = RetryPolicy(max_attempts=5, initial_interval=0.0)

    @registry.tool(
        name="ship",
        retry=retry,
        retry_scope="step",
        timeout=2.5,
        compensation_retry=compensation_retry,
        irreversible=True,
    )
    class ShippingTool:
        def execute(self, address: str) -> str:
            return address

    assert registry.names() == ["ship"]
    assert "ShippingTool" not in registry
    spec = registry.get("ship")
    assert spec.retry is retry
    assert spec.retry_scope == "step"
    assert spec.timeout == 2.5
    assert spec.compensation_retry is compensation_retry
    assert spec.irreversible is True
    assert isinstance(ShippingTool, type)  # the decorator with options also returns the class


async def test_retry_option_retries_the_step_until_it_succeeds() -> None:
    """retry=RetryPolicy(max_attempts=3) gives a flaky step three attempts; `attempts` records how many ran."""
    registry = ToolRegistry()
    attempts_seen: list[int] = []

    @registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.0))
    class Flaky:
        async def execute(self, ctx: StepContext) -> str:
            attempts_seen.append(ctx.attempt)
            if ctx.attempt < 3:
                raise ConnectionError("try again")
            return "done"

    result = await SagaExecutor(registry).run([{"tool": "Flaky", "id": "f"}])
    assert result.status is SagaStatus.SUCCESS
    assert attempts_seen == [1, 2, 3]
    assert result.step("f").attempts == 3


async def test_retry_scope_step_records_failed_and_goes_on() -> None:
    """retry_scope="step": an exhausted step is FAILED, and the saga runs its later groups and succeeds."""
    registry = ToolRegistry()
    ran: list[str] = []

    @registry.tool(retry_scope="step")
    class Optional_:
        async def execute(self) -> None:
            ran.append("optional")
            raise RuntimeError("not today")

    @registry.tool
    class Required:
        async def execute(self) -> None:
            ran.append("required")

    result = await SagaExecutor(registry).run([{"tool": "Optional_", "id": "o"}, {"tool": "Required", "id": "r"}])
    assert ran == ["optional", "required"]
    assert result.status is SagaStatus.SUCCESS
    assert result.step("o").status is StepStatus.FAILED
    assert result.step("o").error_type == "RuntimeError"
    assert result.step("r").status is StepStatus.SUCCESS


async def test_timeout_option_cancels_a_slow_attempt_and_compensates_it_as_unknown() -> None:
    """timeout=: an attempt running longer is cancelled, counted as TimeoutError, and compensated with None."""
    registry = ToolRegistry()
    compensated: list[object] = []

    @registry.tool(timeout=0.02)
    class Hang:
        async def execute(self) -> None:
            await asyncio.Event().wait()  # never set: only the timeout ends this attempt

        async def compensate(self, result: object) -> None:
            compensated.append(result)

    result = await SagaExecutor(registry).run([{"tool": "Hang", "id": "h"}])
    record = result.step("h")
    assert record.error_type == "TimeoutError"
    assert record.status is StepStatus.COMPENSATED
    assert compensated == [None]
    assert result.status is SagaStatus.COMPENSATED


async def test_compensation_retry_option_retries_a_failing_compensation() -> None:
    """compensation_retry=RetryPolicy(max_attempts=4) gives compensate four attempts before giving up."""
    registry = ToolRegistry()
    undo_attempts: list[int] = []

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=4, initial_interval=0.0))
    class Stubborn:
        async def execute(self) -> str:
            return "effect"

        async def compensate(self, result: str, ctx: StepContext) -> None:
            undo_attempts.append(ctx.attempt)
            raise RuntimeError("cannot undo")

    boom_tool(registry)

    result = await SagaExecutor(registry).run([{"tool": "Stubborn", "id": "s"}, {"tool": "Boom", "id": "b"}])
    assert undo_attempts == [1, 2, 3, 4]
    assert result.step("s").status is StepStatus.COMPENSATION_FAILED
    assert result.status is SagaStatus.COMPENSATION_FAILED


async def test_irreversible_option_restricts_the_tool_to_the_last_group() -> None:
    """irreversible=True: the tool is refused before the last group and accepted in it."""
    registry = ToolRegistry()
    sent: list[str] = []

    @registry.tool(irreversible=True)
    class SendEmail:
        def execute(self, to: str) -> None:
            sent.append(to)

    with pytest.raises(PlanValidationError, match="irreversible"):
        await SagaExecutor(registry).run([{"tool": "SendEmail", "args": {"to": "a"}}, {"tool": "SendEmail"}])
    assert sent == []
    result = await SagaExecutor(registry).run([{"tool": "SendEmail", "args": {"to": "b"}}])
    assert result.status is SagaStatus.SUCCESS
    assert sent == ["b"]


# -- registering instances -----------------------------------------------------------------------------------------


async def test_register_instance_with_constructor_dependencies() -> None:
    """registry.register(instance) registers a tool built with dependencies, named after its class by default."""

    class Client:
        def __init__(self) -> None:
            self.charged: list[tuple[str, int]] = []
            self.refunded: list[str] = []

    class PaymentTool:
        def __init__(self, client: Client) -> None:
            self.client = client

        async def execute(self, order_id: str, amount_cents: int) -> dict[str, str]:
            self.client.charged.append((order_id, amount_cents))
            return {"tx_id": f"tx-{order_id}"}

        async def compensate(self, result: dict[str, str]) -> None:
            self.client.refunded.append(result["tx_id"])

    class Boom:
        def execute(self) -> None:
            raise RuntimeError("boom")

    client = Client()
    registry = ToolRegistry()
    spec = registry.register(PaymentTool(client))
    registry.register(Boom(), name="boom", retry_scope="saga")
    assert spec is registry.get("PaymentTool")
    assert registry.names() == ["PaymentTool", "boom"]

    result = await SagaExecutor(registry).run(
        [{"tool": "PaymentTool", "args": {"order_id": "A1", "amount_cents": 500}}, {"tool": "boom"}]
    )
    assert client.charged == [("A1", 500)]
    assert client.refunded == ["tx-A1"]
    assert result.status is SagaStatus.COMPENSATED


def test_register_accepts_every_option() -> None:
    """registry.register(instance, name=..., retry=..., ...) applies the same options as the decorator."""

    class Tool:
        def execute(self) -> None:
            return None

    registry = ToolRegistry()
    retry = RetryPolicy(max_attempts=2)
    spec = registry.register(
        Tool(),
        name="custom-name_1",
        retry=retry,
        retry_scope="step",
        timeout=1.0,
        compensation_retry=retry,
        irreversible=True,
    )
    assert (spec.name, spec.retry, spec.retry_scope, spec.timeout, spec.compensation_retry, spec.irreversible) == (
        "custom-name_1",
        retry,
        "step",
        1.0,
        retry,
        True,
    )


def test_register_refuses_a_class() -> None:
    """registry.register(SomeClass) is a TypeError pointing to @registry.tool."""

    class Tool:
        def execute(self) -> None:
            return None

    with pytest.raises(TypeError, match=r"registry\.tool"):
        ToolRegistry().register(Tool)


# -- what registration refuses -------------------------------------------------------------------------------------


def test_class_without_execute_is_refused() -> None:
    """A class with no execute() is a TypeError at registration, and nothing is registered."""
    registry = ToolRegistry()

    class NotATool:
        def compensate(self, result: object) -> None:
            return None

    with pytest.raises(TypeError, match="execute"):
        registry.tool(NotATool)
    with pytest.raises(TypeError, match="execute"):
        registry.register(NotATool())
    assert len(registry) == 0


def test_duplicate_names_are_refused() -> None:
    """Two tools with the same name (class name or name=) are a ValueError; the first stays registered."""
    registry = ToolRegistry()

    @registry.tool
    class Mail:
        def execute(self) -> str:
            return "first"

    class Other:
        def execute(self) -> str:
            return "second"

    with pytest.raises(ValueError, match="Mail"):
        registry.tool(name="Mail")(Other)
    with pytest.raises(ValueError, match="Mail"):
        registry.register(Mail())
    assert registry.names() == ["Mail"]
    assert registry.get("Mail").instance.execute() == "first"


@pytest.mark.parametrize(
    "name",
    ["", "has space", "dotted.name", "a" * 65, "café", "slash/name", "colon:name", "new\nline"],
)
def test_names_outside_the_llm_provider_rule_are_refused(name: str) -> None:
    """A tool name must match ^[A-Za-z0-9_-]{1,64}$ (OpenAI's and Anthropic's rule), else ValueError."""

    class Tool:
        def execute(self) -> None:
            return None

    registry = ToolRegistry()
    with pytest.raises(ValueError, match="name"):
        registry.tool(name=name)(Tool)
    with pytest.raises(ValueError, match="name"):
        registry.register(Tool(), name=name)
    assert len(registry) == 0


@pytest.mark.parametrize("name", ["a", "A" * 64, "snake_case", "kebab-case", "Mixed_09-x"])
def test_names_inside_the_llm_provider_rule_are_accepted(name: str) -> None:
    """Names of 1 to 64 letters, digits, '_' and '-' are accepted."""

    class Tool:
        def execute(self) -> None:
            return None

    registry = ToolRegistry()
    registry.register(Tool(), name=name)
    assert registry.names() == [name]


@pytest.mark.parametrize("scope", ["all", "SAGA", "", None])
def test_bad_retry_scope_is_refused(scope: object) -> None:
    """retry_scope other than "saga" or "step" is a ValueError."""

    class Tool:
        def execute(self) -> None:
            return None

    with pytest.raises(ValueError, match="retry_scope"):
        ToolRegistry().tool(retry_scope=scope)(Tool)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1, -0.5, 0.0, float("nan"), True])
def test_bad_timeout_is_refused(timeout: float) -> None:
    """timeout must be a positive number of seconds: zero, negative, NaN or a bool is a ValueError."""

    class Tool:
        def execute(self) -> None:
            return None

    with pytest.raises(ValueError, match="timeout"):
        ToolRegistry().tool(timeout=timeout)(Tool)


def test_class_whose_constructor_needs_arguments_points_to_register() -> None:
    """@registry.tool on a class needing constructor arguments is a TypeError naming registry.register()."""
    registry = ToolRegistry()

    class NeedsClient:
        def __init__(self, client: object) -> None:
            self.client = client

        def execute(self) -> None:
            return None

    with pytest.raises(TypeError, match=r"registry\.register\(NeedsClient\(\.\.\.\)\)"):
        registry.tool(NeedsClient)
    assert len(registry) == 0


class _NoArgs:
    def compensate(self) -> None:
        return None


class _TwoRequired:
    def compensate(self, result: object, other: object) -> None:
        return None


class _KeywordOnly:
    def compensate(self, *, result: object) -> None:
        return None


class _OnlyContext:
    def compensate(self, ctx: StepContext) -> None:
        return None


@pytest.mark.parametrize("base", [_NoArgs, _TwoRequired, _KeywordOnly, _OnlyContext])
def test_compensate_with_a_wrong_signature_is_refused(base: type) -> None:
    """compensate must take exactly one positional argument (plus an optional StepContext), else TypeError."""

    class Tool(base):  # type: ignore[misc, valid-type]
        def execute(self) -> None:
            return None

    with pytest.raises(TypeError, match="compensate"):
        ToolRegistry().tool(Tool)


def test_compensate_signatures_that_fit_are_accepted() -> None:
    """compensate(result), compensate(result, ctx: StepContext) and compensate(result, extra=1) are accepted."""
    registry = ToolRegistry()

    @registry.tool
    class Plain:
        def execute(self) -> None:
            return None

        def compensate(self, result: object) -> None:
            return None

    @registry.tool
    class WithContext:
        def execute(self) -> None:
            return None

        async def compensate(self, result: object, context: StepContext) -> None:
            return None

    @registry.tool
    class WithDefault:
        def execute(self) -> None:
            return None

        def compensate(self, result: object, extra: int = 1) -> None:
            return None

    assert all(registry.get(name).has_compensate for name in ["Plain", "WithContext", "WithDefault"])


# -- specs and lookups ---------------------------------------------------------------------------------------------


def test_args_schema_is_the_json_schema_of_execute_arguments_without_the_context() -> None:
    """registry.get(name).args_schema describes execute's arguments (types, required, defaults), not StepContext."""
    registry = ToolRegistry()

    @registry.tool
    class PaymentTool:
        async def execute(self, order_id: str, ctx: StepContext, amount_cents: int, note: str = "none") -> None:
            return None

    schema = registry.get("PaymentTool").args_schema
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"order_id", "amount_cents", "note"}
    assert schema["properties"]["order_id"]["type"] == "string"
    assert schema["properties"]["amount_cents"]["type"] == "integer"
    assert schema["properties"]["note"]["default"] == "none"
    assert sorted(schema["required"]) == ["amount_cents", "order_id"]
    assert schema["additionalProperties"] is False


def test_args_schema_of_a_tool_without_arguments_is_an_empty_object() -> None:
    """A tool whose execute takes only a StepContext has an object schema with no properties."""
    registry = ToolRegistry()

    @registry.tool
    class Ping:
        def execute(self, ctx: StepContext) -> None:
            return None

    schema = registry.get("Ping").args_schema
    assert schema["type"] == "object"
    assert schema.get("properties", {}) == {}
    assert schema.get("required", []) == []


def test_get_of_a_missing_tool_raises_unknown_tool_error_listing_available_tools() -> None:
    """registry.get("missing") raises UnknownToolError (a PlanValidationError) naming the tools there are."""
    registry = ToolRegistry()

    @registry.tool
    class Alpha:
        def execute(self) -> None:
            return None

    @registry.tool(name="beta")
    class Beta:
        def execute(self) -> None:
            return None

    with pytest.raises(UnknownToolError) as info:
        registry.get("missing")
    assert isinstance(info.value, PlanValidationError)
    message = str(info.value)
    assert "missing" in message
    assert "Alpha" in message
    assert "beta" in message


def test_get_on_an_empty_registry_says_none_are_registered() -> None:
    """UnknownToolError from an empty registry says that no tool is registered."""
    with pytest.raises(UnknownToolError, match="none are registered"):
        ToolRegistry().get("anything")


# -- sync and async ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_sync_and_async_methods_are_both_accepted(kind: str) -> None:
    """execute and compensate may be def or async def; both run, and compensation gets execute's result."""
    registry = ToolRegistry()
    events: list[tuple[str, object]] = []

    if kind == "sync":

        class Tool:
            def execute(self, n: int) -> dict[str, int]:
                events.append(("execute", n))
                return {"n": n}

            def compensate(self, result: dict[str, int]) -> None:
                events.append(("compensate", result))

    else:

        class Tool:  # type: ignore[no-redef]
            async def execute(self, n: int) -> dict[str, int]:
                events.append(("execute", n))
                return {"n": n}

            async def compensate(self, result: dict[str, int]) -> None:
                events.append(("compensate", result))

    class Boom:
        def execute(self) -> None:
            raise RuntimeError("boom")

    registry.tool(Tool)
    registry.tool(Boom)
    result = await SagaExecutor(registry).run([{"tool": "Tool", "args": {"n": 7}}, {"tool": "Boom"}])
    assert events == [("execute", 7), ("compensate", {"n": 7})]
    assert result.status is SagaStatus.COMPENSATED


async def test_sync_tools_run_in_worker_threads() -> None:
    """A sync execute runs off the event loop's thread; an async one runs on it."""
    registry = ToolRegistry()
    threads: dict[str, int] = {}

    @registry.tool
    class SyncTool:
        def execute(self) -> None:
            threads["sync"] = threading.get_ident()

    @registry.tool
    class AsyncTool:
        async def execute(self) -> None:
            threads["async"] = threading.get_ident()

    await SagaExecutor(registry).run([[{"tool": "SyncTool"}, {"tool": "AsyncTool"}]])
    loop_thread = threading.get_ident()
    assert threads["async"] == loop_thread
    assert threads["sync"] != loop_thread


# -- StepContext ---------------------------------------------------------------------------------------------------


async def test_step_context_is_injected_by_annotation_under_any_name() -> None:
    """A parameter annotated StepContext is injected whatever its name, with the step's identity and args."""
    registry = ToolRegistry()
    seen: list[StepContext] = []

    @registry.tool(name="first")
    class First:
        async def execute(self, order_id: str, info: StepContext) -> str:
            seen.append(info)
            return order_id

    @registry.tool(name="second")
    class Second:
        def execute(self, *, amount: int, whatever_name: StepContext) -> int:
            seen.append(whatever_name)
            return amount

    result = await SagaExecutor(registry).run(
        [[{"tool": "first", "args": {"order_id": "A1"}, "id": "one"}, {"tool": "second", "args": {"amount": 3}}]],
        saga_id="saga-ctx",
    )
    assert result.status is SagaStatus.SUCCESS
    by_tool = {ctx.tool_name: ctx for ctx in seen}
    assert set(by_tool) == {"first", "second"}
    first, second = by_tool["first"], by_tool["second"]
    assert first.saga_id == second.saga_id == "saga-ctx"
    assert first.step_id == "one"
    assert second.step_id == result.steps[1].step_id
    assert dict(first.args) == {"order_id": "A1"}
    assert dict(second.args) == {"amount": 3}
    assert first.attempt == second.attempt == 1
    assert first.idempotency_key == result.step("one").idempotency_key
    assert second.idempotency_key == result.steps[1].idempotency_key
    assert first.idempotency_key != second.idempotency_key


async def test_step_context_attempt_counts_and_idempotency_key_is_stable_across_retries() -> None:
    """ctx.attempt is 1-based and grows with retries; ctx.idempotency_key stays the same."""
    registry = ToolRegistry()
    seen: list[tuple[int, str]] = []

    @registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.0))
    class Flaky:
        def execute(self, ctx: StepContext) -> None:
            seen.append((ctx.attempt, ctx.idempotency_key))
            if ctx.attempt < 3:
                raise ConnectionError("again")

    result = await SagaExecutor(registry).run([{"tool": "Flaky"}])
    assert [attempt for attempt, _ in seen] == [1, 2, 3]
    assert {key for _, key in seen} == {result.steps[0].idempotency_key}


async def test_charge_works_from_a_sync_tool_in_a_worker_thread() -> None:
    """ctx.charge() is a plain method a sync tool calls from its worker thread; the saga adds up the charges."""
    registry = ToolRegistry()
    threads: list[int] = []

    @registry.tool
    class Metered:
        def execute(self, cost: float, tokens: int, ctx: StepContext) -> None:
            threads.append(threading.get_ident())
            ctx.charge(cost=cost, tokens=tokens)
            ctx.charge(cost)

    result = await SagaExecutor(registry).run(
        [
            [
                {"tool": "Metered", "args": {"cost": 0.25, "tokens": 10}},
                {"tool": "Metered", "args": {"cost": 1, "tokens": 5}},
            ]
        ]
    )
    assert result.status is SagaStatus.SUCCESS
    assert len(threads) == 2
    assert threading.get_ident() not in threads
    assert result.cost == pytest.approx(2.5)
    assert result.tokens == 15


async def test_compensate_receives_a_step_context_too() -> None:
    """A StepContext parameter of compensate is injected with the step's id, key and args."""
    registry = ToolRegistry()
    seen: list[tuple[str, str, dict[str, object], str]] = []

    @registry.tool
    class Reserve:
        def execute(self, sku: str) -> str:
            return f"r-{sku}"

        def compensate(self, result: str, undo_ctx: StepContext) -> None:
            seen.append((result, undo_ctx.step_id, dict(undo_ctx.args), undo_ctx.idempotency_key))

    @registry.tool
    class Boom:
        def execute(self) -> None:
            raise RuntimeError("boom")

    result = await SagaExecutor(registry).run(
        [{"tool": "Reserve", "args": {"sku": "X"}, "id": "res"}, {"tool": "Boom"}]
    )
    assert seen == [("r-X", "res", {"sku": "X"}, result.step("res").idempotency_key)]


async def test_optional_step_context_annotation_is_injected() -> None:
    """A parameter annotated `StepContext | None` (so the tool can be called outside a saga) is injected too."""
    registry = ToolRegistry()
    seen: list[object] = []

    @registry.tool
    class Tool:
        def execute(self, n: int, ctx: StepContext | None = None) -> None:
            seen.append(ctx)

    assert set(registry.get("Tool").args_schema["properties"]) == {"n"}
    await SagaExecutor(registry).run([{"tool": "Tool", "args": {"n": 1}}])
    assert len(seen) == 1
    assert isinstance(seen[0], StepContext)
