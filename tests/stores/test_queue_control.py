"""Queues an operator sees and steers (API.md §19) on every store: pause, resume, drain, counts, wake-ups."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from saga_runtime import (
    Queue,
    QueueInfo,
    RateLimit,
    SagaAdmin,
    SagaExecutor,
    SagaStatus,
    SagaStore,
    StepContext,
    ToolRegistry,
)
from saga_runtime._storage._queue_sql import QueueControlQueries
from saga_runtime._storage._sql import Queries

from .conftest import Stores


class Gate:
    """A tool that notes its starts and, for names in `held`, waits until the gate opens."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.opened = asyncio.Event()
        self.registry = ToolRegistry()
        gate = self

        @self.registry.tool
        class Step:
            async def execute(self, name: str, ctx: StepContext, hold: bool = False) -> str:
                gate.started.append(name)
                if hold:
                    await gate.opened.wait()
                return name

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                return None

        @self.registry.tool(approval=True)
        class Wire:
            async def execute(self, amount: int) -> int:
                gate.started.append(f"wire {amount}")
                return amount

            async def compensate(self, result: Any) -> None:
                return None


def step(name: str, *, hold: bool = False) -> list[dict[str, Any]]:
    """Return a one-step plan noting `name` (held at the gate with `hold`)."""
    return [{"tool": "Step", "args": {"name": name, "hold": hold}, "id": "only"}]


@asynccontextmanager
async def worker(executor: SagaExecutor, **options: Any) -> AsyncIterator[None]:
    """Run `executor.serve(**options)` for the block, then stop it."""
    task = asyncio.create_task(executor.serve(**options))
    try:
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def until(check: Any, seconds: float = 10.0) -> None:
    """Wait until `await check()` is true (a generous bound: fails the test past it)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "not within the bound"
        await asyncio.sleep(0.02)


def info(infos: list[QueueInfo], name: str) -> QueueInfo:
    """Return the queue `name` of `infos`."""
    [found] = [item for item in infos if item.name == name]
    return found


async def test_a_paused_queue_starts_nothing_until_resumed(store: SagaStore) -> None:
    """A paused queue's sagas stay QUEUED under a serving worker, saying they wait for the queue; resumed, they
    start; other queues go on."""
    gate = Gate()
    executor, admin = SagaExecutor(gate.registry, store), SagaAdmin(store)
    paused = await admin.pause_queue("payouts")
    assert (paused.paused, paused.draining, paused.state) == (True, False, "paused")
    await executor.submit(step("p1"), saga_id="p1", queue="payouts")
    await executor.submit(step("m1"), saga_id="m1", queue="mail")
    async with worker(executor, queues=["payouts", "mail"], interval=0.02):
        assert (await executor.handle("m1").result(timeout=10)).status is SagaStatus.SUCCESS
        await asyncio.sleep(0.2)  # ten rounds of the worker
        assert await executor.handle("p1").status() is SagaStatus.QUEUED
        assert "p1" not in gate.started
        assert await store.queue_state("payouts") == "paused"
        waiting = await store.get_saga("p1")
        assert waiting is not None
        assert waiting.waiting_for is not None
        assert waiting.waiting_for["kind"] == "queue_paused"
        assert "'payouts' is paused" in waiting.waiting_for["detail"]
        resumed = await admin.resume_queue("payouts")
        assert (resumed.paused, resumed.state) == (False, "active")
        assert (await executor.handle("p1").result(timeout=10)).status is SagaStatus.SUCCESS
    assert await store.queue_state("payouts") == "active"
    assert (await store.get_saga("p1")).waiting_for is None  # type: ignore[union-attr]


async def test_a_drained_queue_lets_what_runs_finish_and_starts_nothing(store: SagaStore) -> None:
    """Draining: the running saga finishes, a newer one stays QUEUED, and the queue reads drained once idle."""
    gate = Gate()
    executor, admin = SagaExecutor(gate.registry, store), SagaAdmin(store)
    await executor.submit(step("long", hold=True), saga_id="long", queue="q")
    async with worker(executor, queues=["q"], interval=0.02):
        await until(lambda: _started(gate, "long"))
        draining = await admin.drain_queue("q")
        assert (draining.draining, draining.running, draining.state) == (True, 1, "draining")
        await executor.submit(step("next"), saga_id="next", queue="q")
        gate.opened.set()
        assert (await executor.handle("long").result(timeout=10)).status is SagaStatus.SUCCESS
        await asyncio.sleep(0.2)
        assert await executor.handle("next").status() is SagaStatus.QUEUED
        drained = info(await admin.queues(), "q")
        assert (drained.queued, drained.running, drained.state) == (1, 0, "drained")
        await admin.resume_queue("q")
        assert (await executor.handle("next").result(timeout=10)).status is SagaStatus.SUCCESS
    assert gate.started == ["long", "next"]


async def test_a_saga_held_back_by_its_keys_concurrency_says_it_waits_for_the_limit(store: SagaStore) -> None:
    """A QUEUED saga whose key is at key_concurrency says waiting_for kind "limit" naming the key; once the key's
    running saga ends it starts, and a saga of a free key says nothing of a limit."""
    gate = Gate()
    executor = SagaExecutor(gate.registry, store)
    await executor.submit(step("first", hold=True), saga_id="first", queue="q", key="acct-1")
    await executor.submit(step("second"), saga_id="second", queue="q", key="acct-1")
    async with worker(executor, queues=[Queue("q", key_concurrency=1)], interval=0.02):
        await until(lambda: _started(gate, "first"))
        await asyncio.sleep(0.1)  # several rounds of the worker: the second stays QUEUED
        held = await store.get_saga("second")
        assert held is not None
        assert held.status is SagaStatus.QUEUED
        assert held.waiting_for is not None
        assert held.waiting_for["kind"] == "limit"
        assert "key 'acct-1'" in held.waiting_for["detail"]
        assert "key_concurrency=1" in held.waiting_for["detail"]
        gate.opened.set()
        assert (await executor.handle("second").result(timeout=10)).status is SagaStatus.SUCCESS
    assert (await store.get_saga("second")).waiting_for is None  # type: ignore[union-attr]


async def test_a_saga_held_back_by_the_rate_limit_says_it_waits_for_the_limit(store: SagaStore) -> None:
    """A QUEUED saga of a queue whose rate window is full says waiting_for kind "limit" naming the rate limit; a
    saga of an unlimited queue that nobody serves says nothing of a limit."""
    gate = Gate()
    executor = SagaExecutor(gate.registry, store)
    await executor.submit(step("one"), saga_id="one", queue="slow")
    await executor.submit(step("two"), saga_id="two", queue="slow")
    await executor.submit(step("idle"), saga_id="idle", queue="unserved")
    async with worker(executor, queues=[Queue("slow", rate_limit=RateLimit(1, per=60.0))], interval=0.02):
        assert (await executor.handle("one").result(timeout=10)).status is SagaStatus.SUCCESS
        await asyncio.sleep(0.1)
        held = await store.get_saga("two")
        assert held is not None
        assert held.status is SagaStatus.QUEUED
        assert held.waiting_for is not None
        assert held.waiting_for["kind"] == "limit"
        assert "rate limit" in held.waiting_for["detail"]
        assert "last 60s" in held.waiting_for["detail"]
    assert (await store.get_saga("idle")).waiting_for is None  # type: ignore[union-attr]


async def test_queues_counts_each_queue_with_its_state_and_limits(store: SagaStore) -> None:
    """queues(): queued, running, waiting and the oldest queued per queue; a served queue shows its limits."""
    gate = Gate()
    executor, admin = SagaExecutor(gate.registry, store), SagaAdmin(store)
    assert await admin.queues() == []
    first = await executor.submit(step("a"), saga_id="a", queue="mail")
    await executor.submit(step("b"), saga_id="b", queue="mail", priority=1)
    await executor.submit(step("held", hold=True), saga_id="held", queue="payouts")
    await executor.submit([{"tool": "Wire", "args": {"amount": 5}, "id": "wire"}], saga_id="w", queue="payouts")
    await executor.run(step("direct"), saga_id="direct")  # not submitted to a queue: counted nowhere
    payouts = Queue("payouts", concurrency=5, key_concurrency=1, rate_limit=RateLimit(100, per=2.0))
    async with worker(executor, queues=[payouts], interval=0.02):
        await until(lambda: _status(executor, "w", SagaStatus.WAITING))
        await until(lambda: _started(gate, "held"))
        infos = await admin.queues()
        assert [item.name for item in infos] == ["mail", "payouts"]
        mail, served = info(infos, "mail"), info(infos, "payouts")
        assert (mail.queued, mail.running, mail.waiting) == (2, 0, 0)
        stored = await store.load_saga(first.saga_id)
        assert stored is not None
        assert mail.oldest_queued_at == stored[0].created_at
        assert (mail.concurrency, mail.rate_limit, mail.limits()) == (None, None, "")
        assert (served.queued, served.running, served.waiting, served.oldest_queued_at) == (0, 1, 1, None)
        assert (served.concurrency, served.key_concurrency, served.rate_limit, served.rate_per) == (5, 1, 100, 2.0)
        assert served.limits() == "concurrency 5, per key 1, 100 per 2s"
        gate.opened.set()
        assert (await executor.handle("held").result(timeout=10)).status is SagaStatus.SUCCESS
    assert info(await admin.queues(), "payouts").running == 0


async def test_a_bad_queue_name_is_refused_and_nothing_is_stored(store: SagaStore) -> None:
    """pause/resume/drain of no valid queue name raise ValueError and store nothing."""
    admin = SagaAdmin(store)
    for bad in ("", "x" * 256, "a\x00b", 7):
        for action in (admin.pause_queue, admin.resume_queue, admin.drain_queue):
            with pytest.raises(ValueError, match="queue name"):
                await action(bad)  # type: ignore[arg-type]
    assert await admin.queues() == []


async def test_list_sagas_of_one_queue(store: SagaStore) -> None:
    """list_sagas(queue=...) lists the sagas submitted to that queue only, newest first, by status if asked."""
    gate = Gate()
    executor, admin = SagaExecutor(gate.registry, store), SagaAdmin(store)
    for saga_id, queue in (("a1", "a"), ("b1", "b"), ("a2", "a")):
        await executor.submit(step(saga_id), saga_id=saga_id, queue=queue)
    await executor.run(step("x"), saga_id="x")
    assert [s.saga_id for s in await admin.list_sagas(queue="a")] == ["a2", "a1"]
    assert [s.saga_id for s in await admin.list_sagas("QUEUED", queue="b")] == ["b1"]
    assert await admin.list_sagas(SagaStatus.SUCCESS, queue="a") == []
    assert await admin.list_sagas(queue="none") == []


async def test_a_listed_page_says_what_holds_each_queued_saga_in_one_read(store: SagaStore) -> None:
    """list_sagas says of each QUEUED saga what get_saga says (a key's limit, a rate window, a start time, a paused
    queue, nothing), and its statements do not grow with the number of QUEUED sagas on the page."""
    gate = Gate()
    executor, admin = SagaExecutor(gate.registry, store), SagaAdmin(store)
    keyed, slow = Queue("pay", key_concurrency=1), Queue("slow", rate_limit=RateLimit(1, per=60.0))
    for saga_id, queue, options in (
        ("first", "pay", {"key": "acct-7"}),
        ("second", "pay", {"key": "acct-7"}),
        ("later", "pay", {"not_before": 3600}),
        ("free", "pay", {}),
        ("stopped", "held", {}),
        ("one", "slow", {}),
        ("two", "slow", {}),
    ):
        await executor.submit(step(saga_id), saga_id=saga_id, queue=queue, **options)
    for queue in (keyed, slow):
        await store.note_queue_limits(queue, datetime.now(UTC))  # as a worker serving the queue does
        lease = datetime.now(UTC) + timedelta(minutes=5)
        assert len(await store.claim_queued("w1", lease, datetime.now(UTC), queue, 1)) == 1
    await admin.pause_queue("held")
    reads = _count_reads(store)

    async def listed() -> tuple[dict[str, Any], int]:
        before = reads()
        page = await admin.list_sagas()
        return {s.saga_id: s.waiting_for for s in page}, reads() - before

    waits, statements = await listed()
    kinds = {saga_id: None if waiting is None else waiting["kind"] for saga_id, waiting in waits.items()}
    assert kinds == {
        "first": None,
        "second": "limit",
        "later": "time",
        "free": None,
        "stopped": "queue_paused",
        "one": None,
        "two": "limit",
    }
    for saga_id, waiting in waits.items():
        shown = await store.get_saga(saga_id)
        assert shown is not None
        assert waiting == shown.waiting_for, saga_id
    for n in range(5):  # five more QUEUED sagas of each queue: the page's statements stay as many
        for queue in ("pay", "slow", "held"):
            await executor.submit(step(f"{queue}{n}"), saga_id=f"{queue}{n}", queue=queue)
    more, again = await listed()
    assert len(more) == len(waits) + 15
    assert again == statements
    assert (more["slow4"] or {}).get("kind") == "limit"
    assert (more["held4"] or {}).get("kind") == "queue_paused"


def _count_reads(store: Any) -> Any:
    """Count the statements a SQL store reads with (memory: its queue standings' reads); return the counter."""
    count = [0]
    name = "_fetch" if hasattr(store, "_fetch") else "saga_queue_states"
    inner = getattr(store, name)

    async def counted(*args: Any) -> Any:
        count[0] += 1
        return await inner(*args)

    setattr(store, name, counted)
    return lambda: count[0]


async def test_an_approval_decided_elsewhere_wakes_the_idle_worker(store: SagaStore) -> None:
    """An approval recorded by an admin without tools is taken up by a serving worker long before its recovery
    round (60 s here): PostgreSQL and memory at once (a notification), the others within the interval."""
    gate = Gate()
    executor = SagaExecutor(gate.registry, store, lease_timeout=120.0)  # recovery rounds every 60 s
    handle = await executor.submit([{"tool": "Wire", "args": {"amount": 7}, "id": "wire"}], queue="payouts")
    async with worker(executor, queues=["payouts"]):
        await until(lambda: _status(executor, handle.saga_id, SagaStatus.WAITING))
        await asyncio.sleep(0.1)  # the worker's rounds are over: it is idle
        decided = await SagaAdmin(store).approve(handle.saga_id, "wire", by="alice")
        assert decided.status is SagaStatus.WAITING  # recorded only: no tools here
        result = await handle.result(timeout=10)
    assert result.status is SagaStatus.SUCCESS
    assert gate.started == ["wire 7"]


async def test_a_cancel_of_a_waiting_saga_wakes_the_idle_worker(store: SagaStore) -> None:
    """A cancel of a waiting saga (its requests rejected) wakes the idle worker, which compensates it."""
    gate = Gate()
    executor = SagaExecutor(gate.registry, store, lease_timeout=120.0)
    plan = [step("first")[0] | {"id": "first"}, {"tool": "Wire", "args": {"amount": 3}, "id": "wire"}]
    handle = await executor.submit(plan, queue="payouts")
    async with worker(executor, queues=["payouts"]):
        await until(lambda: _status(executor, handle.saga_id, SagaStatus.WAITING))
        await SagaAdmin(store).cancel(handle.saga_id, reason="customer left")
        result = await handle.result(timeout=10)
    assert result.status is SagaStatus.COMPENSATED
    assert gate.started == ["first"]


async def test_an_unparked_saga_is_taken_up_by_the_idle_worker(store: SagaStore) -> None:
    """An operator's unpark (an admin without tools) wakes the idle worker, whose recovery finishes the saga long
    before its next round (60 s here)."""
    from .test_parked_compensation import CALLS, park
    from .test_parked_compensation import registry as charges

    await park(store, "stuck")
    CALLS.clear()
    executor = SagaExecutor(charges, store, lease_timeout=120.0)
    async with worker(executor, queues=["none"]):
        await asyncio.sleep(0.3)  # its first recovery round is over: idle
        assert await SagaAdmin(store).unpark("stuck") is None  # left to a worker
        result = await executor.handle("stuck").result(timeout=10)
    assert result.status is SagaStatus.SUCCESS
    assert CALLS["charge"] == 1  # the step of unknown outcome, run again under its key


async def test_claims_and_queue_counts_read_indexes_not_history(stores: Stores, sql_kind: str) -> None:
    """A rate window's count reads the (queue, started_at) index; the queue's depth, its running sagas, its waiting
    sagas and the per-queue counts of queues() read indexes too: no statement scans the table (EXPLAIN on each
    database, with 5,000 finished sagas of the queue stored)."""
    store: Any = await stores.open(sql_kind, wipe=True)
    history = (
        "INSERT INTO sagas (saga_id, kind, status, metadata, created_at, updated_at, queue, priority, started_at) "
    )
    stamp = "'2020-01-01 00:00:00'"
    values = ", ".join(
        f"('h{n}', 'plan', 'SUCCESS', '{{}}', {stamp}, {stamp}, 'bench', 0, {stamp})" for n in range(5000)
    )
    q, counts = Queries(store.dialect.flavour), QueueControlQueries(store.dialect.flavour).counts
    at = store._codec.time_in(datetime.now(UTC))
    statements = {
        "window": (q.queue_started, ("bench", at, 100)),
        "depth": (q.queue_depth, ("bench", "QUEUED")),
        "running": (q.queue_running, ("bench", "RUNNING", "COMPENSATING")),
        "waiting": (q.queue_waiting(keyed=False, after=False), ("bench", "QUEUED", at, 10)),
        "counts": (counts, ("QUEUED", "RUNNING", "COMPENSATING", "WAITING")),
    }
    explain = "EXPLAIN QUERY PLAN " if sql_kind == "sqlite" else "EXPLAIN "
    plans = {}
    async with store._transaction(begin=True) as tx:
        await tx.execute(history + "VALUES " + values)
        for name, (sql, params) in statements.items():
            rows = await tx.fetch(explain + sql, params)
            plans[name] = [" ".join(str(value) for value in row) for row in rows]
    assert "sagas_queue_started" in " ".join(plans["window"]), plans["window"]
    for name, plan in plans.items():
        text = " | ".join(plan)
        if sql_kind == "sqlite":
            assert "SCAN sagas" not in text, (name, text)
        elif sql_kind == "postgresql":
            assert "Seq Scan" not in text, (name, text)
        else:  # MySQL/MariaDB: a full scan is the access type ALL on the table
            assert not any(" sagas ALL " in f" {line} " for line in plan), (name, text)


async def _started(gate: Gate, name: str) -> bool:
    return name in gate.started


async def _status(executor: SagaExecutor, saga_id: str, status: SagaStatus) -> bool:
    return await executor.handle(saga_id).status() is status
