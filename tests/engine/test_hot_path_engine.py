"""The lean engine path keeps its behaviour: arguments validated once, groups cancelled as before, the end bounded."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from cancelling import cancel_once

from saga_runtime import SagaExecutor, SagaStatus, StepStatus, StoreError, ToolRegistry
from saga_runtime._engine import TransitionError, _ending
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaRow, StepRow
from saga_runtime._starting import new_plan_saga
from saga_runtime._storage import MemoryStore

HANDSHAKE = 5.0


class World:
    """Tools that log what they get; `Wait` steps wait until cancelled, `Boom` fails at once."""

    def __init__(self, width: int = 0) -> None:
        self.log: list[tuple[str, Any]] = []
        self.started = 0
        self.all_started = anyio.Event()
        self.width = width
        self.registry = ToolRegistry()
        world = self

        @self.registry.tool
        class Take:
            async def execute(self, count: int, tags: list[str]) -> dict[str, Any]:
                world.log.append(("take", (count, tags)))
                return {"count": count}

        @self.registry.tool
        class Wait:
            async def execute(self, n: int) -> int:
                world.log.append(("start", n))
                world.started += 1
                if world.started == world.width:
                    world.all_started.set()
                await anyio.sleep_forever()
                return n

            async def compensate(self, result: Any) -> None:
                world.log.append(("undo", result))

        @self.registry.tool
        class Guarded:
            async def execute(self, n: int) -> int:
                with anyio.CancelScope(shield=True):  # a critical section no cancellation may cut
                    await anyio.sleep(0.05)
                    world.log.append(("critical section done", n))
                return n

            async def compensate(self, result: Any) -> None:
                world.log.append(("undo", result))

        @self.registry.tool
        class Boom:
            async def execute(self) -> None:
                raise RuntimeError("boom")


async def test_arguments_are_validated_once_and_stored_as_given() -> None:
    """A step gets its arguments as validated (lax: "5" becomes 5); its record keeps them as the plan gave them."""
    world = World()
    plan = [
        {"id": "a", "tool": "Take", "args": {"count": "5", "tags": ("x", "y")}},
        {"id": "b", "tool": "Take", "args": {"count": {"$ref": "a.count"}, "tags": []}},
    ]
    result = await SagaExecutor(world.registry).run(plan)
    assert result.ok, result.describe()
    assert world.log == [("take", (5, ["x", "y"])), ("take", (5, []))]
    assert result.step("a").args == {"count": "5", "tags": ["x", "y"]}
    assert result.step("b").args == {"count": 5, "tags": []}


async def test_a_resolved_ref_is_validated_when_its_step_starts() -> None:
    """A `$ref` argument is checked against the tool when its value is known, before the step runs."""
    world = World()
    plan = [
        {"id": "a", "tool": "Take", "args": {"count": 1, "tags": []}},
        {"id": "b", "tool": "Take", "args": {"count": {"$ref": "a"}, "tags": []}},
    ]
    result = await SagaExecutor(world.registry).run(plan)
    assert result.status is SagaStatus.COMPENSATED
    assert result.step("b").status is StepStatus.FAILED
    assert "could not start" in (result.step("b").error or "")
    assert world.log == [("take", (1, []))]


async def test_a_step_failing_at_once_cancels_siblings_that_had_not_started() -> None:
    """Siblings not yet started when a step fails still start, are cancelled, recorded and undone with None."""
    world = World()
    plan = [[{"id": "boom", "tool": "Boom"}, *({"id": f"w{i}", "tool": "Wait", "args": {"n": i}} for i in range(3))]]
    result = await SagaExecutor(world.registry).run(plan)
    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert result.step("boom").status is StepStatus.FAILED
    for i in range(3):
        step = result.step(f"w{i}")
        assert step.status is StepStatus.COMPENSATED
        assert step.error == "cancelled while running: step 'boom' failed"
        assert step.error_type == "CancelledError"
    assert sorted(entry for entry in world.log if entry[0] == "start") == [("start", i) for i in range(3)]
    assert world.log.count(("undo", None)) == 3


async def test_a_sibling_failure_waits_for_a_tool_shielded_section() -> None:
    """A step failing does not cut a sibling's own anyio-shielded section; that sibling ends and is undone."""
    world = World()
    plan = [[{"id": "guarded", "tool": "Guarded", "args": {"n": 7}}, {"id": "boom", "tool": "Boom"}]]
    result = await SagaExecutor(world.registry).run(plan)
    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert ("critical section done", 7) in world.log
    assert result.step("guarded").status is StepStatus.COMPENSATED
    assert ("undo", 7) in world.log


async def test_a_caller_leaving_a_wide_group_cancels_and_undoes_every_step() -> None:
    """Cancelling the caller while a group of 50 runs: every step is CANCELLED, undone, then the cancel goes on."""
    world = World(width=50)
    executor = SagaExecutor(world.registry)
    plan = [[{"id": f"w{i}", "tool": "Wait", "args": {"n": i}} for i in range(50)]]
    await cancel_once(executor.run(plan, saga_id="wide"), world.all_started)
    result = await executor.store.get_saga("wide")
    assert result is not None
    assert result.status is SagaStatus.COMPENSATED
    assert {step.status for step in result.steps} == {StepStatus.COMPENSATED}
    assert {step.error for step in result.steps} == {"cancelled while running: the caller was cancelled"}
    assert world.log.count(("undo", None)) == 50


class _HangingEnd(MemoryStore):
    """A memory store whose write of a saga's end never returns."""

    async def save(self, saga: SagaRow | None, steps: Sequence[StepRow], **options: Any) -> None:
        if saga is not None and saga.status.is_terminal:
            await anyio.sleep_forever()
        await super().save(saga, steps, **options)


async def test_the_final_write_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that never records a saga's end makes run() raise StoreError after the bound, not hang."""
    monkeypatch.setattr(_ending, "_FINAL_WRITE_MARGIN", 0.05)  # a memory store has no retry window
    world = World()
    executor = SagaExecutor(world.registry, store=_HangingEnd())
    with pytest.raises(StoreError, match="did not record it within"), anyio.fail_after(HANDSHAKE):
        await executor.run([{"tool": "Take", "args": {"count": 1, "tags": []}}])


async def test_a_group_cancelled_by_an_anyio_scope_waits_for_shielded_steps_without_spinning() -> None:
    """A group whose caller an anyio scope cancels waits for its shielded steps idle (it does not busy-loop)."""
    registry = ToolRegistry()

    @registry.tool
    class Settle:
        """Finish a shielded piece of work even when cancelled."""

        async def execute(self, n: int) -> int:
            with anyio.CancelScope(shield=True):
                await asyncio.sleep(0.6)
            return n

    executor = SagaExecutor(registry)
    cpu = time.thread_time()  # the event loop's thread: another thread of the test process does not count
    with anyio.move_on_after(0.05):
        await executor.run([[{"tool": "Settle", "args": {"n": 1}}, {"tool": "Settle", "args": {"n": 2}}]])
    assert time.thread_time() - cpu < 0.4  # a spinning wait burns the whole 0.6 s; idle waiting costs ~nothing


async def test_a_saga_run_without_an_id_gets_a_fresh_uuid4_in_hex() -> None:
    """A saga run without an id gets a new random UUID4 as 32 hex digits, as `uuid.uuid4().hex` writes it."""
    world = World()
    executor = SagaExecutor(world.registry)
    ids = [(await executor.run([{"tool": "Take", "args": {"count": 1, "tags": []}}])).saga_id for _ in range(50)]

    assert len(set(ids)) == 50
    for saga_id in ids:
        parsed = uuid.UUID(hex=saga_id)
        assert (parsed.hex, parsed.version, parsed.variant) == (saga_id, 4, uuid.RFC_4122)


async def test_the_memory_store_writes_without_pausing() -> None:
    """A memory store's save ends without pausing (the end write runs inline on it); a subclass or patch may pause."""
    store = MemoryStore()
    at = datetime.now(UTC)
    saga = SagaRow("s", "plan", [], None, SagaStatus.RUNNING, at, at, owner="me")
    assert await store.create_saga(saga.copy(), []) is None
    write = store.save(saga.copy(), [], owner="me")
    with pytest.raises(StopIteration):
        write.send(None)
    assert not _ending.writes_pause(store)
    assert _ending.writes_pause(_HangingEnd())
    patched = MemoryStore()
    patched.save = _HangingEnd().save  # type: ignore[method-assign]
    assert _ending.writes_pause(patched)


async def test_the_memory_store_key_index_holds_each_step_s_stored_row() -> None:
    """The memory store's key index names each key's step by its stored row: no earlier snapshot of it lives on."""
    store = MemoryStore()
    world = World()
    executor = SagaExecutor(world.registry, store=store)
    plan = [{"tool": "Take", "args": {"count": n, "tags": []}} for n in range(3)]
    result = await executor.run(plan, saga_id="kept")
    assert result.status is SagaStatus.SUCCESS
    stored = store._steps["kept"]
    assert len(stored) == 3
    for step_id, row in stored.items():
        assert store._keys[row.idempotency_key] is row, step_id
    assert len(store._keys) == 3


async def test_the_step_path_reads_the_task_running_now_as_asyncio_does() -> None:
    """The sequential step path's reader of the current task returns what `asyncio.current_task()` does, per task."""
    from saga_runtime._engine import _groups

    async def seen() -> tuple[Any, Any]:
        return _groups._current_task(), asyncio.current_task()

    mine, asyncio_s = await seen()
    assert mine is asyncio_s
    assert mine is not None
    other, other_asyncio_s = await asyncio.create_task(seen())
    assert other is other_asyncio_s
    assert other is not mine


async def test_a_saga_holding_a_step_that_never_ran_cannot_end_success() -> None:
    """The end refuses SUCCESS while a step never ran (a bug guard): it names only the steps never run."""
    world = World()
    executor = SagaExecutor(world.registry)
    plan = build_plan(
        [{"tool": "Take", "args": {"count": n, "tags": []}, "id": f"t{n}"} for n in range(3)], world.registry
    )
    saga, steps = new_plan_saga(executor._drives, plan, None, None, None)
    engine = executor._drives.claims.start_plan(saga, steps)  # the first group announced RUNNING with the saga

    with pytest.raises(TransitionError, match=r"steps \['t1', 't2'\] never ran"):
        await engine.finish(SagaStatus.SUCCESS)
    assert engine.saga.status is SagaStatus.RUNNING
