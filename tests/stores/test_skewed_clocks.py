"""Leases are judged on the database's clock: a worker whose clock is skewed takes no live saga over, and writes
no lease already expired (PostgreSQL and MySQL/MariaDB, where workers on many machines share the database).

The skewed worker is another process run under libfaketime (Debian's `faketime`), its clock a minute off while
the lease is half a minute: with each worker judging leases by its own clock, both tests fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import textwrap
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from saga_runtime import SagaExecutor, SagaStatus, StepContext, ToolRegistry

from .conftest import Stores

pytestmark = pytest.mark.parametrize("kind", ["postgresql", "mysql"])

SKEW = 60  # seconds a worker's clock is off: twice the lease
LEASE = 30.0

# A worker process: `recover` recovers once and prints what it took; `hold` runs a saga whose one step waits for
# the file `go` (writing `started` first) and prints its status. Its Charge tool counts calls in `calls`.
WORKER = textwrap.dedent(
    """
    import asyncio, json, pathlib, sys
    from saga_runtime import SagaExecutor, ToolRegistry, open_store

    role, url, folder = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self, order: str) -> str:
            with open(folder / "calls", "a") as calls:
                calls.write(order + "\\n")
            if role == "hold":
                (folder / "started").touch()
                while not (folder / "go").exists():
                    await asyncio.sleep(0.05)
            return order

        async def compensate(self, result: object) -> None:
            with open(folder / "calls", "a") as calls:
                calls.write(f"undo {result}\\n")

    async def main() -> None:
        async with open_store(url) as store:
            executor = SagaExecutor(registry, store=store, executor_id=f"skewed-{role}", lease_timeout=30.0)
            if role == "recover":
                print(json.dumps([result.saga_id for result in await executor.recover()]))
            else:
                plan = [{"id": "a", "tool": "Charge", "args": {"order": "A"}}]
                print(json.dumps((await executor.run(plan, saga_id="held")).status.value))

    asyncio.run(main())
    """
)


def faketime() -> str:
    """Return the faketime command; skip without it (a failure under CI, which installs it)."""
    found = shutil.which("faketime")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("faketime is not installed (Debian: apt-get install faketime)")
        pytest.skip("faketime is not installed (Debian: apt-get install faketime)")
    return found


async def start_worker(role: str, url: str, folder: Path, skew: int) -> asyncio.subprocess.Process:
    """Start a worker process whose clock is `skew` seconds off (its monotonic clock left alone)."""
    env = {**os.environ, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    return await asyncio.create_subprocess_exec(
        faketime(),
        "-f",
        f"{skew:+d}s",
        sys.executable,
        "-c",
        WORKER,
        role,
        url,
        str(folder),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


async def finish(worker: asyncio.subprocess.Process) -> tuple[int, str, str]:
    """Wait for a worker to end (killed after a minute); return its exit code and output."""
    try:
        out, err = await asyncio.wait_for(worker.communicate(), 60)
    except TimeoutError:
        worker.kill()
        out, err = await worker.communicate()
    assert worker.returncode is not None
    return worker.returncode, out.decode(), err.decode()


def printed(ended: tuple[int, str, str]) -> Any:
    """Return what a worker that ended well printed last (JSON)."""
    code, out, err = ended
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])


def registry_counting(calls: Counter[str]) -> ToolRegistry:
    """Return this process's registry: its Charge tool counts calls and undos by order."""
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self, order: str, ctx: StepContext) -> str:
            calls[order] += 1
            return order

        async def compensate(self, result: Any) -> None:
            calls[f"undo {result}"] += 1

    return registry


async def test_a_worker_whose_clock_runs_ahead_takes_no_live_saga_over(
    stores: Stores, kind: str, tmp_path: Path
) -> None:
    """A worker a minute ahead recovers nothing while a live saga's 30 s lease runs on; the saga ends untouched."""
    store = await stores.open(kind, wipe=True)
    calls: Counter[str] = Counter()
    executor = SagaExecutor(registry_counting(calls), store=store, executor_id="owner", lease_timeout=LEASE)
    async with executor.saga(saga_id="live") as saga:
        await saga.call("Charge", order="A")
        worker = await start_worker("recover", stores.url(kind), tmp_path, SKEW)
        assert printed(await finish(worker)) == []
        await saga.call("Charge", order="B")
    result = await store.get_saga("live")
    assert result is not None
    assert result.status is SagaStatus.SUCCESS
    assert calls == Counter({"A": 1, "B": 1})
    assert not (tmp_path / "calls").exists()  # the skewed worker called nothing


async def test_a_worker_whose_clock_runs_behind_writes_no_lease_already_expired(
    stores: Stores, kind: str, tmp_path: Path
) -> None:
    """A worker a minute behind holds its running saga: its lease is in the future, and recovery leaves it alone."""
    store = await stores.open(kind, wipe=True)
    worker = await start_worker("hold", stores.url(kind), tmp_path, -SKEW)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not (tmp_path / "started").exists():
            assert worker.returncode is None, "the worker ended before its step started"
            assert loop.time() < deadline, "the worker never started its step"
            await asyncio.sleep(0.05)
        calls: Counter[str] = Counter()
        recovering = SagaExecutor(registry_counting(calls), store=store, executor_id="recovery", lease_timeout=LEASE)
        assert await recovering.recover() == []
        loaded = await store.load_saga("held")
        assert loaded is not None
        saga = loaded[0]
        assert saga.owner == "skewed-hold"
        assert saga.lease_expires_at is not None
        assert saga.lease_expires_at > datetime.now(UTC)  # the machine's clock: the database's too
    finally:
        (tmp_path / "go").touch()
        ended = await finish(worker)
    assert printed(ended) == "SUCCESS"
    assert calls == Counter()
    assert (tmp_path / "calls").read_text().split() == ["A"]
    result = await store.get_saga("held")
    assert result is not None
    assert result.status is SagaStatus.SUCCESS
    assert [step.attempts for step in result.steps] == [1]
