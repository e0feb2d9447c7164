"""Run the benchmarks: `python -m benchmarks [--quick] [--json FILE]`."""

from __future__ import annotations

import argparse
import json
import platform
import sys

from benchmarks import overhead


def main(argv: list[str] | None = None) -> int:
    """Run every benchmark and print a markdown table (and JSON, if asked)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few rounds only: check the scripts work")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    rows = [item.as_dict() for item in overhead.run(quick=args.quick)]
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.system()})")
    print("| workload | floor (µs/saga) | saga (µs) | overhead (µs/step) | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['workload']} | {row['floor_us_per_saga']} | {row['saga_us']} | "
            f"{row['overhead_us_per_step']} | {row['ratio']}x |"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"quick": args.quick, "results": rows}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
