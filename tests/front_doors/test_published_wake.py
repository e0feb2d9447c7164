"""Readers of events and streams wake on a notice from a writer in their process; others poll, less when idle."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

import saga_runtime._published as published
from saga_runtime import DynamicSaga, SagaExecutor, SagaStatus, ToolRegistry, open_store


@pytest.fixture
def no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a reader's store poll an hour apart: what it sees in a test's time, a notice woke it for."""
    monkeypatch.setattr(published, "_FIRST_PAUSE", 3600.0)
    monkeypatch.setattr(published, "_MOST_PAUSE", 3600.0)


def talker(begun: anyio.Event | None = None) -> ToolRegistry:
    """Return a saga function that publishes a value per message it receives, and ends on "bye" (stream open)."""
    registry = ToolRegistry()

    @registry.saga
    async def talk(saga: DynamicSaga) -> None:
        if begun is not None:
            begun.set()  # stored, and running
        await saga.set_event("ready", True)
        while (said := await saga.recv("say", timeout=60)) not in ("bye", None):
            await saga.write_stream("heard", said)
            await saga.set_event("last", said)

    return registry


async def test_a_reader_in_the_writers_process_wakes_on_each_value_and_the_end(no_poll: None, tmp_path: Path) -> None:
    """With the store poll an hour apart, read_stream and get_event still get each value, and the saga's end."""
    async with open_store(f"sqlite:///{tmp_path / 'wake.db'}") as store:
        begun = anyio.Event()
        executor = SagaExecutor(talker(begun), store, wait_threshold=120)
        heard: list[Any] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(lambda: executor.run("talk", saga_id="t-1"))
                await begun.wait()
                assert await executor.get_event("t-1", "ready", timeout=10) is True
                stream = executor.read_stream("t-1", "heard")
                await executor.send("t-1", "say", "one")
                heard.append(await anext(stream))
                await executor.send("t-1", "say", {"two": 2})
                heard.append(await anext(stream))
                assert await executor.get_event("t-1", "last", timeout=5) == {"two": 2}
                await executor.send("t-1", "say", "bye")
                heard += [value async for value in stream]  # the stream is never closed: the end stops it
        assert heard == ["one", {"two": 2}]
        result = await store.get_saga("t-1")
        assert result is not None
        assert result.status is SagaStatus.SUCCESS


def test_a_reader_on_another_threads_loop_is_woken_too(no_poll: None, tmp_path: Path) -> None:
    """A reader on its own loop and store (a console served in a thread) is woken by the writer's notice."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    heard: list[Any] = []

    async def run() -> None:
        async with open_store(url) as store:
            begun = anyio.Event()
            executor = SagaExecutor(talker(begun), store, wait_threshold=120)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(lambda: executor.run("talk", saga_id="t-2"))
                await begun.wait()
                await executor.get_event("t-2", "ready", timeout=10)
                reading.set()
                await asyncio.to_thread(started.wait, 20)
                for said in ("one", "two", "bye"):
                    await executor.send("t-2", "say", said)
                    await anyio.sleep(0.2)

    async def read() -> None:
        async with open_store(url) as store:
            stream = published.read_stream(store, "t-2", "heard", 0)
            first = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0.2)  # waiting in its first pause, an hour long
            started.set()
            heard.append(await first)
            heard.extend([value async for value in stream])

    reading, started = threading.Event(), threading.Event()
    writer = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
    writer.start()
    assert reading.wait(20)
    reader = threading.Thread(target=lambda: asyncio.run(read()), daemon=True)
    reader.start()
    reader.join(30)
    writer.join(30)
    assert not reader.is_alive()
    assert heard == ["one", "two"]


class Counting:
    """A store whose saga reads are counted."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def load_saga(self, saga_id: str) -> Any:
        self.reads += 1
        return await self.store.load_saga(saga_id)


async def test_an_idle_reader_reads_the_store_less_and_less(tmp_path: Path) -> None:
    """A reader of a saga that publishes nothing more reads the store about once a second, not ten times."""
    registry = ToolRegistry()

    @registry.saga
    async def waits(saga: DynamicSaga) -> None:
        await saga.write_stream("log", "started")
        await saga.recv("never", timeout=3600)

    async with open_store(f"sqlite:///{tmp_path / 'idle.db'}") as store:
        result = await SagaExecutor(registry, store, wait_threshold=0.01).run(waits, saga_id="idle")
        assert result.status is SagaStatus.WAITING
        counted = Counting(store)
        with anyio.move_on_after(4.0):
            async for _ in published.read_stream(counted, "idle", "log", 1):  # type: ignore[arg-type]
                raise AssertionError("the saga wrote nothing more")
    # Pauses of 0.1, 0.2, 0.4, 0.8, then 1 s: at most 8 reads in 4 s (a read every 0.1 s made 40).
    assert 3 <= counted.reads <= 8, counted.reads
