"""A live saga followed on its console page in headless Chromium: what it publishes appears without a reload."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from conftest import run_sync
from console_helpers import served

from saga_runtime import DynamicSaga, SagaExecutor, ToolRegistry, open_store
from saga_runtime._console import create_app

SCRIPT = "<img src=x onerror=window.__pwned=1>"


def registry() -> ToolRegistry:
    """Return a registry whose saga function publishes, waits for a message, publishes it, and ends."""
    tools = ToolRegistry()

    @tools.saga
    async def chat(saga: DynamicSaga) -> str:
        await saga.set_event("phase", "waiting for the reply")
        await saga.write_stream("log", "opened")
        reply = await saga.recv("reply", timeout=60)
        await saga.write_stream("log", reply)
        await saga.set_event("phase", "answered")
        await saga.close_stream("log")
        return str(reply)

    return tools


def test_a_value_written_after_the_page_opened_appears_without_a_reload(page: Any, tmp_path: Path) -> None:
    """A saga's page shows a stream value and an event set after it opened, as text, then the saga's end."""
    url = f"sqlite:///{tmp_path / 'live.db'}"
    outcome: list[Any] = []

    async def run() -> None:
        async with open_store(url) as store:
            result = await SagaExecutor(registry(), store, wait_threshold=120).run("chat", saga_id="chat-1")
            outcome.append(result.status.value)

    async def create() -> None:
        async with open_store(url):
            pass  # the file and its schema made first: the thread below and this test then open it at once

    run_sync(create)
    worker = threading.Thread(target=lambda: asyncio.run(run()), name="saga-under-test", daemon=True)
    worker.start()

    async def phase() -> Any:
        async with open_store(url) as store:
            return await SagaExecutor(registry(), store).get_event("chat-1", "phase", timeout=20)

    assert run_sync(phase) == "waiting for the reply"
    with served(create_app(url)) as base:
        page.goto(base + "/sagas/chat-1")
        page.evaluate("window.__opened = 'this page, never reloaded'")
        section = page.locator("section.published")
        assert section.locator("[data-stream=log] li").all_inner_texts() == ['"opened"']
        assert page.locator("h1 .status").inner_text() == "RUNNING"

        async def reply() -> None:
            async with open_store(url) as store:
                await SagaExecutor(registry(), store).send("chat-1", "reply", SCRIPT)

        run_sync(reply)
        values = section.locator("[data-stream=log] li")
        values.nth(1).wait_for()
        assert values.all_inner_texts() == ['"opened"', f'"{SCRIPT}"']  # shown as text, never run
        page.locator("dd[data-key=phase]", has_text="answered").wait_for()
        page.locator("[data-stream=log] .closed").wait_for()
        page.locator(".live-state", has_text="the saga has ended SUCCESS").wait_for()
        assert page.locator("h1 .status").inner_text() == "SUCCESS"
        assert page.evaluate("window.__opened") == "this page, never reloaded"
        assert page.evaluate("window.__pwned") is None
    worker.join(30)
    assert outcome == ["SUCCESS"]
