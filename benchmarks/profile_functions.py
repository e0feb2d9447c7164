"""Instructions (valgrind cachegrind, Ir) per saga: a 10-call saga function against the same 10 calls as a plan.

python -m benchmarks.profile_functions ir [--sagas N] [--no-gc]
    Ir per saga of each kind (a run of N sagas after the warm-up minus a run of none) and their ratio: the
    instruction count behind benchmarks.functions' in-memory row
python -m benchmarks.profile_functions run KIND --sagas N [--no-gc]
    run N sagas of KIND ("function" or "plan") after the warm-up (what `ir` counts)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import sys
import tempfile

from benchmarks.functions import PLAN, registry, ten_calls
from saga_runtime import SagaExecutor, SagaStatus

WARM_UP = 50
KINDS = ("function", "plan")


def run(kind: str, sagas: int, warm_up: int = WARM_UP) -> None:
    """Run `sagas` sagas of `kind` after the warm-up, in one executor."""

    async def main() -> None:
        executor = SagaExecutor(registry)
        for _ in range(warm_up + sagas):
            result = await (executor.run(ten_calls) if kind == "function" else executor.run(PLAN))
            assert result.status is SagaStatus.SUCCESS, result.error

    asyncio.run(main())


def _ir(kind: str, sagas: int, no_gc: bool) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cachegrind.out")
        command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}"]
        command += [sys.executable, "-m", "benchmarks.profile_functions", "run", kind, "--sagas", str(sagas)]
        command += ["--no-gc"] if no_gc else []
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            return int(next(line for line in f if line.startswith("summary:")).split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_functions", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["run", "ir"])
    parser.add_argument("kind", nargs="?", choices=KINDS, default="function")
    parser.add_argument("--sagas", type=int, default=300)
    parser.add_argument("--no-gc", action="store_true", help="with the garbage collector disabled (less noise)")
    args = parser.parse_args()
    if args.no_gc:
        gc.disable()
    if args.command == "run":
        run(args.kind, args.sagas)
        return
    per_saga = {}
    for kind in KINDS:
        per_saga[kind] = (_ir(kind, args.sagas, args.no_gc) - _ir(kind, 0, args.no_gc)) / args.sagas
        print(f"{kind}: {per_saga[kind]:,.0f} Ir per 10-call saga", flush=True)
    print(f"function / plan: {per_saga['function'] / per_saga['plan']:.3f} (N={args.sagas})")


if __name__ == "__main__":
    main()
