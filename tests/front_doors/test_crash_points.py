"""Real process kills at every crash point, on SQLite, PostgreSQL and MariaDB, through `saga_runtime.testing`.

Each plan runs in child processes killed (SIGKILL) before a step's effect, after it but before its record, and
during compensation; recovery then finishes every saga. DESIGN.md invariants 3 and 4: every saga ends terminal, no
SUCCESS step's effect repeats, every unknown step is re-run with its original idempotency key or compensated, and
no compensation runs twice for a step recorded COMPENSATED.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from saga_runtime import SagaStatus, StepStatus
from saga_runtime.testing import CrashPoint, CrashReport, PointReport, ToolCall, check_crash_points

pytestmark = pytest.mark.slow

# Example-style tools: a card charge, a stock reservation (a sync tool: it runs in a worker thread) and a
# shipment that fails for an address no carrier serves. Each keeps its effect in a file keyed by idempotency key,
# as a real provider would, so a re-run with the same key is a no-op and a compensation finds what to undo.
TOOLS = textwrap.dedent(
    """
    import json, os
    from saga_runtime import RetryPolicy, StepContext, ToolRegistry

    WORLD = os.path.join(os.path.dirname(__file__), "world.jsonl")

    def effect(kind: str, key: str) -> None:
        with open(WORLD, "a") as handle:
            handle.write(json.dumps([kind, key]) + "\\n")

    registry = ToolRegistry()

    @registry.tool(name="charge")
    class Charge:
        async def execute(self, order_id: str, amount_cents: int, ctx: StepContext) -> dict:
            effect("charge", ctx.idempotency_key)
            return {"charge_id": ctx.idempotency_key, "amount_cents": amount_cents}

        async def compensate(self, result: dict | None, ctx: StepContext) -> None:
            effect("refund", ctx.idempotency_key)

    @registry.tool(name="reserve")
    class Reserve:
        def execute(self, sku: str, quantity: int, ctx: StepContext) -> dict:
            effect("reserve", ctx.idempotency_key)
            return {"reservation": ctx.idempotency_key}

        def compensate(self, result: dict | None, ctx: StepContext) -> None:
            effect("release", ctx.idempotency_key)

    @registry.tool(name="ship", compensation_retry=RetryPolicy(max_attempts=1))
    class Ship:
        async def execute(self, address: str, ctx: StepContext) -> dict:
            if address == "nowhere":
                raise LookupError("no carrier delivers to 'nowhere'")
            effect("ship", ctx.idempotency_key)
            return {"tracking": ctx.idempotency_key}

        async def compensate(self, result: dict | None, ctx: StepContext) -> None:
            effect("cancel-shipment", ctx.idempotency_key)
    """
)

CHARGE = {"id": "charge", "tool": "charge", "args": {"order_id": "A1", "amount_cents": 500}}
RESERVE = {"id": "reserve", "tool": "reserve", "args": {"sku": "KEYBOARD", "quantity": 1}}
SHIP = {"id": "ship", "tool": "ship", "args": {"address": "Seoul"}}
SHIP_NOWHERE = {"id": "ship", "tool": "ship", "args": {"address": "nowhere"}}

# Goes through: the charge, then the reservation and the shipment as one concurrent group.
SUCCEEDS = [CHARGE, [RESERVE, SHIP]]
# The shipment fails: the reservation and the charge are compensated, in reverse.
FAILS = [CHARGE, RESERVE, SHIP_NOWHERE]


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def sql_kind(request: pytest.FixtureRequest) -> str:
    """Return each kind of SQL store in turn."""
    value: str = request.param
    return value


@pytest.fixture
def database_url(request: pytest.FixtureRequest, sql_kind: str, tmp_path: Path) -> str:
    """Return the URL of an empty database of `sql_kind`, the test's own (recovery takes every orphan there)."""
    if sql_kind == "sqlite":
        return f"sqlite:///{tmp_path / 'sagas.db'}"
    databases = request.getfixturevalue("postgres_databases" if sql_kind == "postgresql" else "mysql_databases")
    url: str = databases.create()
    return url


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Write the tools module in a folder of its own, importable here and in the harness's children."""
    name = f"crash_tools_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / f"{name}.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(folder))
    yield f"{name}:registry"
    sys.modules.pop(name, None)


def keys_of(report: PointReport, step_id: str, process: str) -> set[str]:
    """Return the idempotency keys the calls of one step in one process used."""
    return {call.idempotency_key for call in report.calls_of(step_id, process=process)}  # type: ignore[arg-type]


def check_common(report: CrashReport, expected_points: int, final: SagaStatus) -> None:
    """Every point was really killed, broke no invariant, and ended `final`; unknown steps kept their keys."""
    assert report.problems == [], str(report)
    assert len(report.points) == expected_points
    for point in report.points:
        assert point.crashed, point
        assert point.status is final, point
        assert point.at_crash is not None
        assert not point.at_crash.status.is_terminal, point  # the kill really interrupted the saga
        for step in point.at_crash.steps:
            if step.status in (StepStatus.RUNNING, StepStatus.CANCELLED):
                # An unknown step is re-run, or compensated, with the key it was first given.
                assert keys_of(point, step.step_id, "recovery") <= {step.idempotency_key}, point
                assert keys_of(point, step.step_id, "recovery"), point
            if step.status is StepStatus.SUCCESS:
                assert point.calls_of(step.step_id, action="execute", process="recovery") == [], point


@pytest.mark.parametrize("plan_name", ["succeeds", "fails"])
async def test_every_crash_point_recovers_safely(database_url: str, tools: str, plan_name: str) -> None:
    """A 3-step plan killed at each crash point ends terminal on recovery, with no doubled or orphaned effect."""
    plan = SUCCEEDS if plan_name == "succeeds" else FAILS
    report = await check_crash_points(tools, plan, url=database_url, lease_timeout=0.3, concurrency=4)
    if plan_name == "succeeds":
        assert report.baseline.status is SagaStatus.SUCCESS
        check_common(report, 6, SagaStatus.SUCCESS)
        # Killed after the charge returned but before it was recorded: recovery charges again, same key.
        after = report.point("after-execute-charge")
        (first,) = after.calls_of("charge", process="run")
        (again,) = after.calls_of("charge", process="recovery")
        assert (first.outcome, again.outcome, again.idempotency_key) == ("returned", "returned", first.idempotency_key)
        assert after.result is not None
        assert after.result.step("charge").attempts == 2
    else:
        assert report.baseline.status is SagaStatus.COMPENSATED
        assert [str(call) for call in report.baseline_calls] == [
            "run:execute(charge)=returned",
            "run:execute(reserve)=returned",
            "run:execute(ship)=raised",
            "run:compensate(reserve)=returned",
            "run:compensate(charge)=returned",
        ]
        check_common(report, 10, SagaStatus.COMPENSATED)
        # Killed mid-compensation after reserve was released: recovery releases it again (it was not recorded),
        # then refunds the charge once.
        mid = report.point("after-compensate-reserve")
        assert [str(c) for c in mid.calls_of(process="recovery")] == [
            "recovery:compensate(reserve)=returned",
            "recovery:compensate(charge)=returned",
        ]
        # Killed after the failing call: it is run again with its key, fails again, and the saga compensates.
        failed = report.point("after-execute-ship")
        assert [str(c) for c in failed.calls_of("ship")] == [
            "run:execute(ship)=raised",
            "recovery:execute(ship)=raised",
        ]


async def test_fail_step_makes_a_succeeding_plan_compensate(tmp_path: Path, tools: str) -> None:
    """`fail_step=` fails a step without calling its tool, giving the compensation points of any plan."""
    report = await check_crash_points(
        tools, [CHARGE, RESERVE], url=f"sqlite:///{tmp_path / 'sagas.db'}", fail_step="reserve", lease_timeout=0.3
    )
    assert report.baseline.status is SagaStatus.COMPENSATED
    assert [p.point.name for p in report.points] == [
        "before-execute-charge",
        "after-execute-charge",
        "before-execute-reserve",
        "after-execute-reserve",
        "before-compensate-charge",
        "after-compensate-charge",
    ]
    report.assert_ok()
    assert {p.status for p in report.points} == {SagaStatus.COMPENSATED}


def test_the_harness_reports_a_broken_invariant() -> None:
    """A recovery that re-executes a SUCCESS step, or leaves an effect undone, is reported as a problem."""
    from saga_runtime import ToolRegistry
    from saga_runtime._records import SagaResult, StepRecord
    from saga_runtime.testing._harness import _problems

    registry = ToolRegistry()

    @registry.tool
    class T:
        def execute(self) -> None: ...

        def compensate(self, result: None) -> None: ...

    def result(status: SagaStatus, step: StepStatus) -> SagaResult:
        record = StepRecord(step_id="a", group=0, tool_name="T", args={}, status=step, idempotency_key="k")
        return SagaResult(saga_id="s", status=status, steps=[record], created_at="2024-01-01T00:00:00Z")

    do_run = ToolCall("execute", "T", "a", "k", 1, "run", "returned")
    do_again = ToolCall("execute", "T", "a", "k", 2, "recovery", "returned")
    problems = _problems(
        registry,
        True,
        result(SagaStatus.RUNNING, StepStatus.SUCCESS),
        result(SagaStatus.COMPENSATED, StepStatus.COMPENSATED),
        [do_run, do_again],
    )
    assert any("recorded SUCCESS before the crash, yet recovery executed it" in p for p in problems)
    assert any("never undone" in p for p in problems)
    assert _problems(registry, False, None, result(SagaStatus.RUNNING, StepStatus.RUNNING), [])[:2] == [
        "the run was not killed: it never reached the crash point (it took another path)",
        "the saga is RUNNING after recovery, not finished",
    ]
    assert CrashPoint("after", "execute", "a").describe() == "after step 'a' executed, before its outcome is recorded"


async def test_a_compensation_finished_by_recovery_keeps_the_failure_as_its_error(tmp_path: Path, tools: str) -> None:
    """A saga killed mid-compensation ends COMPENSATED with the failed step as its error, not a cancellation."""
    report = await check_crash_points(
        tools,
        FAILS,
        url=f"sqlite:///{tmp_path / 'sagas.db'}",
        points=[CrashPoint("after", "compensate", "reserve")],
        lease_timeout=0.3,
    )
    (point,) = report.assert_ok().points
    assert point.result is not None
    assert point.result.status is SagaStatus.COMPENSATED
    assert "ship" in (point.result.error or ""), point.result.error
