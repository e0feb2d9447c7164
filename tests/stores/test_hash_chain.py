"""The hash chain, on every store: edits, deletions and reorderings made directly in the database are reported."""

from __future__ import annotations

from typing import Any

import pytest

from saga_runtime import SagaExecutor, StepContext, ToolRegistry
from saga_runtime._storage import MemoryStore, SagaStore

from .conftest import Stores, sqlite_query

registry = ToolRegistry()


@registry.tool
class Charge:
    async def execute(self, amount: int, ctx: StepContext) -> dict[str, Any]:
        return {"amount": amount, "key": ctx.idempotency_key}

    async def compensate(self, result: dict[str, Any] | None) -> None:
        return None


PLAN = [{"id": f"s{i}", "tool": "Charge", "args": {"amount": i * 100}} for i in range(4)]


async def run_plan(store: SagaStore, saga_id: str = "audited") -> None:
    """Run a 4-step plan saga on `store`."""
    result = await SagaExecutor(registry, store=store).run(PLAN, saga_id=saga_id)
    assert result.ok


async def tamper(stores: Stores, kind: str, store: SagaStore, *, memory: str, sql: str) -> list[str]:
    """Change the stored steps behind the store's back, with the database's own tools; return what verify says.

    The saga must no longer verify.
    """
    if kind == "memory":
        assert isinstance(store, MemoryStore)
        await store.load_saga("audited")  # in memory a record is sealed when first read: edited after that
        exec(memory, {"steps": store._steps["audited"]})
    elif kind == "sqlite":
        sqlite_query(stores.url(kind), sql)
    else:
        await stores.execute(kind, stores.url(kind), [sql])
    verdict = await store.verify_saga("audited")
    assert not verdict
    return verdict.problems


async def test_an_untouched_saga_verifies(store: SagaStore) -> None:
    """A saga as the engine wrote it verifies: truthy, ok, no problems."""
    await run_plan(store)
    verdict = await store.verify_saga("audited")
    assert verdict
    assert verdict.ok
    assert verdict.problems == []


async def test_an_edited_result_is_reported(stores: Stores, store: SagaStore, kind: str) -> None:
    """Editing a step's result directly in the database breaks that record's seal."""
    await run_plan(store)
    result = '{"amount": 999, "key": "forged"}'
    problems = await tamper(
        stores,
        kind,
        store,
        memory=f"import json; steps['s2'].result = json.loads('{result}')",
        sql=f"UPDATE steps SET result = '{result}' WHERE step_id = 's2'",
    )
    assert any("'s2'" in problem and "altered" in problem for problem in problems), problems


async def test_a_deleted_step_row_is_reported(stores: Stores, store: SagaStore, kind: str) -> None:
    """Deleting a step row directly in the database breaks the chain after it."""
    await run_plan(store)
    problems = await tamper(stores, kind, store, memory="del steps['s1']", sql="DELETE FROM steps WHERE step_id = 's1'")
    assert any("removed" in problem for problem in problems), problems


async def test_two_swapped_rows_are_reported(stores: Stores, store: SagaStore, kind: str) -> None:
    """Swapping the positions of two step rows directly in the database is reported."""
    await run_plan(store)
    swap = "UPDATE steps SET seq = CASE step_id WHEN 's1' THEN 2 WHEN 's2' THEN 1 END WHERE step_id IN ('s1', 's2')"
    problems = await tamper(
        stores, kind, store, memory="steps['s1'].seq, steps['s2'].seq = steps['s2'].seq, steps['s1'].seq", sql=swap
    )
    assert problems


async def test_a_removed_last_call_of_a_dynamic_saga_is_reported(stores: Stores, store: SagaStore, kind: str) -> None:
    """Removing the last record of a dynamic saga is caught by the chain head the saga keeps."""
    async with SagaExecutor(registry, store=store).saga(saga_id="audited") as saga:
        await saga.call("Charge", amount=1)
        await saga.call("Charge", amount=2)
    assert await store.verify_saga("audited")
    problems = await tamper(
        stores, kind, store, memory="del steps['Charge-1']", sql="DELETE FROM steps WHERE step_id = 'Charge-1'"
    )
    assert any("chain head" in problem for problem in problems), problems


async def test_signed_records_verify_only_with_their_key(stores: Stores, kind: str) -> None:
    """Records written under a signing key verify with it, and not with another key or none."""
    url = stores.url(kind)
    signed = await stores.open(kind, wipe=True, signing_key=b"k1")
    await run_plan(signed)
    assert await signed.verify_saga("audited")
    if kind == "memory":
        return  # each memory store is private: no second store can look at the same records
    other = await stores.open(kind, url, signing_key=b"k2")
    assert not await other.verify_saga("audited")
    unkeyed = await stores.open(kind, url)
    verdict = await unkeyed.verify_saga("audited")
    assert not verdict
    assert any("configure the signing key" in problem for problem in verdict.problems)


async def test_the_chain_survives_export_and_import(stores: Stores, store: SagaStore) -> None:
    """An exported saga imported into a memory store still verifies."""
    await run_plan(store)
    target = await stores.open("memory")
    await target.import_saga(await store.export_saga("audited"))
    assert await target.verify_saga("audited")


async def test_verifying_an_unknown_saga_raises_key_error(store: SagaStore) -> None:
    """verify_saga of an id the store does not hold raises KeyError."""
    with pytest.raises(KeyError):
        await store.verify_saga("nope")


async def test_a_record_read_while_its_saga_runs_verifies_then_and_at_its_end(store: SagaStore) -> None:
    """A saga read mid-run (the memory store seals what it holds then) verifies, and so does its finished record."""
    seen: list[bool] = []
    peek = ToolRegistry()

    @peek.tool
    class Peek:
        async def execute(self, n: int) -> int:
            seen.append(bool(await store.verify_saga("peeked")))  # step n-1 done, step n RUNNING
            return n

    plan = [{"id": f"p{i}", "tool": "Peek", "args": {"n": i}} for i in range(3)]
    result = await SagaExecutor(peek, store=store).run(plan, saga_id="peeked")
    assert result.ok
    assert seen == [True, True, True]
    assert await store.verify_saga("peeked")
    exported = await store.export_saga("peeked")
    assert [step["status"] for step in exported["steps"]] == ["SUCCESS"] * 3
