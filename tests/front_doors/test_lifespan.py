"""A registry's lifespan: the tools' resources, set up once per executor before any tool runs, as `ctx.state`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from saga_runtime import SagaExecutor, SagaStatus, StepContext, ToolRegistry


def make_registry(events: list[str], *, fail: bool = False) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.lifespan
    async def resources() -> AsyncIterator[dict[str, Any]]:
        events.append("enter")
        if fail:
            raise ConnectionError("the pool could not connect")
        yield {"pool": "the pool"}
        events.append("exit")

    @registry.tool
    class Charge:
        async def execute(self, amount: int, ctx: StepContext) -> str:
            events.append(f"charge with {ctx.state['pool']}")
            return "ok"

        async def compensate(self, result: str | None, ctx: StepContext) -> None:
            events.append(f"refund with {ctx.state['pool']}")

    return registry


PLAN = [{"tool": "Charge", "args": {"amount": 1}}, {"tool": "Charge", "args": {"amount": 2}}]


async def test_the_lifespan_is_entered_once_before_the_first_tool_and_left_on_close() -> None:
    """Two sagas share one entry; tools read what it yielded as ctx.state; closing the executor runs its cleanup."""
    events: list[str] = []
    async with SagaExecutor(make_registry(events)) as executor:
        assert events == ["enter"]
        assert (await executor.run(PLAN)).status is SagaStatus.SUCCESS
        assert (await executor.run(PLAN)).status is SagaStatus.SUCCESS
    assert events == ["enter", *["charge with the pool"] * 4, "exit"]


async def test_an_executor_not_entered_enters_the_lifespan_at_its_first_saga() -> None:
    """Without `async with`, the first run() enters the lifespan; aclose() leaves it."""
    events: list[str] = []
    executor = SagaExecutor(make_registry(events))
    assert events == []
    await executor.run(PLAN[:1])
    assert events == ["enter", "charge with the pool"]
    await executor.aclose()
    assert events[-1] == "exit"


async def test_a_dynamic_saga_enters_the_lifespan_too() -> None:
    """`executor.saga()` enters the lifespan before its first call, and its tools see ctx.state."""
    events: list[str] = []
    executor = SagaExecutor(make_registry(events))
    async with executor.saga() as saga:
        await saga.call("Charge", amount=3)
    await executor.aclose()
    assert events == ["enter", "charge with the pool", "exit"]


async def test_a_lifespan_that_fails_fails_the_run_stores_nothing_and_calls_no_tool() -> None:
    """Its own error reaches the caller; no saga is stored, so none is compensated for it."""
    events: list[str] = []
    executor = SagaExecutor(make_registry(events, fail=True))
    with pytest.raises(ConnectionError, match="could not connect"):
        await executor.run(PLAN, saga_id="never")
    assert events == ["enter"]
    assert await executor.store.get_saga("never") is None
    with pytest.raises(ConnectionError):  # tried again at the next call, not remembered as broken
        await executor.run(PLAN)


async def test_without_a_lifespan_ctx_state_is_empty() -> None:
    """A registry without a lifespan gives its tools an empty ctx.state."""
    registry = ToolRegistry()
    seen: list[Any] = []

    @registry.tool
    class Look:
        async def execute(self, ctx: StepContext) -> None:
            seen.append(dict(ctx.state))

    await SagaExecutor(registry).run([{"tool": "Look", "args": {}}])
    assert seen == [{}]


def test_a_lifespan_must_be_an_async_generator_without_arguments_and_one_per_registry() -> None:
    """A plain function, one taking arguments, or a second lifespan is refused at registration."""
    registry = ToolRegistry()

    def plain() -> dict[str, Any]:
        return {}

    async def needs(pool: Any) -> AsyncIterator[dict[str, Any]]:
        yield {}

    async def fine() -> AsyncIterator[dict[str, Any]]:
        yield {}

    with pytest.raises(TypeError, match="async generator"):
        registry.lifespan(plain)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="takes no arguments"):
        registry.lifespan(needs)
    registry.lifespan(fine)
    with pytest.raises(ValueError, match="has a lifespan already"):
        registry.lifespan(fine)


async def test_a_lifespan_yielding_no_mapping_is_refused_with_its_name() -> None:
    """What a lifespan yields must be a mapping: anything else fails the first run, naming the function."""
    registry = ToolRegistry()

    @registry.lifespan
    async def wrong() -> AsyncIterator[Any]:
        yield ["not", "a", "mapping"]

    @registry.tool
    class Noop:
        async def execute(self) -> None:
            return None

    with pytest.raises(TypeError, match="wrong yielded list"):
        await SagaExecutor(registry).run([{"tool": "Noop", "args": {}}])
