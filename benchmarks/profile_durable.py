"""Where a durable saga's client work goes: instructions per saga, and a per-function profile, on a store of choice.

The in-memory counterpart is benchmarks.profile_overhead; this one runs benchmarks.durable's plan (10 no-op steps)
against a store whose database it creates and drops (PostgreSQL, MariaDB/MySQL: on the servers of
SAGA_RUNTIME_BENCH_POSTGRES_URL / SAGA_RUNTIME_BENCH_MYSQL_URL; SQLite: a temporary file), or in memory.

    python -m benchmarks.profile_durable run STORE --sagas N [--warm-up W]
        run N sagas after a warm-up (what the two below measure)
    python -m benchmarks.profile_durable ir STORE [--sagas N] [--annotate K]
        instructions (valgrind cachegrind, Ir) per saga: a run of N sagas minus a run of none (same warm-up);
        --annotate K: also the K C functions with the most instructions of the N sagas (cg_annotate of the run
        minus the empty one)
    python -m benchmarks.profile_durable profile STORE [--sagas N] [--top K]
        cProfile: own and cumulative time per Python function, per module

STORE: memory, sqlite, postgresql, mysql.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from benchmarks._floors import database
from benchmarks.durable import PLAN, registry
from benchmarks.profile_overhead import _module
from saga_runtime import SagaExecutor, open_store

WARM_UP = 30
STORES = ("memory", "sqlite", "postgresql", "mysql")


@contextlib.asynccontextmanager
async def _url(store: str) -> AsyncIterator[str | None]:
    if store == "memory":
        yield None
    elif store == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{Path(tmp) / 'sagas.db'}"
    else:
        async with database(store) as url:
            yield url


def run(store: str, sagas: int, *, warm_up: int = WARM_UP, profile: cProfile.Profile | None = None) -> None:
    """Run `sagas` sagas of the durable plan on `store` after `warm_up` of them."""

    async def main() -> None:
        async with _url(store) as url:
            if url is None:
                executor = SagaExecutor(registry)
                await _sagas(executor, warm_up + sagas, warm_up, profile)
                return
            async with open_store(url) as opened:
                await _sagas(SagaExecutor(registry, store=opened), warm_up + sagas, warm_up, profile)

    asyncio.run(main())


async def _sagas(executor: SagaExecutor, total: int, warm_up: int, profile: cProfile.Profile | None) -> None:
    for n in range(total):
        if n == warm_up and profile is not None:
            profile.enable()
        result = await executor.run(PLAN)
        assert result.status.value == "SUCCESS", result.error
    if profile is not None:
        profile.disable()


def _cachegrind(store: str, sagas: int, warm_up: int, out: str) -> int:
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}", sys.executable]
    command += ["-m", "benchmarks.profile_durable", "run", store, "--sagas", str(sagas), "--warm-up", str(warm_up)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        return int(next(line for line in f if line.startswith("summary:")).split()[1])


def _by_function(out: str) -> dict[str, int]:
    """Return the instructions of each C function (file:function) of a cachegrind output."""
    counts: dict[str, int] = defaultdict(int)
    where = "?"
    with open(out) as f:
        for line in f:
            if line.startswith("fl="):
                file = line[3:].strip()
            elif line.startswith("fn="):
                where = f"{os.path.basename(file)}:{line[3:].strip()}"
            elif line[:1].isdigit():
                parts = line.split()
                if len(parts) > 1:
                    counts[where] += int(parts[1])
    return counts


def instructions(store: str, sagas: int, *, warm_up: int = WARM_UP, annotate: int = 0) -> float:
    """Return the instructions per saga: a run of `sagas` sagas minus a run of none, both after `warm_up`."""
    with tempfile.TemporaryDirectory() as tmp:
        full, empty = os.path.join(tmp, "full.out"), os.path.join(tmp, "empty.out")
        per_saga = (_cachegrind(store, sagas, warm_up, full) - _cachegrind(store, 0, warm_up, empty)) / sagas
        if annotate:
            base = _by_function(empty)
            diff = {name: (count - base.get(name, 0)) / sagas for name, count in _by_function(full).items()}
            print(f"C functions, Ir per saga (top {annotate} of the {sagas} sagas):")
            for name, count in sorted(diff.items(), key=lambda item: item[1], reverse=True)[:annotate]:
                print(f"  {count:12,.0f}  {count / per_saga:6.1%}  {name}")
    return per_saga


def _profile(store: str, sagas: int, top: int) -> None:
    profiler = cProfile.Profile()
    run(store, sagas, profile=profiler)
    raw: dict[tuple[str, int, str], Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in raw.values())
    print(f"own share per function (cumulative share; top {top}):")
    for (filename, line, name), (_, calls, own, cumulative, _) in sorted(
        raw.items(), key=lambda item: item[1][2], reverse=True
    )[:top]:
        where = f"{_module(filename)}:{line} {name}"
        print(f"  {own / total:6.1%}  cum {cumulative / total:6.1%}  calls/saga {calls / sagas:6.1f}  {where}")
    modules: dict[str, float] = defaultdict(float)
    for (filename, _, _), entry in raw.items():
        modules[_module(filename)] += entry[2]
    print("\nown share per module:")
    for module, seconds in sorted(modules.items(), key=lambda item: item[1], reverse=True)[:top]:
        print(f"  {seconds / total:6.1%}  {module}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_durable", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["run", "ir", "profile"])
    parser.add_argument("store", choices=STORES)
    parser.add_argument("--sagas", type=int, default=None)
    parser.add_argument("--warm-up", type=int, default=WARM_UP, help="sagas run before counting")
    parser.add_argument("--annotate", type=int, default=0, help="ir: the top K C functions too")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if args.command == "run":
        run(args.store, args.sagas or 0, warm_up=args.warm_up)
    elif args.command == "ir":
        sagas = args.sagas or 100
        per_saga = instructions(args.store, sagas, warm_up=args.warm_up, annotate=args.annotate)
        print(f"{per_saga:,.0f} Ir per durable 10-step saga on {args.store}, N={sagas}")
    else:
        _profile(args.store, args.sagas or 300, args.top)


if __name__ == "__main__":
    main()
