"""A parent saga function with a child saga, killed (SIGKILL, real processes) at every crash point of the parent, of
its child step and of the child's own calls, then recovered.

Besides the harness's invariants for the parent: one child only, whatever the crash; no effect of the child made
twice under its key (once more only where the kill fell between an effect and its record); and when the parent
compensates, every effect of the child undone.
"""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from saga_runtime import SagaStatus, open_store
from saga_runtime.testing import CrashPoint, check_crash_points

from .test_crash_points import database_url, sql_kind

__all__ = ["database_url", "sql_kind"]  # the fixtures, shared

# Real processes, one per crash point, on a machine others share: more than the default minute.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MODULE = textwrap.dedent(
    """
    import json, os
    from saga_runtime import DynamicSaga, StepContext, ToolRegistry

    WORLD = os.path.join(os.path.dirname(__file__), "world.jsonl")

    def effect(kind: str, ctx: StepContext) -> None:
        with open(WORLD, "a") as handle:
            handle.write(json.dumps([kind, ctx.saga_id, ctx.step_id, ctx.idempotency_key]) + "\\n")
            handle.flush()
            os.fsync(handle.fileno())

    registry = ToolRegistry()

    @registry.tool(name="charge")
    class Charge:
        async def execute(self, amount_cents: int, ctx: StepContext) -> dict:
            effect("do", ctx)
            return {"charge_id": ctx.idempotency_key}

        async def compensate(self, result: dict | None, ctx: StepContext) -> None:
            effect("undo", ctx)

    @registry.tool(name="reserve")
    class Reserve:
        async def execute(self, sku: str, ctx: StepContext) -> dict:
            effect("do", ctx)
            return {"reservation": ctx.idempotency_key}

        async def compensate(self, result: dict | None, ctx: StepContext) -> None:
            effect("undo", ctx)

    @registry.tool(name="ship")
    class Ship:
        async def execute(self, address: str, ctx: StepContext) -> dict:
            effect("do", ctx)
            return {"tracking": ctx.idempotency_key}

        async def compensate(self, result: dict | None, ctx: StepContext) -> None:
            effect("undo", ctx)

    @registry.tool(name="refuse")
    class Refuse:
        async def execute(self, why: str) -> dict:
            raise PermissionError(why)

    @registry.saga
    async def fulfil(saga: DynamicSaga, address: str) -> dict:
        reservation = await saga.call("reserve", sku="KEYBOARD")
        shipment = await saga.call("ship", address=address)
        return {"reservation": reservation["reservation"], "tracking": shipment["tracking"]}

    @registry.saga
    async def order(saga: DynamicSaga, refused: bool) -> dict:
        charge = await saga.call("charge", amount_cents=500)
        done = await saga.child(fulfil, args={"address": "Seoul"})
        if refused:
            await saga.call("refuse", why="the customer cancelled")
        return {"charge": charge["charge_id"], "child": done.saga_id, **done.output}
    """
)

# The parent's steps: charge-0, the child fulfil-1, refuse-2; the child's: reserve-0, ship-1.
FORWARD = [("execute", step) for step in ("charge-0", "fulfil-1", "reserve-0", "ship-1")]
UNDO = [("compensate", step) for step in ("fulfil-1", "ship-1", "reserve-0", "charge-0")]


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """Write the tools and saga functions in a module importable here and in the harness's children."""
    name = f"crash_children_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(folder))
    yield f"{name}:registry", folder / "world.jsonl"
    sys.modules.pop(name, None)


@pytest.mark.parametrize("refused", [False, True])
async def test_a_crash_anywhere_in_a_parent_with_a_child_repeats_no_child_effect(
    database_url: str, tools: tuple[str, Path], refused: bool
) -> None:
    """Killed anywhere, a parent and its one child end as the code says: SUCCESS with each child effect made once,
    or (the parent refused after its child) COMPENSATED with every child effect undone."""
    registry, world = tools
    # Refused, the forward points are those of the other run: its compensation's are crashed in.
    actions = [("execute", "refuse-2"), *UNDO] if refused else FORWARD
    points = [CrashPoint(when, action, step) for action, step in actions for when in ("before", "after")]  # type: ignore[arg-type]
    report = await check_crash_points(
        registry, "order", args={"refused": refused}, url=database_url, points=points, lease_timeout=0.3
    )
    final = SagaStatus.COMPENSATED if refused else SagaStatus.SUCCESS
    assert report.baseline.status is final
    assert report.problems == [], str(report)
    effects = [json.loads(line) for line in world.read_text().splitlines()]
    async with open_store(database_url) as store:
        listed = [summary.saga_id for summary in await store.list_sagas(limit=1000)]
        for point in report.points:
            assert point.crashed, point
            assert point.status is final, point
            parent = point.saga_id
            child_id = f"{parent}/fulfil-1"
            assert [saga_id for saga_id in listed if saga_id.startswith(f"{parent}/")] == [child_id], point
            child = await store.get_saga(child_id)
            assert child is not None, point
            assert (child.status, child.parent_id) == (final, parent), point
            assert await store.verify_saga(child_id), point
            mine = [effect for effect in effects if effect[1] == child_id]
            done = Counter(key for kind, _, _, key in mine if kind == "do")
            undone = Counter(key for kind, _, _, key in mine if kind == "undo")
            keys = {step.step_id: step.idempotency_key for step in child.steps}
            assert set(done) == {keys["reserve-0"], keys["ship-1"]}, point  # one child: its two keys only
            for step_id, key in keys.items():
                cut_do = (point.point.when, point.point.action, point.point.step_id) == ("after", "execute", step_id)
                cut_undo = (point.point.when, point.point.action, point.point.step_id) == (
                    "after",
                    "compensate",
                    step_id,
                )
                assert done[key] <= (2 if cut_do else 1), (point, step_id, done)
                assert undone[key] <= (2 if cut_undo else 1), (point, step_id, undone)
                assert (undone[key] >= 1) is refused, (point, step_id, undone)
