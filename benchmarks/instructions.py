"""Instructions per in-memory saga, machine-independent: valgrind cachegrind's count (Ir) of the overhead plan.

The same harness as `python -m benchmarks.profile_overhead ir`: a process running N sagas after a warm-up, minus
one running none, divided by N; a successful 10-step saga of async no-op tools, and one whose last step fails so
that nine compensations run. The floor is the same count for the 10 coroutines awaited bare. Targets: at most
1.3 M instructions per successful saga (the seed without its audit log: 1.33 M), 2.0 M per failing one. Where
valgrind is not installed the rows are skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from benchmarks._report import Target, value
from benchmarks.overhead import FAILING, SUCCESS
from benchmarks.profile_overhead import ir_of

TARGETS = [
    Target(f"instructions, {SUCCESS}", 1.3e6, "Ir", value("ir_per_saga", workload=SUCCESS)),
    Target(f"instructions, {FAILING}", 2.0e6, "Ir", value("ir_per_saga", workload=FAILING)),
]

SAGAS, QUICK_SAGAS = 300, 30
WARM_UP, QUICK_WARM_UP = 50, 10
FLOOR_ROUNDS = 100  # the floor's sagas per saga counted


@dataclass
class Count:
    """One saga shape's instruction count."""

    name: str
    sagas: int
    floor_ir: float | None = None
    saga_ir: float | None = None
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        measured = self.skipped is None and self.floor_ir and self.saga_ir
        return {
            "workload": self.name,
            "sagas": self.sagas,
            "floor_ir_per_saga (bare awaits)": round(self.floor_ir) if measured and self.floor_ir else None,
            "ir_per_saga": round(self.saga_ir) if measured and self.saga_ir else None,
            "ir_per_step": round(self.saga_ir / 10) if measured and self.saga_ir else None,
            "ratio": round(self.saga_ir / self.floor_ir, 1) if measured and self.saga_ir and self.floor_ir else None,
            "skipped": self.skipped,
        }


def run(*, quick: bool = False) -> list[Count]:
    """Count the instructions of both saga shapes and of their floor (fewer sagas with `quick`)."""
    sagas, warm_up = (QUICK_SAGAS, QUICK_WARM_UP) if quick else (SAGAS, WARM_UP)
    shapes = [(SUCCESS, False), (FAILING, True)]
    if shutil.which("valgrind") is None:
        why = "valgrind is not installed (apt-get install valgrind): instructions are not counted"
        return [Count(name, sagas, skipped=why) for name, _ in shapes]
    # Each count is a run of `sagas` minus a run of none: six processes under valgrind, as many at once as cores.
    # The floor costs a few hundred instructions a saga: counted over many more rounds (they are cheap), so the
    # noise of two interpreter starts does not swamp it.
    floors = sagas * FLOOR_ROUNDS
    runs = [(floors, False, True), (0, False, True), (sagas, False, False), (0, False, False)]
    runs += [(sagas, True, False), (0, True, False)]
    try:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            counts = list(pool.map(lambda r: ir_of(r[0], fail=r[1], floor=r[2], warm_up=warm_up), runs))
    except (subprocess.CalledProcessError, OSError) as exc:
        return [Count(name, sagas, skipped=f"valgrind failed: {exc}") for name, _ in shapes]
    floor = (counts[0] - counts[1]) / floors
    success, failing = ((counts[i] - counts[i + 1]) / sagas for i in (2, 4))
    return [Count(SUCCESS, sagas, floor, success), Count(FAILING, sagas, floor, failing)]
