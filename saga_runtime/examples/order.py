"""An order as a saga: charge the card, reserve the stock, book the shipment.

The first order goes through. The second cannot be shipped (the carrier does not deliver to Atlantis, even after
three attempts), so saga_runtime releases the stock and refunds the card, in reverse order. Every step is
written ahead to the embedded SQLite store, so running an order's saga id again returns its stored result
without charging anyone twice.

Run it: `make demo`, or `python -m saga_runtime.examples order`.
"""

from __future__ import annotations

import asyncio
import os
import uuid

from saga_runtime import RetryPolicy, SagaExecutor, StepContext, ToolRegistry, open_store

# -- a small, offline outside world: a payment provider, a warehouse and a carrier --------------------------------


class World:
    """Remember every effect the tools had, keyed by idempotency key as a real provider would."""

    def __init__(self) -> None:
        self.charges: dict[str, int] = {}
        self.refunds: list[str] = []
        self.stock = {"KEYBOARD": 5}
        self.shipments: dict[str, str] = {}
        self.calls = 0


world = World()
registry = ToolRegistry()


@registry.tool
class ChargeCard:
    """Charge the customer's card."""

    async def execute(self, order_id: str, amount_cents: int, ctx: StepContext) -> dict[str, object]:
        world.calls += 1
        # A retried or recovered step reuses its idempotency key: the provider charges once.
        world.charges.setdefault(ctx.idempotency_key, amount_cents)
        return {"charge_id": ctx.idempotency_key, "amount_cents": amount_cents}

    async def compensate(self, result: dict[str, object] | None, ctx: StepContext) -> None:
        if world.charges.pop(ctx.idempotency_key, None) is not None:
            world.refunds.append(f"{ctx.idempotency_key[:12]}...")


@registry.tool
class ReserveStock:
    """Reserve items in the warehouse."""

    def execute(self, sku: str, quantity: int) -> dict[str, object]:  # sync tools run in a worker thread
        world.calls += 1
        if world.stock.get(sku, 0) < quantity:
            raise LookupError(f"only {world.stock.get(sku, 0)} {sku} left")
        world.stock[sku] -= quantity
        return {"sku": sku, "quantity": quantity}

    def compensate(self, result: dict[str, object] | None) -> None:
        if result is not None:
            world.stock[str(result["sku"])] += int(str(result["quantity"]))


@registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.05), timeout=5.0)
class BookShipment:
    """Book a parcel with the carrier."""

    async def execute(self, address: str, ctx: StepContext) -> dict[str, object]:
        world.calls += 1
        if "Atlantis" in address:
            raise ConnectionError(f"the carrier does not deliver to {address!r}")
        world.shipments[ctx.idempotency_key] = address
        return {"tracking_id": f"TRK-{ctx.idempotency_key[3:11]}"}

    async def compensate(self, result: dict[str, object] | None, ctx: StepContext) -> None:
        world.shipments.pop(ctx.idempotency_key, None)


def order(order_id: str, address: str) -> list[dict[str, object]]:
    """Return the plan of one order: three steps, one after the other."""
    return [
        {"id": "charge", "tool": "ChargeCard", "args": {"order_id": order_id, "amount_cents": 4999}},
        {"id": "reserve", "tool": "ReserveStock", "args": {"sku": "KEYBOARD", "quantity": 1}},
        {"id": "ship", "tool": "BookShipment", "args": {"address": address}},
    ]


async def main() -> None:
    async with open_store() as store:  # $SAGA_RUNTIME_DATABASE_URL, else sqlite:///sagas.db
        executor = SagaExecutor(registry, store=store)
        run = uuid.uuid4().hex[:6]
        where = f" (in {os.getcwd()})" if store.url.startswith("sqlite:///") and "////" not in store.url else ""
        print(f"store: {store.url}{where}\n")

        ok = await executor.run(order("A-1", "12 Main St, Springfield"), saga_id=f"order-A-1-{run}")
        print(ok.describe(), "\n")

        failed = await executor.run(order("A-2", "1 Deep Sea Rd, Atlantis"), saga_id=f"order-A-2-{run}")
        print(failed.describe(), "\n")

        calls = world.calls
        again = await executor.run(order("A-2", "1 Deep Sea Rd, Atlantis"), saga_id=f"order-A-2-{run}")
        print(
            f"running order-A-2-{run} again: {again.status.value}, stored result returned, "
            f"{world.calls - calls} tool calls made\n"
        )

    print(f"charges still standing: {len(world.charges)} (order A-1), refunds: {len(world.refunds)} (order A-2)")
    print(f"keyboards in stock: {world.stock['KEYBOARD']} of 5, shipments booked: {len(world.shipments)}")


if __name__ == "__main__":
    asyncio.run(main())
