"""Queues on PostgreSQL: a decision waking the idle worker, and claims as finished history grows.

Decision: one worker process serves the queue (`serve()`'s defaults: a 0.5 s interval, recovery rounds every
15 s), idle. This process submits a two-step saga whose second step needs approval; once the saga is WAITING (and
the worker idle again), it approves the step with a `SagaAdmin` that has no tools (the decision is recorded only),
and the worker's tool notes when the step starts. Reported: the p50 and p99 of the decision (its `decided_at`,
stamped as it is written) -> the step started. Without a wake-up a worker would take it at its next recovery
round (up to 15 s). Its floor, measured in the same run, is the raw driver's NOTIFY -> listener callback (p50).

Claims with history: one worker process starts `CLAIMS` queued one-step sagas from a rate-limited queue
(`RateLimit(100_000, per=60)`: every claim counts the queue's starts of the last minute), from two databases in
turn: one holding no other saga, one holding `HISTORY` finished sagas of the same queue (inserted with SQL, started
over the hours before, then ANALYZE, as autovacuum would), in turn (ABBA). Reported: sagas started per second
(first start to last, the median of the rounds) with each history, and their ratio.

`python -m benchmarks.queues [--quick]` runs only this.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._floors import Unreachable, database
from benchmarks._report import Target, value
from benchmarks.fleet import _notify_floor
from saga_runtime import SagaAdmin, SagaExecutor, SagaStatus, StepContext, ToolRegistry, open_store

ROOT = Path(__file__).resolve().parent.parent
CLAIMS = 500
HISTORY = 200_000
RATIO = "with history / without"

registry = ToolRegistry()


def _mark(ctx: StepContext, what: str) -> None:
    """Note when `what` started (to the file $SAGA_BENCH_MARKS) in one small O_APPEND write."""
    path = os.environ.get("SAGA_BENCH_MARKS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{ctx.saga_id} {what} {time.time():.6f}\n".encode())
        finally:
            os.close(fd)


@registry.tool
class Mark:
    """Note that the step started."""

    async def execute(self, n: int, ctx: StepContext) -> int:
        _mark(ctx, "mark")
        return n

    async def compensate(self, result: int | None) -> None:
        return None


@registry.tool(approval=True)
class Payout:
    """A step a person allows first; notes when it starts."""

    async def execute(self, amount: int, ctx: StepContext) -> int:
        _mark(ctx, "payout")
        return amount

    async def compensate(self, result: int | None) -> None:
        return None


TARGETS = [
    Target(
        "queues, PostgreSQL, idle worker: approval decided -> the next step starts p50",
        20,
        "ms",
        value("p50_ms", workload="approval"),
    ),
    Target(
        "queues, PostgreSQL, rate-limited queue: claims/s with 200k finished sagas over with none",
        0.9,
        "x",
        value(RATIO, workload="claims"),
        at_least=True,
    ),
]

_WORKER = """
import asyncio, sys
from saga_runtime import Queue, RateLimit, SagaExecutor, open_store
from benchmarks.queues import registry

async def main():
    queue = Queue("bench", rate_limit=RateLimit(100_000, per=60.0)) if sys.argv[2] == "limited" else Queue("bench")
    async with open_store(sys.argv[1]) as store:
        print("ready", flush=True)
        await SagaExecutor(registry, store=store).serve(queues=[queue])

asyncio.run(main())
"""


@dataclass
class Row:
    """One workload's result."""

    workload: str
    store: str = "postgresql"
    sagas: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    floor_ms: float | None = None
    history: int | None = None
    claims_without: float | None = None
    claims_with: float | None = None
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        def r(x: float | None, n: int = 2) -> float | None:
            return None if x is None else round(x, n)

        approval = self.workload == "approval"
        ratio = self._claims_ratio
        if approval:
            ratio = None if not (self.p50_ms and self.floor_ms) else self.p50_ms / self.floor_ms
        return {
            "workload": self.workload,
            "store": self.store,
            "sagas": self.sagas,
            "p50_ms": r(self.p50_ms),
            "p99_ms": r(self.p99_ms),
            # The floor: the raw NOTIFY -> listener p50 (ms), or the claims/s with no history.
            "floor": r(self.floor_ms, 3) if approval else r(self.claims_without, 1),
            "floor is": "raw NOTIFY -> listener, ms" if approval else "claims/s with no history",
            "ratio": r(ratio, 3),
            "finished sagas in history": self.history,
            "claims/s without": r(self.claims_without, 1),
            "claims/s with": r(self.claims_with, 1),
            RATIO: r(self._claims_ratio, 3),
            "skipped": self.skipped,
        }

    @property
    def _claims_ratio(self) -> float | None:
        if not (self.claims_with and self.claims_without):
            return None
        return self.claims_with / self.claims_without


def _marks(path: Path, what: str) -> dict[str, float]:
    if not path.exists():
        return {}
    found: dict[str, float] = {}
    for line in path.read_text().splitlines():
        saga_id, kind, at = line.split(" ")
        if kind == what:
            found.setdefault(saga_id, float(at))
    return found


class _Worker:
    """One worker process serving the queue `bench` of `url`."""

    def __init__(self, url: str, marks: Path, limited: bool) -> None:
        self._args = (url, "limited" if limited else "plain")
        self._env = {**os.environ, "SAGA_BENCH_MARKS": str(marks), "PYTHONPATH": str(ROOT)}
        self._child: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> _Worker:
        self._child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WORKER, *self._args, env=self._env, stdout=asyncio.subprocess.PIPE
        )
        assert self._child.stdout is not None
        assert (await self._child.stdout.readline()).strip() == b"ready"
        await asyncio.sleep(1.0)  # past its first rounds: idle, listening
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._child is not None:
            if self._child.returncode is None:
                self._child.terminate()
            await self._child.wait()


async def _approvals(url: str, sagas: int, folder: Path) -> Row:
    """Return the p50 and p99 of approve() -> the approved step starting in an idle worker."""
    marks = folder / "marks-approval.txt"
    latencies = []
    async with open_store(url) as store, _Worker(url, marks, limited=False):
        executor, admin = SagaExecutor(registry, store=store), SagaAdmin(store)
        for n in range(sagas):
            plan = [
                {"tool": "Mark", "args": {"n": n}, "id": "mark"},
                {"tool": "Payout", "args": {"amount": n}, "id": "payout"},
            ]
            handle = await executor.submit(plan, saga_id=f"approve-{n}", queue="bench")
            deadline = time.monotonic() + 30
            while await handle.status() is not SagaStatus.WAITING:
                assert time.monotonic() < deadline, f"{handle.saga_id} never waited"
                await asyncio.sleep(0.005)
            await asyncio.sleep(random.uniform(0.05, 0.1))  # the worker goes idle again
            result = await admin.approve(handle.saga_id, "payout", by="bench")
            decided_at = result.approvals[0].decided_at  # stamped as the decision is written
            assert decided_at is not None
            decided = decided_at.timestamp()
            while handle.saga_id not in (found := _marks(marks, "payout")):
                assert time.time() < decided + 30, f"{handle.saga_id}: the approved step never started"
                await asyncio.sleep(0.002)
            latencies.append((found[handle.saga_id] - decided) * 1000)
    latencies.sort()
    return Row(
        "approval",
        sagas=sagas,
        p50_ms=statistics.median(latencies),
        p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        floor_ms=await _notify_floor(url, 50),
    )


async def _history(url: str, count: int) -> None:
    """Store `count` finished sagas of the queue `bench`, started over the hours before now (then ANALYZE)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO sagas (saga_id, kind, status, metadata, created_at, updated_at, finished_at, queue, "
            "priority, started_at) SELECT 'history-' || g, 'plan', 'SUCCESS', '{}', "
            "now() - interval '3 hours' + g * interval '20 ms', now() - interval '1 hour', "
            "now() - interval '1 hour', 'bench', 0, now() - interval '3 hours' + g * interval '20 ms' "
            "FROM generate_series(1, $1::int) g",
            count,
        )
        await conn.execute("ANALYZE sagas")
    finally:
        await conn.close()


async def _claim_round(url: str, count: int, folder: Path, tag: str) -> float:
    """Return the sagas per second one worker starts of `count` queued ones in the rate-limited queue."""
    marks = folder / f"marks-claims-{tag}.txt"
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store)
        for first in range(0, count, 50):
            ids = [f"claim-{tag}-{n}" for n in range(first, min(count, first + 50))]
            await asyncio.gather(
                *(executor.submit([{"tool": "Mark", "args": {"n": 0}}], saga_id=i, queue="bench") for i in ids)
            )
    async with _Worker(url, marks, limited=True):
        deadline = time.monotonic() + 120
        while len(_marks(marks, "mark")) < count and time.monotonic() < deadline:  # noqa: ASYNC110 - another process
            await asyncio.sleep(0.05)
    starts = sorted(_marks(marks, "mark").values())
    assert len(starts) == count, (len(starts), count)
    return (count - 1) / (starts[-1] - starts[0])


async def _claims(bare: str, full: str, count: int, history: int, rounds: int, folder: Path) -> Row:
    """Return the claims/s of one worker without history (`bare`) and with `history` finished sagas (`full`)."""
    async with open_store(full):
        pass  # the schema, then the history under it
    await _history(full, history)
    without: list[float] = []
    with_history: list[float] = []
    for n in range(rounds):  # in turn, ABBA, so a busy moment of the machine falls on both
        order = [(bare, without, "bare"), (full, with_history, "full")]
        for url, rates, tag in order[:: -1 if n % 2 else 1]:
            rates.append(await _claim_round(url, count, folder, f"{tag}-{n}"))
    return Row(
        "claims",
        sagas=count,
        history=history,
        claims_without=statistics.median(without),
        claims_with=statistics.median(with_history),
    )


async def _all(quick: bool) -> list[Row]:
    sagas, claims, rounds = (10, 150, 1) if quick else (50, CLAIMS, 4)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        try:
            async with database("postgresql") as url:
                approval = await _approvals(url, sagas, folder)
            async with database("postgresql") as bare, database("postgresql") as full:
                return [approval, await _claims(bare, full, claims, HISTORY, rounds, folder)]
        except Unreachable as exc:
            return [Row("approval", skipped=str(exc)), Row("claims", skipped=str(exc))]


def run(quick: bool = False) -> list[Row]:
    """Measure the decision wake-up and claims with history; `quick`: few sagas and one round."""
    return asyncio.run(_all(quick))


if __name__ == "__main__":
    from benchmarks._report import table

    print(table("queues", [item.as_dict() for item in run(quick="--quick" in sys.argv)]))
