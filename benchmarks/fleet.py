"""A fleet: submit -> first step latency with 1, 2 and 4 idle worker processes, and claims per second.

Latency: 1, 2 or 4 worker processes (`executor.serve(queues=[Queue("bench")])`, the default `interval` of 0.5 s)
wait idle on one database; this process submits one-step sagas one at a time, each once the one before has
started and after a pause (so every worker is idle again), and the tool notes when it starts. Reported: the p50
and p99 of submit -> step start. On PostgreSQL an idle worker is woken by the submit's NOTIFY; its floor, measured
in the same run on the same database, is the raw driver's NOTIFY -> listener callback on two asyncpg connections
(p50), and `ratio` is the fleet's p50 over it. Poll-based stores (SQLite) start a saga within the interval: their
floor is the interval itself.

Claims: `CLAIMS` one-step no-op sagas are queued first, then one worker process starts them all; reported as sagas
started per second (first start to last). Its floor is the raw driver's autocommitted INSERTs of a step row per
second on one connection (benchmarks/_floors.py); `ratio` is claims/s over raw commits/s.

Scaling: `SCALE` queued 10-step sagas of 10 ms sleep steps, then 1, 2 or 4 worker processes serving the queue
with `concurrency=25` each start them all (PostgreSQL only), each level twice, there and back (1, 2, 4, 4, 2, 1:
the machine's drifting load weighs on every level alike; each figure is the mean of a level's two turns).
Reported: sagas finished per second, from the first saga's first step starting to the last saga's last step
ending, and `speedup` over one worker's in the same run.
Beside it, what a saga costs: the CPU seconds the worker processes and the database's backends (the server
processes serving the run's database, from pg_stat_activity, read from /proc) used per saga while the run was
steady (from a quarter of the sagas finished to three quarters: a worker's start, its pool's first connections and
statements are a cost per worker, not per saga; the whole run's figure is beside it), and that over one worker's
in the same run (the target: adding workers adds no cost per saga; on 2 cores more workers
cannot add speed, as the `cpu share` shows: their CPU over the cores this process may run on times the wall time,
1.0 being every core busy with them); and how busy the whole machine was (/proc/stat, other programs included).
What the database did per saga is beside it: its transactions (every statement a worker sends outside a claim's
transaction is one; pg_stat_database, read from another database) and the backends serving the run (each worker's
pool and listening connection, and this process's), so a cost per worker shows as more of one or the other.

Idle: 4 worker processes serving the queue with nothing to do, for `IDLE_SECONDS`: the database's transactions per
second in all (pg_stat_database's commits and rollbacks of the run's database, read from another database).

Stores: a SQLite file, and a PostgreSQL database created for the run (SAGA_RUNTIME_BENCH_POSTGRES_URL); an
unreachable server is reported as skipped. `python -m benchmarks.fleet [--quick]` runs only this.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks._floors import STEPS, Unreachable, database, postgres_floor, sqlite_floor
from benchmarks._report import Target, value
from saga_runtime import SagaExecutor, StepContext, ToolRegistry, open_store

ROOT = Path(__file__).resolve().parent.parent
INTERVAL = 0.5  # serve()'s default
CLAIMS = 500
SCALE = 400  # sagas per worker count: four waves of 4 x 25
STEP_SECONDS = 0.010
SPEEDUP = "speedup over 1 worker"
CPU_PER_SAGA = "cpu ms per saga (workers + db), steady"
CPU_RATIO = "cpu per saga over 1 worker"
IDLE = "4 idle workers: db transactions/s"
IDLE_SECONDS = 20.0

registry = ToolRegistry()


@registry.tool
class Mark:
    """Note when the step started (in a worker: to the file $SAGA_BENCH_MARKS), then return."""

    async def execute(self, n: int, ctx: StepContext) -> int:
        path = os.environ.get("SAGA_BENCH_MARKS")
        if path:  # one small O_APPEND write: lines of concurrent steps never interleave
            line = f"{ctx.saga_id} {time.time():.6f}\n".encode()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        return n

    async def compensate(self, result: int | None) -> None:
        return None


def _note(path: str, line: str) -> None:
    """Append one line to `path` in one small O_APPEND write: lines of concurrent steps never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@registry.tool
class Nap:
    """Sleep 10 ms; the first step notes its start, the last its end (to the file $SAGA_BENCH_MARKS)."""

    async def execute(self, n: int, last: int, ctx: StepContext) -> int:
        path = os.environ.get("SAGA_BENCH_MARKS")
        if path and n == 0:
            _note(path, f"{ctx.saga_id} start {time.time():.6f}\n")
        await asyncio.sleep(STEP_SECONDS)
        if path and n == last:
            _note(path, f"{ctx.saga_id} end {time.time():.6f}\n")
        return n

    async def compensate(self, result: int | None) -> None:
        return None


TARGETS = [
    Target("fleet, PostgreSQL, 1 idle worker: submit -> first step p50", 15, "ms", value("p50_ms", store="postgresql")),
    Target(
        "fleet, PostgreSQL, 1 idle worker: submit -> first step p99", 100, "ms", value("p99_ms", store="postgresql")
    ),
    Target(
        "fleet, PostgreSQL, 1 worker: queued sagas started",
        500,
        "/s",
        value("claims_per_s", store="postgresql"),
        at_least=True,
    ),
    Target(
        "fleet, PostgreSQL, 4 workers: CPU per saga (workers + database) over 1 worker's",
        1.2,
        "x",
        value(CPU_RATIO, store="postgresql", workers=4),
    ),
    Target("fleet, PostgreSQL, 4 idle workers: database transactions", 10, "/s", value(IDLE, store="postgresql")),
]

_WORKER = """
import asyncio, sys
from saga_runtime import Queue, SagaExecutor, open_store
from benchmarks.fleet import registry

async def main():
    concurrency = int(sys.argv[2]) or None
    async with open_store(sys.argv[1]) as store:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # "go": every worker starts serving at once
        await SagaExecutor(registry, store=store).serve(queues=[Queue("bench")], concurrency=concurrency)

asyncio.run(main())
"""


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int) -> float | None:
    """Return the CPU seconds (user + system) process `pid` used so far, or None if it is gone (or no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime and stime: fields 14 and 15 of stat(5)


async def _backends(url: str) -> list[int]:
    """Return the process ids of the PostgreSQL backends serving the database at `url` (this query's excepted)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        records = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return [int(record[0]) for record in records]
    finally:
        await conn.close()


def _machine_busy() -> tuple[float, float] | None:
    """Return the machine's (busy, total) CPU time so far from /proc/stat, in ticks; None without /proc."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, IndexError, ValueError):
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and iowait
    return sum(ticks) - idle, sum(ticks)


@dataclass
class Cpu:
    """What the CPU did while the workers ran: theirs, the database server's, the machine's."""

    wall_s: float
    cores: int
    workers_s: float | None
    database_s: float | None
    machine_busy: float | None

    @property
    def share(self) -> float | None:
        """Return the workers' and database's CPU time over the cores' capacity in that wall time."""
        if self.workers_s is None:
            return None
        return (self.workers_s + (self.database_s or 0.0)) / (self.wall_s * self.cores)


class CpuMeter:
    """Sample the CPU time of worker processes and the database server, and of the machine, at start and end."""

    def __init__(self, pids: list[int], backends: list[int]) -> None:
        self._pids = pids
        self._started = time.monotonic()
        self._workers = self._sum(pids)
        self._database = {pid: _cpu_seconds(pid) for pid in backends}
        self._machine = _machine_busy()

    @staticmethod
    def _sum(pids: list[int]) -> float | None:
        used = [_cpu_seconds(pid) for pid in pids]
        return None if any(x is None for x in used) else sum(x for x in used if x is not None)

    def stop(self, backends: list[int]) -> Cpu:
        """Return what was used since the meter started (`backends`: the database's backends now)."""
        wall = time.monotonic() - self._started
        workers_now = self._sum(self._pids)
        workers = None if workers_now is None or self._workers is None else workers_now - self._workers
        database = None
        if self._database or backends:  # a backend started meanwhile counts from 0; one that ended meanwhile is lost
            now = {pid: _cpu_seconds(pid) for pid in backends}
            database = sum(used - (self._database.get(pid) or 0.0) for pid, used in now.items() if used is not None)
        busy = None
        machine = _machine_busy()
        if machine is not None and self._machine is not None and machine[1] > self._machine[1]:
            busy = (machine[0] - self._machine[0]) / (machine[1] - self._machine[1])
        return Cpu(wall, len(os.sched_getaffinity(0)), workers, database, busy)


@dataclass
class Fleet:
    """One store's result with `workers` worker processes."""

    store: str
    workers: int
    sagas: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    floor_ms: float | None = None
    floor: str = ""
    claims_per_s: float | None = None
    raw_commits_per_s: float | None = None
    sagas_per_s: float | None = None
    speedup: float | None = None
    cpu: Cpu | None = None
    cpu_ratio: float | None = None
    steady_cpu_ms: float | None = None
    idle_transactions_per_s: float | None = None
    transactions_per_saga: float | None = None
    backends: int | None = None
    skipped: str | None = None

    @property
    def cpu_per_saga_ms(self) -> float | None:
        """Return the CPU milliseconds the workers and the database's backends used per saga while scaling."""
        if self.cpu is None or self.cpu.workers_s is None or self.cpu.database_s is None or not self.scaled:
            return None
        return (self.cpu.workers_s + self.cpu.database_s) / self.scaled * 1000

    scaled: int = 0  # sagas of the scaling workload

    def as_dict(self) -> dict[str, Any]:
        def r(x: float | None, n: int = 2) -> float | None:
            return None if x is None else round(x, n)

        return {
            "store": self.store,
            "workers": self.workers,
            "sagas": self.sagas,
            "p50_ms": r(self.p50_ms),
            "p99_ms": r(self.p99_ms),
            "floor_ms": r(self.floor_ms, 3),
            "floor": self.floor,
            "ratio": None if not (self.p50_ms and self.floor_ms) else round(self.p50_ms / self.floor_ms, 2),
            "claims_per_s": r(self.claims_per_s, 1),
            "floor: raw commits/s": r(self.raw_commits_per_s, 1),
            "claims ratio": None
            if not (self.claims_per_s and self.raw_commits_per_s)
            else round(self.claims_per_s / self.raw_commits_per_s, 3),
            "10-step sagas/s, 25 at a time each": r(self.sagas_per_s, 1),
            SPEEDUP: r(self.speedup),
            CPU_PER_SAGA: r(self.steady_cpu_ms),
            "cpu ms per saga, whole run": None if self.cpu_per_saga_ms is None else r(self.cpu_per_saga_ms),
            CPU_RATIO: r(self.cpu_ratio),
            IDLE: r(self.idle_transactions_per_s),
            "db transactions per saga": r(self.transactions_per_saga),
            "db backends": self.backends,
            "cpu: workers s": None if self.cpu is None else r(self.cpu.workers_s),
            "cpu: postgres s": None if self.cpu is None else r(self.cpu.database_s),
            "cpu: wall s x cores": None if self.cpu is None else f"{self.cpu.wall_s:.2f} x {self.cpu.cores}",
            "cpu share (workers + db)": None if self.cpu is None else r(self.cpu.share),
            "machine busy": None if self.cpu is None else r(self.cpu.machine_busy),
            "skipped": self.skipped,
        }


def _marks(path: Path) -> dict[str, float]:
    """Return when each saga's step started, by saga id."""
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        saga_id, at = line.split(" ")
        found.setdefault(saga_id, float(at))
    return found


@contextlib.asynccontextmanager
async def _workers(url: str, count: int, marks: Path, concurrency: int = 0, settle: float = 1.0) -> Any:
    """Start `count` worker processes on `url`; yield their ids `settle` seconds after each began serving; stop
    them at the end."""
    env = {**os.environ, "SAGA_BENCH_MARKS": str(marks), "PYTHONPATH": str(ROOT)}
    children = []
    try:
        for _ in range(count):
            child = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _WORKER,
                url,
                str(concurrency),
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            children.append(child)
        for child in children:
            assert child.stdout is not None
            assert (await child.stdout.readline()).strip() == b"ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
        await asyncio.sleep(settle)  # past each worker's first round: idle, listening
        yield [child.pid for child in children]
    finally:
        for child in children:
            if child.returncode is None:
                child.terminate()
            await child.wait()


async def _wait_for(marks: Path, saga_id: str, seconds: float) -> float:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = _marks(marks).get(saga_id)
        if found is not None:
            return found
        await asyncio.sleep(0.002)
    raise TimeoutError(f"{saga_id} did not start within {seconds}s")


async def _latency(url: str, workers: int, sagas: int, folder: Path) -> tuple[float, float]:
    """Return the p50 and p99 (ms) of submit -> step start with `workers` idle workers."""
    marks = folder / f"marks-{url.split(':')[0]}-{workers}.txt"
    latencies = []
    async with open_store(url) as store, _workers(url, workers, marks):
        executor = SagaExecutor(registry, store=store)
        for n in range(sagas):
            saga_id = f"lat-{workers}-{n}"
            submitted = time.time()
            await executor.submit([{"tool": "Mark", "args": {"n": n}}], saga_id=saga_id, queue="bench")
            latencies.append((await _wait_for(marks, saga_id, 10 * INTERVAL + 5) - submitted) * 1000)
            await asyncio.sleep(random.uniform(0.02, 0.06))  # the worker goes idle again
    latencies.sort()
    return statistics.median(latencies), latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]


async def _claims(url: str, count: int, folder: Path) -> float:
    """Return the sagas per second one worker starts from a queue of `count` one-step sagas."""
    marks = folder / f"marks-{url.split(':')[0]}-claims.txt"
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store)
        for n in range(count):
            await executor.submit([{"tool": "Mark", "args": {"n": n}}], saga_id=f"claim-{n}", queue="bench")
        async with _workers(url, 1, marks):
            deadline = time.monotonic() + 120
            while len(_marks(marks)) < count and time.monotonic() < deadline:  # noqa: ASYNC110 - another process writes
                await asyncio.sleep(0.05)
    starts = sorted(_marks(marks).values())
    assert len(starts) == count, len(starts)
    return (count - 1) / (starts[-1] - starts[0])


@dataclass
class Scaled:
    """One scaling run: its rate, CPU, steady CPU per saga, and what the database did per saga."""

    rate: float
    cpu: Cpu
    per_saga_ms: float | None
    transactions_per_saga: float | None  # the run database's commits and rollbacks (each statement of a worker)
    backends: int  # the database's backends at the end (each worker's pool and its listening connection)


async def _scale(url: str, workers: int, count: int, folder: Path, turn: int = 0) -> Scaled:
    """Return the 10-step sagas per second `workers` workers (25 at a time each) finish of `count` queued ones,
    the CPU they and the database used meanwhile, and the CPU ms per saga of the steady part of the run (from a
    quarter of the sagas finished to three quarters: each worker's start, its pool's first connections and
    statements, and the stragglers at the end are a cost per worker, not per saga)."""
    marks = folder / f"marks-scale-{workers}-{turn}.txt"
    plan = [{"tool": "Nap", "args": {"n": n, "last": 9}} for n in range(10)]
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store)
        for first in range(0, count, 50):
            ids = [f"scale-{workers}-{turn}-{n}" for n in range(first, min(count, first + 50))]
            await asyncio.gather(*(executor.submit(plan, saga_id=saga_id, queue="bench") for saga_id in ids))
        async with _workers(url, workers, marks, concurrency=25, settle=0.0) as pids:
            meter = CpuMeter(pids, await _backends(url))  # from "go": the queue is full, so they start at once
            transactions = await _transactions(url)
            steady: tuple[CpuMeter, int] | None = None
            per_saga = None
            deadline = time.monotonic() + 180
            while (ended := _ends(marks)) < count and time.monotonic() < deadline:
                if steady is None and ended >= count // 4:
                    steady = CpuMeter(pids, await _backends(url)), ended
                elif steady is not None and per_saga is None and ended >= count * 3 // 4:
                    window = steady[0].stop(await _backends(url))
                    if window.workers_s is not None and window.database_s is not None and ended > steady[1]:
                        per_saga = (window.workers_s + window.database_s) / (ended - steady[1]) * 1000
                await asyncio.sleep(0.05)
            if steady is not None and per_saga is None and ended > steady[1]:  # it ended between two looks
                window = steady[0].stop(await _backends(url))
                if window.workers_s is not None and window.database_s is not None:
                    per_saga = (window.workers_s + window.database_s) / (ended - steady[1]) * 1000
            backends = await _backends(url)
            cpu = meter.stop(backends)
            await asyncio.sleep(1.0)  # backends report their counts at most once a second
            transactions = await _transactions(url) - transactions
    if per_saga is None and cpu.workers_s is not None and cpu.database_s is not None:
        per_saga = (cpu.workers_s + cpu.database_s) / count * 1000  # too quick for a steady part: the whole run
    # A Mark line ("id at") of an earlier workload's saga that a stopped worker left to recovery is not counted.
    lines = [parts for parts in (line.split(" ") for line in marks.read_text().splitlines()) if len(parts) == 3]
    starts = [float(at) for _, kind, at in lines if kind == "start"]
    ends = [float(at) for _, kind, at in lines if kind == "end"]
    assert len(ends) == count, (len(ends), count)
    return Scaled(count / (max(ends) - min(starts)), cpu, per_saga, transactions / count, len(backends))


async def _scaled(url: str, levels: list[int], count: int, folder: Path) -> list[Scaled]:
    """Scale at each of `levels`, there and back (1, 2, 4, 4, 2, 1): a machine whose load drifts meanwhile weighs
    on every level alike. Each level's figures are the mean of its two turns (one turn for a single level)."""
    turns: dict[int, list[Scaled]] = {workers: [] for workers in levels}
    order = [*levels, *reversed(levels)] if len(levels) > 1 else levels
    for turn, workers in enumerate(order):
        turns[workers].append(await _scale(url, workers, count, folder, turn))
    return [_mean(turns[workers]) for workers in levels]


def _mean(runs: list[Scaled]) -> Scaled:
    """Return one level's turns as one: each figure their mean (the steady CPU of the turns that had one)."""
    if len(runs) == 1:
        return runs[0]

    def mean(values: list[float | None]) -> float | None:
        known = [value for value in values if value is not None]
        return sum(known) / len(known) if known else None

    cpus = [run.cpu for run in runs]
    cpu = Cpu(
        sum(c.wall_s for c in cpus) / len(cpus),
        cpus[0].cores,
        None if any(c.workers_s is None for c in cpus) else mean([c.workers_s for c in cpus]),
        None if any(c.database_s is None for c in cpus) else mean([c.database_s for c in cpus]),
        mean([c.machine_busy for c in cpus]),
    )
    return Scaled(
        mean([run.rate for run in runs]) or 0.0,
        cpu,
        mean([run.per_saga_ms for run in runs]),
        mean([run.transactions_per_saga for run in runs]),
        max(run.backends for run in runs),
    )


def _ends(marks: Path) -> int:
    return marks.read_text().count(" end ") if marks.exists() else 0


async def _notify_floor(url: str, rounds: int) -> float:
    """Return the p50 (ms) of a raw NOTIFY committed on one asyncpg connection -> the callback on another."""
    import asyncpg

    listener, sender = await asyncpg.connect(url), await asyncpg.connect(url)
    heard: asyncio.Queue[float] = asyncio.Queue()
    try:
        await listener.add_listener("bench_floor", lambda *_: heard.put_nowait(time.perf_counter()))
        times = []
        for _ in range(rounds):
            sent = time.perf_counter()
            await sender.execute("NOTIFY bench_floor, 'x'")
            times.append((await asyncio.wait_for(heard.get(), 5) - sent) * 1000)
            await asyncio.sleep(0.005)
        return statistics.median(times)
    finally:
        await listener.close()
        await sender.close()


async def _raw_commits(kind: str, url: str, path: Path) -> float:
    """Return the floor's autocommitted step-row INSERTs per second on one connection."""
    floor = await (sqlite_floor(path) if kind == "sqlite" else postgres_floor(url, None))
    try:
        started = time.perf_counter()
        rounds = 20
        for n in range(rounds):
            await floor.saga(n)
        return rounds * STEPS / (time.perf_counter() - started)
    finally:
        await floor.close()


async def _transactions(url: str) -> int:
    """Return the commits and rollbacks PostgreSQL counted for the database at `url`, read from another database."""
    import asyncpg

    name = urlsplit(url).path.lstrip("/")
    conn = await asyncpg.connect(urlsplit(url)._replace(path="/postgres").geturl())
    try:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        found = await conn.fetchval("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", name)
        return int(found)
    finally:
        await conn.close()


async def _idle(url: str, workers: int, seconds: float, folder: Path) -> float:
    """Return the database transactions per second `workers` idle worker processes cause in all.

    Backends report their counts at most once a second: over `seconds` that blurs the count by about one second
    at each end, both ways.
    """
    async with _workers(url, workers, folder / "marks-idle.txt", settle=2.0):
        before = await _transactions(url)
        started = time.monotonic()
        await asyncio.sleep(seconds)
        after = await _transactions(url)
        return (after - before) / (time.monotonic() - started)


async def _store(
    kind: str,
    url: str,
    levels: tuple[int, ...],
    sagas: int,
    claims: int,
    scale: int,
    folder: Path,
    idle_seconds: float = IDLE_SECONDS,
) -> list[Fleet]:
    results = []
    if kind == "postgresql":
        floor_ms, floor = await _notify_floor(url, 50), "raw NOTIFY -> listener"
    else:
        floor_ms, floor = INTERVAL * 1000, "poll interval"
    for workers in levels:
        p50, p99 = await _latency(url, workers, sagas, folder)
        results.append(Fleet(kind, workers, sagas, p50, p99, floor_ms, floor))
    results[0].claims_per_s = await _claims(url, claims, folder)
    results[0].raw_commits_per_s = await _raw_commits(kind, url, folder / "raw.db")
    if kind == "postgresql":
        scaled = await _scaled(url, [result.workers for result in results], scale, folder)
        for result, run in zip(results, scaled, strict=True):
            result.sagas_per_s, result.speedup, result.cpu, result.scaled = (
                run.rate,
                run.rate / scaled[0].rate,
                run.cpu,
                scale,
            )
            result.steady_cpu_ms = run.per_saga_ms
            result.transactions_per_saga, result.backends = run.transactions_per_saga, run.backends
            one, this = results[0].steady_cpu_ms, result.steady_cpu_ms
            result.cpu_ratio = None if not one or this is None else this / one
        results[0].idle_transactions_per_s = await _idle(url, 4, idle_seconds, folder)
    return results


async def _all(quick: bool) -> list[Fleet]:
    levels = (1,) if quick else (1, 2, 4)
    sagas, claims, scale = (10, 50, 50) if quick else (100, CLAIMS, SCALE)
    idle = 6.0 if quick else IDLE_SECONDS
    results: list[Fleet] = []
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        if not quick:  # polling: slow by design, and the same at every size
            results += await _store("sqlite", f"sqlite:///{folder}/fleet.db", levels, sagas // 4, claims, scale, folder)
        try:
            async with database("postgresql") as url:
                results += await _store("postgresql", url, levels, sagas, claims, scale, folder, idle)
        except Unreachable as exc:
            results.append(Fleet("postgresql", 1, skipped=str(exc)))
    return results


def run(quick: bool = False) -> list[Fleet]:
    """Measure the fleet; `quick` runs one worker on PostgreSQL only, few sagas, to check the script works."""
    return asyncio.run(_all(quick))


if __name__ == "__main__":
    from benchmarks._report import table

    print(table("fleet", [item.as_dict() for item in run(quick="--quick" in sys.argv)]))
