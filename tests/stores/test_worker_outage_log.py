"""A PostgreSQL outage under a real `saga-runtime worker` is two log lines: one as it starts, one as it ends.

The server is a private one (tests/stores/private_postgres.py), stopped for a few seconds under an idle worker
whose claims and recovery rounds run every 50 ms, each retrying its lost connection many times meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .private_postgres import PrivatePostgres, private_postgres_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SCRIPT = Path(sys.executable).with_name("saga-runtime")
OUTAGE = 5.0  # seconds the server is down
TOOLS = textwrap.dedent(
    """
    from saga_runtime import Queue, ToolRegistry

    registry = ToolRegistry()
    QUEUES = [Queue("jobs", concurrency=2)]


    @registry.tool
    class Nothing:
        async def execute(self) -> None:
            return None
    """
)


@pytest.fixture
def server() -> Iterator[PrivatePostgres]:
    """Return a private PostgreSQL server of this test."""
    with private_postgres_or_skip() as started:
        yield started


def _wait_for(path: Path, text: str, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while text not in path.read_text():
        assert process.poll() is None, path.read_text()
        assert time.monotonic() < deadline, f"no {text!r} within {seconds}s:\n{path.read_text()}"
        time.sleep(0.05)


def test_an_outage_is_one_line_as_it_starts_and_one_as_it_ends(server: PrivatePostgres, tmp_path: Path) -> None:
    """Five seconds down: the worker logs "unreachable" once and "answers again" once (with a count), nothing else."""
    (tmp_path / "outage_tools.py").write_text(TOOLS)
    env = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}
    env.update(PYTHONPATH=str(tmp_path), COLUMNS="300")
    command = [
        str(SCRIPT), "--db", server.url + "?retry_for=120", "worker", "--tools", "outage_tools:registry",
        "--queues", "outage_tools:QUEUES", "--interval", "0.05", "--lease-timeout", "2",
    ]  # fmt: skip
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=out)
    try:
        _wait_for(log, "serving", worker, 60)
        time.sleep(0.5)
        server.stop("fast")
        time.sleep(OUTAGE)
        server.start()
        _wait_for(log, "answers again", worker, 60)
        time.sleep(1.0)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    lines = log.read_text().splitlines()
    warnings = [line for line in lines if "WARNING" in line]
    print("\n" + "\n".join(warnings))
    assert len(warnings) == 2, lines
    assert "unreachable" in warnings[0]
    assert "answers again after" in warnings[1]
    assert "failed tries" in warnings[1]
    assert "Traceback" not in log.read_text()
