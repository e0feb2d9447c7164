"""A `saga-runtime worker` SIGKILLed and restarted under the same `--executor-id` takes its sagas back at once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from saga_runtime import SagaExecutor, SagaStatus, open_store

SCRIPT = Path(sys.executable).with_name("saga-runtime")
LEASE = 120  # far longer than the test waits: only a take-back ends the saga in time

TOOLS = textwrap.dedent(
    """
    import asyncio, os, pathlib
    from saga_runtime import Queue, StepContext, ToolRegistry

    registry = ToolRegistry()
    QUEUES = [Queue("jobs", concurrency=2)]
    FOLDER = pathlib.Path(os.environ["JOB_FOLDER"])


    @registry.tool
    class Job:
        async def execute(self, name: str, ctx: StepContext) -> dict:
            with open(FOLDER / "ledger", "a") as ledger:
                ledger.write(f"{os.getpid()} start {name}\\n")
            while not (FOLDER / "go").exists():
                await asyncio.sleep(0.02)
            return {"done": name}

        async def compensate(self, result: object) -> None:
            return None
    """
)

pytestmark = pytest.mark.timeout(120)


def _spawn(db: str, folder: Path, executor_id: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}
    env.update(JOB_FOLDER=str(folder), PYTHONPATH=str(folder))
    command = [
        str(SCRIPT), "--db", db, "worker", "--tools", "restart_tools:registry", "--queues", "restart_tools:QUEUES",
        "--executor-id", executor_id, "--lease-timeout", str(LEASE), "--interval", "0.05",
    ]  # fmt: skip
    with (folder / f"{executor_id}-{time.monotonic_ns()}.log").open("wb") as log:  # the child keeps its own copy
        return subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=log)


def _wait_for(what: str, check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_a_worker_restarted_under_its_id_after_sigkill_takes_its_sagas_back_at_once(tmp_path: Path) -> None:
    """After kill -9, the same --executor-id restarted finishes the saga it held, long before its lease ends."""
    (tmp_path / "restart_tools.py").write_text(TOOLS)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    sys.path.insert(0, str(tmp_path))
    os.environ["JOB_FOLDER"] = str(tmp_path)
    try:
        import restart_tools  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
        del os.environ["JOB_FOLDER"]

    async def submit() -> None:
        async with open_store(db) as store:
            executor = SagaExecutor(restart_tools.registry, store)
            await executor.submit([{"tool": "Job", "args": {"name": "held"}}], saga_id="held", queue="jobs")

    async def status() -> SagaStatus:
        async with open_store(db) as store:
            found = await store.load_saga("held")
            assert found is not None
            return found[0].status

    asyncio.run(submit())
    ledger = tmp_path / "ledger"
    first = _spawn(db, tmp_path, "orders-worker-1")
    second = None
    try:
        _wait_for("the saga to start", lambda: ledger.exists() and "start held" in ledger.read_text(), 30)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        (tmp_path / "go").touch()
        restarted = time.monotonic()
        second = _spawn(db, tmp_path, "orders-worker-1")
        _wait_for("the saga to end", lambda: asyncio.run(status()).is_terminal, 30)
        took = time.monotonic() - restarted
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    assert asyncio.run(status()) is SagaStatus.SUCCESS
    assert took < LEASE / 4, took  # it did not wait out the lease
    assert ledger.read_text().count("start held") == 2  # the killed run, then the take-back's
