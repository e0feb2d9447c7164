"""Retention: purging finished 10-step sagas on PostgreSQL with an archive file, while 50 sagas at a time run.

The store is filled with N finished 10-step sagas (one run by the executor, then copied by SQL under new ids and
keys, finished a day ago: the rows have the size and shape of real ones). Then, in a database of the run's own:

1. 50 tasks run 10-step sagas one after another for a while: the floor, time per saga without a purge;
2. a purge (`store.purge(older_than=3600, archive=FILE)`, in a process of its own, as a cron job runs it) removes
   the N sagas while the 50 tasks go on; the purge's rate is N over its time, and the running sagas' time per
   saga is measured over the same span;
3. the floor again; `ratio` is the time per saga during the purge over the mean of both floors (target <= 1.5).

Each running saga is checked SUCCESS with its 10 steps after the purge: nothing running is touched. N is
`--sagas N` (`python -m benchmarks.retention --sagas 100000`) or SAGA_RUNTIME_BENCH_RETENTION_SAGAS; the default
runs in a few minutes on a small machine. The server is SAGA_RUNTIME_BENCH_POSTGRES_URL (default: the local one);
unreachable, the workload is reported as skipped.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._floors import Unreachable, database
from benchmarks._report import Target, value
from benchmarks.durable import PLAN, registry
from saga_runtime import SagaExecutor, SagaStatus, open_store
from saga_runtime._storage._codec import SAGA_COLUMNS, STEP_COLUMNS

DEFAULT_SAGAS = 10_000
QUICK_SAGAS = 300
CONCURRENCY = 50

TARGETS = [
    Target(
        "retention, PostgreSQL: running sagas' time per saga during a purge / without",
        1.5,
        "x",
        value("ratio", store="postgresql"),
    )
]

# The purge, run as its own process: it prints its count and seconds as JSON.
_PURGE = """
import asyncio, json, sys, time
from saga_runtime import open_store

async def main():
    async with open_store(sys.argv[1]) as store:
        started = time.perf_counter()
        report = await store.purge(older_than=3600, archive=sys.argv[2])
        print(json.dumps({"count": report.count, "seconds": time.perf_counter() - started}))

asyncio.run(main())
"""


@dataclass
class Retention:
    """One purge beside running sagas."""

    store: str
    sagas: int = 0
    purge_seconds: float | None = None
    archive_mib: float | None = None
    floor_ms: float | None = None
    during_ms: float | None = None
    running_sagas: int = 0
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        rate = None if not self.purge_seconds else round(self.sagas / self.purge_seconds, 1)
        ratio = None if not (self.floor_ms and self.during_ms) else round(self.during_ms / self.floor_ms, 3)
        return {
            "store": self.store,
            "purged_sagas": self.sagas,
            "purge_s": None if self.purge_seconds is None else round(self.purge_seconds, 2),
            "purge_sagas_per_s": rate,
            "archive_MiB": self.archive_mib,
            "floor_ms_per_saga": self.floor_ms,
            "during_purge_ms_per_saga": self.during_ms,
            "ratio": ratio,
            "running_sagas_checked": self.running_sagas,
            "skipped": self.skipped,
        }


async def _fill(url: str, count: int) -> None:
    """Store `count` finished 10-step sagas: one run, then copied by SQL (new ids and keys, finished a day ago)."""
    import asyncpg

    async with open_store(url) as store:
        await SagaExecutor(registry, store=store).run(PLAN, saga_id="template")
    sagas = ", ".join(SAGA_COLUMNS)
    copied = ", ".join(
        {
            "saga_id": "s.saga_id || '-' || g",
            "created_at": "now() - interval '2 days' + g * interval '1 millisecond'",
            "updated_at": "now() - interval '1 day'",
            "finished_at": "now() - interval '1 day' + g * interval '1 millisecond'",
        }.get(c, f"s.{c}")
        for c in SAGA_COLUMNS
    )
    steps = ", ".join(STEP_COLUMNS)
    step_copy = ", ".join(
        {"saga_id": "st.saga_id || '-' || g", "idempotency_key": "st.idempotency_key || '-' || g"}.get(c, f"st.{c}")
        for c in STEP_COLUMNS
    )
    conn = await asyncpg.connect(url)
    try:
        for first in range(1, count + 1, 10_000):
            last = min(count, first + 9_999)
            series = f"generate_series({first}, {last}) g"
            await conn.execute(
                f"INSERT INTO sagas ({sagas}) SELECT {copied} FROM sagas s, {series} WHERE s.saga_id = 'template'"
            )
            await conn.execute(
                f"INSERT INTO steps ({steps}) SELECT {step_copy} FROM steps st, {series} WHERE st.saga_id = 'template'"
            )
        await conn.execute("DELETE FROM steps WHERE saga_id = 'template'")
        await conn.execute("DELETE FROM sagas WHERE saga_id = 'template'")
        await conn.execute("ANALYZE sagas")
        await conn.execute("ANALYZE steps")
    finally:
        await conn.close()


async def _running(executor: SagaExecutor, stop: asyncio.Event, ids: list[str]) -> tuple[float, int]:
    """Run sagas in CONCURRENCY tasks until `stop`; return the time per saga (ms, wall over sagas) and the count."""
    done = 0

    async def worker() -> None:
        nonlocal done
        while not stop.is_set():
            result = await executor.run(PLAN)
            assert result.status is SagaStatus.SUCCESS, result.error
            ids.append(result.saga_id)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return (time.perf_counter() - started) * 1e3 / max(done, 1), done


async def _floor(executor: SagaExecutor, seconds: float, ids: list[str]) -> float:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(seconds, stop.set)
    return (await _running(executor, stop, ids))[0]


async def _measure(count: int, floor_seconds: float) -> Retention:
    item = Retention("postgresql", count)
    try:
        async with database("postgresql") as url:
            await _fill(url, count)
            with tempfile.TemporaryDirectory() as folder:
                archive = Path(folder) / "archive.jsonl"
                options = {"min_size": CONCURRENCY, "max_size": CONCURRENCY}
                async with open_store(url, **options) as store:
                    executor = SagaExecutor(registry, store=store)
                    ids: list[str] = []
                    await _floor(executor, 0.5, [])  # warm: connections, statements
                    before = await _floor(executor, floor_seconds, ids)
                    stop = asyncio.Event()
                    running = asyncio.ensure_future(_running(executor, stop, ids))
                    purge = await asyncio.create_subprocess_exec(
                        sys.executable, "-c", _PURGE, url, str(archive), stdout=asyncio.subprocess.PIPE
                    )
                    out, _ = await purge.communicate()
                    stop.set()
                    item.during_ms, _ = await running
                    assert purge.returncode == 0, "the purge failed"
                    report = json.loads(out)
                    assert report["count"] == count, report
                    item.purge_seconds = report["seconds"]
                    after = await _floor(executor, floor_seconds, ids)
                    item.floor_ms = (before + after) / 2
                    item.during_ms = round(item.during_ms, 3)
                    item.floor_ms = round(item.floor_ms, 3)
                    item.archive_mib = round(archive.stat().st_size / 2**20, 1)
                    summaries = {s.saga_id: s for s in await store.list_sagas(limit=len(ids) + count + 10)}
                    for saga_id in ids:  # nothing running was touched (a tombstone counts no step)
                        summary = summaries[saga_id]
                        if summary.status is not SagaStatus.SUCCESS or summary.step_count != 10:
                            raise RuntimeError(f"the purge touched the running saga {saga_id}")
                    item.running_sagas = len(ids)
    except Unreachable as exc:
        item.skipped = str(exc)
    return item


def sagas_option(argv: list[str]) -> int:
    """Return N: `--sagas N` in argv, else SAGA_RUNTIME_BENCH_RETENTION_SAGAS, else the default."""
    if "--sagas" in argv:
        return int(argv[argv.index("--sagas") + 1])
    return int(os.environ.get("SAGA_RUNTIME_BENCH_RETENTION_SAGAS", DEFAULT_SAGAS))


def run(quick: bool = False, sagas: int | None = None) -> list[Retention]:
    """Measure one purge of `sagas` (default: see sagas_option; 300 with `quick`) beside running sagas."""
    count = QUICK_SAGAS if quick else sagas if sagas is not None else sagas_option([])
    return [asyncio.run(_measure(count, 0.5 if quick else 5.0))]


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv, sagas=sagas_option(sys.argv)):
        print(row.as_dict())
