"""An idle `saga-runtime worker` stops on SIGTERM at once and quietly, even in its first second (issue 35, 9).

A real worker process on PostgreSQL and MariaDB/MySQL; the time is from the signal to the process's exit.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("saga-runtime")
TOOLS = textwrap.dedent(
    """
    from saga_runtime import Queue, ToolRegistry

    registry = ToolRegistry()
    QUEUES = [Queue("idle", concurrency=2)]


    @registry.tool
    class Nothing:
        async def execute(self) -> None:
            return None
    """
)
# When SIGTERM comes, in seconds after the worker says it serves: its first claims and recovery round are then
# under way (opening pool connections, in transactions).
MOMENTS = (0.0, 0.05, 0.3)
NOISE = ("Traceback", "never retrieved", "Resetting connection", "Exception")

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("kind", ["postgresql", "mysql"])]


def stop_after(url: str, folder: Path, moment: float) -> tuple[float, str]:
    """Start a worker, SIGTERM it `moment` seconds after it serves; return how long it took to exit, and its output."""
    env = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}
    env.update(PYTHONPATH=str(folder), COLUMNS="300")
    command = [str(SCRIPT), "--db", url, "worker", "--tools", "stop_tools:registry", "--queues", "stop_tools:QUEUES"]
    process = subprocess.Popen(command, cwd=folder, env=env, stderr=subprocess.PIPE)
    assert process.stderr is not None
    try:
        said = b""
        deadline = time.monotonic() + 60
        while b"serving" not in said:
            assert process.poll() is None, said.decode()
            assert time.monotonic() < deadline, said.decode()
            said += os.read(process.stderr.fileno(), 4096)
        time.sleep(moment)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        rest = process.stderr.read()
        code = process.wait(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()
    output = (said + rest).decode()
    assert code == 0, output
    return took, output


def test_an_idle_worker_stops_on_sigterm_at_once_and_says_nothing_more(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """SIGTERM at once, 50 ms or 300 ms after it serves: exit 0, no traceback or driver noise, within 0.5 s."""
    url = request.getfixturevalue("postgres_url" if kind == "postgresql" else "mysql_url")
    (tmp_path / "stop_tools.py").write_text(TOOLS)
    times = []
    for moment in MOMENTS:
        took, output = stop_after(url, tmp_path, moment)
        assert not [noise for noise in NOISE if noise in output], output
        assert "stopped; its sagas are released" in output
        times.append(took)
    print(f"\n{kind}: stops took " + ", ".join(f"{took:.3f}s" for took in times))
    assert statistics.median(times) < 0.5, times  # the median: one hiccup of a shared machine is not the worker's
