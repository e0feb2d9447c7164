"""Saga functions served over MCP: a call runs the function as a saga, its stream values reported as progress."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import Client
from mcp_types import TextContent

from saga_runtime import DynamicSaga, SagaExecutor, SagaStatus, SagaStore, ToolRegistry, open_store
from saga_runtime.integrations.mcp import saga_mcp_server


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SagaStore]:
    """Return a SQLite store of the test's own."""
    async with open_store(f"sqlite:///{tmp_path / 'sagas.db'}") as opened:
        yield opened


def registry() -> ToolRegistry:
    """Return a tool and two saga functions: one that streams its pages, one that waits for a message mid-stream."""
    tools = ToolRegistry()

    @tools.tool(name="fetch", irreversible=True)
    class Fetch:
        """Fetch a page."""

        async def execute(self, url: str) -> dict[str, Any]:
            return {"url": url, "words": len(url)}

    @tools.saga
    async def crawl(saga: DynamicSaga, urls: list[str]) -> dict[str, Any]:
        """Fetch each page, reporting each as it goes."""
        words = 0
        for url in urls:
            page = await saga.call("fetch", url=url)
            words += page["words"]
            await saga.write_stream("pages", f"fetched {url}")
        await saga.write_stream("totals", {"pages": len(urls), "words": words})
        return {"words": words}

    @tools.saga
    async def ask(saga: DynamicSaga) -> str:
        await saga.write_stream("log", "asked")
        answer = await saga.recv("answer", timeout=30)
        await saga.write_stream("log", f"answered {answer}")
        return str(answer)

    return tools


def text_of(result: Any) -> str:
    """Return the text of a tool result."""
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_each_stream_value_is_a_progress_notification_in_order(store: SagaStore, mode: str) -> None:
    """A saga function's call reports each value of its streams, in the order written, as progress 1, 2, 3, ..."""
    executor = SagaExecutor(registry(), store)
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    async with Client(saga_mcp_server(executor), mode=mode) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"fetch", "crawl", "ask", "saga_commit", "saga_rollback"} <= set(listed)
        assert listed["crawl"].input_schema["required"] == ["urls"]
        assert listed["crawl"].description == "Fetch each page, reporting each as it goes."
        urls = ["a.example/1", "b.example/22"]
        result = await client.call_tool("crawl", {"urls": urls}, progress_callback=progress)
    assert not result.is_error, text_of(result)
    assert result.structured_content == {"words": 23}
    assert seen == [
        (1, None, "fetched a.example/1"),
        (2, None, "fetched b.example/22"),
        (3, None, '{"pages": 2, "words": 23}'),
    ]
    assert result.meta is not None
    stored = await store.get_saga(result.meta["saga_id"])
    assert stored is not None
    assert stored.status is SagaStatus.SUCCESS
    assert [step.tool_name for step in stored.steps] == ["fetch", "fetch"]


async def test_a_value_is_reported_while_the_call_still_runs(store: SagaStore) -> None:
    """The progress of a value written before the saga waits arrives while the call waits, not once it ended."""
    executor = SagaExecutor(registry(), store, wait_threshold=60)
    seen: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(message)
        if message == "asked":  # the saga waits for this answer: the call cannot have ended yet
            await executor.send("ask-1", "answer", 42)

    async with Client(saga_mcp_server(executor), mode="legacy") as client:
        with anyio.fail_after(20):
            result = await client.call_tool("ask", {}, progress_callback=progress, meta={"saga_id": "ask-1"})
    assert not result.is_error, text_of(result)
    assert result.structured_content == {"result": "42"}
    assert seen == ["asked", "answered 42"]


async def test_a_call_without_progress_asked_and_a_bad_call(store: SagaStore) -> None:
    """Without a progress callback the call still answers its output; arguments it refuses store nothing."""
    executor = SagaExecutor(registry(), store)
    async with Client(saga_mcp_server(executor), mode="legacy") as client:
        plain = await client.call_tool("crawl", {"urls": ["c.example"]}, meta={"saga_id": "crawl-1"})
        refused = await client.call_tool("crawl", {"urls": "not a list"}, meta={"saga_id": "crawl-2"})
        again = await client.call_tool("crawl", {"urls": ["c.example"]}, meta={"saga_id": "crawl-1"})
    assert plain.structured_content == {"words": 9}
    assert again.structured_content == {"words": 9}  # the same saga id and arguments: the stored saga's output
    assert refused.is_error
    assert "urls" in text_of(refused)
    assert await store.get_saga("crawl-2") is None
    stored = await store.get_saga("crawl-1")
    assert stored is not None
    assert len(stored.steps) == 1  # run once


async def test_names_choose_the_saga_functions_served(store: SagaStore) -> None:
    """`names` offers the tools and saga functions it names, and only those."""
    server = saga_mcp_server(SagaExecutor(registry(), store), names=["crawl", "fetch"])
    async with Client(server) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
    assert listed == {"crawl", "fetch", "saga_commit", "saga_rollback"}


async def test_other_arguments_under_a_saga_id_and_a_released_saga_are_tool_errors(store: SagaStore) -> None:
    """Other arguments under a stored saga id: a tool error, nothing run; a saga released to wait says it waits."""
    executor = SagaExecutor(registry(), store, wait_threshold=0.01)
    async with Client(saga_mcp_server(executor), mode="legacy") as client:
        first = await client.call_tool("crawl", {"urls": ["d.example"]}, meta={"saga_id": "crawl-3"})
        other = await client.call_tool("crawl", {"urls": ["e.example"]}, meta={"saga_id": "crawl-3"})
        waits = await client.call_tool("ask", {}, meta={"saga_id": "ask-2"})
        await executor.send("ask-2", "answer", 7)
        with anyio.fail_after(20):
            await executor.recover()  # a worker goes on with it
        again = await client.call_tool("ask", {}, meta={"saga_id": "ask-2"})
    assert first.structured_content == {"words": 9}
    assert other.is_error
    assert "IdempotencyConflictError" in text_of(other)
    assert waits.is_error
    assert "WAITING" in text_of(waits)
    assert not again.is_error, text_of(again)
    assert again.structured_content == {"result": "7"}
    stored = await store.get_saga("crawl-3")
    assert stored is not None
    assert len(stored.steps) == 1
