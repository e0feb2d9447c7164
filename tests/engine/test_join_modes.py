"""Join modes of a group (API.md §8): `first` races, `quorum`/`any` tolerate failures, `all` stays the default.

Every racing tool waits for the test to release it (tests/quote_desk.py), so the test decides who finishes when.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest
from quote_desk import HOLD, Desk, group, price, quote, quotes, scripted, statuses, use

from saga_runtime import (
    PlanValidationError,
    SagaExecutor,
    SagaResult,
    SagaStatus,
    StepContext,
    StepFailedError,
    StepStatus,
    ToolRegistry,
)

# -- first ------------------------------------------------------------------------------------------------------


async def test_first_winner_is_kept_and_running_siblings_are_cancelled_and_undone_with_none() -> None:
    """`first`: the first success wins; running siblings are cancelled, then compensated at once with None."""
    desk = Desk()
    plan = [group("Quote", "abc", "first"), use()]

    result = await desk.race(plan, "abc", "b")

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {"a": "COMPENSATED", "b": "SUCCESS", "c": "COMPENSATED", "use": "SUCCESS"}
    assert sorted(desk.cancelled()) == ["a", "c"]
    assert sorted(desk.undone(), key=str) == [("a", None), ("c", None)]
    for loser in ("a", "c"):
        record = result.step(loser)
        assert record.error == "cancelled while running: step 'b' won the race"
        assert record.error_type == "CancelledError"
        assert record.result is None
        assert record.compensated_at is not None
    assert result.step("b").error is None
    assert desk.used() == [quote("b")]
    assert result.result_of("q") == quote("b")


async def test_first_sibling_that_finished_too_is_compensated_with_its_result() -> None:
    """`first`: a sibling that succeeded after the winner (before its cancellation landed) is undone with its result."""
    desk = Desk()
    plan = [group("Quote", "ab", "first"), use()]

    result = await desk.race(plan, "ab", "ba")  # b wakes first and wins; a wakes in the same turn and finishes anyway

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert desk.cancelled() == []
    loser = result.step("a")
    assert loser.status is StepStatus.COMPENSATED
    assert loser.error == "lost the race to step 'b'"
    assert loser.error_type == "LostRace"
    assert desk.undone() == [("a", quote("a"))]
    assert result.step("b").status is StepStatus.SUCCESS
    assert desk.used() == [quote("b")]
    assert result.result_of("q") == quote("b")


async def test_first_failed_members_are_failed_not_undone_and_do_not_fail_the_saga() -> None:
    """`first`: a member that fails is recorded FAILED, is not compensated, and a later winner still wins."""
    desk = Desk()
    desk.failing.add("a")
    plan = [group("Quote", "abc", "first"), use()]

    async def script() -> None:
        await desk.wait_started("a", "b", "c")
        desk.release("a")
        await anyio.wait_all_tasks_blocked()
        assert desk.cancelled() == []  # a failure in a race stops nobody
        desk.release("c")

    result = await scripted(lambda: SagaExecutor(desk.registry).run(plan), script)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    failed = result.step("a")
    assert failed.status is StepStatus.FAILED
    assert failed.error == "RuntimeError: a is down (after 1 attempt)"
    assert failed.error_type == "RuntimeError"
    assert result.step("c").status is StepStatus.SUCCESS
    assert result.step("b").status is StepStatus.COMPENSATED
    assert result.step("b").error == "cancelled while running: step 'c' won the race"
    assert desk.undone() == [("b", None)]
    assert desk.used() == [quote("c")]
    assert result.result_of("q") == quote("c")


async def test_first_every_member_failing_fails_the_saga_and_undoes_earlier_groups() -> None:
    """`first`: only when every member failed does the group fail; the saga compensates and stops there."""
    desk = Desk()
    desk.failing.update("ab")
    plan = [
        HOLD,
        group("Quote", "ab", "first"),
        use(),
    ]

    result = await desk.race(plan, "ab", "a", "b")

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert result.error == "every step of 'first' group 1 failed"
    assert statuses(result) == {"hold": "COMPENSATED", "a": "FAILED", "b": "FAILED", "use": "PENDING"}
    assert desk.undone() == [("hold", {"held": "hold"})]
    assert desk.used() == []
    assert result.result_of("q") is None


async def test_first_winner_is_undone_with_the_saga_and_losers_are_not_undone_twice() -> None:
    """`first`: when a later group fails, the winner is compensated with its result; each loser was undone once."""
    desk = Desk()
    plan = [group("Quote", "abc", "first"), {"id": "boom", "tool": "Boom"}]

    result = await desk.race(plan, "abc", "c")

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert statuses(result) == {"a": "COMPENSATED", "b": "COMPENSATED", "c": "COMPENSATED", "boom": "FAILED"}
    assert Counter(name for name, _ in desk.undone()) == {"a": 1, "b": 1, "c": 1}
    assert desk.undone()[-1] == ("c", quote("c"))  # the winner, with the saga, after the losers
    assert result.step("c").error is None


async def test_first_loser_without_compensate_stays_cancelled() -> None:
    """`first`: a cancelled loser whose tool cannot compensate is left CANCELLED (its outcome unknown)."""
    desk = Desk()
    plan = [group("Peek", "ab", "first")]

    result = await desk.race(plan, "ab", "a")

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {"a": "SUCCESS", "b": "CANCELLED"}
    assert result.step("b").error == "cancelled while running: step 'a' won the race"
    assert result.result_of("q") == quote("a")


async def test_first_ref_is_the_winner_even_when_an_earlier_loser_without_compensate_finished_too() -> None:
    """`first`: a $ref to the group is the winner's result, even if a plan-earlier, uncompensatable loser finished."""
    desk = Desk()
    plan = [group("Peek", "ab", "first"), use()]

    result = await desk.race(plan, "ab", "ba")  # b wins; a (plan-earlier, no compensate) finishes in the same turn

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert result.step("a").error == "lost the race to step 'b'"
    assert desk.used() == [quote("b")]
    assert result.result_of("q") == quote("b")


async def test_first_ref_paths_reach_into_the_winners_result() -> None:
    """`first`: `{"$ref": "<group>.<key>"}` reads a field of the winner's result."""
    desk = Desk()
    plan = [group("Quote", "ab", "first"), use("q.price")]

    result = await desk.race(plan, "ab", "b")

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert desk.used() == [price("b")]


async def test_stored_result_knows_the_group_ids() -> None:
    """A result read back from the store answers result_of(group id) as the live result does."""
    desk = Desk()
    plan = [group("Quote", "ab", "first", gid="race"), group("Quote", "cde", "quorum", gid="poll", k=2)]
    executor = SagaExecutor(desk.registry)

    async def script() -> None:
        await desk.wait_started("a", "b")
        desk.release("a")
        await desk.wait_started("c", "d", "e")
        desk.release("e", "c", "d")

    result = await scripted(lambda: executor.run(plan, saga_id="stored"), script)
    stored = await executor.store.get_saga("stored")

    assert stored is not None
    assert result.status is stored.status is SagaStatus.SUCCESS
    for answer in (result, stored):
        assert answer.result_of("race") == quote("a")
        assert answer.result_of("poll") == [quote("c"), quote("d"), quote("e")]
        assert answer.result_of("a") == quote("a")


async def test_replay_rebuilds_a_saga_whose_step_took_a_ref_to_a_group() -> None:
    """executor.replay() accepts a recorded step whose $ref pointed at a group id, calling no tool."""
    desk = Desk()
    executor = SagaExecutor(desk.registry)
    plan = [group("Quote", "ab", "first"), use()]

    result = await scripted(lambda: executor.run(plan, saga_id="replayed"), desk.releasing("ab", "a"))
    calls_made = len(desk.log)
    replayed = await executor.replay("replayed")

    assert result.status is SagaStatus.SUCCESS
    assert replayed.result_of("q") == quote("a")
    assert len(desk.log) == calls_made


async def test_running_a_finished_join_saga_again_returns_its_record() -> None:
    """The saga id of a finished plan with join groups returns its stored result; no tool is called again."""
    desk = Desk()
    executor = SagaExecutor(desk.registry)
    plan = [group("Quote", "ab", "first"), group("Quote", "cd", "quorum", gid="p", k=1)]
    desk.release("a", "c", "d")

    first = await executor.run(plan, saga_id="again")
    calls_made = len(desk.log)
    second = await executor.run(plan, saga_id="again")

    assert first.status is second.status is SagaStatus.SUCCESS
    assert second.result_of("q") == first.result_of("q")
    assert second.result_of("p") == [quote("c"), quote("d")]
    assert len(desk.log) == calls_made


# -- quorum and any ---------------------------------------------------------------------------------------------


async def test_quorum_met_keeps_going_and_its_ref_is_the_successes_in_plan_order() -> None:
    """`quorum`: a failure cancels nobody; with k successes the saga goes on, the $ref listing them in plan order."""
    desk = Desk()
    desk.failing.add("b")
    plan = [
        group("Quote", "abc", "quorum", k=2),
        use(),
        use("q.1.quote", "second"),
    ]

    async def script() -> None:
        await desk.wait_started("a", "b", "c")
        desk.release("b")
        await anyio.wait_all_tasks_blocked()
        assert desk.cancelled() == []
        desk.release("c")
        await anyio.wait_all_tasks_blocked()
        desk.release("a")

    result = await scripted(lambda: SagaExecutor(desk.registry).run(plan), script)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {"a": "SUCCESS", "b": "FAILED", "c": "SUCCESS", "use": "SUCCESS", "second": "SUCCESS"}
    assert result.step("b").error == "RuntimeError: b is down (after 1 attempt)"
    assert desk.cancelled() == []
    assert desk.undone() == []
    assert desk.used() == [[quote("a"), quote("c")], "c"]
    assert result.result_of("q") == [quote("a"), quote("c")]


async def test_quorum_not_met_fails_the_saga_and_compensates_its_successes() -> None:
    """`quorum`: fewer than k successes fails the saga; the group's successes and earlier steps are compensated."""
    desk = Desk()
    desk.failing.update("bc")
    plan = [
        HOLD,
        group("Quote", "abc", "quorum", k=2),
        use(),
    ]

    result = await desk.race(plan, "abc", "b", "a", "c")

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert result.error == "quorum group 1: 1 of 3 steps succeeded, 2 needed"
    assert statuses(result) == {
        "hold": StepStatus.COMPENSATED,
        "a": StepStatus.COMPENSATED,
        "b": StepStatus.FAILED,
        "c": StepStatus.FAILED,
        "use": StepStatus.PENDING,
    }
    assert desk.cancelled() == []
    assert desk.undone() == [("a", quote("a")), ("hold", {"held": "hold"})]
    assert desk.used() == []
    assert result.result_of("q") == [quote("a")]  # undone with the saga, but it did succeed


async def test_quorum_waits_for_every_member_even_once_k_succeeded() -> None:
    """`quorum`: reaching k does not cancel the members still running; they run to their end."""
    desk = Desk()
    plan = [group("Quote", "abc", "quorum", k=2)]

    async def script() -> None:
        await desk.wait_started("a", "b", "c")
        desk.release("a", "b")
        await anyio.wait_all_tasks_blocked()
        assert desk.cancelled() == []
        desk.release("c")

    result = await scripted(lambda: SagaExecutor(desk.registry).run(plan), script)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert set(statuses(result).values()) == {StepStatus.SUCCESS}
    assert result.result_of("q") == [quote("a"), quote("b"), quote("c")]


async def test_any_goes_on_with_one_success() -> None:
    """`any`: one success among failures is enough; its $ref is the list of successes."""
    desk = Desk()
    desk.failing.update("ac")
    plan = [group("Quote", "abc", "any"), use()]

    result = await desk.race(plan, "abc", "ac", "b")

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert statuses(result) == {"a": "FAILED", "b": "SUCCESS", "c": "FAILED", "use": "SUCCESS"}
    assert desk.used() == [[quote("b")]]


async def test_any_with_every_member_failing_fails_the_saga() -> None:
    """`any`: no success at all fails the saga, which compensates the earlier groups."""
    desk = Desk()
    desk.failing.update("ab")
    plan = [HOLD, group("Quote", "ab", "any")]

    result = await desk.race(plan, "ab", "ab")

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert result.error == "any group 1: 0 of 2 steps succeeded, 1 needed"
    assert desk.undone() == [("hold", {"held": "hold"})]
    assert result.result_of("q") == []


# -- all --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["list", "dict"])
async def test_all_groups_fail_on_one_failure_and_cancel_their_siblings(form: str) -> None:
    """A plain list group, and a group dict with join "all", fail the saga on one failure and cancel siblings."""
    desk = Desk()
    desk.failing.add("a")
    steps = quotes("ab")
    first: Any = steps if form == "list" else {"group": steps, "join": "all", "id": "q"}
    plan = [first, use("b")]

    result = await desk.race(plan, "ab", "a")

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert statuses(result) == {"a": "FAILED", "b": "COMPENSATED", "use": "PENDING"}
    assert result.step("b").error == "cancelled while running: step 'a' failed"
    assert desk.cancelled() == ["b"]
    assert desk.undone() == [("b", None)]


async def test_all_group_id_ref_is_the_list_of_results_in_plan_order() -> None:
    """A `$ref` to an `all` group's id is the list of its results in plan order, whoever finished first."""
    desk = Desk()
    plan = [group("Quote", "abc", "all"), use()]

    result = await desk.race(plan, "abc", "cba")

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert desk.used() == [[quote("a"), quote("b"), quote("c")]]
    assert result.result_of("q") == [quote("a"), quote("b"), quote("c")]


# -- plan validation --------------------------------------------------------------------------------------------

QUOTES = quotes("ab")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"join": "fastest"}, "group 0: 'join' must be one of all, first, quorum, any, got 'fastest'"),
        ({"join": "quorum"}, "group 0: a quorum needs 'k', an int from 1 to its 2 steps, got None"),
        ({"join": "quorum", "k": 0}, "a quorum needs 'k', an int from 1 to its 2 steps, got 0"),
        ({"join": "quorum", "k": 3}, "a quorum needs 'k', an int from 1 to its 2 steps, got 3"),
        ({"join": "quorum", "k": "2"}, "a quorum needs 'k', an int from 1 to its 2 steps, got '2'"),
        ({"join": "quorum", "k": True}, "a quorum needs 'k', an int from 1 to its 2 steps, got True"),
        ({"join": "first", "k": 1}, "group 0: 'k' belongs to quorum groups only (join is 'first')"),
        ({"join": "all", "k": 2}, "group 0: 'k' belongs to quorum groups only (join is 'all')"),
        ({"join": "any", "k": 2}, "group 0: 'k' belongs to quorum groups only (join is 'any')"),
        ({"join": "first", "id": "a"}, "group 0: id 'a' is already the id of a step or group; ids are unique"),
        ({"join": "first", "id": "g.x"}, "group 0: 'id' must be a non-empty string without '.'"),
        ({"join": "first", "id": ""}, "group 0: 'id' must be a non-empty string without '.'"),
        ({"join": "first", "mode": "x"}, "group 0: unknown key(s) ['mode']; a group has 'group', 'join', 'k' and 'id'"),
    ],
)
async def test_bad_group_dicts_are_refused_before_anything_runs(spec: dict[str, Any], message: str) -> None:
    """A group dict with a bad join, k or id is refused with a PlanValidationError naming it; nothing is stored."""
    desk = Desk()
    executor = SagaExecutor(desk.registry)

    with pytest.raises(PlanValidationError) as caught:
        await executor.run([{"group": QUOTES, **spec}], saga_id="refused")

    assert any(message in problem for problem in caught.value.problems), caught.value.problems
    assert await executor.store.get_saga("refused") is None
    assert desk.log == []


async def test_any_with_k_one_is_accepted() -> None:
    """`any` may spell out its k = 1."""
    desk = Desk()
    desk.release("a", "b")

    result = await SagaExecutor(desk.registry).run([{"group": QUOTES, "join": "any", "k": 1, "id": "q"}])

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert result.result_of("q") == [quote("a"), quote("b")]


async def test_two_groups_with_one_id_are_refused() -> None:
    """Two groups may not share an id."""
    desk = Desk()
    plan = [group("Quote", "ab", "first", gid="g"), group("Quote", "cd", "first", gid="g")]

    with pytest.raises(PlanValidationError) as caught:
        await SagaExecutor(desk.registry).run(plan)

    assert caught.value.problems == ["group 1: id 'g' is already the id of a step or group; ids are unique"]


@pytest.mark.parametrize("where", ["same", "later"])
async def test_ref_to_a_group_in_the_same_or_a_later_group_is_refused(where: str) -> None:
    """A `$ref` to a group id from inside that group, or from an earlier group, is refused."""
    desk = Desk()
    user = use()
    if where == "same":
        plan: list[Any] = [{"group": [*QUOTES, user], "join": "first", "id": "q"}]
        expected = "$ref to 'q' in group 0; a $ref may only point to a step of an earlier group"
    else:
        plan = [user, group("Quote", "ab", "first")]
        expected = "$ref to 'q' in group 1; a $ref may only point to a step of an earlier group"

    with pytest.raises(PlanValidationError) as caught:
        await SagaExecutor(desk.registry).run(plan)

    assert any(expected in problem for problem in caught.value.problems), caught.value.problems
    assert desk.log == []


async def test_ref_to_an_unknown_group_id_is_refused() -> None:
    """A `$ref` to an id no step or group has is refused."""
    desk = Desk()
    plan = [group("Quote", "ab", "first"), use("nope")]

    with pytest.raises(PlanValidationError) as caught:
        await SagaExecutor(desk.registry).run(plan)

    assert any("$ref to 'nope', which is no step of this plan" in p for p in caught.value.problems)


# -- dynamic sagas ----------------------------------------------------------------------------------------------


def calls(names: str, tool: str = "Quote") -> list[tuple[str, dict[str, Any], str]]:
    """Return saga.group calls, one per name, each with its name as step id."""
    return [(tool, {"name": n}, n) for n in names]


async def test_dynamic_first_returns_the_winner_and_undoes_the_losers() -> None:
    """saga.group(join="first") returns the winner's result; the others are cancelled and compensated at once."""
    desk = Desk()
    executor = SagaExecutor(desk.registry)
    seen: list[Any] = []

    async def work() -> SagaResult:
        async with executor.saga("dyn-first") as saga:
            seen.append(await saga.group(calls("abc"), join="first"))
            seen.append(desk.undone())
        assert saga.result is not None
        return saga.result

    result = await scripted(work, desk.releasing("abc", "b"))

    assert seen[0] == quote("b")
    assert sorted(seen[1], key=str) == [("a", None), ("c", None)]  # already undone when the call returned
    assert result.status is SagaStatus.SUCCESS
    assert statuses(result) == {"a": "COMPENSATED", "b": "SUCCESS", "c": "COMPENSATED"}
    assert result.step("a").error == "cancelled while running: step 'b' won the race"


async def test_dynamic_first_with_every_call_failing_raises_and_the_block_compensates() -> None:
    """saga.group(join="first") raises StepFailedError when every call failed; leaving the block undoes the rest."""
    desk = Desk()
    desk.failing.update("ab")
    executor = SagaExecutor(desk.registry)

    async def work() -> SagaResult:
        saga = executor.saga("dyn-first-fail")

        async def block() -> None:
            async with saga:
                await saga.call("Hold", name="hold")
                await saga.group(calls("ab"), join="first")

        with pytest.raises(StepFailedError) as caught:
            await block()
        assert caught.value.error_type == "RuntimeError"
        assert caught.value.error == "RuntimeError: a is down (after 1 attempt)"
        assert saga.result is not None
        return saga.result

    result = await scripted(work, desk.releasing("ab", "a", "b"))

    assert result.status is SagaStatus.COMPENSATED
    assert statuses(result) == {"Hold-0": "COMPENSATED", "a": "FAILED", "b": "FAILED"}
    assert desk.undone() == [("hold", {"held": "hold"})]


async def test_dynamic_quorum_returns_the_successes_in_call_order() -> None:
    """saga.group(join="quorum", k=2) lets every call finish and returns the successes in the order given."""
    desk = Desk()
    desk.failing.add("a")
    executor = SagaExecutor(desk.registry)
    seen: list[Any] = []

    async def work() -> SagaResult:
        async with executor.saga("dyn-quorum") as saga:
            seen.append(await saga.group(calls("abc"), join="quorum", k=2))
        assert saga.result is not None
        return saga.result

    result = await scripted(work, desk.releasing("abc", "ca", "b"))

    assert seen == [[quote("b"), quote("c")]]
    assert result.status is SagaStatus.SUCCESS
    assert statuses(result) == {"a": "FAILED", "b": "SUCCESS", "c": "SUCCESS"}
    assert desk.cancelled() == []


async def test_dynamic_quorum_not_met_raises_and_leaving_the_block_undoes_its_successes() -> None:
    """saga.group(join="quorum") with fewer than k successes raises StepFailedError; the block undoes the successes."""
    desk = Desk()
    desk.failing.update("bc")
    executor = SagaExecutor(desk.registry)

    async def work() -> SagaResult:
        saga = executor.saga("dyn-quorum-fail")
        with pytest.raises(StepFailedError, match=r"the quorum group of 3 calls failed: 1 succeeded, 2 needed"):
            async with saga:
                await saga.group(calls("abc"), join="quorum", k=2)
        assert saga.result is not None
        return saga.result

    result = await scripted(work, desk.releasing("abc", "abc"))

    assert result.status is SagaStatus.COMPENSATED
    assert statuses(result) == {"a": "COMPENSATED", "b": "FAILED", "c": "FAILED"}
    assert desk.undone() == [("a", quote("a"))]


async def test_dynamic_any_returns_the_list_of_successes() -> None:
    """saga.group(join="any") returns the list of successful results."""
    desk = Desk()
    desk.failing.add("b")
    executor = SagaExecutor(desk.registry)
    desk.release("a", "b")

    async with executor.saga("dyn-any") as saga:
        got = await saga.group(calls("ab"), join="any")

    assert got == [quote("a")]
    assert saga.result is not None
    assert saga.result.status is SagaStatus.SUCCESS


async def test_dynamic_quorum_not_met_compensates_its_successes_even_when_the_error_is_caught() -> None:
    """A failed saga.group(join="quorum") compensates its successes itself, whether or not the caller goes on."""
    desk = Desk()
    desk.failing.update("bc")
    executor = SagaExecutor(desk.registry)
    desk.release("a", "b", "c")

    async with executor.saga("dyn-quorum-caught") as saga:
        with pytest.raises(StepFailedError):
            await saga.group(calls("abc"), join="quorum", k=2)

    assert desk.undone() == [("a", quote("a"))]
    assert saga.result is not None
    assert saga.result.step("a").status is StepStatus.COMPENSATED


async def test_dynamic_first_returns_the_winner_even_when_an_earlier_loser_without_compensate_finished_too() -> None:
    """saga.group(join="first") returns the winner's result, even if a call-earlier uncompensatable loser finished."""
    desk = Desk()
    executor = SagaExecutor(desk.registry)
    seen: list[Any] = []

    async def work() -> None:
        async with executor.saga("dyn-first-peek") as saga:
            seen.append(await saga.group(calls("ab", tool="Peek"), join="first"))

    await scripted(work, desk.releasing("ab", "ba"))

    assert seen == [quote("b")]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"join": "fastest"}, "join must be all, first, quorum or any, got 'fastest'"),
        ({"join": "quorum"}, "a quorum needs k from 1 to its 2 calls, got None"),
        ({"join": "quorum", "k": 3}, "a quorum needs k from 1 to its 2 calls, got 3"),
    ],
)
async def test_dynamic_bad_join_options_are_refused_before_any_call(options: dict[str, Any], message: str) -> None:
    """saga.group with a bad join or k raises PlanValidationError and calls nothing."""
    desk = Desk()
    executor = SagaExecutor(desk.registry)

    async with executor.saga("dyn-bad") as saga:
        with pytest.raises(PlanValidationError) as caught:
            await saga.group(calls("ab"), **options)

    assert caught.value.problems == [message]
    assert desk.log == []


async def test_a_race_loser_whose_release_fails_fails_the_saga_instead_of_being_forgotten() -> None:
    """A `first` race whose loser cannot be undone ends COMPENSATION_FAILED (winner undone too), then retryable."""
    from saga_runtime import RetryPolicy

    released: list[str] = []
    down = {"slow"}
    registry = ToolRegistry()

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=1))
    class Book:
        """Book with a provider; `slow` never answers before the race is won."""

        async def execute(self, name: str) -> str:
            if name == "slow":
                await anyio.sleep(30)
            return name

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            if ctx.args["name"] in down:
                raise ConnectionError(f"{ctx.args['name']} cannot release right now")
            released.append(ctx.args["name"])

    executor = SagaExecutor(registry)
    plan = [
        {
            "group": [{"tool": "Book", "args": {"name": "fast"}}, {"tool": "Book", "args": {"name": "slow"}}],
            "join": "first",
        }
    ]
    result = await executor.run(plan, saga_id="hedge")
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert "could not be undone" in (result.error or "")
    assert released == ["fast"]  # the winner is undone with the saga; the loser's booking is still out
    assert [s.status for s in result.steps] == [StepStatus.COMPENSATED, StepStatus.COMPENSATION_FAILED]

    down.clear()
    again = await executor.retry_compensation("hedge")
    assert again.status is SagaStatus.COMPENSATED
    assert released == ["fast", "slow"]
