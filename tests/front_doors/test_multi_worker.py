"""Four worker processes share 200 sagas on one PostgreSQL database while a killer SIGKILLs them, one a second.

Each worker runs `executor.serve()` and submits its share of the sagas with `run()`; a replacement worker started
after each kill submits the dead one's share again (finished sagas return their record, orphans whose lease ran
out are resumed or left to recovery). The tools write their effects to a ledger table of the same database, each
row in its own transaction, with the process id that wrote it.

The invariants, checked on the ledger against the records once every saga has ended:

- every saga is terminal: SUCCESS when its shipment goes through, COMPENSATED when it cannot;
- no doubled effect: an effect ("do") or undo of one idempotency key appears more than once only when the
  earlier rows were written by a process that was killed, i.e. by a run whose outcome could not be recorded
  (DESIGN.md invariant 4); a step recorded SUCCESS by a live worker is never executed again by another;
  and a step's effects never outnumber its recorded attempts (write-ahead, invariant 1);
- no orphaned effect: in a COMPENSATED saga every key that had an effect has an undo after its last effect, and a
  SUCCESS saga undid nothing.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import textwrap
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from orphans import planned_orphan
from worker_processes import WorkerProcesses

from saga_runtime import SagaStatus, open_store

pytestmark = pytest.mark.slow

SAGAS = 200
WORKERS = 4
KILLS = 5
LEASE = 1.0

TOOLS = textwrap.dedent(
    """
    import asyncio, os, random
    import asyncpg
    from saga_runtime import StepContext, ToolRegistry

    _pool = None

    async def ledger(ctx: StepContext, event: str) -> None:
        global _pool
        if _pool is None:
            _pool = await asyncpg.create_pool(os.environ["LEDGER_URL"], min_size=1, max_size=4)
        # Its own transaction (autocommit): once this returns, the effect is in the outside world for good.
        await _pool.execute(
            "INSERT INTO ledger (saga_id, step_id, idempotency_key, event, pid) VALUES ($1, $2, $3, $4, $5)",
            ctx.saga_id, ctx.step_id, ctx.idempotency_key, event, os.getpid(),
        )

    registry = ToolRegistry()

    class Effect:
        async def execute(self, what: str, ctx: StepContext) -> dict:
            await asyncio.sleep(random.uniform(0.03, 0.12))
            if what == "nowhere":
                raise LookupError("no carrier delivers to 'nowhere'")
            await ledger(ctx, "do")
            await asyncio.sleep(random.uniform(0.0, 0.05))  # the effect is out, its outcome not yet recorded
            return {"ref": ctx.idempotency_key}

        async def compensate(self, result, ctx: StepContext) -> None:
            await asyncio.sleep(random.uniform(0.01, 0.05))
            await ledger(ctx, "undo")

    for name in ("charge", "reserve", "ship"):
        registry.register(Effect(), name=name)
    """
)

WORKER = textwrap.dedent(
    """
    import asyncio, logging, os, sys
    from saga_runtime import SagaExecutor, SagaInProgressError, open_store
    from mw_tools import registry

    def plan_of(i: int) -> list:
        ship = "nowhere" if i % 5 == 0 else f"street {i}"
        return [
            {"id": "charge", "tool": "charge", "args": {"what": f"card {i}"}},
            {"id": "reserve", "tool": "reserve", "args": {"what": f"stock {i}"}},
            {"id": "ship", "tool": "ship", "args": {"what": ship}},
        ]

    async def main() -> None:
        form = f"%(created).3f {os.getpid()} %(message)s"
        logging.basicConfig(level=os.environ.get("WORKER_LOG", "WARNING"), format=form)
        url, index, total, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        lease = float(sys.argv[5])
        async with open_store(url) as store:
            name = f"worker-{index}-{os.getpid()}"
            executor = SagaExecutor(registry, store=store, executor_id=name, lease_timeout=lease)
            serving = asyncio.create_task(executor.serve(interval=lease / 4))
            gate = asyncio.Semaphore(5)

            async def one(i: int) -> None:
                async with gate:
                    try:
                        await executor.run(plan_of(i), saga_id=f"saga-{i:03d}")
                    except SagaInProgressError:
                        pass  # a dead worker's saga whose lease is still alive: recovery takes it later
                    except Exception as exc:
                        print(f"saga-{i:03d}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

            await asyncio.gather(*(one(i) for i in range(index, total, workers)))
            await serving

    asyncio.run(main())
    """
)


def plan_fails(i: int) -> bool:
    """Tell whether saga i cannot ship (and so compensates)."""
    return i % 5 == 0


@pytest.fixture
def postgres_database(postgres_databases: object) -> str:
    """Return the URL of a fresh PostgreSQL database of the session."""
    url: str = postgres_databases.create()  # type: ignore[attr-defined]
    return url


@pytest.fixture
def worker_dir(tmp_path: Path) -> Path:
    """Return a folder holding the tools module and the worker script."""
    (tmp_path / "mw_tools.py").write_text(TOOLS)
    (tmp_path / "worker.py").write_text(WORKER)
    return tmp_path


class Fleet(WorkerProcesses):
    """The worker processes of the test; every one still alive is killed at the end."""

    def __init__(self, folder: Path, url: str) -> None:
        super().__init__(folder)
        self.url = url
        self.env = {**os.environ, "LEDGER_URL": url, "PYTHONPATH": str(folder)}

    def start(self, index: int) -> None:
        """Start (or restart) the worker of slot `index`."""
        arguments = [self.url, str(index), str(SAGAS), str(WORKERS), str(LEASE)]
        self.spawn(index, [sys.executable, str(self.folder / "worker.py"), *arguments], env=self.env)


@pytest.fixture
def fleet(worker_dir: Path, postgres_database: str) -> Iterator[Fleet]:
    """Return the fleet of workers on the test's database; stopped at the end."""
    workers = Fleet(worker_dir, postgres_database)
    try:
        yield workers
    finally:
        workers.stop_all()


async def test_four_workers_share_200_sagas_under_sigkill(fleet: Fleet, postgres_database: str) -> None:
    """All 200 sagas end terminal, and the ledger shows no doubled and no orphaned effect (see module docstring)."""
    import asyncpg

    async with open_store(postgres_database) as store:  # creates the schema before the workers race to
        conn = await asyncpg.connect(postgres_database)
        try:
            await conn.execute(
                "CREATE TABLE ledger (id BIGSERIAL PRIMARY KEY, saga_id TEXT, step_id TEXT, idempotency_key TEXT, "
                "event TEXT, pid INTEGER, at TIMESTAMPTZ DEFAULT clock_timestamp())"
            )
            for index in range(WORKERS):
                fleet.start(index)
            rng = random.Random(4)
            for _ in range(KILLS):
                await asyncio.sleep(rng.uniform(0.8, 1.2))
                index = rng.randrange(WORKERS)
                fleet.kill(index)
                fleet.start(index)  # a replacement: serves, and submits the dead worker's share again
            deadline = time.monotonic() + 35
            while time.monotonic() < deadline:
                summaries = await store.list_sagas(limit=1000)
                if len(summaries) == SAGAS and all(s.status.is_terminal for s in summaries):
                    break
                await asyncio.sleep(0.25)
            fleet.stop_all()

            summaries = await store.list_sagas(limit=1000)
            assert len(summaries) == SAGAS, fleet.errors()
            unfinished = [(s.saga_id, s.status.value) for s in summaries if not s.status.is_terminal]
            assert unfinished == [], fleet.errors()
            for summary in summaries:
                expected = SagaStatus.COMPENSATED if plan_fails(int(summary.saga_id[5:])) else SagaStatus.SUCCESS
                assert summary.status is expected, summary

            rows = await conn.fetch("SELECT saga_id, step_id, idempotency_key, event, pid FROM ledger ORDER BY id")
        finally:
            await conn.close()

        events: dict[tuple[str, str], list[int]] = defaultdict(list)  # (key, event) -> pids, in order
        step_of = {}
        for row in rows:
            events[(row["idempotency_key"], row["event"])].append(row["pid"])
            step_of[row["idempotency_key"]] = f"{row['saga_id']}/{row['step_id']}"
        doubled = [
            (step_of[key], event, pids)
            for (key, event), pids in events.items()
            if any(pid not in fleet.killed for pid in pids[:-1])
        ]
        assert doubled == [], f"effects repeated by processes that were not killed: {doubled}"

        orphans = []
        for summary in summaries:
            result = await store.get_saga(summary.saga_id)
            assert result is not None
            for step in result.steps:
                key = step.idempotency_key
                dos = [i for i, r in enumerate(rows) if r["idempotency_key"] == key and r["event"] == "do"]
                undos = [i for i, r in enumerate(rows) if r["idempotency_key"] == key and r["event"] == "undo"]
                assert len(dos) <= step.attempts, (summary.saga_id, step)  # no effect without its written intent
                if result.status is SagaStatus.SUCCESS:
                    assert undos == [], (summary.saga_id, step)
                elif dos and not any(u > dos[-1] for u in undos):
                    orphans.append((summary.saga_id, step.step_id))
        assert orphans == [], f"effects never undone in COMPENSATED sagas: {orphans}"
        print(f"\n{len(rows)} ledger rows, {len(fleet.killed)} workers killed, {len(events)} distinct key/events")


async def test_a_saga_waiting_in_a_claimed_batch_is_not_run_by_two_executors() -> None:
    """Executor A claims two orphans at once and is busy with the first; B takes the second: it must run once."""
    from saga_runtime import MemoryStore, SagaExecutor, StepContext, ToolRegistry
    from saga_runtime._records import StepRow, StepStatus, idempotency_key, now, seal_all

    calls: list[str] = []
    registry = ToolRegistry()

    @registry.tool
    class Slow:
        async def execute(self, seconds: float, ctx: StepContext) -> None:
            calls.append(ctx.saga_id)
            await asyncio.sleep(seconds)

    store = MemoryStore()
    for saga_id, seconds in (("first", 1.0), ("second", 0.2)):
        started = now()
        saga = planned_orphan(
            saga_id, [{"id": "s", "tool": "Slow", "args": {"seconds": seconds}}], registry, started=started
        )
        row = StepRow(saga_id, 0, "s", 0, "Slow", {"seconds": seconds}, idempotency_key(saga_id, "s"))
        row.status, row.attempts, row.started_at = StepStatus.RUNNING, 1, started
        seal_all([row], None)
        await store.create_saga(saga, [row])
        await asyncio.sleep(0.01)  # "first" is the older: claimed and driven first
    # One at a time, so that "second" waits its turn in the batch A claimed.
    a = SagaExecutor(registry, store=store, executor_id="a", lease_timeout=0.3, recovery_concurrency=1)
    b = SagaExecutor(registry, store=store, executor_id="b", lease_timeout=0.3)
    first = asyncio.create_task(a.recover())
    await asyncio.sleep(0.5)  # A is still busy with "first"; the lease it took on "second" ran out
    assert [r.saga_id for r in await b.recover()] == ["second"]
    await first
    assert calls.count("second") == 1, calls
