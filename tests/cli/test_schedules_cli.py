"""`saga-runtime schedules` and `schedule pause|resume|delete`, and real `saga-runtime worker` processes submitting
each tick of a schedule once, against a SQLite file."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from worker_processes import WorkerProcesses

from saga_runtime import DynamicSaga, SagaExecutor, SagaStatus, ToolRegistry, open_store
from saga_runtime._records import tick_id

from .test_cli import cli, run_sync

SCRIPT = Path(sys.executable).with_name("saga-runtime")

registry = ToolRegistry()


@registry.tool
class Report:
    async def execute(self, name: str) -> dict[str, str]:
        return {"name": name}


@registry.saga
async def send_digest(saga: DynamicSaga, team: str) -> None:
    """A saga function a schedule names."""
    await saga.call("Report", name=team)


async def _store_schedules(db: str) -> None:
    async with open_store(db) as store:
        executor = SagaExecutor(registry, store)
        report = [{"tool": "Report", "args": {"name": "nightly"}}]
        await executor.schedule("nightly", report, cron="0 2 * * *", timezone="Europe/Paris", queue="reports")
        await executor.schedule("digest", "send_digest", every=90, args={"team": "ops"})


@pytest.mark.timeout(240)  # seven runs of the console script, on a busy machine
def test_schedules_are_listed_paused_resumed_and_deleted(tmp_path: Path) -> None:
    """`schedules` lists each schedule; `schedule pause|resume|delete NAME` steers one; an unknown name exits 1."""
    db = f"sqlite:///{tmp_path / 'sagas.db'}"
    run_sync(lambda: _store_schedules(db))
    listed = cli("schedules", db=db)
    assert listed.code == 0, listed.err
    for text in ("nightly", "plan (1 step)", "0 2 * * *", "Europe/Paris", "reports", "digest", "send_digest", "90s"):
        assert text in listed.out, text
    paused = cli("schedule", "pause", "digest", db=db)
    assert paused.code == 0, paused.err
    assert "paused" in paused.out
    shown = {row["name"]: row for row in cli("schedules", "--json", db=db).json()}
    assert shown["digest"]["paused"] is True
    assert shown["digest"]["args"] == {"team": "ops"}
    assert (shown["nightly"]["paused"], shown["nightly"]["cron"], shown["nightly"]["last_tick"]) == (
        False,
        "0 2 * * *",
        None,
    )
    resumed = cli("schedule", "resume", "digest", db=db)
    assert resumed.code == 0, resumed.err
    assert "next tick" in resumed.out
    deleted = cli("schedule", "delete", "nightly", db=db)
    assert deleted.code == 0, deleted.err
    assert [row["name"] for row in cli("schedules", "--json", db=db).json()] == ["digest"]
    unknown = cli("schedule", "delete", "nightly", db=db)
    assert unknown.code == 1
    assert "no schedule 'nightly'" in unknown.err


WORKER_TOOLS = textwrap.dedent(
    """
    import os
    from pathlib import Path
    from saga_runtime import Queue, StepContext, ToolRegistry

    registry = ToolRegistry()
    QUEUES = [Queue("reports")]
    LOG = Path(__file__).with_name("effects.log")


    @registry.tool
    class Report:
        async def execute(self, name: str, ctx: StepContext) -> dict:
            with LOG.open("a") as log:
                log.write(f"{ctx.saga_id} {os.getpid()}\\n")
            return {"name": name}
    """
)


async def _backdated(db: str, names: list[str]) -> list[str]:
    """Store a schedule per name, each due an hour ago; return the saga ids of their due ticks."""
    async with open_store(db) as store:
        executor = SagaExecutor(registry, store)
        ids = []
        for name in names:
            stored = await executor.schedule(
                name, [{"tool": "Report", "args": {"name": name}}], every=3600, queue="reports"
            )
            due = replace(stored, next_tick=stored.next_tick - timedelta(hours=1))
            await store.put_schedule(due)
            ids.append(tick_id(name, due.next_tick))
        return ids


async def _finished(db: str, ids: list[str]) -> bool:
    async with open_store(db) as store:
        for saga_id in ids:
            loaded = await store.load_saga(saga_id)
            if loaded is None or loaded[0].status is not SagaStatus.SUCCESS:
                return False
        return True


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_three_worker_processes_submit_each_tick_once(tmp_path: Path) -> None:
    """Three `saga-runtime worker` processes on one store submit and run one saga per due tick, none twice."""
    (tmp_path / "worker_tools.py").write_text(WORKER_TOOLS)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    names = [f"report-{index:02}" for index in range(15)]
    ids = asyncio.run(_backdated(db, names))
    env = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}
    command = [str(SCRIPT), "--db", db, "worker", "--tools", "worker_tools:registry", "--queues", "worker_tools:QUEUES"]
    fleet = WorkerProcesses(tmp_path)
    try:
        for slot in range(3):
            fleet.spawn(slot, command, cwd=tmp_path, env=env)
        deadline = time.monotonic() + 120
        while not asyncio.run(_finished(db, ids)):
            assert time.monotonic() < deadline, fleet.errors()
            time.sleep(0.2)
        # A worker slow to start (a loaded machine) may not have its SIGTERM handler yet when the others did every
        # saga: each is stopped once it says it serves (its handlers are in place by then).
        while fleet.errors().count(": serving ") < len(fleet.slots):
            assert time.monotonic() < deadline, fleet.errors()
            time.sleep(0.2)
        for process in fleet.slots.values():
            process.send_signal(signal.SIGTERM)
        for process in fleet.slots.values():
            process.wait(timeout=60)
    finally:
        fleet.stop_all()
    listed = cli("list", "--json", db=db).json()
    assert sorted(summary["saga_id"] for summary in listed) == sorted(ids)
    effects = (tmp_path / "effects.log").read_text().split("\n")
    assert sorted(line.split()[0] for line in effects if line) == sorted(ids)  # each tick's saga ran once
    assert all(process.returncode == 0 for process in fleet.slots.values()), fleet.errors()
    moved = cli("schedules", "--json", db=db).json()
    assert {row["name"] for row in moved if row["last_tick"] is not None} == set(names)
