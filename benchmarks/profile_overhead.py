"""Where the in-memory overhead goes: instruction counts and a per-function profile of the overhead plan.

Wall-clock is noisy on a shared machine; instruction counts are not. Three commands:

    python -m benchmarks.profile_overhead run --sagas N [--fail] [--no-gc] [--floor] [--warm-up W]
        run N sagas of benchmarks.overhead's plan after a warm-up (what the two below measure); --floor: N times
        the floor instead (the same 10 coroutines awaited bare)
    python -m benchmarks.profile_overhead ir [--sagas N] [--fail] [--no-gc] [--floor] [--warm-up W]
        instructions (valgrind cachegrind, Ir) per saga: a run of N sagas minus a run of none
    python -m benchmarks.profile_overhead profile [--sagas N] [--fail] [--top K]
        cProfile's own time per function and per module, scaled to us per step of an unprofiled run
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import pstats
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

from benchmarks.overhead import STEPS, bare, registry
from saga_runtime import SagaExecutor

WARM_UP = 50  # sagas run before counting: caches filled, code paths warm


def _plan(fail: bool) -> list[dict[str, Any]]:
    plan: list[dict[str, Any]] = [{"tool": "Noop", "args": {"n": i}} for i in range(STEPS)]
    if fail:
        plan[-1] = {"tool": "Boom", "args": {"n": 0}}
    return plan


async def _sagas(executor: SagaExecutor, plan: list[dict[str, Any]], n: int, expect: str) -> None:
    for _ in range(n):
        result = await executor.run(plan)
        assert result.status.value == expect, result.status


async def _floors(n: int) -> None:
    for _ in range(n):
        for i in range(STEPS):
            await bare(i)


def run(
    sagas: int,
    *,
    fail: bool = False,
    profile: cProfile.Profile | None = None,
    floor: bool = False,
    warm_up: int = WARM_UP,
) -> float:
    """Run `sagas` sagas of the overhead plan after the warm-up; return their seconds (perf_counter).

    `floor`: run the floor instead, the saga's 10 coroutines awaited bare, `sagas` times.
    """
    plan = _plan(fail)
    expect = "COMPENSATED" if fail else "SUCCESS"

    async def main() -> float:
        executor = SagaExecutor(registry)
        if floor:
            await _floors(warm_up)
            started = time.perf_counter()
            await _floors(sagas)
            return time.perf_counter() - started
        await _sagas(executor, plan, warm_up, expect)
        started = time.perf_counter()
        if profile is not None:
            profile.enable()
        await _sagas(executor, plan, sagas, expect)
        if profile is not None:
            profile.disable()
        return time.perf_counter() - started

    return asyncio.run(main())


def instructions(
    sagas: int, *, fail: bool = False, no_gc: bool = False, floor: bool = False, warm_up: int = WARM_UP
) -> float:
    """Return the instructions (valgrind cachegrind) per saga: a run of `sagas` sagas minus a run of none."""
    return (_ir(sagas, fail, no_gc, floor, warm_up) - _ir(0, fail, no_gc, floor, warm_up)) / sagas


def ir_of(sagas: int, *, fail: bool = False, floor: bool = False, warm_up: int = WARM_UP) -> int:
    """Return the instructions valgrind counts for a process running `sagas` sagas after `warm_up`."""
    return _ir(sagas, fail, False, floor, warm_up)


def _ir(sagas: int, fail: bool, no_gc: bool, floor: bool = False, warm_up: int = WARM_UP) -> int:
    """Return the instructions valgrind counts for a process running `sagas` sagas (and the warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cachegrind.out")
        command = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            f"--cachegrind-out-file={out}",
            sys.executable,
            "-m",
            "benchmarks.profile_overhead",
            "run",
            "--sagas",
            str(sagas),
            "--warm-up",
            str(warm_up),
        ]
        command += ["--fail"] if fail else []
        command += ["--no-gc"] if no_gc else []
        command += ["--floor"] if floor else []
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            summary = next(line for line in f if line.startswith("summary:"))
        return int(summary.split()[1])


def _module(filename: str) -> str:
    match = re.search(r"saga_runtime/(.+)\.py$", filename)
    if match:
        return "saga_runtime/" + match.group(1)
    if filename.startswith("~") or filename == "":
        return "(builtins)"
    match = re.search(r"(asyncio|anyio|pydantic|sniffio)[/\\]", filename)
    return match.group(1) if match else os.path.basename(filename)


def _profile(sagas: int, fail: bool, top: int) -> None:
    plain = min(run(sagas, fail=fail) for _ in range(3))  # the unprofiled time the shares are scaled to
    profiler = cProfile.Profile()
    run(sagas, fail=fail, profile=profiler)
    stats = pstats.Stats(profiler)
    raw: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in raw.values())
    scale = plain / total / sagas / STEPS * 1e6  # profiled seconds -> unprofiled us per step
    print(f"unprofiled: {plain / sagas * 1e6:.1f} us per saga, {plain / sagas / STEPS * 1e6:.2f} us per step")
    print(f"\nown time per function, us per step (scaled to the unprofiled run; top {top}):")
    rows = sorted(raw.items(), key=lambda item: item[1][2], reverse=True)
    for (filename, line, name), (_, calls, tottime, cumtime, _) in rows[:top]:
        where = f"{_module(filename)}:{line} {name}"
        print(f"  {tottime * scale:6.2f}  cum {cumtime * scale:6.2f}  calls/saga {calls / sagas:6.1f}  {where}")
    modules: dict[str, float] = defaultdict(float)
    for (filename, _, _), entry in raw.items():
        modules[_module(filename)] += entry[2]
    print("\nown time per module, us per step:")
    for module, seconds in sorted(modules.items(), key=lambda item: item[1], reverse=True)[:top]:
        print(f"  {seconds * scale:6.2f}  {module}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_overhead", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["run", "ir", "profile"])
    parser.add_argument("--sagas", type=int, default=None)
    parser.add_argument("--fail", action="store_true", help="the last step fails: nine compensations")
    parser.add_argument("--no-gc", action="store_true", help="with the garbage collector disabled")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--floor", action="store_true", help="the floor (10 bare awaits) instead of a saga")
    parser.add_argument("--warm-up", type=int, default=WARM_UP, help="sagas run before counting")
    args = parser.parse_args()
    if args.no_gc:
        gc.disable()
    if args.command == "run":
        run(args.sagas or 0, fail=args.fail, floor=args.floor, warm_up=args.warm_up)
    elif args.command == "ir":
        sagas = args.sagas or 200
        per_saga = instructions(sagas, fail=args.fail, no_gc=args.no_gc, floor=args.floor, warm_up=args.warm_up)
        kind = "floor (bare awaits) of a" if args.floor else "failing" if args.fail else "successful"
        print(f"{per_saga:,.0f} Ir per {kind} {STEPS}-step saga ({per_saga / STEPS:,.0f} per step), N={sagas}")
    else:
        _profile(args.sagas or 2000, args.fail, args.top)


if __name__ == "__main__":
    main()
