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
from typing import Any

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


SLOW_TOOLS = textwrap.dedent(
    """
    import asyncio
    import pathlib
    from saga_runtime import ToolRegistry

    registry = ToolRegistry()


    @registry.tool
    class Slow:
        async def execute(self, name: str) -> dict:
            pathlib.Path(__file__).with_name(name + ".started").touch()
            await asyncio.sleep(1.0)
            return {"done": name}

        async def compensate(self, result: object) -> None:
            return None
    """
)


def test_a_takeover_after_sigterm_names_the_worker_that_released_the_saga(tmp_path: Path) -> None:
    """A saga a SIGTERMed worker let go: the next worker's takeover says "released" by that worker (not None)."""
    (tmp_path / "slow_tools.py").write_text(SLOW_TOOLS)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    sys.path.insert(0, str(tmp_path))
    try:
        import slow_tools  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    plan = [{"tool": "Slow", "args": {"name": n}, "id": n} for n in ("one", "two")]

    async def submit() -> None:
        async with open_store(db) as store:
            await SagaExecutor(slow_tools.registry, store).submit(plan, saga_id="deploy")

    asyncio.run(submit())
    env = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}
    command = [str(SCRIPT), "--db", db, "worker", "--tools", "slow_tools:registry", "--executor-id", "worker-a"]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "one.started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err

    async def take_over() -> tuple[SagaStatus, list[tuple[str, str | None, str]]]:
        async with open_store(db) as store:
            executor = SagaExecutor(slow_tools.registry, store, executor_id="worker-b")
            [result] = await executor.recover()
            return result.status, [(t.by, t.from_owner, t.reason) for t in result.takeovers]

    status, takeovers = asyncio.run(take_over())
    assert status is SagaStatus.SUCCESS
    assert takeovers == [("worker-b", "worker-a", "released")]


HUNG_TOOLS = textwrap.dedent(
    """
    import asyncio
    import pathlib
    from saga_runtime import ToolRegistry

    registry = ToolRegistry()
    HERE = pathlib.Path(__file__).parent


    @registry.tool
    class Hang:
        async def execute(self, name: str) -> dict:
            (HERE / "execute.started").touch()
            await asyncio.Event().wait()  # no timeout: hangs for good
            return {}

        async def reconcile(self, name: str) -> dict:
            (HERE / "reconcile.started").touch()
            await asyncio.Event().wait()
            return {}

        async def compensate(self, result: object) -> None:
            return None
    """
)


def _wait_for(path: Path, seconds: float = 30) -> None:
    """Wait until `path` exists (a tool touched it); fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def test_hung_tool_code_never_strands_a_saga(tmp_path: Path) -> None:
    """SIGTERM cuts a hung call after compensation_timeout (said); a cancel cuts the next worker's hung reconcile."""
    (tmp_path / "hung_tools.py").write_text(HUNG_TOOLS)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    sys.path.insert(0, str(tmp_path))
    try:
        import hung_tools  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))

    async def submit() -> None:
        async with open_store(db) as store:
            await SagaExecutor(hung_tools.registry, store).submit(
                [{"tool": "Hang", "args": {"name": "x"}}], saga_id="stuck"
            )

    asyncio.run(submit())
    env = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}

    def worker(name: str) -> subprocess.Popen[str]:
        command = [str(SCRIPT), "--db", db, "worker", "--tools", "hung_tools:registry", "--executor-id", name]
        command += ["--compensation-timeout", "1", "--lease-timeout", "3", "--interval", "0.05"]
        return subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    first = worker("worker-a")
    second = None
    try:
        _wait_for(tmp_path / "execute.started")
        began = time.monotonic()
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        assert time.monotonic() - began < 20  # bounded by the 1 s compensation_timeout, not the hung call
        assert "saga stuck" in err
        assert "cut short" in err
        second = worker("worker-b")  # its reconcile of the unknown step hangs in turn
        _wait_for(tmp_path / "reconcile.started")
        assert cli("cancel", "stuck", "--reason", "hung", "--by", "ops", db=db).code == 0
        deadline = time.monotonic() + 30
        while not asyncio.run(_statuses(db, ["stuck"]))["stuck"].is_terminal:
            assert time.monotonic() < deadline, "the cancel did not end the saga"
            time.sleep(0.1)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
    assert second is not None
    assert second.returncode == 0

    async def record() -> Any:
        async with open_store(db) as store:
            return await store.get_saga("stuck")

    result = asyncio.run(record())
    assert result.status in (SagaStatus.COMPENSATED, SagaStatus.COMPENSATION_FAILED)
    assert (result.cancel.by, result.cancel.outcome) == ("ops", "cancelled")
    assert [(t.by, t.from_owner, t.reason) for t in result.takeovers] == [("worker-b", "worker-a", "released")]


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
