"""A model's function calls run as a saga: LLMRunner books a trip, reacts to a failed tool, and is rolled back.

By default the model is `MockLLMClient`, scripted turn by turn (no network, no API key). Trip 1: the model books
a flight and a hotel in one turn (two parallel calls, one saga group), asks for a rental car (the tool fails, and
the error goes back to the model as that call's result), books an airport transfer instead, and answers in text.
Trip 2 runs the same script, but the model's API goes down before its final answer: the loop fails, every booking
made is undone in reverse (the transfer first, then the flight and the hotel), and `run()` returns the COMPENSATED
result. Each model call is recorded in the saga with its tokens and its cost from a price table, summed into the
saga's cost.

With `OPENAI_API_KEY` set and the `openai` package installed (`pip install openai`), the same program drives a
real model instead: `openai.AsyncOpenAI()` with the model named by `OPENAI_MODEL` (default "gpt-4o-mini"). A real
model chooses its own calls, so what it books may differ; the outage of trip 2 is still simulated on its fourth
turn. This mode uses the network and costs a little money; it is not run by the tests.

Run it: `python -m saga_runtime.examples llm_integration`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import os
import tempfile
import uuid
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from saga_runtime import (
    Budget,
    LLMRunner,
    MockLLMClient,
    SagaExecutor,
    SagaResult,
    StepContext,
    ToolRegistry,
    open_store,
)

# USD per million (input, output) tokens. Example figures: check your provider's price page.
PRICES = {"gpt-4o-mini": (0.15, 0.60), "mock-gpt": (0.15, 0.60)}
SYSTEM = "You are a travel agent. Book with the tools given. When a tool fails, try an alternative."
PROMPT = "Book me 3 nights in Lisbon from 2025-06-01: the flight, a hotel, and a way from the airport to the hotel."

# What a scripted model asks for, turn by turn: a list is one turn's parallel calls. Then it answers in text.
SCRIPT: list[Any] = [
    [("BookFlight", {"to": "Lisbon", "date": "2025-06-01"}), ("BookHotel", {"city": "Lisbon", "nights": 3})],
    ("RentCar", {"city": "Lisbon", "days": 3}),
    ("BookTransfer", {"city": "Lisbon", "to": "the hotel"}),
]
ANSWER = "Booked: flight to Lisbon, 3 nights at the hotel, and an airport transfer (no rental cars were left)."

registry = ToolRegistry()
effects: list[str] = []


@registry.tool
class BookFlight:
    """Book a flight to a city on a date (YYYY-MM-DD)."""

    async def execute(self, to: str, date: str, ctx: StepContext) -> dict[str, Any]:
        pnr = f"PNR-{ctx.idempotency_key[-6:].upper()}"
        effects.append(f"booked flight {pnr} to {to}")
        return {"pnr": pnr, "to": to, "date": date, "price_eur": 212}

    async def compensate(self, result: dict[str, Any] | None, ctx: StepContext) -> None:
        effects.append(f"cancelled flight {result['pnr'] if result else ctx.idempotency_key}")


@registry.tool
class BookHotel:
    """Book a hotel room in a city for a number of nights."""

    async def execute(self, city: str, nights: int) -> dict[str, Any]:
        effects.append(f"booked {nights} nights in {city}")
        return {"hotel": "Casa do Rio", "city": city, "nights": nights, "price_eur": 135 * nights}

    async def compensate(self, result: dict[str, Any] | None) -> None:
        effects.append(f"cancelled the hotel {result['hotel'] if result else '(outcome unknown)'}")


@registry.tool
class RentCar:
    """Rent a car in a city for a number of days."""

    async def execute(self, city: str, days: int) -> dict[str, Any]:
        effects.append(f"asked for a car in {city}: none left")
        raise LookupError(f"no rental cars left in {city} for {days} days")


@registry.tool
class BookTransfer:
    """Book a transfer from the airport of a city to an address."""

    async def execute(self, city: str, to: str) -> dict[str, Any]:
        effects.append(f"booked a transfer in {city} to {to}")
        return {"transfer": "TX-88", "pickup": f"{city} airport", "to": to}

    async def compensate(self, result: dict[str, Any] | None) -> None:
        effects.append(f"cancelled transfer {result['transfer'] if result else '(outcome unknown)'}")


def _get(obj: Any, name: str) -> Any:
    """Read a field of an SDK object or of a dict."""
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


class Narrated:
    """An OpenAI-compatible client around another: it prints each turn, and can fail on one turn (an outage)."""

    def __init__(self, inner: Any, *, outage_on_turn: int | None = None) -> None:
        self.inner = inner
        self.outage_on_turn = outage_on_turn
        self.turn = 0
        self.seen = 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    async def create(self, **request: Any) -> Any:
        """Print the tool results the runner sends back, ask the inner client, print what the model answered."""
        messages = request["messages"]
        for message in messages[self.seen :]:
            if message["role"] == "tool":
                print(f"    -> {message['tool_call_id']}: {message['content']}")
        self.seen = len(messages)
        turn, self.turn = self.turn, self.turn + 1
        if turn == self.outage_on_turn:
            print(f"  turn {turn}: the model API is down")
            raise ConnectionError("503 Service Unavailable from the model API (simulated outage)")
        response = self.inner.chat.completions.create(**request)
        if inspect.isawaitable(response):
            response = await response
        message = _get(_get(response, "choices")[0], "message")
        calls = _get(message, "tool_calls") or []
        if calls:
            print(f"  turn {turn}: the model calls {len(calls)} tool(s)")
            for call in calls:
                function = _get(call, "function")
                print(f"    {_get(call, 'id')}: {_get(function, 'name')}({_get(function, 'arguments')})")
        else:
            print(f"  turn {turn}: the model answers: {_get(message, 'content')}")
        return response


def make_client() -> tuple[Any, str, str]:
    """Return the model client, the model name, and a line saying which one it is."""
    if os.environ.get("OPENAI_API_KEY") and importlib.util.find_spec("openai") is not None:
        import openai

        model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
        return openai.AsyncOpenAI(), model, f"model: {model} through the OpenAI API (OPENAI_API_KEY is set)"
    mock = MockLLMClient(tool_sequence=SCRIPT, final_answer=ANSWER)
    return mock, "mock-gpt", "model: MockLLMClient, scripted (offline; set OPENAI_API_KEY to use the OpenAI API)"


def cost_table(results: list[SagaResult]) -> None:
    """Print every model call of the sagas with its tokens and cost, and each saga's totals."""
    print(f"{'saga':<18}{'turn':>5}  {'model':<24}{'prompt':>8}{'completion':>12}{'cost USD':>12}")
    for result in results:
        for call in result.metadata.get("llm_calls", []):
            print(
                f"{result.saga_id:<18}{call['turn']:>5}  {call['model']:<24}{call['prompt_tokens']:>8}"
                f"{call['completion_tokens']:>12}{call['cost']:>12.6f}"
            )
        print(f"{result.saga_id:<18}{'total':>5}  {'':<24}{result.tokens:>20} tokens{result.cost:>12.6f}")


async def trip(runner_client: Any, model: str, executor: SagaExecutor, saga_id: str) -> SagaResult:
    """Run the loop for one trip and print what happened."""
    effects.clear()
    runner = LLMRunner(runner_client, model, registry, executor, prices=PRICES, system=SYSTEM)
    result = await runner.run(PROMPT, saga_id=saga_id, budget=Budget(max_cost=0.05), max_turns=8)
    print("  what the tools did, in order:")
    for effect in effects:
        print(f"    {effect}")
    print(result.describe())
    if "answer" in result.metadata:
        print(f"  answer after {result.metadata['turns']} turns: {result.metadata['answer']}")
    return result


async def main() -> None:
    folder = tempfile.mkdtemp(prefix="llm-integration-")
    url = os.environ.get("SAGA_RUNTIME_DATABASE_URL") or f"sqlite:///{folder}/llm.db"
    tag = uuid.uuid4().hex[:4]  # fresh saga ids, so running again against the same database books again
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store)
        client, model, which = make_client()
        print(f"store: {store.url}\n{which}")
        print(f"tools sent to the model: {', '.join(t['function']['name'] for t in registry.to_openai_tools())}\n")

        print("trip 1: a rental car fails; the model is told and books a transfer instead")
        done = await trip(Narrated(client), model, executor, f"trip-{tag}-1")

        print("\ntrip 2: the same, but the model API goes down on turn 3; every booking is undone in reverse")
        if isinstance(client, MockLLMClient):
            client = MockLLMClient(tool_sequence=SCRIPT, final_answer=ANSWER)  # a fresh script for the new trip
        undone = await trip(Narrated(client, outage_on_turn=3), model, executor, f"trip-{tag}-2")
        print(f"  run() returned (did not raise): {undone.status.value}; error: {undone.error}")

        print("\nmodel calls and their cost:")
        cost_table([done, undone])
        stored = await store.get_saga(undone.saga_id)
        assert stored is not None
        first_call = json.dumps(stored.metadata["llm_calls"][0])
        print(f"\nas stored with saga {stored.saga_id} ({stored.status.value}), its first model call: {first_call}")


if __name__ == "__main__":
    asyncio.run(main())
