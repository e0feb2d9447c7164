"""Small tools shared by tests: Book, Ship, Fail, Spend reporting to a ledger, Boom, and a warehouse that fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from saga_runtime import RetryPolicy, StepContext, ToolRegistry


class Ledger:
    """What the tools of one test did, in order."""

    def __init__(self) -> None:
        self.executed: list[tuple[str, Any]] = []
        self.compensated: list[tuple[str, Any]] = []


def shop_registry(ledger: Ledger, *names: str, registry: ToolRegistry | None = None) -> ToolRegistry:
    """Return `registry` (a new one by default) holding the named shop tools, reporting to `ledger`."""
    registry = ToolRegistry() if registry is None else registry

    class Book:
        """Book an item."""

        async def execute(self, item: str) -> dict[str, Any]:
            ledger.executed.append(("Book", item))
            return {"booked": item}

        async def compensate(self, result: dict[str, Any] | None) -> None:
            ledger.compensated.append(("Book", result))

    class Ship:
        """Ship to an address."""

        async def execute(self, to: str) -> dict[str, Any]:
            ledger.executed.append(("Ship", to))
            return {"tracking": f"T-{to}"}

        async def compensate(self, result: dict[str, Any] | None) -> None:
            ledger.compensated.append(("Ship", result))

    class Fail:
        """Fail with the reason given."""

        async def execute(self, reason: str) -> None:
            ledger.executed.append(("Fail", reason))
            raise ValueError(reason)

    class Spend:
        """Charge the saga a fee."""

        async def execute(self, usd: float, ctx: StepContext) -> str:
            ledger.executed.append(("Spend", usd))
            ctx.charge(cost=usd)
            return "spent"

    tools = {tool.__name__: tool for tool in (Book, Ship, Fail, Spend)}
    for name in names:
        registry.tool(tools[name])
    return registry


def boom_tool(registry: ToolRegistry) -> None:
    """Register `Boom`, a tool that always fails."""

    @registry.tool
    class Boom:
        async def execute(self) -> None:
            raise RuntimeError("boom")


def warehouse_registry(while_reserving: Callable[[], None] = lambda: None) -> ToolRegistry:
    """Return Reserve (its undo refuses once, then works) and Ship (fails each try), each given a second try.

    `while_reserving` is called inside each Reserve call.
    """
    registry = ToolRegistry()
    refusals = {"left": 1}

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=2, initial_interval=0))
    class Reserve:
        async def execute(self, item: str) -> dict[str, str]:
            while_reserving()
            return {"item": item}

        async def compensate(self, result: Any) -> None:
            if refusals["left"]:
                refusals["left"] -= 1
                raise ConnectionError("warehouse busy")

    @registry.tool(retry=RetryPolicy(max_attempts=2, initial_interval=0))
    class Ship:
        async def execute(self, to: str) -> None:
            raise LookupError(f"no route to {to}")

    return registry
