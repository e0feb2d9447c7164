"""MCP: a real MCP client against a real MCP server of the SDK, both ways round, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import func_metadata
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, CallToolResult, TextContent, ToolAnnotations

from saga_runtime import (
    PlanValidationError,
    RetryPolicy,
    SagaExecutor,
    SagaStatus,
    SagaStore,
    StepContext,
    StepFailedError,
    StepStatus,
    ToolRegistry,
    open_store,
)
from saga_runtime.integrations.mcp import register_mcp_tools, saga_mcp_server

CANCEL = ("cancel_ticket", lambda result, args: None if result is None else {"ticket_id": result["ticket_id"]})

# The saga tools served over MCP (and by `saga-runtime mcp` in a child process). Each effect is kept in a file
# keyed by idempotency key, as a real provider would, so a test counts what was done and undone, and by whom.
TOOLS = textwrap.dedent(
    """
    import json, os
    from saga_runtime import StepContext, ToolRegistry

    LEDGER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ledger.jsonl")

    def effect(kind, key):
        with open(LEDGER, "a") as handle:
            handle.write(json.dumps([kind, key, os.getpid()]) + "\\n")

    registry = ToolRegistry()

    @registry.tool(name="book_ticket")
    class BookTicket:
        \"\"\"Book a seat on a flight.\"\"\"

        async def execute(self, flight: str, seat: str, ctx: StepContext) -> dict:
            effect("book", ctx.idempotency_key)
            return {"ticket_id": ctx.idempotency_key, "flight": flight, "seat": seat}

        async def compensate(self, result: dict | None, ctx: StepContext) -> None:
            effect("cancel", ctx.idempotency_key)

    @registry.tool(name="refund", approval=True)
    class Refund:
        \"\"\"Refund a ticket (a person approves every refund).\"\"\"

        async def execute(self, ticket_id: str, amount: int, ctx: StepContext) -> dict:
            effect("refund", ctx.idempotency_key)
            return {"refunded": amount}

        async def compensate(self, result: dict | None, ctx: StepContext) -> None:
            effect("charge_back", ctx.idempotency_key)
    """
)


def ledger(folder: Path) -> list[tuple[str, str, int]]:
    """Return the effects the saga tools had, in order: (kind, idempotency key, process id)."""
    path = folder / "ledger.jsonl"
    if not path.exists():
        return []
    return [tuple(json.loads(line)) for line in path.read_text().splitlines()]  # type: ignore[misc]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Return the URL of an empty database of each kind in turn, the test's own."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'sagas.db'}"
    url: str = request.getfixturevalue("postgres_databases").create()
    return url


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SagaStore]:
    """Return the test's store, closed at its end."""
    async with open_store(database_url) as opened:
        yield opened


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    """Write the saga tools module in a folder of its own; return its `module:registry` and the module."""
    name = f"mcp_tools_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / f"{name}.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(folder))
    module = __import__(name)
    yield f"{name}:registry", module
    sys.modules.pop(name, None)


def tickets_server(state: dict[str, Any]) -> MCPServer:
    """Return an MCP server of tickets: book, cancel, a read-only count, and a refund that fails `fail` times."""
    server = MCPServer("tickets")
    state.setdefault("booked", {})
    state.setdefault("calls", [])

    @server.tool()
    def book(seat: str, price: int) -> dict[str, str]:
        """Book a seat."""
        state["calls"].append(("book", seat))
        ticket_id = f"T{len(state['calls'])}"
        state["booked"][ticket_id] = seat
        return {"ticket_id": ticket_id, "seat": seat}

    @server.tool()
    def cancel_ticket(ticket_id: str) -> dict[str, str]:
        """Cancel a ticket."""
        state["calls"].append(("cancel", ticket_id))
        state["booked"].pop(ticket_id, None)
        return {"cancelled": ticket_id}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def count() -> dict[str, int]:
        """Count the booked tickets."""
        return {"booked": len(state["booked"])}

    @server.tool()
    def refund(ticket_id: str) -> CallToolResult:
        """Refund a ticket; the payment service is down for the first `fail` calls."""
        state["calls"].append(("refund", ticket_id))
        if state.get("fail", 0) > 0:
            state["fail"] -= 1
            return CallToolResult(content=[TextContent(type="text", text="payments unavailable")], is_error=True)
        return CallToolResult(content=[TextContent(type="text", text=f"refunded {ticket_id}")])

    return server


# -- an MCP server's tools as saga tools ---------------------------------------------------------------------------


async def test_mcp_tools_run_as_steps_and_are_compensated_in_reverse(store: SagaStore) -> None:
    """Each MCP call is a step with its structured result; a failing block cancels the booked tickets in reverse."""
    state: dict[str, Any] = {}
    async with Client(tickets_server(state)) as client:
        registry = ToolRegistry()
        names = await register_mcp_tools(registry, client, compensations={"book": CANCEL}, prefix="t_")
        assert sorted(names) == ["t_book", "t_cancel_ticket", "t_count", "t_refund"]
        assert registry.get("t_book").args_schema["required"] == ["seat", "price"]
        assert registry.get("t_book").description == "Book a seat."
        executor = SagaExecutor(registry, store)
        with contextlib.suppress(RuntimeError):
            async with executor.saga(saga_id="trip") as saga:
                first = await saga.call("t_book", seat="1A", price=100)
                await saga.call("t_book", seat="1B", price=100)
                assert await saga.call("t_count") == {"booked": 2}
                raise RuntimeError("the traveller changed their mind")
        assert first == {"ticket_id": "T1", "seat": "1A"}
        assert state["booked"] == {}
        assert state["calls"] == [("book", "1A"), ("book", "1B"), ("cancel", "T2"), ("cancel", "T1")]
        result = await store.get_saga("trip")
        assert result is not None
        assert result.status is SagaStatus.COMPENSATED


async def test_arguments_outside_the_input_schema_are_refused_and_record_nothing(store: SagaStore) -> None:
    """A call whose arguments break the tool's inputSchema raises PlanValidationError: no step, no MCP call."""
    state: dict[str, Any] = {}
    async with Client(tickets_server(state)) as client:
        registry = ToolRegistry()
        await register_mcp_tools(registry, client, names=["book"], compensations={"book": CANCEL})
        executor = SagaExecutor(registry, store)
        async with executor.saga(saga_id="bad-args") as saga:
            for bad in ({"seat": 12, "price": 1}, {"seat": "1A"}):
                with pytest.raises(PlanValidationError, match=r"seat|price"):
                    await saga.call("book", **bad)
        result = await store.get_saga("bad-args")
        assert result is not None
        assert result.steps == []
        assert state["calls"] == []


async def test_an_is_error_result_fails_the_attempt_under_the_retry_policy(store: SagaStore) -> None:
    """isError results fail attempts (retried by the tool's policy); the text is the result once it succeeds."""
    state: dict[str, Any] = {"fail": 2}
    async with Client(tickets_server(state)) as client:
        registry = ToolRegistry()
        await register_mcp_tools(
            registry, client, names=["refund"], retry=RetryPolicy(max_attempts=3, initial_interval=0.0, jitter=False)
        )
        executor = SagaExecutor(registry, store)
        async with executor.saga(saga_id="refunds") as saga:
            assert await saga.call("refund", ticket_id="T9") == "refunded T9"
            state["fail"] = 5
            with pytest.raises(StepFailedError, match="payments unavailable") as failed:
                await saga.call("refund", ticket_id="T8")
        assert failed.value.attempts == 3
        result = await store.get_saga("refunds")
        assert result is not None
        assert [step.attempts for step in result.steps] == [3, 3]


async def test_a_server_error_mid_call_leaves_the_outcome_unknown_and_a_refusal_fails(store: SagaStore) -> None:
    """A JSON-RPC internal error mid-call leaves the outcome unknown (undone); a refused request (bad params) fails."""
    booked: list[str] = []
    undone: list[Any] = []
    server = MCPServer("flaky")

    @server.tool()
    async def book(seat: str) -> dict[str, str]:
        booked.append(seat)
        raise MCPError(code=INTERNAL_ERROR, message="the database went away after the booking")

    @server.tool()
    async def cancel(seat: str) -> dict[str, str]:
        undone.append(seat)
        return {"cancelled": seat}

    @server.tool()
    async def note(text: str) -> dict[str, str]:
        raise MCPError(code=INVALID_PARAMS, message="text refused")

    async with Client(server) as client:
        registry = ToolRegistry()
        build = lambda result, args: {"seat": args["seat"]}  # noqa: E731 (a one-line builder)
        await register_mcp_tools(registry, client, compensations={"book": ("cancel", build)})
        executor = SagaExecutor(registry, store)
        async with executor.saga(saga_id="server-error") as saga:
            with pytest.raises(StepFailedError) as unknown:
                await saga.call("book", seat="4D")
            with pytest.raises(StepFailedError) as refused:
                await saga.call("note", text="hi")
    assert unknown.value.error_type == "OutcomeUnknownError"
    assert refused.value.error_type == "MCPError"
    assert (booked, undone) == (["4D"], ["4D"])  # unknown: undone, as the effect may have happened
    result = await store.get_saga("server-error")
    assert result is not None
    assert [step.status for step in result.steps] == [StepStatus.COMPENSATED, StepStatus.FAILED]


async def test_read_only_tools_need_no_compensation_and_others_without_one_are_irreversible() -> None:
    """readOnlyHint: an ordinary tool; a tool that changes something and has no compensation: irreversible."""
    async with Client(tickets_server({})) as client:
        registry = ToolRegistry()
        await register_mcp_tools(registry, client, compensations={"book": CANCEL})
        assert not registry.get("count").irreversible
        assert registry.get("refund").irreversible
        assert not registry.get("book").irreversible
        assert registry.get("book").has_compensate


async def test_a_malformed_input_schema_is_skipped_with_a_warning_naming_the_tool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tool whose inputSchema is not a valid JSON schema is not registered; the warning names it."""

    def broken(x: Any) -> str:
        return "never"

    bad = Tool(
        fn=broken,
        name="broken",
        title=None,
        description="",
        parameters={"type": "object", "properties": {"x": {"type": 12}}},
        fn_metadata=func_metadata(broken),
        is_async=False,
        annotations=None,
    )
    server = MCPServer("mixed", tools=[bad, Tool.from_function(lambda seat: seat, name="echo")])
    with caplog.at_level(logging.WARNING, logger="saga_runtime"):
        async with Client(server) as client:
            registry = ToolRegistry()
            names = await register_mcp_tools(registry, client)
    assert names == ["echo"]
    assert "'broken'" in caplog.text
    assert "inputSchema" in caplog.text


async def test_an_unknown_tool_name_is_refused_listing_the_tools() -> None:
    """names= or a compensation naming a tool the server does not list: ValueError, nothing registered."""
    async with Client(tickets_server({})) as client:
        registry = ToolRegistry()
        with pytest.raises(ValueError, match="'fly' is not a tool"):
            await register_mcp_tools(registry, client, names=["fly"])
        with pytest.raises(ValueError, match="'undo_book'"):
            await register_mcp_tools(registry, client, compensations={"book": ("undo_book", CANCEL[1])})
        assert len(registry) == 0


DYING_SERVER = textwrap.dedent(
    """
    import os, sys
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("dying")

    @server.tool()
    def book(seat: str) -> dict[str, str]:
        \"\"\"Book a seat, then the server dies before it answers.\"\"\"
        with open(sys.argv[1], "a") as handle:
            handle.write(seat + "\\n")
        os._exit(1)

    server.run()
    """
)


async def test_a_server_dying_mid_call_leaves_the_outcome_unknown_never_success(
    store: SagaStore, tmp_path: Path
) -> None:
    """Over stdio: the server dies mid-call after its effect; the step's outcome is unknown and it is undone."""
    script = tmp_path / "dying.py"
    script.write_text(DYING_SERVER)
    effects = tmp_path / "effects.txt"
    undone: list[Any] = []
    params = StdioServerParameters(command=sys.executable, args=[str(script), str(effects)])
    async with Client(params) as client:
        registry = ToolRegistry()
        await register_mcp_tools(
            registry, client, compensations={"book": ("book", lambda result, args: undone.append(result))}
        )
        executor = SagaExecutor(registry, store)
        async with executor.saga(saga_id="dying") as saga:
            with pytest.raises(StepFailedError) as failed:
                await saga.call("book", seat="7C")
    assert failed.value.error_type == "OutcomeUnknownError"
    assert effects.read_text() == "7C\n"
    assert undone == [None]
    result = await store.get_saga("dying")
    assert result is not None
    [step] = result.steps
    assert step.status is StepStatus.COMPENSATED


# -- a saga executor served as an MCP server -----------------------------------------------------------------------


def text_of(result: CallToolResult) -> str:
    """Return the text of a tool result."""
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def test_a_session_is_one_saga_and_rollback_compensates_it_in_reverse(
    store: SagaStore, tools: tuple[str, Any], tmp_path: Path
) -> None:
    """On a session, calls are steps of saga mcp-<session>; saga_rollback undoes them in reverse, COMPENSATED."""
    _, module = tools
    executor = SagaExecutor(module.registry, store)
    async with Client(saga_mcp_server(executor), mode="legacy") as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == {"book_ticket", "refund", "saga_commit", "saga_rollback"}
        assert listed["book_ticket"].description == "Book a seat on a flight."
        assert listed["book_ticket"].input_schema["required"] == ["flight", "seat"]
        first = await client.call_tool("book_ticket", {"flight": "KE1", "seat": "1A"})
        second = await client.call_tool("book_ticket", {"flight": "KE1", "seat": "1B"})
        saga_id = first.meta["saga_id"] if first.meta else None
        assert saga_id is not None
        assert saga_id.startswith("mcp-")
        assert second.meta is not None
        assert second.meta["saga_id"] == saga_id
        assert first.structured_content is not None
        assert first.structured_content["seat"] == "1A"
        ended = await client.call_tool("saga_rollback", {})
        assert not ended.is_error
        assert ended.structured_content is not None
        assert ended.structured_content["status"] == "COMPENSATED"
    booked = [key for kind, key, _ in ledger(tmp_path / "tools") if kind == "book"]
    assert [(kind, key) for kind, key, _ in ledger(tmp_path / "tools")] == [
        ("book", booked[0]),
        ("book", booked[1]),
        ("cancel", booked[1]),
        ("cancel", booked[0]),
    ]
    result = await store.get_saga(saga_id)
    assert result is not None
    assert result.status is SagaStatus.COMPENSATED


async def test_commit_ends_the_saga_given_in_meta_success_across_connections(
    store: SagaStore, tools: tuple[str, Any]
) -> None:
    """_meta saga_id joins calls of separate stateless connections into one saga; saga_commit ends it SUCCESS."""
    _, module = tools
    server = saga_mcp_server(SagaExecutor(module.registry, store))
    meta: Any = {"saga_id": "trip-42"}
    async with Client(server) as client:
        await client.call_tool("book_ticket", {"flight": "OZ2", "seat": "2A"}, meta=meta)
    async with Client(server) as client:
        await client.call_tool("book_ticket", {"flight": "OZ2", "seat": "2B"}, meta=meta)
        ended = await client.call_tool("saga_commit", {}, meta=meta)
    assert ended.structured_content == {"saga_id": "trip-42", "status": "SUCCESS", "steps": 2, "error": None}
    result = await store.get_saga("trip-42")
    assert result is not None
    assert [step.args["seat"] for step in result.steps] == ["2A", "2B"]


async def test_a_call_made_again_in_a_saga_with_its_idempotency_key_is_the_same_step(
    store: SagaStore, tools: tuple[str, Any], tmp_path: Path
) -> None:
    """In a _meta saga, a call retried with its `_meta.idempotency_key` is one step, run once, answered alike."""
    _, module = tools
    args = {"flight": "LH1", "seat": "1A"}
    meta: Any = {"saga_id": "trip-retry", "idempotency_key": "client-step-1"}
    async with Client(saga_mcp_server(SagaExecutor(module.registry, store))) as client:
        first = await client.call_tool("book_ticket", args, meta=meta)
        again = await client.call_tool("book_ticket", args, meta=meta)  # the answer was lost: made again
    # Another server process: the saga is entered again from its record.
    async with Client(saga_mcp_server(SagaExecutor(module.registry, store))) as client:
        later = await client.call_tool("book_ticket", args, meta=meta)
        second: Any = {"saga_id": "trip-retry", "idempotency_key": "client-step-2"}
        other = await client.call_tool("book_ticket", {"flight": "LH1", "seat": "1B"}, meta=second)
        ended = await client.call_tool("saga_commit", {}, meta={"saga_id": "trip-retry"})
    assert not first.is_error
    assert first.structured_content == again.structured_content == later.structured_content
    assert not other.is_error
    assert [kind for kind, _, _ in ledger(tmp_path / "tools")] == ["book", "book"]
    assert ended.structured_content == {"saga_id": "trip-retry", "status": "SUCCESS", "steps": 2, "error": None}


async def test_a_call_without_session_or_saga_id_is_a_saga_of_its_own(store: SagaStore, tools: tuple[str, Any]) -> None:
    """Stateless and without _meta: each call is its own saga, ended SUCCESS once the call succeeds."""
    _, module = tools
    async with Client(saga_mcp_server(SagaExecutor(module.registry, store))) as client:
        answer = await client.call_tool("book_ticket", {"flight": "KE3", "seat": "3A"})
        assert not answer.is_error
        assert answer.meta is not None
        own = await store.get_saga(answer.meta["saga_id"])
        assert own is not None
        assert own.status is SagaStatus.SUCCESS
        assert len(own.steps) == 1
        refused = await client.call_tool("saga_commit", {})
        assert refused.is_error
        assert "which saga" in text_of(refused)


async def test_a_served_call_outside_the_schema_is_refused_and_records_nothing(
    store: SagaStore, tools: tuple[str, Any], tmp_path: Path
) -> None:
    """Arguments the tool refuses: a tool error naming them, no saga and no step stored, no tool called."""
    _, module = tools
    async with Client(saga_mcp_server(SagaExecutor(module.registry, store))) as client:
        answer = await client.call_tool("book_ticket", {"flight": "KE4", "seat": 4}, meta={"saga_id": "s4"})  # type: ignore[arg-type]
    assert answer.is_error
    assert "seat" in text_of(answer)
    assert await store.get_saga("s4") is None
    assert await store.list_sagas() == []
    assert ledger(tmp_path / "tools") == []


async def test_a_call_needing_approval_waits_then_runs_once_approved(store: SagaStore, tools: tuple[str, Any]) -> None:
    """A refund needing approval answers a tool error naming the decision; the same call made again runs it."""
    _, module = tools
    executor = SagaExecutor(module.registry, store)
    meta: Any = {"saga_id": "refund-1"}
    args = {"ticket_id": "T1", "amount": 50}
    async with Client(saga_mcp_server(executor)) as client:
        waits = await client.call_tool("refund", args, meta=meta)
        assert waits.is_error
        assert "waits for a person's decision" in text_of(waits)
        [request] = await executor.pending_approvals()
        assert request.step_id in text_of(waits)
        other = await client.call_tool("book_ticket", {"flight": "KE5", "seat": "5A"}, meta=meta)
        assert other.is_error
        assert "waits for a decision" in text_of(other)
        again = await client.call_tool("refund", args, meta=meta)
        assert again.is_error
        await executor.approve("refund-1", request.step_id, by="alice")
        done = await client.call_tool("refund", args, meta=meta)
        assert not done.is_error, text_of(done)
        assert done.structured_content == {"refunded": 50}
        ended = await client.call_tool("saga_commit", {}, meta=meta)
        assert ended.structured_content is not None
        assert ended.structured_content["status"] == "SUCCESS"


async def test_a_call_of_its_own_that_waited_runs_in_its_saga_when_made_again(
    store: SagaStore, tools: tuple[str, Any]
) -> None:
    """Without session or _meta: the same call made again after approval runs in the saga that waited."""
    _, module = tools
    executor = SagaExecutor(module.registry, store)
    args = {"ticket_id": "T3", "amount": 30}
    async with Client(saga_mcp_server(executor)) as client:
        waits = await client.call_tool("refund", args)
        assert waits.is_error
        [request] = await executor.pending_approvals()
        await executor.approve(request.saga_id, request.step_id, by="carol")
        done = await client.call_tool("refund", args)
    assert done.structured_content == {"refunded": 30}
    assert done.meta is not None
    assert done.meta["saga_id"] == request.saga_id
    result = await store.get_saga(request.saga_id)
    assert result is not None
    assert result.status is SagaStatus.SUCCESS


async def test_a_rejected_call_is_answered_as_rejected_and_the_saga_goes_on(
    store: SagaStore, tools: tuple[str, Any]
) -> None:
    """Once rejected, the same call is answered with who refused it; later calls of the saga run."""
    _, module = tools
    executor = SagaExecutor(module.registry, store)
    meta: Any = {"saga_id": "refund-2"}
    args = {"ticket_id": "T2", "amount": 70}
    async with Client(saga_mcp_server(executor)) as client:
        await client.call_tool("refund", args, meta=meta)
        [request] = await executor.pending_approvals()
        await executor.reject("refund-2", request.step_id, by="bob", note="not refundable")
        refused = await client.call_tool("refund", args, meta=meta)
        assert refused.is_error
        assert "bob" in text_of(refused)
        booked = await client.call_tool("book_ticket", {"flight": "KE6", "seat": "6A"}, meta=meta)
        assert not booked.is_error, text_of(booked)


async def test_a_session_ending_with_neither_is_left_to_recovery_which_compensates_it(
    store: SagaStore, tools: tuple[str, Any], tmp_path: Path
) -> None:
    """A session closed without commit or rollback leaves its saga RUNNING; recover() undoes its steps once."""
    _, module = tools
    executor = SagaExecutor(module.registry, store)
    async with Client(saga_mcp_server(executor), mode="legacy") as client:
        answer = await client.call_tool("book_ticket", {"flight": "KE7", "seat": "7A"})
    assert answer.meta is not None
    saga_id = answer.meta["saga_id"]
    left = await store.get_saga(saga_id)
    assert left is not None
    assert left.status is SagaStatus.RUNNING
    [recovered] = await executor.recover()
    assert recovered.status is SagaStatus.COMPENSATED
    assert [kind for kind, _, _ in ledger(tmp_path / "tools")] == ["book", "cancel"]


# -- the command line, over stdio, and killed mid-session ----------------------------------------------------------


def cli_server(tools_spec: str, database_url: str, tmp_path: Path, executor_id: str) -> StdioServerParameters:
    """Return how to start `saga-runtime mcp` over stdio in a child process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "tools"), *sys.path])}
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-c",
            "from saga_runtime._cli import main; main()",
            "mcp",
            "--tools",
            tools_spec,
            "--db",
            database_url,
            "--executor-id",
            executor_id,
            "--lease-timeout",
            "1",
        ],
        env=env,
        cwd=str(tmp_path),
    )


async def test_the_cli_serves_over_stdio_and_rolls_back(
    database_url: str, tools: tuple[str, Any], tmp_path: Path
) -> None:
    """`saga-runtime mcp --tools M:R` over stdio: a session books two tickets and rolls back, in reverse."""
    spec, _ = tools
    async with Client(cli_server(spec, database_url, tmp_path, "mcp-cli"), mode="legacy") as client:
        await client.call_tool("book_ticket", {"flight": "KE8", "seat": "8A"})
        await client.call_tool("book_ticket", {"flight": "KE8", "seat": "8B"})
        ended = await client.call_tool("saga_rollback", {})
    assert ended.structured_content is not None
    assert ended.structured_content["status"] == "COMPENSATED"
    kinds = [kind for kind, _, _ in ledger(tmp_path / "tools")]
    assert kinds == ["book", "book", "cancel", "cancel"]


@pytest.mark.slow
async def test_a_killed_server_leaves_its_session_to_recovery_which_undoes_each_step_once(
    database_url: str, tools: tuple[str, Any], tmp_path: Path
) -> None:
    """SIGKILL the serving process mid-session: recover() cancels each booked ticket once, and only once."""
    spec, module = tools
    folder = tmp_path / "tools"
    with contextlib.suppress(Exception):
        async with Client(cli_server(spec, database_url, tmp_path, "mcp-killed"), mode="legacy") as client:
            await client.call_tool("book_ticket", {"flight": "KE9", "seat": "9A"})
            await client.call_tool("book_ticket", {"flight": "KE9", "seat": "9B"})
            [(_, _, pid), *_] = ledger(folder)
            os.kill(pid, signal.SIGKILL)
            await client.call_tool("book_ticket", {"flight": "KE9", "seat": "9C"})
    booked = [key for kind, key, _ in ledger(folder) if kind == "book"]
    assert len(booked) == 2
    async with open_store(database_url) as store:
        await anyio.sleep(1.5)  # the dead server's lease runs out
        executor = SagaExecutor(module.registry, store)
        [recovered] = await executor.recover()
        assert recovered.status is SagaStatus.COMPENSATED
        assert await executor.recover() == []
    cancelled = [key for kind, key, _ in ledger(folder) if kind == "cancel"]
    assert cancelled == booked[::-1]


def free_port() -> int:
    """Return a TCP port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.slow
async def test_the_cli_serves_streamable_http_sessions_and_sagas_given_in_meta(
    database_url: str, tools: tuple[str, Any], tmp_path: Path
) -> None:
    """`saga-runtime mcp --http PORT` prints its address; a stateful session rolls back its saga; a _meta saga is
    committed."""
    spec, _ = tools
    port = free_port()
    server = cli_server(spec, database_url, tmp_path, "mcp-http")
    errors = (tmp_path / "mcp-http.err").open("w")
    child = await anyio.open_process(
        [server.command, *server.args, "--http", str(port)],
        env=server.env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=errors,
    )
    try:
        with anyio.fail_after(30):
            while True:
                try:
                    probe = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    assert child.returncode is None, "the server exited"
                    await anyio.sleep(0.1)
                    continue
                await probe.aclose()
                break
        url = f"http://127.0.0.1:{port}/mcp"
        async with Client(url, mode="legacy") as client:
            first = await client.call_tool("book_ticket", {"flight": "KE10", "seat": "10A"})
            await client.call_tool("book_ticket", {"flight": "KE10", "seat": "10B"})
            ended = await client.call_tool("saga_rollback", {})
        assert first.meta is not None
        assert str(first.meta["saga_id"]).startswith("mcp-")
        assert ended.structured_content is not None
        assert ended.structured_content["status"] == "COMPENSATED"
        meta: Any = {"saga_id": "over-http"}
        async with Client(url) as client:
            await client.call_tool("book_ticket", {"flight": "KE11", "seat": "11A"}, meta=meta)
            committed = await client.call_tool("saga_commit", {}, meta=meta)
        assert committed.structured_content is not None
        assert committed.structured_content["status"] == "SUCCESS"
    finally:
        child.terminate()
        with anyio.fail_after(30):
            await child.wait()
        await child.aclose()
        errors.close()
    kinds = [kind for kind, _, _ in ledger(tmp_path / "tools")]
    assert kinds == ["book", "book", "cancel", "cancel", "book"]
    assert f"serving over streamable HTTP at http://127.0.0.1:{port}/mcp" in (tmp_path / "mcp-http.err").read_text()


async def test_a_call_made_again_with_its_idempotency_key_runs_its_tool_once(
    store: SagaStore, tools: tuple[str, Any], tmp_path: Path
) -> None:
    """A client retrying a call of its own with the same `_meta.idempotency_key` gets the one saga: one booking."""
    _, module = tools
    server = saga_mcp_server(SagaExecutor(module.registry, store))
    meta: Any = {"idempotency_key": "client-key-1"}
    answers = []
    for _ in range(2):
        async with Client(server) as client:
            answers.append(await client.call_tool("book_ticket", {"flight": "LH9", "seat": "9A"}, meta=meta))
    first, again = answers
    assert not first.is_error
    assert first.meta is not None
    assert again.meta is not None
    assert again.meta["saga_id"] == first.meta["saga_id"]
    own = await store.get_saga(first.meta["saga_id"])
    assert own is not None
    assert own.status is SagaStatus.SUCCESS
    assert len(own.steps) == 1
    assert [kind for kind, _, _ in ledger(tmp_path / "tools")] == ["book"]


async def test_a_call_the_client_gave_up_on_still_ends_its_saga_and_its_retry_runs_nothing(store: SagaStore) -> None:
    """A client timing out mid-call: its own saga still ends with the call; the retry with its key books nothing."""
    booked: list[str] = []
    registry = ToolRegistry()

    @registry.tool(name="slow_book")
    class SlowBook:
        async def execute(self, seat: str, ctx: StepContext) -> dict[str, str]:
            await anyio.sleep(0.5)
            booked.append(ctx.idempotency_key)
            return {"seat": seat}

        async def compensate(self, result: dict[str, str] | None) -> None:
            booked.append("cancelled")

    server = saga_mcp_server(SagaExecutor(registry, store))
    meta: Any = {"idempotency_key": "client-key-2"}
    async with Client(server) as client:
        with anyio.move_on_after(0.1):
            await client.call_tool("slow_book", {"seat": "1A"}, meta=meta)
        await anyio.sleep(1.0)
        again = await client.call_tool("slow_book", {"seat": "1A"}, meta=meta)
    assert again.meta is not None
    own = await store.get_saga(again.meta["saga_id"])
    assert own is not None
    assert own.status is SagaStatus.SUCCESS
    assert len(booked) == 1
