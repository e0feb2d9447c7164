"""A process killed inside a dynamic saga: re-entered with the same id, it repeats no finished call (SQL stores).

The memory store dies with its process, so these run on SQLite, PostgreSQL and MySQL/MariaDB only.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from crash_children import EFFECT_TOOLS, child_env, load_tools

from saga_runtime import Budget, ReplayDivergenceError, SagaExecutor, SagaStatus

from .conftest import Stores

AGENT = textwrap.dedent(
    """
    import asyncio, sys
    from saga_runtime import Budget, SagaExecutor, open_store
    from tools import registry

    async def main() -> None:
        async with open_store(sys.argv[1]) as store:
            executor = SagaExecutor(registry, store=store, executor_id="agent-host")
            async with executor.saga(saga_id="killed", budget=Budget(max_cost=10)) as saga:
                for name in ("a", "b", "c", "d"):
                    await saga.charge(cost=0.5)
                    await saga.call("Effect", name=name)

    asyncio.run(main())
    """
)


def ledger_lines(path: Path) -> list[str]:
    """Return the ledger's lines."""
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    """Return a folder holding the tools module and the agent script."""
    (tmp_path / "tools.py").write_text(EFFECT_TOOLS)
    (tmp_path / "agent.py").write_text(AGENT)
    return tmp_path


def run_agent(folder: Path, url: str, die_in: str | None) -> int:
    """Run the agent in a child process; return its exit code."""
    env = child_env(folder, DIE_IN=die_in) if die_in else child_env(folder)
    done = subprocess.run([sys.executable, str(folder / "agent.py"), url], env=env, timeout=60, check=False)
    return done.returncode


async def test_killed_dynamic_saga_reentered_repeats_no_finished_call(
    stores: Stores, sql_kind: str, agent_dir: Path
) -> None:
    """After a kill inside call c, re-entry serves a and b from the record, re-runs c with its key, then goes on."""
    store = await stores.open(sql_kind, wipe=True)
    url = stores.url(sql_kind)
    assert run_agent(agent_dir, url, die_in="c") == 137
    before = ledger_lines(agent_dir / "ledger.txt")
    assert [line.split()[:2] for line in before] == [["do", "a"], ["do", "b"], ["do", "c"]]
    key_of_c = before[2].split()[2]

    assert run_agent(agent_dir, url, die_in=None) == 0
    after = ledger_lines(agent_dir / "ledger.txt")[len(before) :]
    assert after == [f"do c {key_of_c}", after[1]]  # c again with its original key, then d; never a or b
    assert after[1].startswith("do d ")

    result = await store.get_saga("killed")
    assert result is not None
    assert result.status is SagaStatus.SUCCESS
    assert [(s.step_id, s.attempts) for s in result.steps] == [
        ("Effect-0", 1),
        ("Effect-1", 1),
        ("Effect-2", 2),
        ("Effect-3", 1),
    ]
    assert result.cost == 2.0  # four charges of 0.5: the two re-executed ones were not counted again
    assert await store.verify_saga("killed")


async def test_killed_dynamic_saga_replays_and_detects_divergence(
    stores: Stores, sql_kind: str, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished saga re-entered after the kill-and-resume replays from the record and catches a changed call."""
    store = await stores.open(sql_kind, wipe=True)
    url = stores.url(sql_kind)
    assert run_agent(agent_dir, url, die_in="b") == 137
    assert run_agent(agent_dir, url, die_in=None) == 0
    lines = len(ledger_lines(agent_dir / "ledger.txt"))
    executor = SagaExecutor(load_tools(agent_dir, monkeypatch).registry, store=store)
    served = []

    async def replay_with_a_changed_second_call() -> None:
        async with executor.saga(saga_id="killed", replay=True, budget=Budget(max_cost=10)) as saga:
            served.append(await saga.call("Effect", name="a"))
            await saga.call("Effect", name="x")

    with pytest.raises(ReplayDivergenceError, match="call #2"):
        await replay_with_a_changed_second_call()
    assert served == [{"name": "a"}]
    assert len(ledger_lines(agent_dir / "ledger.txt")) == lines  # replay called no tool
