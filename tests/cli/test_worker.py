"""`saga-runtime worker` and `cancel` run for real in subprocesses against a SQLite file."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

from saga_runtime import CancelRecord, SagaExecutor, SagaStatus, open_store

from .test_cli import cli

SCRIPT = Path(sys.executable).with_name("saga-runtime")

WORKER_TOOLS = textwrap.dedent(
    """
    import asyncio
    from saga_runtime import Queue, StepContext, ToolRegistry

    registry = ToolRegistry()
    QUEUES = [Queue("jobs", concurrency=2)]


    @registry.tool
    class Job:
        async def execute(self, name: str, ctx: StepContext) -> dict:
            await asyncio.sleep(0.05)
            return {"done": name}

        async def compensate(self, result: object) -> None:
            return None
    """
)


def _submit(db: str, tools: Path, ids: list[str]) -> None:
    """Submit one-step Job sagas to the `jobs` queue, in this process."""
    sys.path.insert(0, str(tools))
    try:
        import worker_tools  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tools))

    async def main() -> None:
        async with open_store(db) as store:
            executor = SagaExecutor(worker_tools.registry, store)
            for saga_id in ids:
                await executor.submit([{"tool": "Job", "args": {"name": saga_id}}], saga_id=saga_id, queue="jobs")

    asyncio.run(main())


async def _statuses(db: str, ids: list[str]) -> dict[str, SagaStatus]:
    async with open_store(db) as store:
        return {saga_id: (await store.load_saga(saga_id))[0].status for saga_id in ids}  # type: ignore[index]


def test_the_worker_runs_queued_sagas_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """`worker --tools --queues` runs what was submitted, and SIGTERM stops it with exit code 0."""
    (tmp_path / "worker_tools.py").write_text(WORKER_TOOLS)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    ids = [f"job-{n}" for n in range(4)]
    _submit(db, tmp_path, ids)
    listed = cli("list", "--status", "QUEUED", "--json", db=db).json()
    assert {summary["saga_id"] for summary in listed} == set(ids)
    env = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}
    command = [str(SCRIPT), "--db", db, "worker", "--tools", "worker_tools:registry", "--queues", "worker_tools:QUEUES"]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if set(asyncio.run(_statuses(db, ids)).values()) == {SagaStatus.SUCCESS}:
                break
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "stopped" in err
    assert set(asyncio.run(_statuses(db, ids)).values()) == {SagaStatus.SUCCESS}


def test_cancel_command_ends_a_queued_saga(tmp_path: Path) -> None:
    """`cancel ID --reason T` ends a QUEUED saga COMPENSATED; an unknown id exits with a one-line error."""
    (tmp_path / "worker_tools.py").write_text(WORKER_TOOLS)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    _submit(db, tmp_path, ["job-x"])
    ran = cli("cancel", "job-x", "--reason", "not needed", db=db)
    assert ran.code == 0, ran.err
    assert "COMPENSATED" in ran.out
    assert "not needed" in ran.out
    missing = cli("cancel", "nobody", db=db)
    assert missing.code != 0
    assert "nobody" in missing.err


def test_cancel_command_records_the_operator_as_who_asked(tmp_path: Path) -> None:
    """`cancel` records `by` as cli:USER@HOST, or as given with --by, never a generated executor id."""
    (tmp_path / "worker_tools.py").write_text(WORKER_TOOLS)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    _submit(db, tmp_path, ["job-a", "job-b"])
    assert cli("cancel", "job-a", db=db).code == 0
    assert cli("cancel", "job-b", "--by", "alice", "--reason", "duplicate", db=db).code == 0

    async def cancels() -> list[CancelRecord | None]:
        async with open_store(db) as store:
            return [(await store.get_saga(saga_id)).cancel for saga_id in ("job-a", "job-b")]  # type: ignore[union-attr]

    default, given = asyncio.run(cancels())
    assert default is not None
    assert given is not None
    assert default.by == f"cli:{getpass.getuser()}@{socket.gethostname()}"
    assert (given.by, given.reason) == ("alice", "duplicate")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, str]:
    """GET a path of the worker's health server: its status code and body (an error status is an answer too)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_worker_serves_health_endpoints_and_logs_json(tmp_path: Path) -> None:
    """`worker --health-port P --log-format json`: /healthz and /readyz answer 200; each log line is a JSON object,
    a queued saga's start logged as a start (not a recovery)."""
    (tmp_path / "worker_tools.py").write_text(WORKER_TOOLS)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    ids = ["job-h1", "job-h2"]
    _submit(db, tmp_path, ids)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}
    command = [
        str(SCRIPT), "-v", "--db", db, "worker", "--tools", "worker_tools:registry", "--queues", "worker_tools:QUEUES",
        "--health-port", str(port), "--log-format", "json",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        answers: dict[str, tuple[int, str]] = {}
        while time.monotonic() < deadline:
            try:
                answers = {path: _get(port, path) for path in ("/healthz", "/readyz", "/nowhere")}
            except OSError:  # not listening yet
                time.sleep(0.1)
                continue
            if answers["/readyz"][0] == 200 and set(asyncio.run(_statuses(db, ids)).values()) == {SagaStatus.SUCCESS}:
                break
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert answers["/healthz"] == (200, "alive\n")
    assert answers["/readyz"] == (200, "ready\n")
    assert answers["/nowhere"][0] == 404
    logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    messages = [entry["message"] for entry in logged]
    assert all({"time", "level", "logger", "message"} <= set(entry) for entry in logged)
    assert any("job-h1: starting, from queue 'jobs'" in message for message in messages), messages
    assert not any("recovering" in message for message in messages)
    assert f"http://127.0.0.1:{port}/healthz" in err


async def test_readyz_answers_503_when_not_serving_or_the_store_does_not_answer() -> None:
    """/readyz is 503 before the worker serves and while its store probe fails; /healthz stays 200 (alive)."""
    from saga_runtime._cli._serving import HealthServer

    failing = {"on": False}

    async def probe() -> None:
        if failing["on"]:
            raise ConnectionRefusedError("the database is down")

    health = HealthServer(0, probe)
    try:
        assert await asyncio.to_thread(_get, health.port, "/readyz") == (
            503,
            "not ready: not serving (starting or stopping)\n",
        )
        health.serving = True
        assert await asyncio.to_thread(_get, health.port, "/readyz") == (200, "ready\n")
        failing["on"] = True
        code, text = await asyncio.to_thread(_get, health.port, "/readyz")
        assert code == 503
        assert "the store does not answer (ConnectionRefusedError: the database is down)" in text
        assert await asyncio.to_thread(_get, health.port, "/healthz") == (200, "alive\n")
    finally:
        await asyncio.to_thread(health.close)
