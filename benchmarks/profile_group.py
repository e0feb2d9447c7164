"""Where a parallel group's overhead goes: instructions of one 100-step group against `asyncio.gather`'s.

Wall-clock is noisy on a shared machine; instruction counts are not. benchmarks.group's workload (one saga of a
single group of 100 steps that each sleep 10 ms, in memory) and its floor (`asyncio.gather` of the same 100 sleeps),
counted by the same harness:

    python -m benchmarks.profile_group run [--groups N] [--gather] [--warm-up W]
        run N groups (or, --gather, N gathers) after a warm-up of W (what the two below measure)
    python -m benchmarks.profile_group ir [--groups N] [--warm-up W] [--only group|gather]
        instructions (valgrind cachegrind, Ir) per group and per gather: a run of N minus a run of none, each;
        and the group's overhead (its Ir minus gather's); --only: count one of them
    python -m benchmarks.profile_group profile [--groups N] [--top K]
        cProfile: own time per function, per group
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
from typing import Any

from benchmarks.group import PLAN, SLEEP_S, WIDTH, registry
from benchmarks.profile_overhead import _module
from saga_runtime import SagaExecutor

WARM_UP = 5  # groups run before counting: caches filled, code paths warm


async def _gathers(n: int) -> None:
    for _ in range(n):
        await asyncio.gather(*(asyncio.sleep(SLEEP_S) for _ in range(WIDTH)))


async def _groups(executor: SagaExecutor, n: int) -> None:
    for _ in range(n):
        result = await executor.run(PLAN)
        assert result.status.value == "SUCCESS", result.error


def run(groups: int, *, gather: bool = False, warm_up: int = WARM_UP, profile: cProfile.Profile | None = None) -> None:
    """Run `groups` groups (or gathers) after `warm_up` of them."""

    async def main() -> None:
        if gather:
            await _gathers(warm_up)
            await _gathers(groups)
            return
        executor = SagaExecutor(registry)
        await _groups(executor, warm_up)
        if profile is not None:
            profile.enable()
        await _groups(executor, groups)
        if profile is not None:
            profile.disable()

    asyncio.run(main())


def _ir(groups: int, gather: bool, warm_up: int) -> int:
    """Return the instructions valgrind counts for a process running `groups` groups (or gathers) and the warm-up."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cachegrind.out")
        command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}", sys.executable]
        command += ["-m", "benchmarks.profile_group", "run", "--groups", str(groups), "--warm-up", str(warm_up)]
        command += ["--gather"] if gather else []
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            summary = next(line for line in f if line.startswith("summary:"))
        return int(summary.split()[1])


def instructions(groups: int, *, gather: bool = False, warm_up: int = WARM_UP) -> float:
    """Return the instructions per group (or gather): a run of `groups` minus a run of none."""
    return (_ir(groups, gather, warm_up) - _ir(0, gather, warm_up)) / groups


def _profile(groups: int, top: int) -> None:
    profiler = cProfile.Profile()
    run(groups, profile=profiler)
    stats = pstats.Stats(profiler)
    raw: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in raw.values())
    print(f"profiled: {total / groups * 1e3:.2f} ms of own time per group")
    rows = sorted(raw.items(), key=lambda item: item[1][2], reverse=True)
    for (filename, line, name), (_, calls, tottime, cumtime, _) in rows[:top]:
        where = f"{_module(filename)}:{line} {name}"
        share = tottime / total * 100
        print(f"  {share:5.1f}%  cum {cumtime / total * 100:5.1f}%  calls/group {calls / groups:7.1f}  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_group", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["run", "ir", "profile"])
    parser.add_argument("--groups", type=int, default=None)
    parser.add_argument("--gather", action="store_true", help="asyncio.gather of the same sleeps instead")
    parser.add_argument("--warm-up", type=int, default=WARM_UP, help="groups run before counting")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--only", choices=["group", "gather"], default=None, help="count one of them only")
    args = parser.parse_args()
    if args.command == "run":
        run(args.groups or 0, gather=args.gather, warm_up=args.warm_up)
    elif args.command == "ir":
        groups = args.groups or 20
        if args.only is not None:
            each = instructions(groups, gather=args.only == "gather", warm_up=args.warm_up)
            print(f"{args.only} of {WIDTH}: {each:,.0f} Ir, N={groups}")
            return
        group = instructions(groups, warm_up=args.warm_up)
        floor = instructions(groups, gather=True, warm_up=args.warm_up)
        print(f"group of {WIDTH}: {group:,.0f} Ir; gather: {floor:,.0f} Ir; overhead: {group - floor:,.0f} Ir", end="")
        print(f" ({(group - floor) / WIDTH:,.0f} per step), N={groups}")
    else:
        _profile(args.groups or 50, args.top)


if __name__ == "__main__":
    main()
