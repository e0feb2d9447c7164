"""Recovery: throughput of one executor taking over 1,000 orphaned sagas, and takeover latency after a real kill.

Throughput: 1,000 10-step sagas left by a dead executor (four SUCCESS steps, one of unknown outcome, five pending;
lease long expired) are written straight into the store, then one executor's `recover()` drives them all to
SUCCESS, `recovery_concurrency` (32) at a time; the report is sagas per second. Its floor, measured right after on
the same store, is the same executor running as many fresh sagas of the same plan one after another; `ratio` is
recovered sagas/s over fresh sagas/s.

Takeover: a child process runs a saga with `lease_timeout=L` and is SIGKILLed in the middle of a step; an
executor running `serve()` in this process re-runs that step. The report is the time
from the kill to the first recovered step (median of the rounds): about what was left of the dead owner's lease
(between 2L/3 and L, as leases are renewed every L/3) plus one `serve()` interval.

Stores as in benchmarks/durable.py: a SQLite file, and PostgreSQL and MariaDB/MySQL databases created for the run
(SAGA_RUNTIME_BENCH_POSTGRES_URL / SAGA_RUNTIME_BENCH_MYSQL_URL); an unreachable server is reported as skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks._floors import SERVERS, Unreachable, database
from saga_runtime import SagaExecutor, SagaStatus, StepContext, ToolRegistry, open_store
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaRow, StepRow, StepStatus, idempotency_key, now, seal_all

ROOT = Path(__file__).resolve().parent.parent
LEASE = 1.0  # the lease of the killed process in the takeover rounds

registry = ToolRegistry()
# The first call of each step in this process, by idempotency key: when recovery re-ran it.
first_calls: dict[str, float] = {}


@registry.tool
class Step:
    """Note when it ran; in the child of a takeover round, hang (until killed) instead."""

    async def execute(self, n: int, ctx: StepContext) -> int:
        first_calls.setdefault(ctx.idempotency_key, time.time())
        if os.environ.get("SAGA_BENCH_HANG") == "1" and n == 1:
            print("hanging", flush=True)
            await asyncio.sleep(3600)
        return n

    async def compensate(self, result: int | None) -> None:
        return None


PLAN = [{"id": f"s{i}", "tool": "Step", "args": {"n": i}} for i in range(10)]


@dataclass
class Recovery:
    """One store's result."""

    store: str
    sagas: int = 0
    sagas_per_s: float | None = None
    fresh_per_s: float | None = None
    takeover_s: float | None = None
    lease_s: float = LEASE
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "orphans": self.sagas,
            "recovered_sagas_per_s": None if self.sagas_per_s is None else round(self.sagas_per_s, 1),
            "floor: fresh sagas/s": None if self.fresh_per_s is None else round(self.fresh_per_s, 1),
            "ratio": None
            if not (self.sagas_per_s and self.fresh_per_s)
            else round(self.sagas_per_s / self.fresh_per_s, 3),
            "takeover_s (kill -> first recovered step)": None if self.takeover_s is None else round(self.takeover_s, 3),
            "lease_timeout_s": self.lease_s,
            "skipped": self.skipped,
        }


def _orphan(saga_id: str) -> tuple[SagaRow, list[StepRow]]:
    """Return a saga a dead executor left: s0-s3 SUCCESS, s4 of unknown outcome, s5-s9 pending; lease expired."""
    planned = build_plan(PLAN, registry)
    started = now() - timedelta(minutes=5)
    saga = SagaRow(
        saga_id=saga_id,
        kind="plan",
        plan=planned.to_json(),
        plan_hash=planned.digest,
        status=SagaStatus.RUNNING,
        created_at=started,
        updated_at=started,
        owner="dead-executor",
        lease_expires_at=started,
    )
    statuses = [StepStatus.SUCCESS] * 4 + [StepStatus.RUNNING] + [StepStatus.PENDING] * 5
    rows = []
    for seq, (step, status) in enumerate(zip(planned.steps, statuses, strict=True)):
        row = StepRow(saga_id, seq, step.step_id, step.group, "Step", step.args, idempotency_key(saga_id, step.step_id))
        row.status = status
        if status is not StepStatus.PENDING:
            row.attempts, row.started_at = 1, started
        if status is StepStatus.SUCCESS:
            row.result, row.finished_at = seq, started
        rows.append(row)
    seal_all(rows, None)
    return saga, rows


async def _throughput(url: str, count: int) -> tuple[float, float]:
    """Return recovered sagas/s, and the floor: fresh sagas of the same plan run one at a time, per second."""
    async with open_store(url) as store:
        for i in range(count):
            await store.create_saga(*_orphan(f"orphan-{i:05d}"))
        executor = SagaExecutor(registry, store=store)
        started = time.perf_counter()
        results = await executor.recover()
        elapsed = time.perf_counter() - started
        assert len(results) == count, len(results)
        assert all(r.status is SagaStatus.SUCCESS for r in results)
        started = time.perf_counter()
        for _ in range(count):
            result = await executor.run(PLAN)
            assert result.status is SagaStatus.SUCCESS, result.error
        fresh = time.perf_counter() - started
    return count / elapsed, count / fresh


_CHILD = """
import asyncio, sys
from saga_runtime import SagaExecutor, open_store
from benchmarks.recovery import PLAN, registry

async def main():
    async with open_store(sys.argv[1]) as store:
        await SagaExecutor(registry, store=store, lease_timeout=float(sys.argv[3])).run(PLAN, saga_id=sys.argv[2])

asyncio.run(main())
"""


async def _takeover(url: str, rounds: int) -> float:
    latencies = []
    env = {**os.environ, "SAGA_BENCH_HANG": "1", "PYTHONPATH": str(ROOT)}
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store, lease_timeout=LEASE)
        worker = asyncio.create_task(executor.serve(interval=0.05))
        try:
            for n in range(rounds):
                saga_id = f"takeover-{secrets.token_hex(4)}-{n}"
                child = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", _CHILD, url, saga_id, str(LEASE), env=env, stdout=asyncio.subprocess.PIPE
                )
                assert child.stdout is not None
                assert (await child.stdout.readline()).strip() == b"hanging"
                await asyncio.sleep(LEASE / 2)  # mid-lease, as a real death would fall
                child.send_signal(signal.SIGKILL)
                died = time.time()
                await child.wait()
                key = idempotency_key(saga_id, "s1")
                first_calls.pop(key, None)
                deadline = time.monotonic() + 10 * LEASE
                while key not in first_calls and time.monotonic() < deadline:  # noqa: ASYNC110 - polls another task's note
                    await asyncio.sleep(0.005)
                latencies.append(first_calls[key] - died)
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
    return statistics.median(latencies)


async def _measure(name: str, url: str, count: int, rounds: int) -> Recovery:
    rate, fresh = await _throughput(url, count)
    takeover = await _takeover(url, rounds)
    return Recovery(name, count, rate, fresh, takeover)


async def _server(kind: str, count: int, rounds: int) -> Recovery:
    try:
        async with database(kind) as url:
            return await _measure(kind, url, count, rounds)
    except Unreachable as exc:
        return Recovery(kind, skipped=str(exc))


async def _all(count: int, rounds: int) -> list[Recovery]:
    results = []
    with tempfile.TemporaryDirectory() as folder:
        results.append(await _measure("sqlite", f"sqlite:///{folder}/sagas.db", count, rounds))
    for kind in SERVERS:
        results.append(await _server(kind, count, rounds))
    return results


def run(quick: bool = False) -> list[Recovery]:
    """Measure every store; `quick` recovers 50 orphans and does one takeover round, to check the script works."""
    return asyncio.run(_all(50 if quick else 1000, 1 if quick else 5))


if __name__ == "__main__":
    for item in run(quick="--quick" in sys.argv):
        print(item.as_dict())
