"""Reporting helpers for `python -m benchmarks`: the progress display, markdown tables, the machine, the plot."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

Rows = list[dict[str, Any]]


class Progress:
    """A progress bar over the workloads on stderr (rich, on a terminal), else one plain line per workload."""

    def __init__(self, total: int) -> None:
        self._total = total
        self._done = 0
        self._bar: Any = None
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:  # the `cli` extra is not installed
            return
        console = Console(stderr=True)
        if console.is_terminal:
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            self._bar = Progress(*columns, console=console, transient=True)
            self._task = self._bar.add_task("benchmarks", total=total)

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def note(self, text: str) -> None:
        """Say what runs now."""
        if self._bar is not None:
            self._bar.update(self._task, description=text)
        else:
            print(f"[{self._done + 1}/{self._total}] {text}", file=sys.stderr, flush=True)

    def advance(self) -> None:
        """Count one workload done."""
        self._done += 1
        if self._bar is not None:
            self._bar.update(self._task, completed=self._done)


def table(title: str, rows: Rows) -> str:
    """Return rows of equal keys as a markdown table."""
    keys = list(rows[0])
    lines = [f"### {title}", "", "| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join("" if row[k] is None else str(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


@dataclass(frozen=True)
class Target:
    """A goal of one workload: the value `pick` reads from its rows is at most `bound` (in `unit`).

    With `at_least`, the bound is a floor instead: the value must be at least `bound`.
    """

    name: str
    bound: float
    unit: str
    pick: Callable[[Rows], float | None]
    at_least: bool = False

    def verdict(self, rows: Rows) -> dict[str, Any]:
        """Return the target's line of the report: the bound, what was measured, and met or missed."""
        value = self.pick(rows)
        met = value is not None and (value >= self.bound if self.at_least else value <= self.bound)
        status = "not measured" if value is None else "met" if met else "missed"
        return {
            "target": self.name,
            "bound": f"{'at least' if self.at_least else 'at most'} {self.bound:g} {self.unit}",
            "measured": None if value is None else f"{value:.3g} {self.unit}",
            "status": status,
        }


def value(key: str, **match: Any) -> Callable[[Rows], float | None]:
    """Return a `pick` reading `key` of the first row matching `match` (a string matches a value it starts).

    The pick returns None when no row matches or the row was skipped.
    """

    def pick(rows: Rows) -> float | None:
        for row in rows:
            if all(row.get(k) == v or (type(v) is str and str(row.get(k)).startswith(v)) for k, v in match.items()):
                found = row.get(key)
                return None if row.get("skipped") is not None or found is None else float(found)
        return None

    return pick


def machine() -> dict[str, Any]:
    """Describe where the benchmarks ran."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu": cpu,
        "cores": os.cpu_count(),
    }


def plot(rows: Rows, path: str) -> bool:
    """Plot saga and raw throughput against concurrency per store into the PNG `path`; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(figsize=(8, 5))
    for store in dict.fromkeys(row["store"] for row in rows if row["skipped"] is None):
        mine = [row for row in rows if row["store"] == store]
        levels = [row["concurrency"] for row in mine]
        (line,) = axes.plot(levels, [row["saga step transitions/s"] for row in mine], marker="o", label=f"{store}")
        raw = [row["floor: raw commits/s"] for row in mine]
        axes.plot(levels, raw, marker="x", linestyle="--", color=line.get_color(), label=f"{store}: raw floor")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("concurrent sagas (raw: concurrent writers)")
    axes.set_ylabel("step transitions/s (raw: commits/s)")
    axes.set_title("10-step sagas: throughput against concurrency")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True
