"""Property: for any plan, failure pattern and interleaving, compensation undoes exactly what happened, in reverse."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from saga_runtime import RetryPolicy, SagaExecutor, SagaStatus, StepContext, StepStatus, ToolRegistry


@dataclass
class Journal:
    """What the tool saw, in the order it happened."""

    events: list[tuple[str, str]] = field(default_factory=list)
    results: dict[str, object] = field(default_factory=dict)
    compensated_with: dict[str, list[object]] = field(default_factory=dict)


journal = Journal()
registry = ToolRegistry()


@registry.tool(compensation_retry=RetryPolicy(max_attempts=1))
class Effect:
    """Do (and undo) one recorded effect, yielding to the loop to vary the interleaving."""

    async def execute(self, key: str, fail: bool, comp_fail: bool, yields: int, ctx: StepContext) -> dict[str, str]:
        journal.events.append(("exec_start", key))
        for _ in range(yields):
            await asyncio.sleep(0)
        if fail:
            journal.events.append(("exec_failed", key))
            raise RuntimeError(f"{key} failed")
        result = {"key": key, "token": ctx.idempotency_key}
        journal.results[key] = result
        journal.events.append(("exec_done", key))
        return result

    async def compensate(self, result: dict[str, str] | None, ctx: StepContext) -> None:
        key = ctx.args["key"]
        journal.compensated_with.setdefault(key, []).append(result)
        journal.events.append(("comp_start", key))
        for _ in range(ctx.args["yields"]):
            await asyncio.sleep(0)
        journal.events.append(("comp_end", key))
        if ctx.args["comp_fail"]:
            raise RuntimeError(f"could not undo {key}")


# (fail, comp_fail, yields): failures are rarer than successes, so long successful prefixes are common too.
step_spec = st.tuples(st.sampled_from([False, False, False, True]), st.booleans(), st.integers(0, 3))
plans = st.lists(st.lists(step_spec, min_size=1, max_size=4), min_size=1, max_size=6)


def build(groups: list[list[tuple[bool, bool, int]]]) -> tuple[list[list[dict]], dict[str, int]]:
    """Return the plan and the group of each step key."""
    plan, group_of = [], {}
    for g, steps in enumerate(groups):
        group = []
        for i, (fail, comp_fail, yields) in enumerate(steps):
            key = f"g{g}s{i}"
            group_of[key] = g
            args = {"key": key, "fail": fail, "comp_fail": comp_fail, "yields": yields}
            group.append({"id": key, "tool": "Effect", "args": args})
        plan.append(group)
    return plan, group_of


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=plans)
def test_compensation_undoes_exactly_what_happened_in_reverse(groups) -> None:
    """Every SUCCESS step is compensated exactly once, groups in reverse, and no FAILED or unstarted step is."""
    journal.events.clear()
    journal.results.clear()
    journal.compensated_with.clear()
    plan, group_of = build(groups)
    result = asyncio.run(SagaExecutor(registry).run(plan))
    records = {record.step_id: record for record in result.steps}

    done = {key for kind, key in journal.events if kind == "exec_done"}
    failed = {key for kind, key in journal.events if kind == "exec_failed"}
    started = {key for kind, key in journal.events if kind == "exec_start"}
    compensated = set(journal.compensated_with)

    if not failed:
        assert result.status is SagaStatus.SUCCESS
        assert not compensated
        assert all(r.status is StepStatus.SUCCESS for r in records.values())
        return

    # Exactly once, with the stored result, for every step whose execute returned.
    for key in done:
        assert journal.compensated_with.get(key) == [journal.results[key]], key
        comp_fail = records[key].args["comp_fail"]
        assert records[key].status is (StepStatus.COMPENSATION_FAILED if comp_fail else StepStatus.COMPENSATED)
    # Steps cancelled mid-flight (started, neither done nor failed) are unknown: compensated once, with None.
    for key in started - done - failed:
        assert journal.compensated_with.get(key) == [None], key
        assert records[key].error_type == "CancelledError"
    # Never a FAILED step, never a step that did not start.
    assert not compensated & failed
    assert not compensated - started
    for key in set(records) - started:
        assert records[key].status is StepStatus.PENDING

    # Reverse order: all compensations of a group end before any of an earlier group starts.
    comp_events = [(kind, key) for kind, key in journal.events if kind in ("comp_start", "comp_end")]
    for i, (kind, key) in enumerate(comp_events):
        if kind != "comp_end":
            continue
        for later_kind, later_key in comp_events[i + 1 :]:
            if later_kind == "comp_start" and group_of[later_key] > group_of[key]:
                raise AssertionError(f"{later_key} (group {group_of[later_key]}) started after {key} ended")

    needed_failed = any(records[key].args["comp_fail"] for key in compensated)
    assert result.status is (SagaStatus.COMPENSATION_FAILED if needed_failed else SagaStatus.COMPENSATED)
