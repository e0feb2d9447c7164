"""Join modes after a crash: `recover()` respects `first` and `quorum` groups on SQLite and PostgreSQL.

Each test writes a saga as a dead executor leaves it (owner "dead", its lease long expired, rows sealed as the
engine seals them), then a fresh executor recovers it. A `first` group's recorded winner is kept, never raced
again; its losers are compensated once; a group without a winner races its unknown members again; a quorum
counts the recorded successes with those of the members run again.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import anyio
import pytest
from orphans import orphan_saga

from saga_runtime import SagaExecutor, SagaResult, SagaStatus, SagaStore, StepContext, StepStatus, ToolRegistry
from saga_runtime._records import (
    StepRow,
    idempotency_key,
    now,
    seal_all,
)

from .conftest import Stores

pytestmark = pytest.mark.parametrize("kind", ["sqlite", "postgresql"])

HANDSHAKE = 10.0
SAGA = "crashed-1"


class Bench:
    """Tools that log every call; a gated name waits for the test to release it, a failing name raises."""

    def __init__(self) -> None:
        self.failing: set[str] = set()
        self.gated: set[str] = set()
        self.started: dict[str, anyio.Event] = {}
        self.go: dict[str, anyio.Event] = {}
        self.log: list[tuple[Any, ...]] = []
        self.registry = ToolRegistry()
        bench = self

        @self.registry.tool
        class Quote:
            """A provider's quote, holding a reservation that compensate() releases."""

            async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
                bench.log.append(("do", name, ctx.idempotency_key, ctx.attempt))
                if name in bench.gated:
                    bench.event(bench.started, name).set()
                    try:
                        await bench.event(bench.go, name).wait()
                    except anyio.get_cancelled_exc_class():
                        bench.log.append(("cancelled", name))
                        raise
                if name in bench.failing:
                    raise RuntimeError(f"{name} is down")
                return quote(name)

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                bench.log.append(("undo", ctx.args["name"], result))

        @self.registry.tool
        class Hold:
            """An earlier effect."""

            async def execute(self, name: str) -> dict[str, Any]:
                bench.log.append(("do", name))
                return {"held": name}

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                bench.log.append(("undo", ctx.args["name"], result))

        @self.registry.tool
        class Use:
            """A later step: logs what its $ref gave it."""

            async def execute(self, value: Any) -> Any:
                bench.log.append(("use", value))
                return value

    @staticmethod
    def event(table: dict[str, anyio.Event], name: str) -> anyio.Event:
        """Return the event of `name` in `table`, made on first use."""
        if name not in table:
            table[name] = anyio.Event()
        return table[name]

    def ran(self) -> Counter[str]:
        """Return how often each name was executed."""
        return Counter(entry[1] for entry in self.log if entry[0] == "do")

    def undone(self) -> list[tuple[Any, ...]]:
        """Return the compensations, in order: (name, result given)."""
        return [entry[1:] for entry in self.log if entry[0] == "undo"]

    def used(self) -> list[Any]:
        """Return what the Use steps received."""
        return [entry[1] for entry in self.log if entry[0] == "use"]


def quote(name: str) -> dict[str, Any]:
    """Return the result Quote gives for `name`."""
    return {"quote": name, "price": 100 + ord(name[0])}


def quotes(names: str) -> list[dict[str, Any]]:
    """Return stored plan steps of Quote, one per name."""
    return [{"id": n, "tool": "Quote", "args": {"name": n}} for n in names]


HOLD = [{"id": "hold", "tool": "Hold", "args": {"name": "hold"}}]
USE = [{"id": "use", "tool": "Use", "args": {"value": {"$ref": "q"}}}]


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
    for g, group in enumerate(plan):
        members = group["group"] if isinstance(group, dict) else group
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


async def recover(bench: Bench, store: SagaStore) -> SagaResult:
    """Recover the crashed saga with a fresh executor; return its result, checked against the store."""
    results = await SagaExecutor(bench.registry, store=store).recover()
    assert [r.saga_id for r in results] == [SAGA]
    stored = await store.get_saga(SAGA)
    assert stored is not None
    assert stored.status is results[0].status
    assert await store.verify_saga(SAGA), (await store.verify_saga(SAGA)).problems
    return stored


def statuses(result: SagaResult) -> dict[str, StepStatus]:
    """Return each step's status by id."""
    return {s.step_id: s.status for s in result.steps}


async def test_recorded_first_winner_is_kept_and_its_running_losers_undone_once(stores: Stores, kind: str) -> None:
    """A `first` group with a recorded winner: it is kept (its tool not run again); RUNNING losers undone once."""
    store = await stores.open(kind, wipe=True)
    bench = Bench()
    plan = [HOLD, {"group": quotes("abc"), "join": "first", "id": "q"}, USE]
    await crashed(store, plan, {"hold": HELD, "a": RUNNING, "b": won("b"), "c": RUNNING})

    result = await recover(bench, store)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {
        "hold": StepStatus.SUCCESS,
        "a": StepStatus.COMPENSATED,
        "b": StepStatus.SUCCESS,
        "c": StepStatus.COMPENSATED,
        "use": StepStatus.SUCCESS,
    }
    assert bench.ran() == {}  # neither the winner, nor the losers, nor anything else done was run again
    assert sorted(bench.undone(), key=str) == [("a", None), ("c", None)]
    for loser in ("a", "c"):
        assert result.step(loser).error == "lost the race to step 'b'"
        assert result.step(loser).error_type == "LostRace"
    assert bench.used() == [quote("b")]
    assert result.result_of("q") == quote("b")

    assert await SagaExecutor(bench.registry, store=store).recover() == []
    assert len(bench.undone()) == 2


async def test_recorded_first_winner_stands_over_a_later_success_which_is_undone_with_its_result(
    stores: Stores, kind: str
) -> None:
    """Two recorded successes in a `first` group: the earlier-finished wins; the other is undone with its result."""
    store = await stores.open(kind, wipe=True)
    bench = Bench()
    already = {
        "status": StepStatus.COMPENSATED,
        "error": "cancelled while running: step 'b' won the race",
        "error_type": "CancelledError",
        "finished": 1,
        "compensation_attempts": 1,
        "compensated_at": now() - timedelta(minutes=4),
    }
    plan = [{"group": quotes("abc"), "join": "first", "id": "q"}, USE]
    await crashed(store, plan, {"a": won("a", finished=2), "b": won("b", finished=1), "c": already})

    result = await recover(bench, store)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {
        "a": StepStatus.COMPENSATED,
        "b": StepStatus.SUCCESS,
        "c": StepStatus.COMPENSATED,
        "use": StepStatus.SUCCESS,
    }
    assert bench.ran() == {}
    assert bench.undone() == [("a", quote("a"))]  # c was undone before the crash: not again
    assert result.step("a").error == "lost the race to step 'b'"
    assert result.step("c").compensation_attempts == 1
    assert bench.used() == [quote("b")]
    assert result.result_of("q") == quote("b")


async def test_first_group_without_winner_races_its_unknown_members_again(stores: Stores, kind: str) -> None:
    """A `first` group with no recorded winner runs its RUNNING members again (same keys); FAILED ones stay."""
    store = await stores.open(kind, wipe=True)
    bench = Bench()
    bench.gated.update("ab")
    plan = [HOLD, {"group": quotes("abc"), "join": "first", "id": "q"}, USE]
    await crashed(store, plan, {"hold": HELD, "a": RUNNING, "b": RUNNING, "c": failed("c")})
    out: list[SagaResult] = []

    async def recovering() -> None:
        out.append(await recover(bench, store))

    with anyio.fail_after(HANDSHAKE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(recovering)
            await bench.event(bench.started, "a").wait()
            await bench.event(bench.started, "b").wait()
            bench.event(bench.go, "b").set()
    (result,) = out

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {
        "hold": StepStatus.SUCCESS,
        "a": StepStatus.COMPENSATED,
        "b": StepStatus.SUCCESS,
        "c": StepStatus.FAILED,
        "use": StepStatus.SUCCESS,
    }
    assert bench.ran() == {"a": 1, "b": 1}
    reruns = {entry[1]: entry[2:] for entry in bench.log if entry[0] == "do" and entry[1] in "ab"}
    assert reruns == {"a": (idempotency_key(SAGA, "a"), 2), "b": (idempotency_key(SAGA, "b"), 2)}
    assert result.step("b").attempts == 2
    assert result.step("a").error == "cancelled while running: step 'b' won the race"
    assert bench.undone() == [("a", None)]
    assert bench.used() == [quote("b")]
    assert result.result_of("q") == quote("b")


async def test_first_group_whose_rerun_members_all_fail_compensates_the_saga(stores: Stores, kind: str) -> None:
    """A winner-less `first` group whose members run again and all fail fails the saga, which compensates."""
    store = await stores.open(kind, wipe=True)
    bench = Bench()
    bench.failing.update("ab")
    plan = [HOLD, {"group": quotes("ab"), "join": "first", "id": "q"}, USE]
    await crashed(store, plan, {"hold": HELD, "a": failed("a"), "b": RUNNING})

    result = await recover(bench, store)

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert result.error == "every step of 'first' group 1 failed"
    assert statuses(result) == {
        "hold": StepStatus.COMPENSATED,
        "a": StepStatus.FAILED,
        "b": StepStatus.FAILED,
        "use": StepStatus.PENDING,
    }
    assert bench.ran() == {"b": 1}
    assert bench.undone() == [("hold", {"held": "hold"})]


async def test_quorum_counts_recorded_successes_with_the_members_run_again(stores: Stores, kind: str) -> None:
    """A half-done quorum: recorded outcomes stand, unknown and pending members run, and all successes count."""
    store = await stores.open(kind, wipe=True)
    bench = Bench()
    bench.failing.add("d")
    plan = [HOLD, {"group": quotes("abcd"), "join": "quorum", "k": 2, "id": "q"}, USE]
    await crashed(store, plan, {"hold": HELD, "a": won("a"), "b": failed("b"), "c": RUNNING})

    result = await recover(bench, store)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {
        "hold": StepStatus.SUCCESS,
        "a": StepStatus.SUCCESS,
        "b": StepStatus.FAILED,
        "c": StepStatus.SUCCESS,
        "d": StepStatus.FAILED,
        "use": StepStatus.SUCCESS,
    }
    assert bench.ran() == {"c": 1, "d": 1}
    assert result.step("c").attempts == 2
    assert result.step("d").attempts == 1
    assert bench.undone() == []
    assert bench.used() == [[quote("a"), quote("c")]]
    assert result.result_of("q") == [quote("a"), quote("c")]


async def test_quorum_short_of_k_after_recovery_compensates_recorded_and_new_successes(
    stores: Stores, kind: str
) -> None:
    """A recovered quorum still short of k fails the saga: recorded and re-run successes are both compensated."""
    store = await stores.open(kind, wipe=True)
    bench = Bench()
    bench.failing.add("d")
    plan = [HOLD, {"group": quotes("abcd"), "join": "quorum", "k": 3, "id": "q"}, USE]
    await crashed(store, plan, {"hold": HELD, "a": won("a"), "b": failed("b"), "c": RUNNING})

    result = await recover(bench, store)

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
    assert bench.ran() == {"c": 1, "d": 1}
    assert sorted(bench.undone()[:2], key=str) == [("a", quote("a")), ("c", quote("c"))]
    assert bench.undone()[2:] == [("hold", {"held": "hold"})]


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
    bench = Bench()
    spec: dict[str, Any] = {"group": quotes("abc"), "join": join, "id": "q"}
    if join == "quorum":
        spec["k"] = 2
    plan = [HOLD, spec, USE]
    cancelled = {"status": StepStatus.CANCELLED, "error": "cancelled while running: step 'b' failed", "finished": 1}
    states = {"hold": HELD, "a": won("a"), "b": failed("b"), "c": failed("c") if join == "quorum" else cancelled}
    await crashed(store, plan, states, status=SagaStatus.COMPENSATING)

    result = await recover(bench, store)

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert bench.ran() == {}
    assert result.step("a").status is StepStatus.COMPENSATED
    assert result.step("hold").status is StepStatus.COMPENSATED
    assert result.error == expected
