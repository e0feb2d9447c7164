"""Where a wake-up goes: every store call between `send` and the waiting saga function's next call, timed.

    python -m benchmarks.profile_wake [--rounds N]

Runs benchmarks.functions' wake-up workload with the worker in this process (a task running `serve()` on a store
of its own, each of whose calls is timed) on a PostgreSQL database created for the run
(SAGA_RUNTIME_BENCH_POSTGRES_URL), and prints, for the median round, each store call the worker made after the
send: when it started (ms after the send began) and how long it took; then each call's median count and time per
wake-up over every round.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks._floors import database
from benchmarks.functions import _marks, registry, woken
from saga_runtime import SagaExecutor, SagaStatus, SagaStore, open_store

Calls = list[tuple[str, float, float]]  # (store method, started ms after the send, took ms)


def _timed(store: SagaStore, calls: Calls, origin: list[float]) -> None:
    """Time every coroutine method of `store` into `calls`, relative to `origin[0]` (perf_counter)."""
    for name, method in inspect.getmembers(store, inspect.iscoroutinefunction):
        if name.startswith("_"):
            continue

        @functools.wraps(method)
        async def timed(*args: Any, __name: str = name, __method: Any = method, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await __method(*args, **kwargs)
            finally:
                calls.append((__name, (started - origin[0]) * 1000, (time.perf_counter() - started) * 1000))

        setattr(store, name, timed)


async def _rounds(url: str, rounds: int, marks: Path) -> list[tuple[float, float, Calls]]:
    os.environ["SAGA_BENCH_MARKS"] = str(marks)  # Mark notes its start in this process
    out: list[tuple[float, float, Calls]] = []
    async with open_store(url) as store, open_store(url) as served:
        sender = SagaExecutor(registry, store=store)
        ids = [f"woken-{n}" for n in range(rounds)]
        for n, saga_id in enumerate(ids):
            assert (await sender.run(woken, args={"n": n}, saga_id=saga_id)).status is SagaStatus.WAITING
        calls: Calls = []
        origin = [0.0]
        _timed(served, calls, origin)
        worker = asyncio.create_task(SagaExecutor(registry, store=served).serve(queues=["wake"], concurrency=4))
        try:
            await asyncio.sleep(1.0)
            for saga_id in ids:
                await asyncio.sleep(0.1)  # idle again
                calls.clear()
                origin[0], wall = time.perf_counter(), time.time()
                await sender.send(saga_id, "go", {})
                sent = (time.perf_counter() - origin[0]) * 1000
                deadline = time.monotonic() + 10
                while saga_id not in _marks(marks):
                    assert time.monotonic() < deadline, saga_id
                    await asyncio.sleep(0.0005)
                out.append(((_marks(marks)[saga_id] - wall) * 1000, sent, list(calls)))
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
    return out


async def _main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with database("postgresql") as url:
            results = await _rounds(url, rounds, Path(folder) / "marks.txt")
    results.sort(key=lambda r: r[0])
    latency, sent, calls = results[len(results) // 2]
    print(f"median round: send -> next call {latency:.1f} ms (send itself returned after {sent:.1f} ms)")
    for name, at, took in calls:
        if at <= latency:
            print(f"  {at:7.1f} ms  {name:20s} {took:6.1f} ms")
    per: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for latency, _, calls in results:
        counts: dict[str, list[float]] = defaultdict(list)
        for name, at, took in calls:
            if at <= latency:
                counts[name].append(took)
        for name, took in counts.items():
            per[name].append((len(took), sum(took)))
    print(f"\nper wake-up over {len(results)} rounds (median count, median ms of the calls):")
    for name, seen in sorted(per.items(), key=lambda item: -statistics.median(t for _, t in item[1])):
        count, took = statistics.median(c for c, _ in seen), statistics.median(t for _, t in seen)
        print(f"  {name:20s} {count:4g} x  {took:6.1f} ms")


def main() -> None:
    """Parse the options and print the profile."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_wake", description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    asyncio.run(_main(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
