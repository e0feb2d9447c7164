"""A store to look at in the web console: sagas that succeeded, rolled back, failed to roll back, and wait.

It fills a SQLite file with one saga of each kind an operator meets: an order that went through (its card token
a secret, shown masked), an order whose shipping failed and was undone in reverse, a refund whose compensation
gave up (COMPENSATION_FAILED), and a large refund waiting for a person's approval. Then it says how to open the
console on it (`pip install 'saga-runtime[ui]'`):

    python -m saga_runtime.examples console_store
    saga-runtime ui --db sqlite:///console.db --tools saga_runtime.examples.console_store:registry

With `--tools` an approval given in the console runs the refund there, once; the steps take a few tenths of a
second, so their timelines have something to draw. `scripts/console_screenshots.py` makes the README's pictures
from this store.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Annotated, Any

from saga_runtime import RetryPolicy, SagaExecutor, Secret, ToolRegistry, open_store

registry = ToolRegistry()
effects: list[str] = []  # what the tools did, in order: a test counts the refunds the console ran


def work(seconds: float) -> None:
    """Take some time, as a call to a remote service would (sync tools run in threads)."""
    time.sleep(seconds)


@registry.tool
class ReserveStock:
    def execute(self, sku: str, quantity: int) -> dict[str, Any]:
        work(0.12)
        effects.append(f"reserve {sku}")
        return {"reservation": f"res-{sku}", "quantity": quantity}

    def compensate(self, result: dict[str, Any] | None) -> None:
        work(0.05)
        effects.append("release stock")


@registry.tool
class ChargeCard:
    def execute(self, order_id: str, amount_cents: int, card_token: Annotated[str, Secret]) -> dict[str, Any]:
        work(0.25)
        effects.append(f"charge {order_id}")
        return {"charge_id": f"ch_{order_id}", "amount_cents": amount_cents}

    def compensate(self, result: dict[str, Any] | None) -> None:
        work(0.08)
        effects.append("refund charge")


@registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.05, jitter=False))
class ShipParcel:
    def execute(self, order_id: str, address: str) -> dict[str, Any]:
        work(0.06)
        if "Atlantis" in address:
            raise ConnectionError(f"no carrier delivers to {address}")
        effects.append(f"ship {order_id}")
        return {"tracking": f"trk-{order_id}"}


@registry.tool(compensation_retry=RetryPolicy(max_attempts=2, initial_interval=0.01, jitter=False))
class OpenTicket:
    def execute(self, customer: str, text: str) -> dict[str, Any]:
        work(0.04)
        return {"ticket": f"T-{len(effects) + 100}", "customer": customer, "text": text}

    def compensate(self, result: dict[str, Any] | None) -> None:
        raise ConnectionError("the helpdesk API answers 503")


@registry.tool(approval=True)
class RefundCard:
    def execute(self, order_id: str, amount_cents: int) -> dict[str, Any]:
        work(0.1)
        effects.append(f"refund {order_id}")
        return {"refund_id": f"re_{order_id}", "amount_cents": amount_cents}


def order(order_id: str, address: str) -> list[list[dict[str, Any]]]:
    """Return an order's plan: reserve, then charge, then ship."""
    return [
        [{"id": "reserve", "tool": "ReserveStock", "args": {"sku": "lamp-42", "quantity": 2}}],
        [
            {
                "id": "charge",
                "tool": "ChargeCard",
                "args": {"order_id": order_id, "amount_cents": 129_00, "card_token": "tok_visa_4242_secret"},
            }
        ],
        [{"id": "ship", "tool": "ShipParcel", "args": {"order_id": order_id, "address": address}}],
    ]


def secret_key() -> str:
    """Return the key the card tokens are encrypted with: SAGA_RUNTIME_SECRET_KEY, or a new one for this run."""
    from cryptography.fernet import Fernet  # the `secrets` extra

    return os.environ.get("SAGA_RUNTIME_SECRET_KEY") or Fernet.generate_key().decode()


async def fill(url: str) -> None:
    """Run the example sagas into the store at `url` (each id once: running again changes nothing)."""
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store, secret_key=secret_key())
        await executor.run(order("A-1001", "12 Quay Street, Dublin"), saga_id="order-A-1001")
        await executor.run(order("A-1002", "1 Sunken Road, Atlantis"), saga_id="order-A-1002")
        complaint = [
            [{"id": "ticket", "tool": "OpenTicket", "args": {"customer": "c-77", "text": "lamp arrived broken"}}],
            [{"id": "ship", "tool": "ShipParcel", "args": {"order_id": "A-1003", "address": "Atlantis"}}],
        ]
        await executor.run(complaint, saga_id="complaint-77")
        refund = [
            [{"id": "ticket", "tool": "OpenTicket", "args": {"customer": "c-78", "text": "refund the order"}}],
            [{"id": "refund", "tool": "RefundCard", "args": {"order_id": "A-0990", "amount_cents": 900_00}}],
        ]
        await executor.run(refund, saga_id="refund-A-0990")


def main() -> None:
    """Fill the store named on the command line, or SAGA_RUNTIME_DATABASE_URL, or ./console.db; say what is in it."""
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SAGA_RUNTIME_DATABASE_URL", "sqlite:///console.db")
    asyncio.run(fill(url))

    async def show() -> None:
        async with open_store(url) as store:
            for summary in await store.list_sagas():
                print(f"{summary.saga_id}: {summary.status.value}")

    asyncio.run(show())
    print(f"look at them: saga-runtime ui --db {url} --tools saga_runtime.examples.console_store:registry")


if __name__ == "__main__":
    main()
