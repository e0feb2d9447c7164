"""The benchmark scripts work (run quick; their timings are never asserted)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import shape
from benchmarks.__main__ import WORKLOADS
from benchmarks._report import Target, value

ROOT = Path(__file__).resolve().parent.parent
STORES = ["sqlite", "postgresql", "mysql"]


def _one(results: dict[str, Any], start: str) -> list[dict[str, Any]]:
    """Return the rows of the only table whose title starts with `start`."""
    titles = [title for title in results if title.startswith(start)]
    assert len(titles) == 1, (start, list(results))
    rows: list[dict[str, Any]] = results[titles[0]]
    assert rows, titles[0]
    return rows


def _floor(row: dict[str, Any]) -> Any:
    """Return the row's floor: the value of its one key naming a floor (or the raw driver)."""
    keys = [key for key in row if key.startswith(("floor", "raw_"))]
    assert keys, row
    return row[keys[0]]


def _measured(row: dict[str, Any]) -> None:
    """A row that was not skipped has a positive floor and a positive ratio."""
    if row.get("skipped") is None:
        assert _floor(row) > 0, row
        assert row["ratio"] > 0, row


@pytest.mark.timeout(750)  # past the run's own 720 s: a quick run takes 3-8 minutes on 2 busy cores (valgrind)
def test_quick_benchmarks_run_and_report_every_workload(tmp_path: Path) -> None:
    """`python -m benchmarks --quick --json` exits 0 and reports every workload with a floor and a ratio."""
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=720,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["quick"] is True
    assert report["machine"]["cores"] >= 1
    results = report["results"]
    assert len(results) == len(WORKLOADS) == 17, list(results)
    for title, rows in results.items():
        assert f"### {title}" in done.stdout, title  # every table is printed too
        for row in rows:
            _measured(row)

    overhead = results["in memory: overhead over bare awaits"]
    assert [row["ratio"] > 0 for row in overhead] == [True, True]
    assert [row["floor_us_per_saga"] > 0 for row in overhead] == [True, True]
    assert len(_one(results, "in memory: a group of 100 steps")) == 1
    counted = _one(results, "in memory: instructions per saga")
    assert [row["sagas"] for row in counted] == [30, 30]  # --quick
    valgrind = shutil.which("valgrind") is not None
    for row in counted:  # skipped only where valgrind is missing, saying so
        assert (row["skipped"] is None) is valgrind, row
        assert row["skipped"] is not None or row["ir_per_saga"] > row["floor_ir_per_saga (bare awaits)"] > 0, row

    durable = _one(results, "durable: 10-step saga, one at a time")
    assert [row["store"].split(" ")[0] for row in durable] == STORES
    for row in durable:
        assert row["skipped"] is not None or row["ratio"] > 0, row
        assert row["skipped"] is not None or row["cpu_ratio"] > 0, row  # client CPU, time.process_time
    assert durable[0]["statements_per_saga"] > 0  # SQLite's, counted at the driver

    concurrent = _one(results, "durable: 10-step sagas at concurrency")
    assert [(row["store"].split(" ")[0], row["concurrency"]) for row in concurrent] == [
        (store, level) for store in STORES for level in (1, 50)
    ]
    for row in durable + concurrent:  # time per saga, the saga's as a multiple of the floor's
        if row["skipped"] is None:
            assert row["ratio"] == pytest.approx(row["saga_ms_per_saga"] / row["floor_ms_per_saga"], rel=0.01), row

    recovery = results["recovery: one executor taking over orphaned sagas, and takeover after a SIGKILL"]
    assert [row["store"] for row in recovery] == STORES
    for row in recovery:
        assert row["skipped"] is not None or row["recovered_sagas_per_s"] > 0, row

    fleet = _one(results, "fleet: submit -> first step")
    assert [(row["store"], row["workers"]) for row in fleet] == [("postgresql", 1)]  # --quick
    for row in fleet:
        assert row["skipped"] is not None or (row["p50_ms"] > 0 and row["claims_per_s"] > 0), row
        assert row["skipped"] is not None or row["10-step sagas/s, 25 at a time each"] > 0, row
        assert row["skipped"] is not None or row["speedup over 1 worker"] == 1.0, row  # one worker: itself
        assert row["skipped"] is not None or row["cpu per saga over 1 worker"] == 1.0, row
        assert row["skipped"] is not None or row["cpu ms per saga (workers + db), steady"] > 0, row
        assert row["skipped"] is not None or row["4 idle workers: db transactions/s"] > 0, row
    approval, claims = _one(results, "queues: approval decided")
    assert (approval["workload"], claims["workload"]) == ("approval", "claims")
    assert approval["skipped"] is not None or approval["p50_ms"] > 0, approval
    assert claims["skipped"] is not None or (claims["claims/s with"] > 0, claims["finished sagas in history"]) == (
        True,
        200_000,
    )
    [purge] = _one(results, "retention: purging finished 10-step sagas")
    assert purge["skipped"] is not None or (purge["purged_sagas"], purge["running_sagas_checked"] > 0) == (300, True)

    rss = _one(results, "memory: peak RSS")
    assert [row["sagas"] for row in rss] == [500, 500]  # --quick: the in-memory stores only
    released = _one(results, "memory: finished sagas are released")
    assert [row["store"].split(",")[0] for row in released] == ["memory:// (keeps every saga)", "memory"]

    [function] = _one(results, "in memory: 10-call saga function")
    assert (function["rounds"], function["ratio"] > 0) == (50, True), function
    resumed = _one(results, "resume: orphaned 10-call sagas")
    assert [row["orphans"] for row in resumed] == ["plan", "saga function"]
    for row in resumed:  # a recorded call is never run again; the one of unknown outcome runs once, under its key
        assert row["skipped"] is not None or (row["recorded calls run again"], row["sagas"], row["rounds"]) == (
            0,
            50,
            3,
        ), row
        assert row["skipped"] is not None or row["unknown calls run again once"] == 50, row
    [woken] = _one(results, "wake-up: send -> the waiting saga's next call")
    assert woken["skipped"] is not None or (woken["rounds"], woken["p50_ms"] > 0) == (10, True), woken
    [asleep] = _one(results, "sleepers: saga functions sleeping")
    assert asleep["skipped"] is not None or (asleep["WAITING"], asleep["holding lease, owner or slot"]) == (300, 0)
    [idle] = _one(results, "events and streams: an idle stream reader")
    assert idle["reads/s now"] > 0, idle  # it does read the store, less often
    [wake] = _one(results, "events and streams: write_stream -> read_stream")
    assert wake["values"] == 20, wake  # --quick

    targets = report["targets"]
    assert [target["target"].split(",")[0] for target in targets] == (
        ["in memory"] * 2
        + ["store shape"] * 2
        + ["instructions"] * 2
        + ["in memory"]
        + ["durable"] * 7
        + ["fleet"] * 5
        + ["queues"] * 2
        + ["retention"]
        + ["saga functions"] * 6
        + ["events and streams"] * 2
    )
    assert all(target["status"] in ("met", "missed", "not measured") for target in targets), targets
    measured = [target for target in targets if target["status"] != "not measured"]
    assert len(measured) >= 3  # the in-memory ones at least: they need no server
    if os.environ.get("CI") == "true":  # every server is up: a target reading a key no row has shows here
        unmeasured = [target["target"] for target in targets if target["status"] == "not measured"]
        uncounted = [] if valgrind else [target["target"] for target in targets[4:6]]  # no valgrind: skipped
        # --quick runs one worker
        four = "fleet, PostgreSQL, 4 workers: CPU per saga (workers + database) over 1 worker's"
        assert unmeasured == [*uncounted, four], unmeasured
    assert "### targets: " in done.stdout


def test_a_lower_bound_target_is_met_at_or_above_its_bound() -> None:
    """A Target with `at_least` is met at or above its bound, missed below it, and says which bound it is."""
    target = Target("speedup", 2.5, "x", value("speedup"), at_least=True)
    assert [target.verdict([{"speedup": x}])["status"] for x in (2.4, 2.5, 3.0)] == ["missed", "met", "met"]
    assert target.verdict([{"speedup": 3.0}])["bound"] == "at least 2.5 x"
    assert target.verdict([{"speedup": None}])["status"] == "not measured"
    upper = Target("latency", 15, "ms", value("p50"))
    assert [upper.verdict([{"p50": x}])["status"] for x in (14, 15, 16)] == ["met", "met", "missed"]
    assert upper.verdict([{"p50": 1}])["bound"] == "at most 15 ms"


def test_the_store_shape_targets_count_what_the_guard_tests_count() -> None:
    """The in-memory workload's shape targets print the core protocol's member count and the store-write call
    sites outside the journal, counted by the guard tests' functions, met at most 16 and 0."""
    [_, _, members, writes] = WORKLOADS["in memory: overhead over bare awaits"][2]
    assert members.verdict([])["measured"] == f"{shape.core_members()} members"
    assert writes.verdict([])["measured"] == f"{len(shape.writes_outside_the_journal())} sites"
    assert (members.bound, writes.bound) == (16, 0)
    assert members.verdict([])["status"] == ("met" if shape.core_members() <= 16 else "missed")
    assert writes.verdict([])["status"] == ("met" if not shape.writes_outside_the_journal() else "missed")
