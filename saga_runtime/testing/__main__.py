"""The crash point's child process (`python -m saga_runtime.testing _run CONFIG`), and a command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from saga_runtime._executor import SagaExecutor
from saga_runtime._storage import open_store
from saga_runtime.testing._harness import check_crash_points
from saga_runtime.testing._ledger import Ledger, instrument, load_registry
from saga_runtime.testing._reports import CrashPoint, CrashReport

# -- the child process, and a command line


async def _run(config: Mapping[str, Any]) -> int:
    """Run the plan once as a crash point's child: killed there, or 0 if never reached."""
    point = None if config["point"] is None else CrashPoint(**config["point"])
    ledger = Ledger(config["ledger"], "run", point, config["fail_step"])
    registry = instrument(load_registry(config["registry"]), ledger)
    async with open_store(config["url"]) as store:
        executor = SagaExecutor(
            registry,
            store=store,
            executor_id=f"crash-harness-run-{os.getpid()}",
            lease_timeout=float(config["lease_timeout"]),
        )
        await executor.run(config["plan"], args=config.get("args"), saga_id=config["saga_id"])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Check a plan from the command line: `python -m saga_runtime.testing module:registry plan.json [--url URL]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["_run"]:
        return anyio.run(_run, json.loads(args[1]))
    parser = argparse.ArgumentParser(prog="python -m saga_runtime.testing", description=main.__doc__)
    parser.add_argument("registry", help="the ToolRegistry to test, as package.module:attribute")
    parser.add_argument("plan", help="a JSON file holding the plan")
    parser.add_argument("--url", help="a scratch store (default: a temporary SQLite file)")
    parser.add_argument("--fail-step", help="make this step fail without calling its tool, to test compensation")
    parser.add_argument("--concurrency", type=int, default=4, help="children running at once (default 4)")
    options = parser.parse_args(args)
    plan = json.loads(Path(options.plan).read_text())

    async def check() -> CrashReport:
        return await check_crash_points(
            options.registry, plan, url=options.url, fail_step=options.fail_step, concurrency=options.concurrency
        )

    report = anyio.run(check)
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
