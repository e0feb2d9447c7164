"""A process killed right after an approval is recorded, before the approved step runs (SQL stores).

The decision is durable and consumed once: a recovering worker runs the step exactly once, whether the deciding
process died the moment the decision was stored or just after it took the saga up again to run it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from crash_children import LEDGER_TOOLS, child_env, load_tools

from saga_runtime import SagaExecutor, SagaStatus, StepStatus

from .conftest import Stores

pytestmark = pytest.mark.slow

TOOLS = LEDGER_TOOLS + textwrap.dedent(
    """
    @registry.tool
    class Charge:
        async def execute(self, amount: int, ctx: StepContext) -> dict:
            note(f"charge {ctx.idempotency_key}")
            return {"amount": amount}

        async def compensate(self, result, ctx: StepContext) -> None:
            note(f"refund {ctx.idempotency_key}")

    @registry.tool(approval=True)
    class Refund:
        async def execute(self, amount: int, ctx: StepContext) -> dict:
            note(f"refund-card {ctx.idempotency_key}")
            return {"refunded": amount}
    """
)

DECIDER = textwrap.dedent(
    """
    import asyncio, os, sys
    from saga_runtime import SagaExecutor, open_store
    from tools import registry

    def die_at(event) -> None:
        if event.kind == os.environ["DIE_AT"]:
            os._exit(137)  # killed: the decision (or the claim that follows it) is stored, the step did not run

    async def main() -> None:
        async with open_store(sys.argv[1]) as store:
            executor = SagaExecutor(registry, store=store, executor_id="decider", lease_timeout=1.0, hooks=[die_at])
            await executor.approve("refund-7", "refund", by="alice", note="over the limit, checked")

    asyncio.run(main())
    """
)

PLAN = [
    {"id": "charge", "tool": "Charge", "args": {"amount": 9000}},
    {"id": "refund", "tool": "Refund", "args": {"amount": 9000}},
]


def run_decider(folder: Path, url: str, die_at: str) -> int:
    """Run the deciding process; return its exit code."""
    env = child_env(folder, DIE_AT=die_at)
    done = subprocess.run([sys.executable, str(folder / "decider.py"), url], env=env, timeout=60, check=False)
    return done.returncode


@pytest.mark.parametrize("die_at", ["approval_decided", "saga_started"])
async def test_a_worker_runs_the_approved_step_once_after_the_decider_was_killed(
    stores: Stores, sql_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, die_at: str
) -> None:
    """Killed once the approval is stored (or once it took the saga up to run it): recovery runs the step once."""
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "decider.py").write_text(DECIDER)
    store = await stores.open(sql_kind, wipe=True)
    executor = SagaExecutor(load_tools(tmp_path, monkeypatch).registry, store=store)
    waiting = await executor.run(PLAN, saga_id="refund-7")
    assert waiting.status is SagaStatus.WAITING

    assert run_decider(tmp_path, stores.url(sql_kind), die_at) == 137
    ledger = tmp_path / "ledger.txt"
    assert [line.split()[0] for line in ledger.read_text().splitlines()] == ["charge"]
    at_crash = await store.get_saga("refund-7")
    assert at_crash is not None
    assert at_crash.approvals[0].decision == "approved"
    assert at_crash.step("refund").status is StepStatus.WAITING  # decided, never started

    results = await executor.recover()
    if die_at == "saga_started":  # the dead decider held the saga: its lease runs out first
        assert results == []
        await anyio.sleep(1.2)
        results = await executor.recover()
    assert [r.status for r in results] == [SagaStatus.SUCCESS]
    assert await executor.recover() == []
    lines = ledger.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["charge", "refund-card"]
    assert lines[1].split()[1] == results[0].step("refund").idempotency_key
    assert results[0].step("refund").attempts == 1
    assert await store.verify_saga("refund-7")
