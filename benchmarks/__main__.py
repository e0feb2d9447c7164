"""Run the benchmarks: `python -m benchmarks [--quick] [--json FILE] [--plot FILE] [--results FILE]`.

Every workload is reported against a floor measured in the same run on the same machine, and the last table holds
each target with what was measured and whether it is met (with --quick the rounds are few and the numbers rough).
Tables go to stdout as markdown; progress goes to stderr (a bar on a terminal, plain lines otherwise). With
`--results FILE` nothing runs: the tables (and the plot) are made from a run saved with `--json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from benchmarks import (
    concurrency,
    durable,
    fleet,
    functions,
    group,
    instructions,
    memory,
    overhead,
    published,
    queues,
    recovery,
    retention,
)
from benchmarks._report import Progress, Target, machine, plot, table

Note = Callable[[str], None]

CONCURRENCY = (
    "durable: 10-step sagas at concurrency 1, 8, 50, 200 (1 and 50 with --quick): time per saga vs the raw "
    "driver's, one autocommitted INSERT of a step row per step at the same concurrency"
)

FLEET = (
    "fleet: submit -> first step with 1, 2 and 4 idle worker processes (1 on PostgreSQL only with --quick) vs "
    "the raw NOTIFY -> listener (PostgreSQL) or the poll interval (SQLite); claims/s by one worker vs raw commits/s; "
    "10-step sagas of 10 ms steps finished per second by 1, 2 and 4 workers, 25 at a time each, and their CPU per "
    "saga (PostgreSQL); database transactions/s of 4 idle workers (PostgreSQL)"
)
QUEUES = (
    "queues: approval decided -> the next step starts in an idle worker vs the raw NOTIFY -> listener; claims/s of "
    "a rate-limited queue with 200k finished sagas in history vs with none (PostgreSQL)"
)
RETENTION = (
    "retention: purging finished 10-step sagas on PostgreSQL with an archive file while 50 sagas at a time run "
    f"({retention.DEFAULT_SAGAS:,} sagas, SAGA_RUNTIME_BENCH_RETENTION_SAGAS to change; 300 with --quick)"
)

INSTRUCTIONS = (
    "in memory: instructions per saga (valgrind cachegrind, as python -m benchmarks.profile_overhead ir) vs the "
    f"same coroutines awaited bare ({instructions.SAGAS} sagas after {instructions.WARM_UP}; "
    f"{instructions.QUICK_SAGAS} after {instructions.QUICK_WARM_UP} with --quick)"
)

# title (a key of the JSON's "results") -> what to show while it runs, how to run it, and its targets
WORKLOADS: dict[str, tuple[str, Callable[[bool, Note], list[Any]], list[Target]]] = {
    "in memory: overhead over bare awaits": (
        "in memory: 10-step saga",
        lambda q, n: overhead.run(quick=q),
        overhead.TARGETS,
    ),
    INSTRUCTIONS: (
        "in memory: instructions (valgrind)",
        lambda q, n: instructions.run(quick=q),
        instructions.TARGETS,
    ),
    "in memory: a group of 100 steps x 10 ms sleep vs asyncio.gather of the same sleeps": (
        "in memory: group of 100 sleeps",
        lambda q, n: group.run(quick=q),
        group.TARGETS,
    ),
    "durable: 10-step saga, one at a time, vs one autocommitted INSERT of a step row per step on one connection": (
        "durable: one saga at a time",
        lambda q, n: durable.run(quick=q),
        durable.TARGETS,
    ),
    CONCURRENCY: ("durable: concurrency", lambda q, n: concurrency.run(quick=q, note=n), concurrency.TARGETS),
    "recovery: one executor taking over orphaned sagas, and takeover after a SIGKILL": (
        "recovery",
        lambda q, n: recovery.run(quick=q),
        [],
    ),
    FLEET: ("fleet", lambda q, n: fleet.run(quick=q), fleet.TARGETS),
    QUEUES: ("queues: wake-ups and history", lambda q, n: queues.run(quick=q), queues.TARGETS),
    RETENTION: ("retention: purge beside running sagas", lambda q, n: retention.run(quick=q), retention.TARGETS),
    "memory: peak RSS for 10,000 sagas (500 with --quick) vs RSS after setup": (
        "memory: peak RSS",
        lambda q, n: memory.rss(quick=q, note=n),
        [],
    ),
    "memory: finished sagas are released (tracemalloc after gc) vs after a warm-up": (
        "memory: release",
        lambda q, n: memory.release(quick=q, note=n),
        [],
    ),
    **{
        title: (label, lambda q, n, measure=measure: measure(q), targets)
        for title, (label, measure, targets) in functions.WORKLOADS.items()
    },
    **{
        title: (label, lambda q, n, measure=measure: measure(q), targets)
        for title, (label, measure, targets) in published.WORKLOADS.items()
    },
}


def main(argv: list[str] | None = None) -> int:
    """Run every benchmark and print markdown tables (and JSON, and a plot, if asked)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="few rounds, concurrency 1 and 8 only, 500 sagas for memory: check the scripts",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw throughput against concurrency as a PNG; needs matplotlib (pip install "
        "'saga-runtime[docs]' or matplotlib): without it, the plot is skipped with a warning",
    )
    parser.add_argument(
        "--results",
        metavar="FILE",
        help="run nothing: print the tables, and draw --plot, from a run saved with --json",
    )
    args = parser.parse_args(argv)
    if args.results:
        with open(args.results) as handle:
            report = json.load(handle)
    else:
        report = measure(args.quick)
    host = report["machine"]
    print(
        f"python {host['python']} on {host['system']}, {host['cores']} cores ({host['cpu']}), quick={report['quick']}\n"
    )
    print("\n\n".join(table(title, rows) for title, rows in report["results"].items()))
    verdicts = report["targets"]
    met = sum(verdict["status"] == "met" for verdict in verdicts)
    print("\n\n" + table(f"targets: {met} of {len(verdicts)} met", verdicts))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    if args.plot and not plot(report["results"][CONCURRENCY], args.plot):
        print("--plot: matplotlib is not installed (pip install matplotlib); no plot drawn", file=sys.stderr)
    return 0


def measure(quick: bool) -> dict[str, Any]:
    """Run every workload; return the run as --json writes it."""
    results: dict[str, list[dict[str, Any]]] = {}
    verdicts: list[dict[str, Any]] = []
    with Progress(len(WORKLOADS)) as progress:
        for title, (label, run, targets) in WORKLOADS.items():
            progress.note(label)
            results[title] = [item.as_dict() for item in run(quick, progress.note)]
            verdicts += [target.verdict(results[title]) for target in targets]
            progress.advance()
    return {"quick": quick, "machine": machine(), "results": results, "targets": verdicts}


if __name__ == "__main__":
    sys.exit(main())
