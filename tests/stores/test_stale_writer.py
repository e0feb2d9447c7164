"""A worker whose event loop stalled past its lease neither writes nor starts a step once another executor took over.

Executor A runs a saga; its first step blocks A's event loop (a frozen process, a long GC or VM pause) for longer
than the lease, so A cannot renew. Meanwhile executor B, in another thread with its own loop and store, takes the
saga over and drives it to its end. Then A's loop runs again. Its next write is owner-conditional: the store
refuses it, A is fenced, and `LeaseLostError` is raised; A never starts its next step and nothing it would have
written reaches the database. Runs on SQLite and PostgreSQL, two stores over one database.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from saga_runtime import LeaseLostError, SagaExecutor, SagaStatus, StepContext, ToolRegistry, open_store
from saga_runtime._records import SagaRow, StepRow

from .conftest import Stores

LEASE = 0.5


class Takeover:
    """Tools that log their effects, and stall executor A's loop inside one call while B takes the saga over."""

    def __init__(self, url: str, saga_id: str) -> None:
        self.url = url
        self.saga_id = saga_id
        self.main = threading.get_ident()  # A's loop runs here; B's in a thread of its own
        self.effects: list[tuple[str, str, str]] = []  # (who, step id, idempotency key)
        self.undos: list[tuple[str, str, str]] = []
        self.after_b: tuple[SagaRow, list[StepRow]] | None = None
        self.b_results: list[Any] = []
        self.registry = ToolRegistry()
        lab = self

        @self.registry.tool
        class Effect:
            async def execute(self, name: str, ctx: StepContext) -> str:
                who = lab.who()
                lab.effects.append((who, ctx.step_id, ctx.idempotency_key))
                if who == "A" and name == "first":
                    lab.stall()
                return name

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                lab.undos.append((lab.who(), ctx.step_id, ctx.idempotency_key))

    def who(self) -> str:
        """Return which executor runs the current call."""
        return "A" if threading.get_ident() == self.main else "B"

    def stall(self) -> None:
        """Block A's loop (no await: nothing of A runs) while B waits out A's lease and recovers the saga."""
        thread = threading.Thread(target=lambda: asyncio.run(self._b()))
        thread.start()
        thread.join()

    async def _b(self) -> None:
        await asyncio.sleep(LEASE * 1.5)  # A's lease runs out: its loop is blocked, so it cannot renew
        async with open_store(self.url) as store:
            executor = SagaExecutor(self.registry, store=store, executor_id="B", lease_timeout=30)
            self.b_results = await executor.recover()
            self.after_b = await store.load_saga(self.saga_id)


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_kind(request: pytest.FixtureRequest) -> str:
    """Return SQLite, then PostgreSQL."""
    value: str = request.param
    return value


async def test_a_stalled_plan_executor_cannot_write_nor_start_a_step_after_a_takeover(
    stores: Stores, sql_kind: str
) -> None:
    """A plan saga taken over while A's loop stalled: A raises LeaseLostError, never runs step 2, writes nothing."""
    store = await stores.open(sql_kind, wipe=True)
    lab = Takeover(stores.url(sql_kind), "stale-plan")
    a = SagaExecutor(lab.registry, store=store, executor_id="A", lease_timeout=LEASE)
    plan = [
        {"id": "first", "tool": "Effect", "args": {"name": "first"}},
        {"id": "second", "tool": "Effect", "args": {"name": "second"}},
    ]

    with pytest.raises(LeaseLostError):
        await a.run(plan, saga_id="stale-plan")

    assert [r.status for r in lab.b_results] == [SagaStatus.SUCCESS]
    key = {step: k for _, step, k in lab.effects}
    # A's first call, then B re-running it with the same key (its outcome was unknown), then B's second step:
    # A never started the second step.
    assert lab.effects == [("A", "first", key["first"]), ("B", "first", key["first"]), ("B", "second", key["second"])]
    assert lab.undos == []
    assert await store.load_saga("stale-plan") == lab.after_b  # nothing of A's reached the database
    assert await store.verify_saga("stale-plan")


async def test_a_stalled_dynamic_saga_cannot_write_nor_call_again_after_a_takeover(
    stores: Stores, sql_kind: str
) -> None:
    """A dynamic saga recovered (compensated) by B while A's loop stalled: A's next call never runs, nothing written."""
    store = await stores.open(sql_kind, wipe=True)
    lab = Takeover(stores.url(sql_kind), "stale-dynamic")
    a = SagaExecutor(lab.registry, store=store, executor_id="A", lease_timeout=LEASE)

    async def agent() -> None:
        async with a.saga("stale-dynamic") as saga:
            await saga.call("Effect", name="first")
            await saga.call("Effect", name="second")

    with pytest.raises(LeaseLostError):
        await agent()

    assert [r.status for r in lab.b_results] == [SagaStatus.COMPENSATED]
    assert [(who, step) for who, step, _ in lab.effects] == [("A", "Effect-0")]
    assert [(who, step) for who, step, _ in lab.undos] == [("B", "Effect-0")]  # the unknown call, undone by B
    assert await store.load_saga("stale-dynamic") == lab.after_b
