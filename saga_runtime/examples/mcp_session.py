"""Tickets and refunds served over MCP: an agent's session books two tickets, asks a refund, then rolls back.

The tools of a small airline (book a ticket, refund one; refunds need a person's approval) are saga tools served
by `saga_mcp_server`, the MCP SDK's own server. A scripted agent (no network, no API key) connects as an MCP
client with a session: each of its tool calls is a step of the session's saga, recorded before it runs. The
refund is answered with a tool error naming the decision it waits for; the agent then changes its mind and calls
`saga_rollback`, which cancels both tickets in reverse. The same tools are then used the other way round: the
airline's MCP server registered into a saga's registry with `register_mcp_tools`, and a failing saga undoes the
booking through the server's cancel tool.

Run it: `python -m saga_runtime.examples mcp_session` (needs `pip install 'saga-runtime[mcp]'`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from mcp import Client
from mcp.server.mcpserver import MCPServer

from saga_runtime import SagaExecutor, StepContext, ToolRegistry, open_store
from saga_runtime.integrations.mcp import register_mcp_tools, saga_mcp_server

# The airline's books: what is booked now, and everything that happened.
BOOKED: dict[str, str] = {}
LOG: list[str] = []

registry = ToolRegistry()


@registry.tool(name="book_ticket")
class BookTicket:
    """Book a seat on a flight."""

    async def execute(self, flight: str, seat: str, ctx: StepContext) -> dict[str, str]:
        ticket = f"{flight}-{seat}"
        BOOKED[ticket] = ctx.idempotency_key
        LOG.append(f"booked {ticket}")
        return {"ticket": ticket}

    async def compensate(self, result: dict[str, str] | None, ctx: StepContext) -> None:
        for ticket, key in list(BOOKED.items()):
            if key == ctx.idempotency_key:  # found by key: also when the outcome was unknown
                del BOOKED[ticket]
                LOG.append(f"cancelled {ticket}")


@registry.tool(name="refund", approval=True)
class Refund:
    """Refund a ticket (a person approves every refund)."""

    async def execute(self, ticket: str, amount_eur: int) -> dict[str, Any]:
        LOG.append(f"refunded {amount_eur} EUR on {ticket}")
        return {"refunded": amount_eur}


def text(result: Any) -> str:
    return " ".join(block.text for block in result.content if getattr(block, "type", "") == "text")


async def agent_session(executor: SagaExecutor) -> str:
    """Play the agent: one MCP session, two bookings, a refund that waits, then a rollback."""
    # mode="legacy": the handshake protocol, which keeps a session (the default 2.x protocol keeps none).
    async with Client(saga_mcp_server(executor), mode="legacy") as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        print(f"the MCP server offers: {', '.join(tools)}")
        for seat in ("12A", "12B"):
            booked = await client.call_tool("book_ticket", {"flight": "KE901", "seat": seat})
            print(f"agent: book_ticket {seat} -> {booked.structured_content}")
        saga_id = str((booked.meta or {})["saga_id"])
        print(f"the session's saga: {saga_id}")
        refund = await client.call_tool("refund", {"ticket": "KE901-12A", "amount_eur": 120})
        print(f"agent: refund -> error: {text(refund)}")
        ended = await client.call_tool("saga_rollback", {})
        print(f"agent: saga_rollback -> {ended.structured_content}")
    return saga_id


def airline_server() -> MCPServer:
    """Return the airline's own MCP server: tickets booked and cancelled by id."""
    server = MCPServer("airline")

    @server.tool()
    def book(flight: str, seat: str) -> dict[str, str]:
        """Book a seat."""
        ticket = f"{flight}-{seat}"
        BOOKED[ticket] = ticket
        LOG.append(f"airline booked {ticket}")
        return {"ticket": ticket}

    @server.tool()
    def cancel(ticket: str) -> dict[str, str]:
        """Cancel a ticket."""
        BOOKED.pop(ticket, None)
        LOG.append(f"airline cancelled {ticket}")
        return {"cancelled": ticket}

    return server


async def saga_over_mcp_tools(store: Any) -> None:
    """Use an MCP server's tools as saga tools: a failing saga cancels the booking through the server."""
    async with Client(airline_server()) as client:
        tools = ToolRegistry()
        names = await register_mcp_tools(
            tools,
            client,
            compensations={"book": ("cancel", lambda result, args: result and {"ticket": result["ticket"]})},
        )
        print(f"registered from the airline's MCP server: {', '.join(names)}")
        executor = SagaExecutor(tools, store)
        with contextlib.suppress(RuntimeError):
            async with executor.saga(saga_id="trip-over-mcp") as saga:
                await saga.call("book", flight="OZ202", seat="3C")
                raise RuntimeError("the hotel is full")
        result = await store.get_saga("trip-over-mcp")
        print(f"saga trip-over-mcp: {result.status.value}")


async def main() -> None:
    async with open_store() as store:
        executor = SagaExecutor(registry, store)
        print(f"store: {store.url}")
        saga_id = await agent_session(executor)
        result = await store.get_saga(saga_id)
        assert result is not None
        steps = ", ".join(f"{step.tool_name}={step.status.value}" for step in result.steps)
        print(f"saga {saga_id}: {result.status.value} ({steps})")
        await saga_over_mcp_tools(store)
    print("what happened: " + "; ".join(LOG))
    print(f"tickets still booked: {len(BOOKED)}")


if __name__ == "__main__":
    asyncio.run(main())
