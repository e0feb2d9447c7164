"""Retries: backoff for flaky calls, no retry for errors that cannot heal, and steps allowed to fail.

- A flaky exchange-rate API fails twice, then answers: the step succeeds on attempt 3, after growing waits.
- A card that is declined raises `CardDeclined`, listed in `non_retryable`: no second attempt; the saga
  compensates what it did.
- An optional SMS notification uses `retry_scope="step"`: when it fails, it is recorded FAILED and the saga
  goes on to SUCCESS.

Run it: `python -m saga_runtime.examples retry`.
"""

from __future__ import annotations

import asyncio
import time

from saga_runtime import RetryPolicy, SagaExecutor, StepContext, ToolRegistry

registry = ToolRegistry()
started = time.perf_counter()
log: list[str] = []


def say(message: str) -> None:
    log.append(f"  {time.perf_counter() - started:5.2f}s  {message}")


class CardDeclined(Exception):
    """The bank said no; asking again will not change its mind."""


@registry.tool(retry=RetryPolicy(max_attempts=4, initial_interval=0.05, backoff_coefficient=2.0, jitter=False))
class ExchangeRate:
    """Fetch a rate from a flaky API."""

    failures_left = 2

    async def execute(self, currency: str, ctx: StepContext) -> float:
        say(f"ExchangeRate attempt {ctx.attempt}")
        if ExchangeRate.failures_left > 0:
            ExchangeRate.failures_left -= 1
            raise ConnectionError("rate service unavailable")
        return 1.08


@registry.tool(retry=RetryPolicy(max_attempts=5, initial_interval=0.05, non_retryable=(CardDeclined,)))
class ChargeCard:
    """Charge a card; a declined card is final."""

    async def execute(self, card: str, amount: float, ctx: StepContext) -> dict[str, object]:
        say(f"ChargeCard attempt {ctx.attempt} for {card}")
        if card.startswith("0000"):
            raise CardDeclined(f"card {card} declined")
        return {"charge_id": ctx.idempotency_key[:12], "amount": amount}

    async def compensate(self, result: dict[str, object] | None) -> None:
        say(f"ChargeCard refunded {result}")


@registry.tool
class HoldSeat:
    """Hold a seat on a flight."""

    async def execute(self, flight: str) -> str:
        say(f"HoldSeat {flight}")
        return f"{flight}-14C"

    async def compensate(self, result: str | None) -> None:
        say(f"HoldSeat released {result}")


@registry.tool(retry_scope="step", retry=RetryPolicy(max_attempts=2, initial_interval=0.01))
class SendSms:
    """Text the traveller; nice to have, not worth a cancelled trip."""

    async def execute(self, phone: str) -> str:
        say(f"SendSms to {phone}")
        raise TimeoutError("SMS gateway did not answer")


def trip(card: str) -> list[object]:
    """Return a booking plan: a rate and a seat in parallel, then the charge, then an optional SMS."""
    return [
        [
            {"id": "rate", "tool": "ExchangeRate", "args": {"currency": "EUR"}},
            {"id": "seat", "tool": "HoldSeat", "args": {"flight": "KE901"}},
        ],
        {"id": "charge", "tool": "ChargeCard", "args": {"card": card, "amount": 420.0}},
        {"id": "sms", "tool": "SendSms", "args": {"phone": "+82-10-0000-0000"}},
    ]


async def main() -> None:
    global started
    executor = SagaExecutor(registry)
    for saga_id, card in (("trip-1", "4242-4242"), ("trip-2", "0000-0000")):
        started = time.perf_counter()
        log.clear()
        result = await executor.run(trip(card), saga_id=saga_id)
        print(result.describe())
        print("\n".join(log), "\n")


if __name__ == "__main__":
    asyncio.run(main())
