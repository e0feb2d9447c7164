"""Memory: peak RSS for 10,000 sagas through one SagaExecutor, and proof that finished sagas are released.

Peak RSS: a fresh child process opens a store, builds an executor and runs one saga (the setup: imports, the
store's connection and schema, lazily built validators and prepared statements), then runs 10,000 10-step sagas,
50 at a time. The floor is the process's RSS after the setup (and a gc.collect()); the report is the peak RSS
during the run (VmHWM, reset after the setup, the reset checked), how far above the floor it went, and the ratio
peak / floor. The peak includes, on purpose, the working set of 50 sagas in flight, finished sagas waiting for
the cyclic GC (if anything of them is in a reference cycle), allocator fragmentation, and for SQLite the page
cache filling up to its cache_size as the file grows. To tell a plateau from retention, the peak is also read
after the first half of the sagas: retention shows as growth of the peak over the second half, per saga.
Stores: `memory://` (a MemoryStore keeps every saga it is given, by design: its growth is the store's, not the
executor's), a MemoryStore that forgets finished sagas (what the executor alone retains; not durable), and, in the
full run, a SQLite file (synchronous=FULL), where finished sagas live on disk: the only durable store here.

Release: in a fresh child process, with tracemalloc on, the executor runs 100 sagas (warm-up), then N more in
two halves; after each phase, `gc.collect()`, then the traced memory and the number of live objects of
saga_runtime types are taken. The floor is the memory after the warm-up; `ratio` is the memory after N sagas
over it (~1.0: nothing retained), and `bytes retained per saga` is the growth over the second half divided by
its sagas: about 0 when finished sagas are released, whatever N is. Those marks follow a gc.collect(), so they
do not see what only the cyclic GC frees: `objects left to the cyclic GC per saga` runs 200 more sagas with the
GC off and counts the objects `gc.collect()` then frees (0 when finished sagas are freed by reference counting alone;
anything else is freed only by a full collection, and piles up between them: that shows in the peak RSS).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.durable import PLAN, registry
from saga_runtime import MemoryStore, SagaExecutor, SagaStore, open_store
from saga_runtime._records import SagaRow, StepRow

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = 50
MIB = 1024 * 1024


class ForgetfulStore(MemoryStore):
    """A MemoryStore that drops a saga once it has finished: what is left in memory is the executor's."""

    async def save(self, saga: SagaRow | None, steps: Sequence[StepRow], **options: Any) -> None:
        # **options: whatever keywords the store contract adds (e.g. owner=) go through unchanged.
        await super().save(saga, steps, **options)
        if saga is not None and saga.status.is_terminal:
            self._sagas.pop(saga.saga_id, None)
            for row in self._steps.pop(saga.saga_id, {}).values():
                self._keys.pop(row.idempotency_key, None)


STORES = {
    "memory:// (keeps every saga)": "memory",
    "memory, forgetting finished sagas (the executor alone)": "forgetful",
    "sqlite file (synchronous=FULL)": "sqlite",
}


@dataclass
class Memory:
    """One child process's report."""

    workload: str
    store: str
    sagas: int
    values: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "store": self.store, "sagas": self.sagas, **self.values}


# -- in the child process -----------------------------------------------------------------------------------------


def _status(field: str) -> int:
    """Return a VmRSS/VmHWM-like field of /proc/self/status, in bytes."""
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert match is not None, field
    return int(match.group(1)) * 1024


def _reset_peak() -> None:
    """Reset VmHWM (the peak RSS) to the RSS now (Linux 4.0+); raise if the kernel did not."""
    Path("/proc/self/clear_refs").write_text("5")
    peak, rss = _status("VmHWM"), _status("VmRSS")
    if peak > rss + MIB // 4:  # else the "peak" would be the setup's (or the imports') high-water mark
        raise RuntimeError(f"VmHWM was not reset ({peak / MIB:.1f} MiB > RSS {rss / MIB:.1f} MiB)")


async def _run_many(executor: SagaExecutor, count: int) -> None:
    """Run `count` sagas, CONCURRENCY at a time, keeping no reference to their results."""
    remaining = iter(range(count))

    async def worker() -> None:
        for _ in remaining:
            result = await executor.run(PLAN)
            assert result.status.value == "SUCCESS", result.error

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


async def _with_store(kind: str, work: Callable[[SagaStore], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            async with open_store(f"sqlite:///{folder}/sagas.db", synchronous="FULL") as store:
                return await work(store)
    return await work(ForgetfulStore() if kind == "forgetful" else MemoryStore())


async def _rss(kind: str, count: int) -> dict[str, Any]:
    async def work(store: SagaStore) -> dict[str, Any]:
        executor = SagaExecutor(registry, store=store)
        await _run_many(executor, 1)
        gc.collect()
        setup = _status("VmRSS")
        _reset_peak()
        await _run_many(executor, count // 2)
        half = _status("VmHWM")
        await _run_many(executor, count - count // 2)
        peak = _status("VmHWM")
        return {
            "floor: RSS after setup (MiB)": round(setup / MIB, 1),
            "peak RSS (MiB)": round(peak / MIB, 1),
            "peak above setup after N/2 (MiB)": round((half - setup) / MIB, 1),
            "peak above setup (MiB)": round((peak - setup) / MIB, 1),
            # Not (peak - setup) / count: the peak is a plateau reached early, not a cost per saga.
            "peak growth over 2nd half (bytes per saga)": round((peak - half) / (count - count // 2)),
            "ratio": round(peak / setup, 3),
        }

    return await _with_store(kind, work)


async def _cyclic_garbage(executor: SagaExecutor, count: int) -> float:
    """Run `count` sagas with the GC off; return the objects per saga that `gc.collect()` then frees."""
    gc.collect()
    gc.disable()
    try:
        await _run_many(executor, count)
        found = gc.collect()
    finally:
        gc.enable()
    return round(found / count, 1)


def _live_objects() -> int:
    """Count the live (gc-tracked) objects whose type comes from saga_runtime."""
    return sum(1 for obj in gc.get_objects() if type(obj).__module__.startswith("saga_runtime"))


async def _release(kind: str, count: int) -> dict[str, Any]:
    async def work(store: SagaStore) -> dict[str, Any]:
        executor = SagaExecutor(registry, store=store)
        marks = []
        for phase in (100, count // 2, count - count // 2):
            await _run_many(executor, phase)
            gc.collect()
            marks.append((tracemalloc.get_traced_memory()[0], _live_objects()))
        (floor, floor_live), (half, _), (full, full_live) = marks
        cyclic = await _cyclic_garbage(executor, 200)
        return {
            "floor: traced KiB after 100 sagas": round(floor / 1024, 1),
            "traced KiB after N/2 more": round(half / 1024, 1),
            "traced KiB after N more": round(full / 1024, 1),
            "bytes retained per saga (2nd half)": round((full - half) / (count - count // 2), 1),
            "live saga_runtime objects (floor -> end)": f"{floor_live} -> {full_live}",
            "objects left to the cyclic GC per saga": cyclic,
            "ratio": round(full / floor, 3),
        }

    tracemalloc.start()
    try:
        return await _with_store(kind, work)
    finally:
        tracemalloc.stop()


def child(argv: list[str]) -> None:
    """`python -m benchmarks.memory rss|release STORE COUNT`: print one JSON line of results."""
    what, kind, count = argv[0], argv[1], int(argv[2])
    print(json.dumps(asyncio.run((_rss if what == "rss" else _release)(kind, count))))


# -- in the parent ------------------------------------------------------------------------------------------------


def _spawn(what: str, kind: str, count: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", what, kind, str(count)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {what} child for {kind} failed:\n{done.stderr}")
    values: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return values


def rss(quick: bool = False, note: Callable[[str], None] = lambda _: None) -> list[Memory]:
    """Measure peak RSS per store; `quick`: 500 sagas, in-memory stores only, to check the script works."""
    count = 500 if quick else 10_000
    results = []
    for name, kind in STORES.items():
        if not (quick and kind == "sqlite"):
            note(f"memory: peak RSS, {kind}")
            results.append(Memory("peak RSS", name, count, _spawn("rss", kind, count)))
    return results


def release(quick: bool = False, note: Callable[[str], None] = lambda _: None) -> list[Memory]:
    """Show finished sagas are released, with both in-memory stores; `quick`: 500 sagas."""
    count = 500 if quick else 10_000
    results = []
    for name, kind in list(STORES.items())[:2]:
        note(f"memory: release, {kind}")
        results.append(Memory("release", name, count, _spawn("release", kind, count)))
    return results


if __name__ == "__main__":
    if len(sys.argv) == 4:
        child(sys.argv[1:])
    else:
        for item in [*rss(quick="--quick" in sys.argv, note=print), *release(quick="--quick" in sys.argv, note=print)]:
            print(item.as_dict())
