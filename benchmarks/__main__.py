"""Run the benchmarks: `python -m benchmarks [--quick] [--json FILE]`.

Every workload is reported against a floor measured in the same run on the same machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from typing import Any

from benchmarks import durable, overhead, recovery


def table(title: str, rows: list[dict[str, Any]]) -> str:
    """Return rows of equal keys as a markdown table."""
    keys = list(rows[0])
    lines = [f"### {title}", "", "| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join("" if row[k] is None else str(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run every benchmark and print markdown tables (and JSON, if asked)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few rounds only: check the scripts work")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    results = {
        "in memory: overhead over bare awaits": [item.as_dict() for item in overhead.run(quick=args.quick)],
        "durable: 10-step saga, one at a time, vs raw insert+commit per step": [
            item.as_dict() for item in durable.run(quick=args.quick)
        ],
        "recovery: one executor taking over orphaned sagas, and takeover after a SIGKILL": [
            item.as_dict() for item in recovery.run(quick=args.quick)
        ],
    }
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.system()}), quick={args.quick}\n")
    print("\n\n".join(table(title, rows) for title, rows in results.items()))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"quick": args.quick, "results": results}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
