"""Shared pieces of the tests that kill a child process mid-saga, then take its saga up in this process."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

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
