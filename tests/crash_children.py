"""Shared pieces of the tests that kill a child process mid-saga, then take its saga up in this process."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import anyio
import pytest

# The child's tools note each call in the file named by $LEDGER, synced, so a killed child loses no line.
LEDGER_TOOLS = """
import os
from saga_runtime import StepContext, ToolRegistry

def note(line: str) -> None:
    with open(os.environ["LEDGER"], "a") as handle:
        handle.write(line + "\\n")
        handle.flush()
        os.fsync(handle.fileno())

registry = ToolRegistry()
"""

EFFECT_TOOLS = (
    LEDGER_TOOLS
    + """
@registry.tool
class Effect:
    async def execute(self, name: str, ctx: StepContext) -> dict:
        note(f"do {name} {ctx.idempotency_key}")
        if name == os.environ.get("DIE_IN"):
            os._exit(137)  # killed mid-call: the effect happened, its outcome was never recorded
        return {"name": name}

    async def compensate(self, result, ctx: StepContext) -> None:
        note(f"undo {ctx.args['name']} {ctx.idempotency_key}")
"""
)


def child_env(folder: Path, **extra: str) -> dict[str, str]:
    """Return a child's environment: its ledger and modules in `folder`, plus `extra`."""
    return {"LEDGER": str(folder / "ledger.txt"), "PYTHONPATH": str(folder), "PATH": "/usr/bin:/bin", **extra}


def load_tools(folder: Path, monkeypatch: pytest.MonkeyPatch, filename: str = "tools.py") -> ModuleType:
    """Import the child's tools module in this process, under a name of its own, noting to the same ledger."""
    monkeypatch.setenv("LEDGER", str(folder / "ledger.txt"))
    spec = importlib.util.spec_from_file_location(f"{Path(filename).stem}_{folder.name}", folder / filename)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def kill_agent(folder: Path, agent: str, helper: str, *argv: str) -> tuple[str, list[str]]:
    """Run `agent` beside the effect tools and tests/`helper` until it dies in the call to `d`.

    The agent is given a SQLite store's URL, then `argv`; return that URL and the ledger's lines.
    """
    url = f"sqlite:///{folder / 'sagas.db'}"
    (folder / "crash_tools.py").write_text(EFFECT_TOOLS)
    (folder / "agent.py").write_text(agent)
    shutil.copy(Path(__file__).parent / helper, folder / helper)
    command = [sys.executable, "agent.py", url, *argv]
    env = child_env(folder, DIE_IN="d")

    def child() -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(command, env=env, cwd=folder, timeout=60, check=False, capture_output=True)

    done = await anyio.to_thread.run_sync(child)
    assert done.returncode == 137, done.stderr.decode()
    return url, (folder / "ledger.txt").read_text().splitlines()


def assert_only_d_done_again(folder: Path) -> None:
    """Assert the ledger's effects: a to d done once each, d (killed mid-call) again with its key, nothing undone."""
    effects = [line.split() for line in (folder / "ledger.txt").read_text().splitlines() if line != "model"]
    assert [name for verb, name, _ in effects if verb == "do"] in (list("abcdd"), list("acbdd"))
    assert len({key for verb, name, key in effects if name == "d"}) == 1
    assert [e for e in effects if e[0] == "undo"] == []
