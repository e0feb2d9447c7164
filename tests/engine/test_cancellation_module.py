"""The cancellation module alone: shields, siblings cancelled together, the fence, and telling a caller's cancel."""

from __future__ import annotations

import asyncio
import contextlib
import time

import anyio
import pytest

from saga_runtime import LeaseLostError, SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._engine._cancellation import (
    Fence,
    Siblings,
    cancel_requests,
    deadline,
    fence_scope,
    shielded,
    shielded_inline,
)


async def test_shielded_work_finishes_when_the_caller_is_cancelled_then_the_cancel_goes_on() -> None:
    """A shielded coroutine runs to its end through a caller's cancel; the cancel is raised afterwards."""
    done = []

    async def work() -> str:
        await asyncio.sleep(0.05)
        done.append(True)
        return "ok"

    task = asyncio.ensure_future(shielded(work()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert done == [True]


async def test_shielded_work_holds_through_a_timeout_of_the_caller() -> None:
    """A caller's `asyncio.timeout` lands after the shielded work ends, not inside it."""
    done = []

    async def work() -> None:
        await asyncio.sleep(0.05)
        done.append(True)

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await shielded(work())
    assert done == [True]


async def test_shielded_work_runs_in_a_task_of_its_own_and_its_error_reaches_the_caller() -> None:
    """Shielded work runs in its own task from its first line; what it raises is raised in the caller."""
    caller = asyncio.current_task()
    ran_in = []

    async def work() -> None:
        ran_in.append(asyncio.current_task())
        await asyncio.sleep(0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await shielded(work())
    assert len(ran_in) == 1
    assert ran_in[0] is not caller


async def test_shielded_work_failing_after_its_caller_was_cancelled_hands_its_error_on() -> None:
    """Work that raises after its caller was cancelled: its error goes on in the caller, never left unretrieved."""

    async def work() -> None:
        await asyncio.sleep(0.05)
        raise ValueError("boom")

    task = asyncio.ensure_future(shielded(work()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(ValueError, match="boom"):
        await task


async def test_shielded_work_failing_in_the_turn_its_caller_is_cancelled_hands_its_error_on() -> None:
    """Work that raised just before its caller was cancelled (the caller not yet woken): its error goes on."""
    caller: asyncio.Future[None] | None = None

    async def work() -> None:
        await asyncio.sleep(0)
        assert caller is not None
        asyncio.get_running_loop().call_soon(caller.cancel)  # lands before the caller wakes to the error
        raise ValueError("boom")

    async def call() -> None:
        await shielded(work())

    caller = asyncio.ensure_future(call())
    with pytest.raises(ValueError, match="boom"):
        await caller


async def test_shielded_inline_work_that_never_pauses_runs_in_the_calling_task() -> None:
    """Work that ends without pausing runs in the caller's own task (no task made for it) and returns its value."""
    caller = asyncio.current_task()
    ran_in = []

    async def work() -> str:
        ran_in.append(asyncio.current_task())
        return "ok"

    assert await shielded_inline(work()) == "ok"
    assert ran_in == [caller]


async def test_shielded_inline_work_that_pauses_finishes_when_the_caller_is_cancelled() -> None:
    """Work that pauses goes on shielded from there: it ends through a caller's cancel, which is raised afterwards."""
    steps: list[str] = []

    async def work() -> str:
        steps.append("before the pause")
        await asyncio.sleep(0.05)
        steps.append("after the pause")
        return "ok"

    task = asyncio.ensure_future(shielded_inline(work()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert steps == ["before the pause", "after the pause"]


async def test_shielded_inline_hands_errors_after_a_pause_to_the_caller() -> None:
    """An error raised after the work paused reaches the caller, as from the work itself."""

    async def work() -> None:
        await asyncio.sleep(0)
        raise ValueError("late")

    with pytest.raises(ValueError, match="late"):
        await shielded_inline(work())


async def test_siblings_are_cancelled_together_when_one_asks() -> None:
    """`cancel()` from one step stops the others at their next wait; `wait()` returns once all ended."""
    ended: list[str] = []
    siblings = Siblings()

    async def slow(name: str) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            ended.append(f"{name} cancelled")
            raise

    async def failing() -> None:
        await asyncio.sleep(0.01)
        ended.append("failing")
        siblings.cancel()

    siblings.start(slow, "a")
    siblings.start(slow, "b")
    siblings.start(failing)
    await siblings.wait()
    assert sorted(ended) == ["a cancelled", "b cancelled", "failing"]


async def test_a_sibling_in_an_anyio_shielded_section_is_cancelled_once_it_leaves_it() -> None:
    """A step cancelled inside an anyio-shielded section finishes the section, then is cancelled at its next wait."""
    ended: list[str] = []
    siblings = Siblings()

    async def guarded() -> None:
        with anyio.CancelScope(shield=True):
            await asyncio.sleep(0.05)
            ended.append("section done")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            ended.append("cancelled after")
            raise

    async def failing() -> None:
        await asyncio.sleep(0.01)
        siblings.cancel()

    siblings.start(guarded)
    siblings.start(failing)
    await asyncio.wait_for(siblings.wait(), 5)
    assert ended == ["section done", "cancelled after"]


async def test_a_sibling_cancelled_before_it_started_starts_and_is_cancelled_at_its_first_wait() -> None:
    """A step of a group cancelled before it ran still starts (so it can record how it ended), then is cancelled."""
    ended: list[str] = []
    siblings = Siblings()

    async def step() -> None:
        ended.append("started")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    siblings.start(step)
    siblings.cancel()
    await asyncio.wait_for(siblings.wait(), 5)
    assert ended == ["started", "cancelled"]


async def test_a_caller_leaving_cancels_the_siblings_waits_for_them_then_re_raises() -> None:
    """The waiting caller cancelled: every step is cancelled and awaited before the cancel goes on."""
    ended: list[str] = []
    siblings = Siblings()

    async def step() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            ended.append("ended")

    siblings.start(step)
    siblings.start(step)
    waiter = asyncio.ensure_future(siblings.wait())
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert ended == ["ended", "ended"]


async def test_a_step_that_raises_cancels_the_others_and_the_error_leaves_wait() -> None:
    """An exception escaping a step (a bug) cancels its siblings and leaves `wait()` in an exception group."""
    siblings = Siblings()
    cancelled = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def broken() -> None:
        raise RuntimeError("bug")

    siblings.start(slow)
    siblings.start(broken)
    with pytest.raises(BaseExceptionGroup) as caught:
        await siblings.wait()
    assert cancelled == [True]
    assert isinstance(caught.value.exceptions[0], RuntimeError)


async def test_a_fold_that_raises_cancels_the_others_and_the_error_leaves_wait() -> None:
    """An exception folding a step's outcome (a bug) cancels its siblings and leaves `wait()`, which never hangs."""
    cancelled = []

    def fold(outcome: object, group: Siblings) -> None:
        if outcome == "bad":
            raise RuntimeError("fold bug")

    siblings = Siblings(fold)

    async def slow() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "ok"

    async def bad() -> str:
        return "bad"

    siblings.start(slow)
    siblings.start(bad)
    with pytest.raises(BaseExceptionGroup) as caught:
        await asyncio.wait_for(siblings.wait(), 5)
    assert cancelled == [True]
    assert str(caught.value.exceptions[0]) == "fold bug"


async def test_each_step_started_together_is_folded_unless_it_returns_the_skipped_outcome() -> None:
    """`start_each` runs one task per call, handed the group; `fold` gets every outcome noted but `skip`, and `wait()`
    returns after all."""
    skip = object()
    folded: list[object] = []
    siblings = Siblings(lambda outcome, group: folded.append(outcome), skip=skip)

    async def step(n: int, tail: str, group: Siblings) -> None:
        await asyncio.sleep(0.001 * n)
        group.ended(skip if n % 2 else f"{n}{tail}")

    siblings.start_each(step, [(n,) for n in range(6)], "!")
    await asyncio.wait_for(siblings.wait(), 5)
    assert sorted(map(str, folded)) == ["0!", "2!", "4!"]


async def test_a_step_started_together_that_raises_tells_the_group_which_cancels_the_rest() -> None:
    """A `start_each` step noting its error with `raised` ends only its own task quietly: the rest are cancelled (each
    noting its cancel, which goes on), and `wait()` raises the error."""
    cancelled: list[int] = []
    goes_on: list[tuple[str, bool]] = []

    async def step(n: int, group: Siblings) -> None:
        try:
            if n == 0:
                raise ValueError("boom")
            await asyncio.sleep(5)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                cancelled.append(n)
            further = group.raised(exc)
            goes_on.append((type(exc).__name__, further))
            if further:
                raise
            return
        group.ended(None)

    siblings = Siblings()
    siblings.start_each(step, [(n,) for n in range(3)])
    with pytest.raises(BaseExceptionGroup) as caught:
        await asyncio.wait_for(siblings.wait(), 5)
    assert [type(e) for e in caught.value.exceptions] == [ValueError]
    assert sorted(cancelled) == [1, 2]
    assert sorted(goes_on) == [("CancelledError", True), ("CancelledError", True), ("ValueError", False)]


def test_a_fence_refuses_once_closed_and_tells_a_lost_lease_once() -> None:
    """A closed fence raises LeaseLostError naming the saga; `on_lost` is called once, only for a lost lease."""
    fence = Fence("s-1")
    told = []
    fence.on_lost = lambda: told.append(True)
    fence.check()
    fence.close()
    assert fence.fenced
    assert not fence.lease_lost
    assert told == []
    with pytest.raises(LeaseLostError, match="s-1"):
        fence.check()
    fence.close(lost=True)
    fence.close(lost=True)
    assert fence.lease_lost
    assert told == [True]


async def test_cancel_requests_counts_a_pending_cancel_of_the_task() -> None:
    """A cancel swallowed by a scope stays counted, so a lost lease is told apart from the caller leaving."""
    before = cancel_requests()
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    assert cancel_requests() == before + 1
    task.uncancel()
    with pytest.raises(asyncio.CancelledError):  # the cancel requested above is still delivered once
        await asyncio.sleep(0)
    assert cancel_requests() == before


async def test_a_sibling_that_swallows_its_cancel_is_cancelled_again_at_its_next_wait() -> None:
    """A sibling that swallows the group's cancel (as 3.11's wait_for can) is cancelled again: no effect after it."""
    log: list[str] = []
    reg = ToolRegistry()

    @reg.tool(name="fail_soon")
    class FailSoon:
        async def execute(self) -> dict[str, int]:
            await asyncio.sleep(0.01)
            raise RuntimeError("boom")

    @reg.tool(name="swallow")
    class Swallow:
        async def execute(self) -> dict[str, int]:
            # Swallowed: what asyncio.wait_for on 3.11 does when its future completes in the same turn.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(5)
            log.append("went on")
            await asyncio.sleep(5)
            log.append("second effect")
            return {"y": 1}

        async def compensate(self, result: dict[str, int] | None) -> None:
            log.append(f"compensate({result})")

    started = time.perf_counter()
    result = await SagaExecutor(reg).run([[{"tool": "fail_soon", "id": "f"}, {"tool": "swallow", "id": "s"}]])
    assert time.perf_counter() - started < 3  # cancelled again at once, not after its 5 s wait
    assert result.status is SagaStatus.COMPENSATED
    assert log == ["went on", "compensate(None)"]


async def test_a_call_started_after_a_halt_is_cut_at_its_first_wait() -> None:
    """A halt taken in while a call's intent was written cuts the call at its first wait; the cancel ends there."""
    from saga_runtime._engine._cancellation import Cancellation

    cancellation = Cancellation()
    cancellation.halt("cancelled by an operator")
    reached: list[str] = []

    async def call() -> str:
        reached.append("first line")
        await asyncio.sleep(1)
        reached.append("after its wait")
        return "done"

    assert await cancellation.inline(call()) is None
    assert reached == ["first line"]
    assert cancel_requests() == 0


async def test_shielded_work_holds_through_a_cancelled_anyio_scope_of_the_caller() -> None:
    """A caller's anyio scope cancelled meanwhile waits for the shielded work, and its cancel lands at the next wait."""
    done: list[object] = []

    async def work() -> str:
        await asyncio.sleep(0.05)
        done.append(True)
        return "ok"

    with anyio.move_on_after(0.01) as scope:
        done.append(await shielded(work()))
        await asyncio.sleep(5)  # the scope's cancel, held off by the shield, lands here
        done.append("went on")
    assert done == [True, "ok"]
    assert scope.cancelled_caught


async def test_a_deadline_cuts_its_block_and_its_cancel_ends_there() -> None:
    """A block past its deadline is cancelled; the cancel ends at the block's end, and the task goes on uncancelled."""
    with deadline(0.01) as scope:
        await asyncio.sleep(5)
    assert scope.cancelled_caught
    assert cancel_requests() == 0
    await asyncio.sleep(0)  # the task goes on: no cancel left pending


async def test_a_deadline_not_reached_leaves_the_block_alone() -> None:
    """A block that ends in time is not cancelled, and its deadline fires no more once it ended."""
    with deadline(0.05) as scope:
        await asyncio.sleep(0)
    assert not scope.cancelled_caught
    await asyncio.sleep(0.08)  # past the deadline: nothing is cancelled
    with deadline(float("inf")) as forever:  # an infinite bound sets no timer
        await asyncio.sleep(0)
    assert not forever.cancelled_caught


async def test_a_deadline_waits_for_an_anyio_shielded_section_then_cuts_the_block() -> None:
    """A deadline that falls in an anyio-shielded section lets it finish, then cancels the block at its next wait."""
    ended: list[str] = []
    with deadline(0.01) as scope:
        with anyio.CancelScope(shield=True):
            await asyncio.sleep(0.05)
            ended.append("section done")
        await asyncio.sleep(5)
        ended.append("went on")
    assert ended == ["section done"]
    assert scope.cancelled_caught


async def test_a_deadline_cancels_again_a_block_that_swallowed_its_cancel() -> None:
    """A block that swallows the deadline's cancel (as 3.11's wait_for can) is cancelled again at its next wait."""
    ended: list[str] = []
    started = time.perf_counter()
    with deadline(0.01) as scope:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(5)
        ended.append("swallowed")
        await asyncio.sleep(5)
        ended.append("went on")
    assert time.perf_counter() - started < 3
    assert ended == ["swallowed"]
    assert scope.cancelled_caught
    assert cancel_requests() == 0


async def test_a_deadline_lets_a_cancel_not_its_own_go_on() -> None:
    """A cancel of the task from elsewhere, landing with the deadline's, goes on past the block."""
    ran: list[str] = []

    async def bounded() -> None:
        with deadline(0.01):
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                assert current is not None
                current.cancel()  # another cancel of the task, in the same turn as the deadline's
                ran.append("cut")
                raise
        ran.append("went on")

    task = asyncio.ensure_future(bounded())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == ["cut"]


async def test_the_fence_scope_is_anyio_s_own_scope_cancelling_every_wait_inside_it() -> None:
    """A session's fence scope is an anyio cancel scope: once cancelled, every wait inside it is cut until it ends."""
    scope = fence_scope()
    assert isinstance(scope, anyio.CancelScope)
    cut = 0
    with scope:
        scope.cancel()
        for _ in range(2):
            try:
                await anyio.sleep(5)
            except anyio.get_cancelled_exc_class():
                cut += 1
    assert cut == 2


@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_step_cancelled_before_its_first_line_still_lets_the_group_end() -> None:
    """Steps whose tasks are cancelled in the turn they were made (nothing of them ran) still let `wait()` return."""
    ran: list[int] = []

    async def step(n: int) -> int:
        ran.append(n)
        await asyncio.sleep(0.01)
        return n

    siblings = Siblings(lambda outcome, group: None)
    for n in range(3):
        siblings.start(step, n)
    for task in asyncio.all_tasks():  # a sweep cancelling every other task, before the steps' first turn
        if task is not asyncio.current_task():
            task.cancel()  # (their coroutines never start: Python warns they were never awaited)
    with anyio.fail_after(5):
        await siblings.wait()
    assert ran == []


@pytest.mark.skipif(not hasattr(asyncio, "eager_task_factory"), reason="eager task factories came with 3.12")
async def test_steps_that_end_as_an_eager_task_factory_makes_them_leave_nothing_running() -> None:
    """With an eager task factory, a step that ends without waiting is not kept running (no cancel loop after)."""
    loop = asyncio.get_running_loop()
    loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
    try:
        registry = ToolRegistry()

        @registry.tool
        class Quick:
            async def execute(self, n: int) -> int:
                if n == 1:
                    raise ValueError("refused at once")
                return n

            async def compensate(self, result: int | None) -> None:
                return None

        plan = [{"group": [{"tool": "Quick", "args": {"n": n}} for n in range(3)]}]
        result = await SagaExecutor(registry).run(plan)
        assert result.status is SagaStatus.COMPENSATED
        handles = len(loop._ready)  # type: ignore[attr-defined]
        await asyncio.sleep(0.05)
        assert len(loop._ready) <= handles  # type: ignore[attr-defined]  # no look at the group scheduled again
    finally:
        loop.set_task_factory(None)


@pytest.mark.parametrize("kind", [SystemExit, KeyboardInterrupt])
def test_a_step_raising_systemexit_or_keyboardinterrupt_leaves_nothing_unretrieved(
    kind: type[BaseException], caplog: pytest.LogCaptureFixture
) -> None:
    """A step raising SystemExit or KeyboardInterrupt ends the loop with it, and asyncio logs no unretrieved error."""

    async def main() -> None:
        async def bad() -> None:
            await asyncio.sleep(0)
            raise kind()

        siblings = Siblings()
        siblings.start(bad)
        siblings.start(asyncio.sleep, 5)
        await siblings.wait()

    with pytest.raises(kind):
        asyncio.run(main())
    import gc

    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_a_step_raising_leaves_no_cycle_through_the_group() -> None:
    """A step's error, raised by `wait()`, holds no frame that holds the group: freed without the cyclic GC."""
    import gc
    import weakref

    class Fold:
        def __call__(self, outcome: object, group: Siblings) -> None:
            return None

    async def bad() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("a bug")

    fold = Fold()
    held = weakref.ref(fold)  # the group holds its fold: alive as long as the group is
    siblings = Siblings(fold)
    del fold
    siblings.start(bad)
    gc.disable()
    try:
        with contextlib.suppress(ExceptionGroup):
            await siblings.wait()
        del siblings
        await asyncio.sleep(0)
        assert held() is None
    finally:
        gc.enable()
