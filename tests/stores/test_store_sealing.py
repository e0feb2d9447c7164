"""Every store seals the rows it is handed unsealed, as the chain's seal functions define the seals."""

from __future__ import annotations

import pytest

from saga_runtime import SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._records import StepRow, StepStatus, idempotency_key, identity_hash, now, saga_seal, seal
from saga_runtime._storage import SagaStore
from saga_runtime._storage._sealing import Sealing

registry = ToolRegistry()


@registry.tool
class Add:
    """Return n + 1; undo nothing."""

    async def execute(self, n: int) -> int:
        return n + 1

    async def compensate(self, result: int | None) -> None:
        return None


@registry.tool
class Fail:
    """Fail."""

    async def execute(self, n: int) -> int:
        raise RuntimeError("no")


def _fresh(row: StepRow, key: bytes | None) -> str | None:
    """Return the seal `seal` gives a copy of `row` (its link kept)."""
    copy = row.copy()
    seal(copy, row.prev_hash, key)
    return copy.hash


async def test_every_store_seals_the_rows_the_engine_hands_it(store: SagaStore) -> None:
    """A saga that ran and was undone is stored with every row sealed as a fresh seal would, and verifies."""
    plan = [{"id": f"s{i}", "tool": "Add", "args": {"n": i}} for i in range(3)]
    plan.append({"id": "bad", "tool": "Fail", "args": {"n": 0}})
    result = await SagaExecutor(registry, store=store).run(plan, saga_id="sealed-by-store")
    assert result.status is SagaStatus.COMPENSATED
    loaded = await store.load_saga("sealed-by-store")
    assert loaded is not None
    saga, rows = loaded
    assert [row.status for row in rows] == [StepStatus.COMPENSATED] * 3 + [StepStatus.FAILED]
    assert all(row.hash is not None and row.hash == _fresh(row, store.signing_key) for row in rows)
    assert saga.seal == saga_seal(saga, store.signing_key)
    assert await store.verify_saga("sealed-by-store")


@pytest.mark.parametrize("key", [None, b"k" * 32])
def test_snapshots_sealed_from_kept_state_match_a_fresh_seal(key: bytes | None) -> None:
    """Sealing snapshots of one row as it changes (the store's path) gives what sealing it afresh gives, each time."""
    sealing = Sealing(key)
    row = StepRow("s", 1, "b", 0, "Add", {"n": [1, 2.0]}, idempotency_key("s", "b"))
    row.prev_hash = identity_hash(StepRow("s", 0, "a", 0, "Add", {}, idempotency_key("s", "a")), "s")

    def written() -> StepRow:
        snapshot = row.copy()
        snapshot.hash = None
        sealing.steps([snapshot])
        assert snapshot.hash == _fresh(row, key)
        return snapshot

    first = written()
    row.status, row.attempts, row.started_at = StepStatus.RUNNING, 1, now()
    assert written().hash != first.hash
    row.args["n"].append(3)  # a tool changed its arguments in place: the kept state is not used
    written()
    row.args = {"n": 9}  # replaced
    row.status, row.result, row.finished_at = StepStatus.SUCCESS, {"ok": True}, now()
    written()
    row.seq = 2  # another identity under the same step id: hashed afresh
    written()
