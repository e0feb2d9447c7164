"""The benchmark scripts work (run quick; their timings are never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmarks_run_and_report_every_workload(tmp_path: Path) -> None:
    """`python -m benchmarks --quick --json` exits 0 and reports every workload with a floor and a ratio."""
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())["results"]
    memory = results["in memory: overhead over bare awaits"]
    assert [row["ratio"] > 0 for row in memory] == [True, True]
    durable = results["durable: 10-step saga, one at a time, vs raw insert+commit per step"]
    assert [row["store"].split(" ")[0] for row in durable] == ["sqlite", "postgresql", "mysql"]
    for row in durable:
        assert row["skipped"] is not None or row["ratio"] > 0, row
    recovery = results["recovery: one executor taking over orphaned sagas, and takeover after a SIGKILL"]
    assert [row["store"] for row in recovery] == ["sqlite", "postgresql", "mysql"]
    for row in recovery:
        assert row["skipped"] is not None or row["recovered_sagas_per_s"] > 0, row
