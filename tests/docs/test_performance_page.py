"""The performance page's plot: `python -m benchmarks --results FILE --plot PNG` redraws a saved run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.__main__ import CONCURRENCY

ROOT = Path(__file__).resolve().parents[2]


def saved_run() -> dict[str, object]:
    """Return a small run as `--json` writes it: two stores at two concurrencies, one target."""
    rows = [
        {
            "store": store,
            "concurrency": level,
            "floor: raw commits/s": 800.0 * level**0.5,
            "saga step transitions/s": 500.0 * level**0.7,
            "ratio": 1.5,
            "skipped": None,
        }
        for store in ("sqlite", "postgresql")
        for level in (1, 50)
    ]
    host = {"python": "3.11", "system": "Linux", "cores": 2, "cpu": "a CPU"}
    target = {"target": "throughput at 50", "bound": "at most 1 x", "measured": "0.9 x", "status": "met"}
    return {"quick": True, "machine": host, "results": {CONCURRENCY: rows}, "targets": [target]}


def test_a_saved_run_is_tabled_and_plotted_without_running(tmp_path: Path) -> None:
    """--results prints the saved run's tables and targets and --plot writes a PNG of it, in seconds."""
    saved, png = tmp_path / "run.json", tmp_path / "throughput.png"
    saved.write_text(json.dumps(saved_run()))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--results", str(saved), "--plot", str(png)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"### {CONCURRENCY}" in done.stdout
    assert "targets: 1 of 1 met" in done.stdout
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_the_performance_page_shows_the_plot_it_says_how_to_make() -> None:
    """The page embeds a checked-in PNG and names the command that draws it."""
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert "](img/throughput.png)" in page
    assert "--plot" in page
    assert (ROOT / "docs" / "img" / "throughput.png").read_bytes().startswith(b"\x89PNG")
