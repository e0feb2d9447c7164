"""The trip all three framework examples book: its tools, and the scripted model's turns (no network, no key).

Shared by examples/langchain_agent.py, examples/openai_agents_agent.py and examples/pydantic_ai_agent.py, which
import it as their neighbour; `effects` records what the tools did, `asked` how often the model was asked.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from saga_runtime import SagaExecutor, ToolRegistry, open_store

registry = ToolRegistry()
effects: list[str] = []
asked: list[int] = []


@registry.tool
class BookFlight:
    """Book a flight to a city on a date (YYYY-MM-DD)."""

    async def execute(self, to: str, date: str) -> dict[str, Any]:
        effects.append(f"booked a flight to {to} on {date}")
        return {"pnr": "PNR-7Q2", "to": to}

    async def compensate(self, result: dict[str, Any] | None) -> None:
        effects.append(f"cancelled flight {result['pnr'] if result else '(outcome unknown)'}")


@registry.tool
class RentCar:
    """Rent a car in a city for a number of days."""

    async def execute(self, city: str, days: int) -> dict[str, Any]:
        effects.append(f"asked for a car in {city}: none left")
        raise LookupError(f"no rental cars left in {city}")


@registry.tool
class BookTransfer:
    """Book a transfer from the airport of a city to an address."""

    async def execute(self, city: str, to: str) -> dict[str, Any]:
        effects.append(f"booked a transfer in {city} to {to}")
        return {"transfer": "TX-88"}

    async def compensate(self, result: dict[str, Any] | None) -> None:
        effects.append("cancelled the transfer")


# What the scripted model asks for, turn by turn (no network, no API key); then it answers in text.
SCRIPT: list[Any] = [
    [
        ("call_1", "BookFlight", {"to": "Lisbon", "date": "2025-06-01"}),
        ("call_2", "RentCar", {"city": "Lisbon", "days": 3}),
    ],
    [("call_3", "BookTransfer", {"city": "Lisbon", "to": "the hotel"})],
    "Booked: the flight to Lisbon and an airport transfer (no rental cars were left).",
]


def next_turn() -> Any:
    """Return the scripted model's next turn, counting each time it is asked."""
    asked.append(1)
    return SCRIPT[len(asked) - 1]


async def demo(run_agent: Callable[[Any, str], Awaitable[str]]) -> None:
    """Run `run_agent` in a saga, then run the same saga id again: everything is served from the record."""
    with tempfile.TemporaryDirectory() as folder:
        async with open_store(f"sqlite:///{Path(folder) / 'sagas.db'}") as store:
            executor = SagaExecutor(registry, store=store)
            for attempt in ("first run", "same saga id again"):
                asked.clear()
                effects.clear()
                async with executor.saga(saga_id="trip-lisbon") as saga:
                    answer = await run_agent(saga, "Book me a trip to Lisbon on 2025-06-01.")
                result = saga.result
                assert result is not None
                print(
                    f"{attempt}: saga {result.saga_id}: {result.status.value}, the model was asked {len(asked)} times"
                )
                for step in result.steps:
                    outcome = json.dumps(step.result) if step.error is None else step.error
                    print(f"  step {step.step_id} {step.tool_name}: {step.status.value} {outcome}")
                print(f"  effects: {effects or 'none (served from the record)'}")
                print(f"  answer: {answer}")
