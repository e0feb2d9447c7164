"""Issue 33's chaos: saga functions that call tools, sleep and receive messages, run by 3 `saga-runtime worker`
processes that are SIGKILLed and restarted under load while a sender sends the messages they wait for.

Each saga function charges, sleeps in the process (under its lease), waits a moment for a note that never comes,
then waits for its "go" message without a limit (released: WAITING, no lease), reserves what the message says,
some sleep past the workers' `wait_threshold` (released again, woken when due), and ships; a saga that cannot ship
compensates. The judge is the tools' outside ledger (see chaos_fleet) and the records: every saga ended as its code
says (its status, and its output holding the message it received), each call recorded once, in order, the
message stored once whatever the sender's retries, and no effect twice under one idempotency key unless the run
before it was SIGKILLed.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from saga_runtime import DynamicSaga, SagaExecutor, SagaStatus, SagaStore, StepContext, ToolRegistry

from .chaos_fleet import Fleet, check_effects, read_ledger, schedule, wait_terminal
from .conftest import Stores

# About 20-40 s per database on 2 busy cores; the bound is for a machine shared with other test runs.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SAGAS = 24
WORKERS = 3
SEED = 33

TOOLS = textwrap.dedent(
    """
    import asyncio, os, random, time
    from saga_runtime import DynamicSaga, Queue, StepContext, ToolRegistry

    QUEUES = [Queue("chaos", concurrency=int(os.environ["CHAOS_CONCURRENCY"]))]
    registry = ToolRegistry()
    _ledger = os.open(os.environ["CHAOS_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(ctx: StepContext, event: str) -> None:
        line = f"{time.time():.6f} {os.getpid()} {ctx.saga_id} - {ctx.idempotency_key} {event}\\n"
        os.write(_ledger, line.encode())

    class Effect:
        async def execute(self, what: str, ctx: StepContext) -> dict:
            note(ctx, "start")
            await asyncio.sleep(random.uniform(0.01, 0.04))
            if what == "nowhere":
                note(ctx, "end")
                raise LookupError("no carrier delivers to 'nowhere'")
            note(ctx, "do")
            await asyncio.sleep(random.uniform(0.0, 0.03))  # the effect is out, its outcome not yet recorded
            note(ctx, "end")
            return {"ref": ctx.idempotency_key}

        async def compensate(self, result, ctx: StepContext) -> None:
            note(ctx, "start")
            await asyncio.sleep(random.uniform(0.005, 0.02))
            note(ctx, "undo")
            note(ctx, "end")

    for name in ("charge", "reserve", "ship"):
        registry.register(Effect(), name=name)

    @registry.saga
    async def order(saga: DynamicSaga, n: int, ship_to: str, nap: float) -> dict:
        charged = await saga.call("charge", what=f"card {n}")
        await saga.sleep(0.2)                              # under wait_threshold: in the process, under the lease
        extra = await saga.recv("note", timeout=0.3)       # no note comes: None, recorded
        reply = await saga.recv("go")                      # no limit: released (WAITING) until the message comes
        await saga.call("reserve", what=f"stock {n} x{reply['qty']}")
        if nap:
            await saga.sleep(nap)                          # past wait_threshold (5 s): released, woken when due
        shipped = await saga.call("ship", what=ship_to)    # "nowhere" raises: the saga compensates
        return {"n": n, "qty": reply["qty"], "extra": extra, "refs": [charged["ref"], shipped["ref"]]}
    """
)


def fails(n: int) -> bool:
    """Tell whether saga `n` cannot ship, and so compensates."""
    return n % 7 == 3


def args_of(n: int) -> dict[str, Any]:
    """Return saga `n`'s arguments: every fourth sleeps past the workers' wait_threshold before it ships."""
    return {"n": n, "ship_to": "nowhere" if fails(n) else f"street {n}", "nap": 5.5 if n % 4 == 1 else 0.0}


def qty_of(n: int) -> int:
    """Return the quantity saga `n`'s message carries."""
    return n % 3 + 1


def submitter(store: SagaStore) -> SagaExecutor:
    """Return an executor that submits and sends only (its registry's tools and function are never run here)."""
    registry = ToolRegistry()

    class Stub:
        async def execute(self, what: str, ctx: StepContext) -> None:
            raise AssertionError("the test process runs no tool")

    for name in ("charge", "reserve", "ship"):
        registry.register(Stub(), name=name)

    @registry.saga
    async def order(saga: DynamicSaga, n: int, ship_to: str, nap: float) -> dict[str, Any]:
        raise AssertionError("the test process runs no saga function")

    return SagaExecutor(registry, store)


async def send_all(executor: SagaExecutor, ids: list[str], seed: int) -> None:
    """Send each saga its "go" message in a shuffled order over a few seconds, each twice under one key."""
    rng = random.Random(seed)
    order = list(range(len(ids)))
    rng.shuffle(order)
    for n in order:
        await asyncio.sleep(rng.uniform(0.05, 0.3))
        for _ in range(2):  # a sender's retry: the key stores it once
            await executor.send(ids[n], "go", {"qty": qty_of(n)}, idempotency_key=f"go-{n}")


async def mid_call(fleet: Fleet, slot: int, seconds: float) -> None:
    """Wait (at most `seconds`) until the worker of `slot` is in the middle of a tool call, by the ledger."""
    pid = fleet.slots[slot].pid
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        mine = [line for line in read_ledger(fleet.ledger) if line.pid == pid] if fleet.ledger.exists() else []
        if mine and mine[-1].event != "end":
            return
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "mysql"])
async def test_saga_functions_end_as_their_code_says_under_sigkills(stores: Stores, kind: str, tmp_path: Path) -> None:
    """Workers SIGKILLed and restarted while saga functions sleep and wait for messages: every saga ends as its
    code says, each call recorded once, each message received once, no effect twice under one key."""
    store = await stores.open(kind, wipe=True)
    executor = submitter(store)
    run = secrets.token_hex(3)  # the messages table is not wiped: ids of this run's own
    ids = [f"order-{run}-{n:02d}" for n in range(SAGAS)]
    for n, saga_id in enumerate(ids):
        await executor.submit("order", args=args_of(n), saga_id=saga_id, queue="chaos")
    fleet = Fleet(tmp_path, stores.url(kind), concurrency=8)
    (tmp_path / "chaos_tools.py").write_text(TOOLS)
    rng = random.Random(SEED)
    try:
        for slot in range(WORKERS):
            fleet.start(slot)
        sender = asyncio.create_task(send_all(executor, ids, SEED))
        for pause in schedule(SEED, 5, 0.8, 1.6):
            await asyncio.sleep(pause)
            slot = rng.randrange(WORKERS)
            await mid_call(fleet, slot, 3.0)
            await asyncio.to_thread(fleet.kill, slot)  # its sagas (mid-call, mid-sleep) are orphans
            fleet.start(slot)
        await sender
        statuses = await wait_terminal(store, SAGAS, 60)
    finally:
        fleet.stop_all()

    assert len(fleet.killed) == 5
    wrong = {
        saga_id: statuses[saga_id].value
        for n, saga_id in enumerate(ids)
        if statuses.get(saga_id) is not (SagaStatus.COMPENSATED if fails(n) else SagaStatus.SUCCESS)
    }
    assert wrong == {}, (wrong, fleet.errors())
    takeovers = 0
    for n, saga_id in enumerate(ids):
        result = await store.get_saga(saga_id)
        assert result is not None
        takeovers += sum(takeover.reason == "lease expired" for takeover in result.takeovers)
        tools = [step.tool_name for step in result.steps]
        assert tools == ["charge", "reserve", "ship"], (saga_id, tools)  # each call recorded once, in order
        reserve = next(step for step in result.steps if step.tool_name == "reserve")
        assert reserve.args == {"what": f"stock {n} x{qty_of(n)}"}, (saga_id, reserve.args)
        if not fails(n):
            keys = {step.tool_name: step.idempotency_key for step in result.steps}
            expected = {"n": n, "qty": qty_of(n), "extra": None, "refs": [keys["charge"], keys["ship"]]}
            assert result.output == expected, (saga_id, result.output)
        assert [topic for _, topic, _, _ in await store.load_messages(saga_id)] == ["go"]  # the retry stored nothing
        assert await store.verify_saga(saga_id), saga_id
    assert takeovers > 0, "no saga was running on a killed worker: the kills tested nothing"
    lines = read_ledger(fleet.ledger)
    await check_effects(fleet, store, statuses, lines)
    print(f"\n{SAGAS} saga functions, {len(lines)} ledger lines, {len(fleet.killed)} SIGKILLed, {takeovers} takeovers")
