"""A saga's events and streams on its console page, and the Server-Sent Events that follow a live saga."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import run_sync
from console_helpers import SCRIPT_TEXT, client

import saga_runtime._published as published
from saga_runtime import DynamicSaga, SagaExecutor, ToolRegistry, open_store
from saga_runtime._console._live import Live
from saga_runtime._storage import SagaStore

TOKEN = "the console token of the test"


def published_registry() -> ToolRegistry:
    """Return a registry with a saga function that publishes events and streams, one value holding a script."""
    registry = ToolRegistry()

    @registry.saga
    async def report(saga: DynamicSaga, pages: int) -> int:
        await saga.set_event("phase", "starting")
        for page in range(pages):
            await saga.write_stream("pages", {"page": page})
        await saga.write_stream("notes", SCRIPT_TEXT)
        await saga.close_stream("pages")
        await saga.set_event("phase", "done")
        return pages

    return registry


@pytest.fixture
def db(tmp_path: Path) -> str:
    """Return the URL of a SQLite store holding one ended saga function that published, `report-1`."""
    url = f"sqlite:///{tmp_path / 'live.db'}"

    async def fill() -> None:
        async with open_store(url) as store:
            executor = SagaExecutor(published_registry(), store)
            result = await executor.run("report", args={"pages": 3}, saga_id="report-1")
            assert result.status.value == "SUCCESS"

    run_sync(fill)
    return url


def sse(text: str) -> list[dict[str, Any]]:
    """Return the messages of a Server-Sent Events body: each one's event, id and JSON data."""
    messages = []
    for block in text.split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            if name in ("event", "id", "data", "retry"):
                fields[name] = json.loads(value) if name == "data" else value
        if "data" in fields:
            messages.append({"event": "message", **fields})
    return messages


def test_the_page_shows_the_latest_events_and_each_stream_escaped(db: str) -> None:
    """A saga's page lists each event's latest value and each stream's values in order, a script shown as text."""
    with client(db) as console:
        page = console.get("/sagas/report-1").text
    assert 'aria-label="events and streams"' in page
    assert '<dd data-key="phase"><pre>&#34;done&#34;</pre></dd>' in page
    assert "starting" not in page  # the latest value only
    assert page.index("&#34;page&#34;: 0") < page.index("&#34;page&#34;: 1") < page.index("&#34;page&#34;: 2")
    assert SCRIPT_TEXT not in page
    assert "&lt;script&gt;" in page
    assert "data-follow" not in page  # ended: nothing to follow


def test_the_stream_of_an_ended_saga_sends_every_entry_then_ends(db: str) -> None:
    """GET /api/follow/ID sends each published entry with its number as id, the status, then `end`."""
    with client(db) as console, console.stream("GET", "/api/follow/report-1") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        messages = sse(response.read().decode())
    entries = [m for m in messages if m["event"] == "message"]
    assert [m["id"] for m in entries] == [str(n) for n in range(1, 8)]
    assert [m["data"]["kind"] for m in entries] == ["event", *["stream"] * 4, "stream_closed", "event"]
    assert [m["data"].get("offset") for m in entries if m["data"]["kind"] == "stream"] == [0, 1, 2, 0]
    assert entries[4]["data"] == {"kind": "stream", "name": "notes", "value": SCRIPT_TEXT, "offset": 0}
    assert messages[-1] == {"event": "end", "data": {"status": "SUCCESS", "missing": False}}


def test_a_reconnection_gets_only_the_entries_after_its_last_event_id(db: str) -> None:
    """A browser reconnecting with Last-Event-ID 5 gets entries 6 and 7 only, never one twice."""
    with client(db) as console, console.stream("GET", "/api/follow/report-1", headers={"last-event-id": "5"}) as got:
        entries = [m for m in sse(got.read().decode()) if m["event"] == "message"]
    assert [m["id"] for m in entries] == ["6", "7"]


def test_an_unknown_saga_ends_at_once_and_the_token_is_required(db: str) -> None:
    """An unknown saga's stream is an `end` saying it is missing; with a token set, none is sent without it."""
    with client(db) as console, console.stream("GET", "/api/follow/nobody") as response:
        messages = sse(response.read().decode())
    assert messages[-1] == {"event": "end", "data": {"status": None, "missing": True}}
    with client(db, token=TOKEN) as console:
        assert console.get("/api/follow/report-1").status_code == 401
        with console.stream("GET", "/api/follow/report-1", headers={"authorization": f"Bearer {TOKEN}"}) as ok:
            assert sse(ok.read().decode())[-1]["event"] == "end"


class CountingStore:
    """A store whose saga reads are counted (everything else passed through)."""

    def __init__(self, store: SagaStore) -> None:
        self.store = store
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def load_saga(self, saga_id: str) -> Any:
        self.reads += 1
        return await self.store.load_saga(saga_id)


async def test_many_pages_following_a_saga_share_one_reader_of_the_store(tmp_path: Path) -> None:
    """Fifty pages following one live saga read the store about as often as one page: one reader per saga."""
    url = f"sqlite:///{tmp_path / 'many.db'}"
    registry = ToolRegistry()

    @registry.saga
    async def waits(saga: DynamicSaga) -> None:
        await saga.set_event("ready", True)
        await saga.recv("go", timeout=30)

    async with open_store(url) as store, anyio.create_task_group() as tasks:
        executor = SagaExecutor(registry, store, wait_threshold=60)
        tasks.start_soon(lambda: executor.run(waits, saga_id="w-1"))
        assert await executor.get_event("w-1", "ready", timeout=10) is True
        counted = CountingStore(store)
        live = Live(counted, tasks)  # type: ignore[arg-type]

        async def pages(count: int) -> tuple[int, list[int]]:
            seen: list[int] = []
            done = anyio.Event()

            async def page() -> None:
                async with live.feed("w-1") as feed:
                    await feed.first.wait()
                    seen.append(len(feed.entries))
                    await done.wait()

            before = counted.reads
            async with anyio.create_task_group() as viewers:
                for _ in range(count):
                    viewers.start_soon(page)
                await anyio.sleep(2.0)
                done.set()
            return counted.reads - before, seen

        with anyio.fail_after(20):
            one, _ = await pages(1)
            fifty, seen = await pages(50)
        await executor.send("w-1", "go", "now")
    assert seen == [1] * 50  # every page got the entry published before it came
    assert one >= 2  # the reader read the store again while the page followed
    assert fifty <= one + 2, (one, fifty)


async def test_a_saga_run_elsewhere_is_followed_by_reading_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no notice from the writer (another process's), the feed still gets each value and the end."""

    class Unwatched:
        async def wait(self, seconds: float) -> bool:
            await anyio.sleep(seconds)
            return False

    @contextlib.contextmanager
    def unwatched(url: str, saga_id: str) -> Iterator[Unwatched]:
        yield Unwatched()

    monkeypatch.setattr(published, "watching", unwatched)
    registry = ToolRegistry()
    begun = anyio.Event()

    @registry.saga
    async def chats(saga: DynamicSaga) -> None:
        begun.set()
        await saga.write_stream("log", await saga.recv("say", timeout=30))

    async with open_store(f"sqlite:///{tmp_path / 'elsewhere.db'}") as store, anyio.create_task_group() as tasks:
        executor = SagaExecutor(registry, store, wait_threshold=60)
        tasks.start_soon(lambda: executor.run(chats, saga_id="c-1"))
        await begun.wait()
        live = Live(store, tasks)
        with anyio.fail_after(20):
            async with live.feed("c-1") as feed:
                await feed.first.wait()
                assert feed.entries == []
                await executor.send("c-1", "say", "hello")
                while not feed.over:
                    await feed.changed.wait()
    assert feed.entries == [{"kind": "stream", "name": "log", "value": "hello", "offset": 0}]
    assert feed.shown_status == "SUCCESS"
