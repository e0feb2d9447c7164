"""The trip all three framework examples book: its tools, and the scripted model's turns (no network, no key).

Shared by examples/langchain_agent.py, examples/openai_agents_agent.py and examples/pydantic_ai_agent.py, which
import it as their neighbour; `effects` records what the tools did, `asked` how often the model was asked.
"""

from __future__ import annotations

from typing import Any

from saga_runtime import ToolRegistry

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
