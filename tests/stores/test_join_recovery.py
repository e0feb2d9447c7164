"""Join modes after a crash: `recover()` respects `first` and `quorum` groups on SQLite and PostgreSQL.

Each test writes a saga as a dead executor leaves it (owner "dead", its lease long expired, rows sealed as the
engine seals them), then a fresh executor recovers it. A `first` group's recorded winner is kept, never raced
again; its losers are compensated once; a group without a winner races its unknown members again; a quorum
counts the recorded successes with those of the members run again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from orphans import orphan_saga
from quote_desk import HOLD, Desk, group, quote, quotes, scripted, statuses, use

from saga_runtime import SagaExecutor, SagaResult, SagaStatus, SagaStore, StepStatus
from saga_runtime._records import (
    StepRow,
    idempotency_key,
    now,
    seal_all,
)

from .conftest import Stores

pytestmark = pytest.mark.parametrize("kind", ["sqlite", "postgresql"])

SAGA = "crashed-1"


async def crashed(
    store: SagaStore,
    plan: list[Any],
    states: dict[str, dict[str, Any]],
    status: SagaStatus = SagaStatus.RUNNING,
) -> None:
    """Store `plan` as a dead executor left it: each step's row set to `states[id]`, its lease expired."""
    saga = orphan_saga(SAGA, plan, status=status)
    started = saga.created_at
    rows = []
    for g, entry in enumerate(plan):
        members = entry["group"] if isinstance(entry, dict) else entry
        for step in members:
            row = StepRow(SAGA, len(rows), step["id"], g, step["tool"], step["args"], idempotency_key(SAGA, step["id"]))
            state = dict(states.get(step["id"], {}))
            finished = state.pop("finished", None)  # seconds after the start, for the order steps finished in
            for field, value in state.items():
                setattr(row, field, value)
            if row.status is not StepStatus.PENDING:
                row.started_at = started
                row.attempts = row.attempts or 1
            if finished is not None:
                row.finished_at = started + timedelta(seconds=finished)
            rows.append(row)
    seal_all(rows, None)
    assert await store.create_saga(saga, rows) is None


def won(name: str, finished: int = 1) -> dict[str, Any]:
    """Return the row state of a step that succeeded."""
    return {"status": StepStatus.SUCCESS, "result": quote(name), "finished": finished}


def failed(name: str) -> dict[str, Any]:
    """Return the row state of a step that failed."""
    return {
        "status": StepStatus.FAILED,
        "error": f"RuntimeError: {name} is down (after 1 attempt)",
        "error_type": "RuntimeError",
        "finished": 1,
    }


RUNNING: dict[str, Any] = {"status": StepStatus.RUNNING}
HELD: dict[str, Any] = {"status": StepStatus.SUCCESS, "result": {"held": "hold"}, "finished": 0}


async def recover(desk: Desk, store: SagaStore) -> SagaResult:
    """Recover the crashed saga with a fresh executor; return its result, checked against the store."""
    results = await SagaExecutor(desk.registry, store=store).recover()
    assert [r.saga_id for r in results] == [SAGA]
    stored = await store.get_saga(SAGA)
    assert stored is not None
    assert stored.status is results[0].status
    assert await store.verify_saga(SAGA), (await store.verify_saga(SAGA)).problems
    return stored


async def test_recorded_first_winner_is_kept_and_its_running_losers_undone_once(stores: Stores, kind: str) -> None:
    """A `first` group with a recorded winner: it is kept (its tool not run again); RUNNING losers undone once."""
    store = await stores.open(kind, wipe=True)
    desk = Desk(gated="")
    plan = [[HOLD], group("Quote", "abc", "first"), [use()]]
    await crashed(store, plan, {"hold": HELD, "a": RUNNING, "b": won("b"), "c": RUNNING})

    result = await recover(desk, store)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {
        "hold": StepStatus.SUCCESS,
        "a": StepStatus.COMPENSATED,
        "b": StepStatus.SUCCESS,
        "c": StepStatus.COMPENSATED,
        "use": StepStatus.SUCCESS,
    }
    assert desk.ran() == {}  # neither the winner, nor the losers, nor anything else done was run again
    assert sorted(desk.undone(), key=str) == [("a", None), ("c", None)]
    for loser in ("a", "c"):
        assert result.step(loser).error == "lost the race to step 'b'"
        assert result.step(loser).error_type == "LostRace"
    assert desk.used() == [quote("b")]
    assert result.result_of("q") == quote("b")

    assert await SagaExecutor(desk.registry, store=store).recover() == []
    assert len(desk.undone()) == 2


async def test_recorded_first_winner_stands_over_a_later_success_which_is_undone_with_its_result(
    stores: Stores, kind: str
) -> None:
    """Two recorded successes in a `first` group: the earlier-finished wins; the other is undone with its result."""
    store = await stores.open(kind, wipe=True)
    desk = Desk(gated="")
    already = {
        "status": StepStatus.COMPENSATED,
        "error": "cancelled while running: step 'b' won the race",
        "error_type": "CancelledError",
        "finished": 1,
        "compensation_attempts": 1,
        "compensated_at": now() - timedelta(minutes=4),
    }
    plan = [group("Quote", "abc", "first"), [use()]]
    await crashed(store, plan, {"a": won("a", finished=2), "b": won("b", finished=1), "c": already})

    result = await recover(desk, store)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {"a": "COMPENSATED", "b": "SUCCESS", "c": "COMPENSATED", "use": "SUCCESS"}
    assert desk.ran() == {}
    assert desk.undone() == [("a", quote("a"))]  # c was undone before the crash: not again
    assert result.step("a").error == "lost the race to step 'b'"
    assert result.step("c").compensation_attempts == 1
    assert desk.used() == [quote("b")]
    assert result.result_of("q") == quote("b")


async def test_first_group_without_winner_races_its_unknown_members_again(stores: Stores, kind: str) -> None:
    """A `first` group with no recorded winner runs its RUNNING members again (same keys); FAILED ones stay."""
    store = await stores.open(kind, wipe=True)
    desk = Desk(gated="ab")
    plan = [[HOLD], group("Quote", "abc", "first"), [use()]]
    await crashed(store, plan, {"hold": HELD, "a": RUNNING, "b": RUNNING, "c": failed("c")})

    result = await scripted(lambda: recover(desk, store), desk.releasing("ab", "b"))

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {"hold": "SUCCESS", "a": "COMPENSATED", "b": "SUCCESS", "c": "FAILED", "use": "SUCCESS"}
    assert desk.ran() == {"a": 1, "b": 1}
    reruns = {entry[1]: entry[2:] for entry in desk.log if entry[0] == "do" and entry[1] in "ab"}
    assert reruns == {"a": (idempotency_key(SAGA, "a"), 2), "b": (idempotency_key(SAGA, "b"), 2)}
    assert result.step("b").attempts == 2
    assert result.step("a").error == "cancelled while running: step 'b' won the race"
    assert desk.undone() == [("a", None)]
    assert desk.used() == [quote("b")]
    assert result.result_of("q") == quote("b")


async def test_first_group_whose_rerun_members_all_fail_compensates_the_saga(stores: Stores, kind: str) -> None:
    """A winner-less `first` group whose members run again and all fail fails the saga, which compensates."""
    store = await stores.open(kind, wipe=True)
    desk = Desk(gated="")
    desk.failing.update("ab")
    plan = [[HOLD], group("Quote", "ab", "first"), [use()]]
    await crashed(store, plan, {"hold": HELD, "a": failed("a"), "b": RUNNING})

    result = await recover(desk, store)

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert result.error == "every step of 'first' group 1 failed"
    assert statuses(result) == {"hold": "COMPENSATED", "a": "FAILED", "b": "FAILED", "use": "PENDING"}
    assert desk.ran() == {"b": 1}
    assert desk.undone() == [("hold", {"held": "hold"})]


async def test_quorum_counts_recorded_successes_with_the_members_run_again(stores: Stores, kind: str) -> None:
    """A half-done quorum: recorded outcomes stand, unknown and pending members run, and all successes count."""
    store = await stores.open(kind, wipe=True)
    desk = Desk(gated="")
    desk.failing.add("d")
    plan = [[HOLD], group("Quote", "abcd", "quorum", k=2), [use()]]
    await crashed(store, plan, {"hold": HELD, "a": won("a"), "b": failed("b"), "c": RUNNING})

    result = await recover(desk, store)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {
        "hold": StepStatus.SUCCESS,
        "a": StepStatus.SUCCESS,
        "b": StepStatus.FAILED,
        "c": StepStatus.SUCCESS,
        "d": StepStatus.FAILED,
        "use": StepStatus.SUCCESS,
    }
    assert desk.ran() == {"c": 1, "d": 1}
    assert result.step("c").attempts == 2
    assert result.step("d").attempts == 1
    assert desk.undone() == []
    assert desk.used() == [[quote("a"), quote("c")]]
    assert result.result_of("q") == [quote("a"), quote("c")]


async def test_quorum_short_of_k_after_recovery_compensates_recorded_and_new_successes(
    stores: Stores, kind: str
) -> None:
    """A recovered quorum still short of k fails the saga: recorded and re-run successes are both compensated."""
    store = await stores.open(kind, wipe=True)
    desk = Desk(gated="")
    desk.failing.add("d")
    plan = [[HOLD], group("Quote", "abcd", "quorum", k=3), [use()]]
    await crashed(store, plan, {"hold": HELD, "a": won("a"), "b": failed("b"), "c": RUNNING})

    result = await recover(desk, store)

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert result.error == "quorum group 1: 2 of 4 steps succeeded, 3 needed"
    assert statuses(result) == {
        "hold": StepStatus.COMPENSATED,
        "a": StepStatus.COMPENSATED,
        "b": StepStatus.FAILED,
        "c": StepStatus.COMPENSATED,
        "d": StepStatus.FAILED,
        "use": StepStatus.PENDING,
    }
    assert desk.ran() == {"c": 1, "d": 1}
    assert sorted(desk.undone()[:2], key=str) == [("a", quote("a")), ("c", quote("c"))]
    assert desk.undone()[2:] == [("hold", {"held": "hold"})]


@pytest.mark.parametrize(
    ("join", "expected"),
    [
        ("all", "step 'b' (Quote) failed: RuntimeError: b is down (after 1 attempt)"),
        ("quorum", "quorum group 1: 1 of 3 steps succeeded, 2 needed"),
    ],
)
async def test_interrupted_compensation_after_a_failed_group_names_that_failure(
    stores: Stores, kind: str, join: str, expected: str
) -> None:
    """A saga recovered while COMPENSATING finishes undoing and names the group failure that started it."""
    store = await stores.open(kind, wipe=True)
    desk = Desk(gated="")
    spec: dict[str, Any] = {"group": quotes("abc"), "join": join, "id": "q"}
    if join == "quorum":
        spec["k"] = 2
    plan = [[HOLD], spec, [use()]]
    cancelled = {"status": StepStatus.CANCELLED, "error": "cancelled while running: step 'b' failed", "finished": 1}
    states = {"hold": HELD, "a": won("a"), "b": failed("b"), "c": failed("c") if join == "quorum" else cancelled}
    await crashed(store, plan, states, status=SagaStatus.COMPENSATING)

    result = await recover(desk, store)

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert desk.ran() == {}
    assert result.step("a").status is StepStatus.COMPENSATED
    assert result.step("hold").status is StepStatus.COMPENSATED
    assert result.error == expected
