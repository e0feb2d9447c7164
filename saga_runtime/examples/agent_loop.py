"""An agent loop as a dynamic saga: it books a trip step by step, fails, is rolled back, and is replayed.

The "model" is scripted (no network, no API key): it reads each tool's result and decides the next call, as an
LLM would. The hotel and flight are booked; the car rental fails, the agent gives up, and leaving the
`async with` block with an exception undoes the flight and the hotel, in reverse. The run is stored in SQLite;
the agent is then replayed from the database: every call is served from the record, no tool is called, and a
call that differs from the record is caught.

Run it: `python -m saga_runtime.examples agent_loop`.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Any

from saga_runtime import (
    Budget,
    ReplayDivergenceError,
    SagaExecutor,
    StepContext,
    StepFailedError,
    ToolRegistry,
    open_store,
)

registry = ToolRegistry()
calls: list[str] = []


@registry.tool
class BookHotel:
    """Book a hotel room."""

    async def execute(self, city: str, nights: int, ctx: StepContext) -> dict[str, Any]:
        calls.append(f"BookHotel({city}, {nights})")
        ctx.charge(cost=0.0)  # a real tool might report an API fee here
        return {"confirmation": f"H-{ctx.idempotency_key[3:9]}", "city": city, "per_night": 120}

    async def compensate(self, result: dict[str, Any] | None, ctx: StepContext) -> None:
        calls.append(f"CancelHotel({result['confirmation'] if result else ctx.idempotency_key})")


@registry.tool
class BookFlight:
    """Book a flight."""

    async def execute(self, to: str, ctx: StepContext) -> dict[str, Any]:
        calls.append(f"BookFlight({to})")
        return {"pnr": f"F-{ctx.idempotency_key[3:9]}", "to": to, "price": 640}

    async def compensate(self, result: dict[str, Any] | None, ctx: StepContext) -> None:
        calls.append(f"CancelFlight({result['pnr'] if result else ctx.idempotency_key})")


@registry.tool
class RentCar:
    """Rent a car; this agency has nothing left."""

    async def execute(self, city: str, days: int) -> dict[str, Any]:
        calls.append(f"RentCar({city}, {days})")
        raise LookupError(f"no cars left in {city}")


class ScriptedModel:
    """Stand in for an LLM: choose the next tool call from what happened so far."""

    def __init__(self) -> None:
        self.spent = 0.0

    def next_call(self, history: list[tuple[str, Any]]) -> tuple[str, dict[str, Any]] | None:
        if not history:
            return "BookHotel", {"city": "Lisbon", "nights": 3}
        last_tool, last_result = history[-1]
        if last_tool == "BookHotel":
            return "BookFlight", {"to": last_result["city"]}
        if last_tool == "BookFlight":
            return "RentCar", {"city": "Lisbon", "days": 3}
        return None


async def agent(executor: SagaExecutor, saga_id: str, *, replay: bool = False) -> None:
    """Run the agent loop once: ask the model, call the tool, feed the result back, until it stops."""
    model = ScriptedModel()
    history: list[tuple[str, Any]] = []
    async with executor.saga(saga_id=saga_id, budget=Budget(max_cost=5.0), replay=replay) as saga:
        while (decision := model.next_call(history)) is not None:
            tool, args = decision
            await saga.charge(cost=0.002, tokens=350)  # what the (pretend) model call cost
            try:
                result = await saga.call(tool, **args)
            except StepFailedError as exc:
                raise RuntimeError(f"the agent gives up: {exc.error}") from exc
            history.append((tool, result))


async def main() -> None:
    folder = tempfile.mkdtemp(prefix="agent-loop-")
    url = os.environ.get("SAGA_RUNTIME_DATABASE_URL") or f"sqlite:///{folder}/agent.db"
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store)
        print(f"store: {store.url}\n")

        try:
            await agent(executor, "trip-lisbon")
        except RuntimeError as exc:
            print(f"the run failed: {exc}")
        stored = await store.get_saga("trip-lisbon")
        assert stored is not None
        print(stored.describe())
        print("tool calls, in order:", ", ".join(calls), "\n")

        calls.clear()
        try:
            await agent(executor, "trip-lisbon", replay=True)
        except RuntimeError as exc:
            print(f"replayed from the database: same decisions, same failure ({exc}); tool calls made: {len(calls)}")

        class Stubborn(ScriptedModel):
            def next_call(self, history: list[tuple[str, Any]]) -> tuple[str, dict[str, Any]] | None:
                return ("BookFlight", {"to": "Porto"}) if len(history) == 1 else super().next_call(history)

        try:
            async with executor.saga(saga_id="trip-lisbon", replay=True) as saga:
                model, history = Stubborn(), list[tuple[str, Any]]()
                while (decision := model.next_call(history)) is not None:
                    history.append((decision[0], await saga.call(decision[0], **decision[1])))
        except ReplayDivergenceError as exc:
            print(f"a changed decision is caught: {exc}")
        verdict = await store.verify_saga("trip-lisbon")
        print(f"the record verifies: {bool(verdict)}; cost recorded: {stored.cost:g} for {stored.tokens} tokens")


if __name__ == "__main__":
    asyncio.run(main())
