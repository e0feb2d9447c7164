"""Hedged quotes: ask two freight providers at once, keep the first answer, release the other's reservation.

Asking a provider for a quote also holds cargo space for a while (its effect), so a quote nobody uses must be
released. The two requests run as a `first` group: the first provider to answer wins, the other is cancelled
mid-flight and compensated at once. It was cancelled before it answered, so its compensation gets `None` and
finds the reservation by the step's idempotency key. The booking then takes the winner's quote through a
`$ref` to the group's id.

In the second shipment the fast provider is rate-limited: its failure is recorded (FAILED) but does not fail
the saga, because the slow provider still answers, and wins.

Run it: `python -m saga_runtime.examples hedged_quote` (offline; the providers are simulated).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from saga_runtime import SagaExecutor, SagaResult, StepContext, ToolRegistry, open_store

# -- a small, offline outside world: two freight providers that hold space for every quote they give ------------


class Providers:
    """Remember the space each provider holds, keyed by the idempotency key of the request that reserved it."""

    def __init__(self) -> None:
        self.held: dict[str, str] = {}  # idempotency key -> "provider/reservation id"
        self.booked: list[str] = []
        self.events: list[str] = []
        self.rate_limited: set[str] = set()

    def say(self, line: str) -> None:
        """Log what happened, and show it as it happens."""
        self.events.append(line)
        print(f"  . {line}")


world = Providers()
registry = ToolRegistry()

# How long each provider takes to answer, in seconds.
LATENCY = {"SwiftCargo": 0.05, "SlowBoat": 0.4}


@registry.tool
class RequestQuote:
    """Ask one provider for a price; it holds cargo space for us until it is booked or released."""

    async def execute(self, provider: str, route: str, kilos: int, ctx: StepContext) -> dict[str, Any]:
        if provider in world.rate_limited:
            await asyncio.sleep(LATENCY[provider] / 2)
            world.say(f"{provider}: 429 Too Many Requests, no space held")
            raise ConnectionRefusedError(f"{provider} is rate-limiting us")
        reservation = f"{provider[:2].upper()}-{ctx.idempotency_key[3:9]}"
        world.held[ctx.idempotency_key] = f"{provider}/{reservation}"  # the effect: space is held right away
        world.say(f"{provider}: holding {kilos} kg on {route} as {reservation}, pricing...")
        try:
            await asyncio.sleep(LATENCY[provider])
        except asyncio.CancelledError:
            world.say(f"{provider}: request cancelled before it answered (space still held)")
            raise
        price = 1000 + kilos * (7 if provider == "SwiftCargo" else 5)
        world.say(f"{provider}: {price / 100:.2f} EUR, reservation {reservation}")
        return {"provider": provider, "reservation": reservation, "price_cents": price}

    async def compensate(self, result: dict[str, Any] | None, ctx: StepContext) -> None:
        # None when the request was cancelled mid-flight: look the reservation up by the idempotency key.
        held = world.held.pop(ctx.idempotency_key, None)
        if held is None:
            return  # nothing to undo
        how = "with its quote" if result is not None else "by idempotency key (it never answered)"
        world.say(f"released {held} {how}")


@registry.tool
class BookShipment:
    """Book the space the winning quote holds."""

    async def execute(self, quote: dict[str, Any], ctx: StepContext) -> dict[str, Any]:
        booking = f"{quote['provider']}/{quote['reservation']}"
        world.booked.append(booking)
        world.say(f"booked {booking} at {quote['price_cents'] / 100:.2f} EUR")
        return {"booking": booking, "price_cents": quote["price_cents"]}


def shipment(route: str, kilos: int) -> list[Any]:
    """Return the plan: race both providers for a quote, then book the winner's."""
    args = {"route": route, "kilos": kilos}
    return [
        {
            "group": [
                {"id": "swift", "tool": "RequestQuote", "args": {"provider": "SwiftCargo", **args}},
                {"id": "slow", "tool": "RequestQuote", "args": {"provider": "SlowBoat", **args}},
            ],
            "join": "first",
            "id": "quote",
        },
        {"id": "book", "tool": "BookShipment", "args": {"quote": {"$ref": "quote"}}},
    ]


def report(result: SagaResult) -> None:
    """Print who won, what was released, and the saga's timeline."""
    winner = result.result_of("quote")
    print(f"  winner: {winner['provider']} at {winner['price_cents'] / 100:.2f} EUR ({winner['reservation']})")
    for step in result.steps:
        if step.step_id != "book" and step.result != winner:
            print(f"  {step.step_id}: {step.status.value} - {step.error}")
    print(result.describe())
    print()


async def main() -> None:
    """Ship twice: once with both providers up, once with the fast one rate-limited."""
    async with open_store() as store:  # $SAGA_RUNTIME_DATABASE_URL, else sqlite:///sagas.db
        executor = SagaExecutor(registry, store=store)
        run = uuid.uuid4().hex[:6]  # fresh saga ids, so running the example again ships again
        print(f"store: {store.url}\n")

        print("shipment 1: both providers up, SwiftCargo answers first")
        first = await executor.run(shipment("Busan -> Rotterdam", 120), saga_id=f"ship-1-{run}")
        report(first)

        print("shipment 2: SwiftCargo rate-limits us, SlowBoat wins the race on its own")
        world.rate_limited.add("SwiftCargo")
        second = await executor.run(shipment("Busan -> Hamburg", 80), saga_id=f"ship-2-{run}")
        report(second)

        print(f"space still held: {sorted(world.held.values())}")
        print(f"bookings: {world.booked}")
        assert len(world.held) == len(world.booked) == 2, "a losing quote's space was not released"


if __name__ == "__main__":
    asyncio.run(main())
