"""Parallel groups: the steps of a group run at the same time, and one failure stops its siblings.

Group 0 checks fraud, reserves stock and quotes shipping concurrently, so the group takes as long as its slowest
step, not the sum. In the second order the fraud check fails while the shipping quote is still waiting on a slow
carrier: the quote is cancelled at once (recorded CANCELLED, its outcome unknown, so it is compensated with
None), the stock reservation is released, and the later group never starts.

Run it: `python -m saga_runtime.examples async_order`.
"""

from __future__ import annotations

import asyncio
import time

from saga_runtime import SagaExecutor, StepContext, ToolRegistry

registry = ToolRegistry()
events: list[str] = []


@registry.tool
class FraudCheck:
    """Score the order; refuse it above the threshold."""

    async def execute(self, order_id: str, risk: float) -> dict[str, object]:
        await asyncio.sleep(0.05)
        if risk > 0.8:
            raise PermissionError(f"order {order_id} refused: risk {risk:.2f}")
        events.append(f"fraud check passed for {order_id}")
        return {"order_id": order_id, "risk": risk}


@registry.tool
class ReserveStock:
    """Hold stock for the order."""

    async def execute(self, sku: str, quantity: int) -> dict[str, object]:
        await asyncio.sleep(0.02)
        events.append(f"reserved {quantity} x {sku}")
        return {"sku": sku, "quantity": quantity}

    async def compensate(self, result: dict[str, object] | None) -> None:
        events.append(f"released {result}")


@registry.tool
class QuoteShipping:
    """Ask a (slow) carrier for a price."""

    async def execute(self, address: str, carrier_delay: float, ctx: StepContext) -> dict[str, object]:
        try:
            await asyncio.sleep(carrier_delay)
        except asyncio.CancelledError:
            events.append(f"shipping quote for {address!r} cancelled mid-flight")
            raise
        events.append(f"shipping quoted for {address!r}")
        return {"quote_id": ctx.idempotency_key[:10], "price_cents": 599}

    async def compensate(self, result: dict[str, object] | None, ctx: StepContext) -> None:
        # result is None when the step was cancelled: look the quote up by its idempotency key instead.
        events.append(f"quote {ctx.idempotency_key[:10]} withdrawn (result={result})")


@registry.tool
class ConfirmOrder:
    """Tell the customer."""

    async def execute(self, order_id: str, quote: dict[str, object]) -> str:
        events.append(f"confirmed {order_id} at {quote['price_cents']} cents")
        return "sent"


def plan(order_id: str, risk: float, carrier_delay: float) -> list[object]:
    """Return an order plan: one parallel group, then a confirmation that uses the quote."""
    return [
        [
            {"id": "fraud", "tool": "FraudCheck", "args": {"order_id": order_id, "risk": risk}},
            {"id": "stock", "tool": "ReserveStock", "args": {"sku": "MUG", "quantity": 2}},
            {
                "id": "quote",
                "tool": "QuoteShipping",
                "args": {"address": "Seoul", "carrier_delay": carrier_delay},
            },
        ],
        {"id": "confirm", "tool": "ConfirmOrder", "args": {"order_id": order_id, "quote": {"$ref": "quote"}}},
    ]


async def main() -> None:
    executor = SagaExecutor(registry)

    started = time.perf_counter()
    ok = await executor.run(plan("B-1", risk=0.1, carrier_delay=0.1), saga_id="order-B-1")
    print(ok.describe())
    print(f"three steps of 50, 20 and 100 ms in parallel took {time.perf_counter() - started:.2f}s\n")

    started = time.perf_counter()
    failed = await executor.run(plan("B-2", risk=0.95, carrier_delay=10.0), saga_id="order-B-2")
    print(failed.describe())
    print(f"the 10 s carrier was cancelled: the failing saga took {time.perf_counter() - started:.2f}s\n")

    print("what happened, in order:")
    for event in events:
        print(f"  - {event}")


if __name__ == "__main__":
    asyncio.run(main())
