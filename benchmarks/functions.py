"""Saga functions (`@registry.saga`, API.md §18): their cost against plans, resume, wake-up, and sleeping sagas.

Four workloads, each against a floor measured in the same run:

- In memory: a saga function making 10 calls of a no-op tool, against a plan of the same 10 steps run by the same
  executor (rounds interleaved, medians); `ratio` is the function's time over the plan's.
- Resume (PostgreSQL): `ORPHANS` (1,000) orphaned 10-call plans, and as many orphaned 10-call saga functions, are
  written straight into the store as a dead executor leaves them (four calls SUCCESS, the fifth of unknown outcome,
  lease long expired; a plan has its five last steps pending, a function has not made those calls yet), and one
  executor's `recover()` drives each batch to SUCCESS, each batch in a database of its own. `RESUME_ROUNDS` rounds,
  each a batch of both kinds back to back (which goes first alternates): a shared machine's load moves both of a
  round alike. Reported: the median sagas per second of each, `ratio` the median of the rounds' function/plan
  ratios, and how many recorded calls a tool was called for again (counted by idempotency key: a call recorded
  SUCCESS is served from the record, never run again; the unknown one runs again once, under its key).
- Wake-up (PostgreSQL): a saga function waits in `saga.recv("go")` (no timeout: released, WAITING, no lease); an
  idle worker process serves the store; this process sends the message and the tool of the function's next call
  notes when it starts. Reported: p50 and p99 of send -> next call start; the floor is the raw driver's NOTIFY ->
  listener callback on two asyncpg connections.
- Sleepers (PostgreSQL): one worker process (`concurrency=25`) starts `SLEEPERS` (10,000) queued saga functions that
  each `saga.sleep()` an hour (released: WAITING). Reported: how many are WAITING, how many of them hold a lease or
  an owner (none should), the sagas the worker holds RUNNING meanwhile, the worker's RSS (VmRSS of
  /proc/<pid>/status) idle (after a warm-up of 50 short saga functions) and once every sleeper sleeps, the CPU the
  worker and its database backends use while they sleep and the database's transactions per second meanwhile (an
  idle worker asks only for the sagas due now, by an index: it should not grow with the sleepers), and how long a
  saga submitted then takes to finish (the worker has its slots free).

The resume, wake-up and sleeper workloads run on a PostgreSQL database created for the run
(SAGA_RUNTIME_BENCH_POSTGRES_URL); an unreachable server is reported as skipped. `python -m benchmarks.functions
[--quick]` runs only these.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks._floors import Unreachable, database
from benchmarks._report import Target, value
from benchmarks.fleet import _backends, _cpu_seconds, _notify_floor, _transactions
from saga_runtime import DynamicSaga, SagaExecutor, SagaStatus, StepContext, ToolRegistry, open_store
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaRow, StepRow, StepStatus, chain_head, idempotency_key, now, seal_all

ROOT = Path(__file__).resolve().parent.parent
STEPS = 10
ORPHANS = 1000
RESUME_ROUNDS = 3  # with --quick too (of 50 orphans each): a ratio of one round is mostly the machine's noise
SLEEPERS = 10_000
HOUR = 3600.0
ASLEEP_SECONDS = 5.0  # how long the worker's CPU and the database's transactions are counted with every sleeper asleep
MIB = 1024 * 1024
IN_MEMORY = "in memory: 10-call saga function vs the same 10 calls as a plan"
RESUME = "resume: orphaned 10-call sagas recovered by one executor, PostgreSQL"
WAKE = "wake-up: send -> the waiting saga's next call starts, 1 idle worker, PostgreSQL"
SLEEP = "sleepers: saga functions sleeping an hour at once, 1 worker (concurrency 25), PostgreSQL"

registry = ToolRegistry()
# Each call of Step in this process, by idempotency key: a recorded call run again shows here.
calls: Counter[str] = Counter()


@registry.tool
class Noop:
    """Do nothing, asynchronously."""

    async def execute(self, n: int) -> int:
        return n

    async def compensate(self, result: int | None) -> None:
        return None


@registry.tool
class Step:
    """Count the call under its idempotency key."""

    async def execute(self, n: int, ctx: StepContext) -> int:
        calls[ctx.idempotency_key] += 1
        return n

    async def compensate(self, result: int | None) -> None:
        return None


@registry.tool
class Mark:
    """Note when the call started (in a worker: to the file $SAGA_BENCH_MARKS), then return."""

    async def execute(self, n: int, ctx: StepContext) -> int:
        path = os.environ.get("SAGA_BENCH_MARKS")
        if path:  # one small O_APPEND write: lines never interleave
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{ctx.saga_id} {time.time():.6f}\n".encode())
            finally:
                os.close(fd)
        return n

    async def compensate(self, result: int | None) -> None:
        return None


@registry.saga
async def ten_calls(saga: DynamicSaga) -> None:
    """The in-memory workload: 10 calls of Noop, one after another."""
    for n in range(STEPS):
        await saga.call("Noop", n=n)


@registry.saga
async def ten_steps(saga: DynamicSaga) -> None:
    """The resume workload: 10 calls of Step, one after another."""
    for n in range(STEPS):
        await saga.call("Step", n=n)


@registry.saga
async def woken(saga: DynamicSaga, n: int) -> None:
    """The wake-up workload: wait for a message on "go", then call Mark."""
    await saga.recv("go")
    await saga.call("Mark", n=n)


@registry.saga
async def sleeper(saga: DynamicSaga, seconds: float) -> None:
    """The sleepers workload: sleep, then call Noop."""
    await saga.sleep(seconds)
    await saga.call("Noop", n=0)


PLAN = [{"id": f"s{n}", "tool": "Noop", "args": {"n": n}} for n in range(STEPS)]
STEP_PLAN = [{"id": f"s{n}", "tool": "Step", "args": {"n": n}} for n in range(STEPS)]

TARGETS = [
    Target("saga functions, in memory: 10-call function / same 10 calls as a plan", 1.1, "x", value("ratio")),
]
RESUME_TARGETS = [
    Target(
        "saga functions, PostgreSQL: orphans resumed, function sagas/s / plan sagas/s",
        1.0,
        "x",
        value("ratio", orphans="saga function"),
        at_least=True,
    ),
    Target(
        "saga functions, PostgreSQL: recorded calls run again on resume",
        0,
        "calls",
        value("recorded calls run again", orphans="saga function"),
    ),
]
WAKE_TARGETS = [Target("saga functions, PostgreSQL: send -> next call starts, p50", 20, "ms", value("p50_ms"))]
SLEEP_TARGETS = [
    Target("saga functions, PostgreSQL: sleepers' worker RSS over its idle RSS", 10, "MiB", value("rss_growth_mib")),
    Target(
        "saga functions, PostgreSQL: sleepers holding a lease, an owner or a worker slot",
        0,
        "sagas",
        value("holding lease, owner or slot"),
    ),
]


# -- in memory


@dataclass
class InMemory:
    """The in-memory workload's result."""

    rounds: int
    plan_us: float
    function_us: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": f"{STEPS} calls of a no-op tool",
            "rounds": self.rounds,
            "floor: plan us/saga": round(self.plan_us, 1),
            "function us/saga": round(self.function_us, 1),
            "ratio": round(self.function_us / self.plan_us, 3),
        }


async def _in_memory(rounds: int) -> InMemory:
    executor = SagaExecutor(registry)
    plans, functions = [], []
    for n in range(rounds + rounds // 10):  # the first tenth warms up, uncounted
        started = time.perf_counter()
        result = await executor.run(PLAN)
        plan = time.perf_counter() - started
        assert result.status is SagaStatus.SUCCESS, result.error
        started = time.perf_counter()
        result = await executor.run(ten_calls)
        function = time.perf_counter() - started
        assert result.status is SagaStatus.SUCCESS, result.error
        if n >= rounds // 10:
            plans.append(plan)
            functions.append(function)
    # Medians: a stray GC pause or scheduler hiccup moves the mean, not the median.
    return InMemory(rounds, statistics.median(plans) * 1e6, statistics.median(functions) * 1e6)


def in_memory(quick: bool = False) -> list[InMemory]:
    """Measure a 10-call saga function against the same calls as a plan; `quick` runs few rounds."""
    return [asyncio.run(_in_memory(50 if quick else 3000))]


# -- resume


@dataclass
class Resume:
    """The resume workload's result, for one kind of orphan."""

    orphans: str
    sagas: int = 0  # per round
    rounds: int = 0
    sagas_per_s: float | None = None  # the median of the rounds'
    plan_per_s: float | None = None
    ratio: float | None = None  # the median of the rounds' ratios (this kind's rate over the plans')
    run_again: int | None = None  # over every round
    unknown_runs: int | None = None  # the fewest of a round (each round should run all of its `sagas`)
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "orphans": self.orphans,
            "sagas": self.sagas,
            "rounds": self.rounds,
            "recovered sagas/s": None if self.sagas_per_s is None else round(self.sagas_per_s, 1),
            "floor: plan sagas/s": None if self.plan_per_s is None else round(self.plan_per_s, 1),
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "recorded calls run again": self.run_again,
            "unknown calls run again once": self.unknown_runs,
            "skipped": self.skipped,
        }


def _steps(saga_id: str, ids: list[str], statuses: list[StepStatus]) -> list[StepRow]:
    """Return the step rows a dead executor left: SUCCESS ones with their results, started ones, pending ones."""
    started = now() - timedelta(minutes=5)
    rows = []
    for seq, (step_id, status) in enumerate(zip(ids, statuses, strict=True)):
        group = seq  # a plan's steps here are one to a group; a function's calls are too
        row = StepRow(saga_id, seq, step_id, group, "Step", {"n": seq}, idempotency_key(saga_id, step_id))
        row.status = status
        if status is not StepStatus.PENDING:
            row.attempts, row.started_at = 1, started
        if status is StepStatus.SUCCESS:
            row.result, row.finished_at = seq, started
        rows.append(row)
    seal_all(rows, None)
    return rows


def _orphan(saga_id: str, function: bool) -> tuple[SagaRow, list[StepRow]]:
    """Return a saga a dead executor left, lease expired: four calls SUCCESS, the fifth of unknown outcome; a plan
    has its last five steps pending, a saga function has not made those calls yet."""
    started = now() - timedelta(minutes=5)
    fields: dict[str, Any] = {
        "saga_id": saga_id,
        "status": SagaStatus.RUNNING,
        "created_at": started,
        "updated_at": started,
        "owner": "dead-executor",
        "lease_expires_at": started,
    }
    if function:
        statuses = [StepStatus.SUCCESS] * 4 + [StepStatus.RUNNING]
        rows = _steps(saga_id, [f"Step-{seq}" for seq in range(5)], statuses)
        plan = {"function": "ten_steps", "version": "1", "args": {}}
        return SagaRow(kind="dynamic", plan=plan, plan_hash=chain_head(rows), **fields), rows
    planned = build_plan(STEP_PLAN, registry)
    statuses = [StepStatus.SUCCESS] * 4 + [StepStatus.RUNNING] + [StepStatus.PENDING] * 5
    rows = _steps(saga_id, [step.step_id for step in planned.steps], statuses)
    return SagaRow(kind="plan", plan=planned.to_json(), plan_hash=planned.digest, **fields), rows


async def _recover(url: str, count: int, function: bool) -> tuple[float, int, int]:
    """Return orphans recovered per second, the recorded SUCCESS calls run again, the unknown calls run once."""
    prefix = "fn" if function else "plan"
    async with open_store(url) as store:
        orphans = [_orphan(f"{prefix}-{i:05d}", function) for i in range(count)]
        for saga, rows in orphans:
            await store.create_saga(saga, rows)
        assert await store.verify_saga(orphans[0][0].saga_id), "the orphan written is not a consistent record"
        calls.clear()
        executor = SagaExecutor(registry, store=store)
        started = time.perf_counter()
        results = await executor.recover()
        elapsed = time.perf_counter() - started
        assert len(results) == count, len(results)
        assert all(r.status is SagaStatus.SUCCESS for r in results), {r.status for r in results}
    again = unknown = 0
    for saga, rows in orphans:
        for row in rows:
            if row.status is StepStatus.SUCCESS:
                again += calls[row.idempotency_key]
            elif row.status is StepStatus.RUNNING and calls[row.idempotency_key] == 1:
                unknown += 1
        keys = {idempotency_key(saga.saga_id, f"Step-{seq}" if function else f"s{seq}") for seq in range(STEPS)}
        assert all(calls[key] <= 1 for key in keys), saga.saga_id
    return count / elapsed, again, unknown


async def _resume(count: int, rounds: int) -> list[Resume]:
    rates: dict[bool, list[float]] = {False: [], True: []}
    again = {False: 0, True: 0}
    unknown = {False: count, True: count}
    ratios: list[float] = []
    try:
        for n in range(rounds):
            # Each kind goes first as often as the other: neither gains from a warmer database or a quieter minute.
            for function in (False, True) if n % 2 == 0 else (True, False):
                # Each batch in a database of its own: none inherits another's dead rows (and vacuum).
                async with database("postgresql") as url:
                    rate, run_again, unknown_runs = await _recover(url, count, function)
                rates[function].append(rate)
                again[function] += run_again
                unknown[function] = min(unknown[function], unknown_runs)
            ratios.append(rates[True][-1] / rates[False][-1])
    except Unreachable as exc:
        return [Resume("plan", skipped=str(exc)), Resume("saga function", skipped=str(exc))]
    median = statistics.median
    plan = median(rates[False])
    return [
        Resume("plan", count, rounds, plan, plan, 1.0, again[False], unknown[False]),
        Resume("saga function", count, rounds, median(rates[True]), plan, median(ratios), again[True], unknown[True]),
    ]


def resume(quick: bool = False) -> list[Resume]:
    """Measure recovery of orphaned plans and saga functions on PostgreSQL; `quick` recovers 50 of each a round."""
    return asyncio.run(_resume(50 if quick else ORPHANS, RESUME_ROUNDS))


# -- worker processes

_WORKER = """
import asyncio, sys
from saga_runtime import Queue, SagaExecutor, open_store
from benchmarks.functions import registry

async def main():
    async with open_store(sys.argv[1]) as store:
        print("ready", flush=True)
        await SagaExecutor(registry, store=store).serve(queues=[Queue(sys.argv[2])], concurrency=int(sys.argv[3]))

asyncio.run(main())
"""


@contextlib.asynccontextmanager
async def _worker(url: str, queue: str, concurrency: int, marks: Path) -> AsyncIterator[int]:
    """Run one worker process serving `queue` on `url`; yield its pid once it serves; stop it at the end."""
    env = {**os.environ, "SAGA_BENCH_MARKS": str(marks), "PYTHONPATH": str(ROOT)}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WORKER, url, queue, str(concurrency), env=env, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert (await child.stdout.readline()).strip() == b"ready"
        await asyncio.sleep(1.0)  # past its first rounds: idle, listening
        yield child.pid
    finally:
        if child.returncode is None:
            child.terminate()
        await child.wait()


def _marks(path: Path) -> dict[str, float]:
    """Return when each saga's Mark call started, by saga id."""
    if not path.exists():
        return {}
    return {saga_id: float(at) for saga_id, at in (line.split(" ") for line in path.read_text().splitlines())}


# -- wake-up


@dataclass
class Wake:
    """The wake-up workload's result."""

    rounds: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    floor_ms: float | None = None
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 2)

        return {
            "rounds": self.rounds,
            "p50_ms": r(self.p50_ms),
            "p99_ms": r(self.p99_ms),
            "floor: raw NOTIFY -> listener ms": None if self.floor_ms is None else round(self.floor_ms, 3),
            "ratio": None if not (self.p50_ms and self.floor_ms) else round(self.p50_ms / self.floor_ms, 1),
            "skipped": self.skipped,
        }


async def _wake(url: str, rounds: int, folder: Path) -> Wake:
    marks = folder / "marks-wake.txt"
    latencies = []
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store)
        waiting = [f"woken-{n}" for n in range(rounds)]
        for n, saga_id in enumerate(waiting):  # each waits for its message, released: WAITING, no lease
            result = await executor.run(woken, args={"n": n}, saga_id=saga_id)
            assert result.status is SagaStatus.WAITING, result.status
        async with _worker(url, "wake", 4, marks):
            for saga_id in waiting:
                await asyncio.sleep(random.uniform(0.05, 0.1))  # the worker is idle again
                sent = time.time()
                await executor.send(saga_id, "go", {})
                deadline = time.monotonic() + 10
                while saga_id not in _marks(marks):
                    assert time.monotonic() < deadline, f"{saga_id} was not woken within 10 s"
                    await asyncio.sleep(0.001)
                latencies.append((_marks(marks)[saga_id] - sent) * 1000)
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return Wake(rounds, statistics.median(latencies), p99, await _notify_floor(url, 50))


async def _wake_all(rounds: int, folder: Path) -> Wake:
    try:
        async with database("postgresql") as url:
            return await _wake(url, rounds, folder)
    except Unreachable as exc:
        return Wake(skipped=str(exc))


def wakeup(quick: bool = False, folder: Path | None = None) -> list[Wake]:
    """Measure send -> next call of a waiting saga function with an idle worker; `quick`: 10 rounds."""
    import tempfile

    with tempfile.TemporaryDirectory() as name:
        return [asyncio.run(_wake_all(10 if quick else 100, folder or Path(name)))]


# -- sleepers


def _rss(pid: int) -> tuple[float, float]:
    """Return the process's resident set now and at its peak (VmRSS, VmHWM), in MiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(rest.split()[0]) * 1024 / MIB
    return found["VmRSS"], found["VmHWM"]


@dataclass
class Sleepers:
    """The sleepers workload's result."""

    sagas: int = 0
    waiting: int | None = None
    holding: int | None = None
    running_meanwhile: int | None = None
    idle_mib: float | None = None
    asleep_mib: float | None = None
    peak_mib: float | None = None
    started_s: float | None = None
    cpu_share: float | None = None
    db_cpu_share: float | None = None
    transactions_per_s: float | None = None
    probe_ms: float | None = None
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        def r(x: float | None, n: int = 1) -> float | None:
            return None if x is None else round(x, n)

        growth = None if self.idle_mib is None or self.asleep_mib is None else self.asleep_mib - self.idle_mib
        return {
            "sagas": self.sagas,
            "WAITING": self.waiting,
            "holding lease, owner or slot": self.holding,
            "started in s": r(self.started_s),
            "floor: idle worker RSS MiB": r(self.idle_mib),
            "RSS with them asleep MiB": r(self.asleep_mib),
            "rss_growth_mib": r(growth, 2),
            "ratio": None if not (self.idle_mib and self.asleep_mib) else round(self.asleep_mib / self.idle_mib, 3),
            "peak RSS MiB": r(self.peak_mib),
            "worker cpu share while asleep": r(self.cpu_share, 3),
            "its database backends' cpu share": r(self.db_cpu_share, 3),
            "db transactions/s while asleep": r(self.transactions_per_s, 1),
            "a new saga meanwhile: submit -> SUCCESS ms": r(self.probe_ms),
            "skipped": self.skipped,
        }


async def _count(url: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        found: int = await conn.fetchval("SELECT count(*) FROM sagas WHERE status = 'WAITING'")
        return found
    finally:
        await conn.close()


async def _submit(executor: SagaExecutor, ids: list[str], seconds: float) -> None:
    for first in range(0, len(ids), 50):
        batch = ids[first : first + 50]
        await asyncio.gather(
            *(executor.submit(sleeper, args={"seconds": seconds}, saga_id=i, queue="sleep") for i in batch)
        )


async def _sleepers(url: str, count: int, folder: Path) -> Sleepers:
    out = Sleepers(count)
    async with open_store(url) as store, _worker(url, "sleep", 25, folder / "marks-sleep.txt") as pid:
        executor = SagaExecutor(registry, store=store)
        warm = [f"warm-{n}" for n in range(50)]  # code paths warm: the worker's idle RSS is after real work
        await _submit(executor, warm, 0.0)
        for saga_id in warm:
            assert (await executor.handle(saga_id).result(timeout=60)).status is SagaStatus.SUCCESS
        await asyncio.sleep(1.0)
        out.idle_mib, _ = _rss(pid)
        started = time.monotonic()
        ids = [f"sleeper-{n:05d}" for n in range(count)]
        await _submit(executor, ids, HOUR)
        deadline = time.monotonic() + 600
        while (waiting := await _count(url)) < count:
            assert time.monotonic() < deadline, f"only {waiting} of {count} asleep after 600 s"
            await asyncio.sleep(0.2)
        out.started_s = time.monotonic() - started
        await asyncio.sleep(2.0)  # a few of its rounds with every sleeper asleep
        backends = await _backends(url)  # the worker's connections (this process's pool is idle meanwhile)
        db_before = [_cpu_seconds(backend) for backend in backends]
        transactions = await _transactions(url)
        cpu_before, wall_before = _cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(ASLEEP_SECONDS)
        cpu_after = _cpu_seconds(pid)
        wall = time.monotonic() - wall_before
        out.transactions_per_s = (await _transactions(url) - transactions) / wall
        if cpu_before is not None and cpu_after is not None:
            out.cpu_share = (cpu_after - cpu_before) / wall
        db_after = [_cpu_seconds(backend) for backend in backends]
        out.db_cpu_share = (
            sum(after - before for before, after in zip(db_before, db_after, strict=True) if before and after) / wall
        )
        out.asleep_mib, out.peak_mib = _rss(pid)
        rows = []
        for offset in range(0, count, 1000):  # what the store says of each
            rows += [row for row, _ in await store.list_rows(SagaStatus.WAITING, 1000, offset)]
        out.waiting = len(rows)
        out.holding = sum(row.owner is not None or row.lease_expires_at is not None for row in rows)
        out.running_meanwhile = len(await store.list_rows(SagaStatus.RUNNING, 1000, 0))
        out.holding += out.running_meanwhile  # a sleeper in a slot would be RUNNING under the worker's lease
        sent = time.monotonic()
        probe = await executor.submit(PLAN, saga_id="probe", queue="sleep")
        assert (await probe.result(timeout=60)).status is SagaStatus.SUCCESS
        out.probe_ms = (time.monotonic() - sent) * 1000
    return out


async def _sleepers_all(count: int, folder: Path) -> Sleepers:
    try:
        async with database("postgresql") as url:
            return await _sleepers(url, count, folder)
    except Unreachable as exc:
        return Sleepers(skipped=str(exc))


def sleepers(quick: bool = False) -> list[Sleepers]:
    """Measure a worker with many saga functions asleep; `quick` puts 300 to sleep."""
    import tempfile

    with tempfile.TemporaryDirectory() as name:
        return [asyncio.run(_sleepers_all(300 if quick else SLEEPERS, Path(name)))]


WORKLOADS: dict[str, tuple[str, Callable[[bool], list[Any]], list[Target]]] = {
    IN_MEMORY: ("saga functions: in memory", in_memory, TARGETS),
    RESUME: ("saga functions: resume", resume, RESUME_TARGETS),
    WAKE: ("saga functions: wake-up", wakeup, WAKE_TARGETS),
    SLEEP: ("saga functions: sleepers", sleepers, SLEEP_TARGETS),
}


if __name__ == "__main__":
    from benchmarks._report import table

    quick = "--quick" in sys.argv
    for title, (_, measure, targets) in WORKLOADS.items():
        rows = [item.as_dict() for item in measure(quick)]
        print(table(title, rows) + "\n")
        print(table("targets", [target.verdict(rows) for target in targets]) + "\n")
