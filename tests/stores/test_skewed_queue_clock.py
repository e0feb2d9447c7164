"""A queue's rate window and `not_before` are judged on the database's clock, whatever a worker's clock says.

The skewed worker is another process under libfaketime (Debian's `faketime`), its clock two minutes ahead: judging
the rate window by its own clock it counts none of the starts already made and takes more, and judging
`not_before` by it, it starts a saga a minute early. PostgreSQL and MySQL/MariaDB, where workers on many machines
share the database (SQLite's database clock is the one machine's).
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from saga_runtime import Queue, RateLimit, SagaExecutor, SagaStatus, StepContext, ToolRegistry

from .conftest import Stores
from .test_skewed_clocks import faketime

pytestmark = pytest.mark.parametrize("kind", ["postgresql", "mysql"])

SKEW = 120  # seconds the worker's clock runs ahead: more than any window or delay below
RATED = Queue("rated", rate_limit=RateLimit(5, per=60.0))

# A worker serving both queues for `seconds`, then stopped; its Work tool notes each saga it runs in `calls`.
WORKER = textwrap.dedent(
    """
    import asyncio, pathlib, sys
    from saga_runtime import Queue, RateLimit, SagaExecutor, StepContext, ToolRegistry, open_store

    url, folder, seconds = sys.argv[1], pathlib.Path(sys.argv[2]), float(sys.argv[3])
    registry = ToolRegistry()

    @registry.tool
    class Work:
        async def execute(self, n: int, ctx: StepContext) -> int:
            with open(folder / "calls", "a") as calls:
                calls.write(ctx.saga_id + "\\n")
            return n

        async def compensate(self, result: object) -> None:
            return None

    async def main() -> None:
        queues = [Queue("rated", rate_limit=RateLimit(5, per=60.0)), Queue("later")]
        async with open_store(url) as store:
            executor = SagaExecutor(registry, store=store, executor_id="skewed", lease_timeout=30.0)
            with __import__("anyio").move_on_after(seconds):
                await executor.serve(queues=queues, interval=0.05)

    asyncio.run(main())
    """
)


def registry() -> ToolRegistry:
    """Return this process's tools (the same Work tool, noting nothing)."""
    tools = ToolRegistry()

    @tools.tool
    class Work:
        async def execute(self, n: int, ctx: StepContext) -> int:
            return n

        async def compensate(self, result: Any) -> None:
            return None

    return tools


async def serve_skewed(url: str, folder: Path, seconds: float) -> None:
    """Run the worker process `SKEW` seconds ahead for `seconds`; fail if it does not end well."""
    env = {**os.environ, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    process = await asyncio.create_subprocess_exec(
        faketime(), "-f", f"+{SKEW}s", sys.executable, "-c", WORKER, url, str(folder), str(seconds),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        _, err = await asyncio.wait_for(process.communicate(), 60 + seconds)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()


async def test_a_worker_whose_clock_runs_ahead_keeps_the_rate_limit_and_not_before(
    stores: Stores, kind: str, tmp_path: Path
) -> None:
    """With 5 starts in the last minute (limit 5 a minute), a worker 2 minutes ahead starts none, nor an early one."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(registry(), store, executor_id="on-time", lease_timeout=30.0)
    ids = [f"rated-{n:02d}" for n in range(12)]
    for n, saga_id in enumerate(ids):
        await executor.submit([{"id": "w", "tool": "Work", "args": {"n": n}}], saga_id=saga_id, queue="rated")
    early = [{"id": "w", "tool": "Work", "args": {"n": 0}}]
    await executor.submit(early, saga_id="early", queue="later", not_before=60)
    worker = asyncio.create_task(executor.serve(queues=[RATED], interval=0.05))
    try:
        for saga_id in ids[:5]:
            assert (await executor.handle(saga_id).result(timeout=30)).status is SagaStatus.SUCCESS
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert [await executor.handle(saga_id).status() for saga_id in ids[5:]] == [SagaStatus.QUEUED] * 7

    await serve_skewed(stores.url(kind), tmp_path, 2.0)

    calls = tmp_path / "calls"
    assert not calls.exists(), f"the skewed worker ran {calls.read_text().split()}"
    assert [await executor.handle(saga_id).status() for saga_id in ids[5:]] == [SagaStatus.QUEUED] * 7
    assert await executor.handle("early").status() is SagaStatus.QUEUED
