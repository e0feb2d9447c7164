"""The sealed saga row, on every store: edits of the saga's own record are reported, numbers round-trip exactly."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from saga_runtime import Budget, SagaExecutor, StepContext, ToolRegistry
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaStatus
from saga_runtime._storage import MemoryStore, SagaStore

from .conftest import Stores, make_saga, sqlite_query

SCRIPT = Path(sys.executable).with_name("saga-runtime")
EXACT = {"big": 1e23, "minus_zero": -0.0, "e16": 1e16, "two63": 2**63, "one": 1.0, "tiny": 5e-324}

registry = ToolRegistry()


@registry.tool
class Charge:
    async def execute(self, amount: int, ctx: StepContext) -> dict[str, Any]:
        ctx.charge(cost=0.1, tokens=7)
        return {"amount": amount, "key": ctx.idempotency_key}

    async def compensate(self, result: dict[str, Any] | None) -> None:
        return None


@registry.tool
class Numbers:
    async def execute(self, values: dict[str, Any]) -> dict[str, Any]:
        return {**EXACT, "echo": values}


PLAN = [{"id": f"s{i}", "tool": "Charge", "args": {"amount": i * 100}} for i in range(4)]


async def run_plan(store: SagaStore, saga_id: str = "audited") -> None:
    """Run a 4-step plan saga with a budget and metadata on `store`."""
    executor = SagaExecutor(registry, store=store)
    result = await executor.run(PLAN, saga_id=saga_id, budget=Budget(max_cost=10.0), metadata={"user": "ann"})
    assert result.ok


def cli_verify(url: str, saga_id: str) -> subprocess.CompletedProcess[str]:
    """Run `saga-runtime verify` against a database."""
    environment = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}
    environment.update({"NO_COLOR": "1", "COLUMNS": "200"})
    return subprocess.run(
        [str(SCRIPT), "--db", url, "verify", saga_id],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=False,
    )


async def tamper(stores: Stores, kind: str, store: SagaStore, memory: str, sql: list[str]) -> None:
    """Change the stored rows behind the store's back, with the database's own tools."""
    if kind == "memory":
        assert isinstance(store, MemoryStore)
        await store.load_saga("audited")  # in memory a record is sealed when first read: edited after that
        exec(memory, {"saga": store._sagas["audited"], "steps": store._steps["audited"], "json": json})
    elif kind == "sqlite":
        for statement in sql:
            sqlite_query(stores.url(kind), statement)
    else:
        await stores.execute(kind, stores.url(kind), sql)


def _shorter_plan() -> str:
    """Return the stored plan's JSON without its last step."""
    return json.dumps(build_plan(PLAN[:-1], registry).to_json())


EDITS: dict[str, tuple[str, list[str]]] = {
    "status": (
        "saga.status = type(saga.status)('COMPENSATED')",
        ["UPDATE sagas SET status = 'COMPENSATED' WHERE saga_id = 'audited'"],
    ),
    "plan": (
        "saga.plan[1][0]['args']['amount'] = 1",
        ["UPDATE sagas SET plan = REPLACE(plan, '\"amount\":100', '\"amount\":1') WHERE saga_id = 'audited'"],
    ),
    "error": ("saga.error = 'all good'", ["UPDATE sagas SET error = 'all good' WHERE saga_id = 'audited'"]),
    "cost": ("saga.cost = 0.0", ["UPDATE sagas SET cost = 0 WHERE saga_id = 'audited'"]),
    "tokens": ("saga.tokens = 1", ["UPDATE sagas SET tokens = 1 WHERE saga_id = 'audited'"]),
    "metadata": (
        "saga.metadata = {'user': 'bob'}",
        ["UPDATE sagas SET metadata = '{\"user\":\"bob\"}' WHERE saga_id = 'audited'"],
    ),
    "a step deleted with its plan entry": (
        f"del steps['s3']; saga.plan = json.loads({_shorter_plan()!r})",
        [
            "DELETE FROM steps WHERE saga_id = 'audited' AND step_id = 's3'",
            f"UPDATE sagas SET plan = '{_shorter_plan()}' WHERE saga_id = 'audited'",
        ],
    ),
}


@pytest.mark.parametrize("edit", list(EDITS))
async def test_an_edit_of_the_saga_row_is_reported(stores: Stores, store: SagaStore, kind: str, edit: str) -> None:
    """Editing the saga's status, plan, error, cost, tokens or metadata, or dropping a step with its plan entry,
    is reported by verify_saga and by `saga-runtime verify` (exit 4)."""
    await run_plan(store)
    assert await store.verify_saga("audited")
    if kind != "memory":
        assert cli_verify(stores.url(kind), "audited").returncode == 0
    memory, sql = EDITS[edit]
    await tamper(stores, kind, store, memory, sql)
    verdict = await store.verify_saga("audited")
    assert not verdict
    assert any("the saga record" in problem and "altered" in problem for problem in verdict.problems), verdict
    if kind != "memory":
        ran = cli_verify(stores.url(kind), "audited")
        assert ran.returncode == 4, ran.stderr
        assert "the saga record" in ran.stdout


async def test_a_removed_saga_seal_is_reported(stores: Stores, store: SagaStore, kind: str) -> None:
    """A saga row written since saga rows are sealed, its seal removed, is reported: it cannot pass as legacy."""
    await run_plan(store)
    await tamper(stores, kind, store, "saga.seal = None", ["UPDATE sagas SET seal = NULL WHERE saga_id = 'audited'"])
    verdict = await store.verify_saga("audited")
    assert not verdict
    assert any("carries no seal" in problem for problem in verdict.problems)


async def test_a_resealed_forgery_is_reported_with_a_signing_key(stores: Stores, kind: str) -> None:
    """With a signing key, a saga row edited and re-sealed by someone without the key is reported."""
    signed = await stores.open(kind, wipe=True, signing_key=b"k1")
    await run_plan(signed)
    assert await signed.verify_saga("audited")
    if kind == "memory":
        assert isinstance(signed, MemoryStore)
        forged = signed._sagas["audited"]
        forged.status = SagaStatus.COMPENSATED
        from saga_runtime._records import seal_saga

        seal_saga(forged, b"not the key")
    else:
        unkeyed = await stores.open(kind, stores.url(kind))
        loaded = await unkeyed.load_saga("audited")
        assert loaded is not None
        saga = loaded[0]
        saga.status = SagaStatus.COMPENSATED
        await unkeyed.save(saga, [])  # sealed by a store without the key: plain SHA-256
    verdict = await signed.verify_saga("audited")
    assert not verdict
    assert any("the saga record" in problem for problem in verdict.problems), verdict.problems


async def test_numbers_round_trip_exactly_and_verify(store: SagaStore) -> None:
    """1e23, -0.0, 1e16, 2**63, 1.0 and 5e-324 in arguments and results come back exactly, and the record verifies."""
    executor = SagaExecutor(registry, store=store)
    result = await executor.run([{"id": "n", "tool": "Numbers", "args": {"values": EXACT}}], saga_id="numbers")
    assert result.ok
    assert await store.verify_saga("numbers")
    loaded = await store.load_saga("numbers")
    assert loaded is not None
    (row,) = loaded[1]
    for stored in (row.result, row.args["values"], row.result["echo"]):
        for name, value in EXACT.items():
            assert stored[name] == value
            assert type(stored[name]) is type(value), name
        assert math.copysign(1.0, stored["minus_zero"]) == -1.0
    assert loaded[0].plan[0][0]["args"]["values"]["big"] == 1e23


async def test_operator_changes_reseal_the_saga_row(store: SagaStore) -> None:
    """Reopening a COMPENSATION_FAILED saga and unparking a PARKED one leave records that verify."""
    from saga_runtime._engine import journal
    from saga_runtime._records import now

    failed = make_saga("failed", status=SagaStatus.COMPENSATION_FAILED, full=False)
    parked = make_saga("parked", status=SagaStatus.PARKED)
    parked.parked_from = SagaStatus.COMPENSATING  # (what a saga is parked from)
    for saga in (failed, parked):
        assert await store.create_saga(saga, []) is None
        assert await store.verify_saga(saga.saga_id)
    t = now()
    rows = {}
    for saga_id in ("failed", "parked"):
        loaded = await store.load_saga(saga_id)
        assert loaded is not None
        rows[saga_id] = loaded[0]
    assert await journal.claim(store, rows["failed"], "op", t, t, "reopen")
    assert await journal.unpark(store, rows["parked"], compensate=False, at=t)
    for saga_id in ("failed", "parked"):
        verdict = await store.verify_saga(saga_id)
        assert verdict, verdict.problems
        assert verdict.saga_sealed
