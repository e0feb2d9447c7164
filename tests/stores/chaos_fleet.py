"""A fleet of `saga-runtime worker` processes on one database, stopped and killed while it works a queue.

The tools write every call to an outside ledger (a file each process appends whole lines to: one `write` of
O_APPEND each, so lines never interleave): when, which process, the saga, its queue key, the step's idempotency
key, and the event ("start" and "end" of an execute, "do" for its effect, "undo" for a compensation's).
`check` then judges the run from the ledger and the records:

- every saga is terminal as its plan says (SUCCESS, or COMPENSATED when its last step cannot ship): none PARKED;
- each effect once per key: an effect (or undo) of one idempotency key appears again only after a run by a
  process that was SIGKILLed, whose outcome could not be recorded (DESIGN.md invariant 4); never after a process
  stopped by a signal it handles, which lets its calls return and records them;
- every effect under a key of a step of its saga's record, no more effects than recorded attempts (write ahead);
  a SUCCESS saga undid nothing; in a COMPENSATED one each key with an effect has an undo after its last effect;
- the queue's limits held: from the first start to the last end of each saga, no two sagas of one key overlap,
  and never more than `concurrency` sagas overlap; with a rate limit, no more sagas first call a tool within a
  window (a little shorter than the limit's, see RATE_SLACK) than the limit allows (of the sagas no worker took
  over: one taken over may first call a tool long after its start). Times are the machine's
  monotonic clock, one for every process, even a worker whose wall clock is skewed (faketime).
"""

from __future__ import annotations

import asyncio
import glob
import os
import random
import signal
import sys
import textwrap
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker_processes import WorkerProcesses

from saga_runtime import SagaExecutor, SagaStatus, SagaStore, StepContext, ToolRegistry

CLI = Path(sys.executable).with_name("saga-runtime")
QUEUE = "chaos"
KEYS = 10
LEASE = 1.0

TOOLS = textwrap.dedent(
    """
    import asyncio, os, random, time
    from saga_runtime import Queue, RateLimit, StepContext, ToolRegistry

    _rate = os.environ.get("CHAOS_RATE")  # "limit/seconds", or none
    _limit = None if not _rate else RateLimit(int(_rate.split("/")[0]), per=float(_rate.split("/")[1]))
    QUEUES = [
        Queue("chaos", concurrency=int(os.environ["CHAOS_CONCURRENCY"]), key_concurrency=1, rate_limit=_limit)
    ]
    registry = ToolRegistry()
    _ledger = os.open(os.environ["CHAOS_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(ctx: StepContext, key: str, event: str) -> None:
        # The machine's monotonic clock: one for every process, even one whose wall clock is skewed (faketime).
        line = f"{time.monotonic():.6f} {os.getpid()} {ctx.saga_id} {key} {ctx.idempotency_key} {event}\\n"
        os.write(_ledger, line.encode())

    class Effect:
        async def execute(self, what: str, key: str, ctx: StepContext) -> dict:
            note(ctx, key, "start")
            await asyncio.sleep(random.uniform(0.01, 0.04))
            if what == "nowhere":
                note(ctx, key, "end")
                raise LookupError("no carrier delivers to 'nowhere'")
            note(ctx, key, "do")
            await asyncio.sleep(random.uniform(0.0, 0.03))  # the effect is out, its outcome not yet recorded
            note(ctx, key, "end")
            return {"ref": ctx.idempotency_key}

        async def compensate(self, result, ctx: StepContext) -> None:
            key = ctx.saga_id.rsplit("-", 1)[0]
            note(ctx, key, "start")
            await asyncio.sleep(random.uniform(0.005, 0.02))
            note(ctx, key, "undo")
            note(ctx, key, "end")

    for name in ("charge", "reserve", "ship"):
        registry.register(Effect(), name=name)
    """
)


def saga_id(i: int) -> str:
    """Return the id of saga `i`: its queue key, then its number (the tools read the key back from it)."""
    return f"k{i % KEYS}-{i:03d}"


def fails(i: int) -> bool:
    """Tell whether saga `i` cannot ship, and so compensates."""
    return i % 7 == 3


def plan_of(i: int) -> list[dict[str, Any]]:
    """Return saga `i`'s plan: charge, reserve, ship."""
    key = f"k{i % KEYS}"
    ship = "nowhere" if fails(i) else f"street {i}"
    return [
        {"id": "charge", "tool": "charge", "args": {"what": f"card {i}", "key": key}},
        {"id": "reserve", "tool": "reserve", "args": {"what": f"stock {i}", "key": key}},
        {"id": "ship", "tool": "ship", "args": {"what": ship, "key": key}},
    ]


def submitter(store: SagaStore) -> SagaExecutor:
    """Return an executor that only submits (its registry has the plan's tool names, none runs here)."""
    registry = ToolRegistry()

    class Stub:
        async def execute(self, what: str, key: str, ctx: StepContext) -> None:
            raise AssertionError("the test process runs no tool")

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            raise AssertionError("the test process runs no tool")

    for name in ("charge", "reserve", "ship"):
        registry.register(Stub(), name=name)
    return SagaExecutor(registry, store)


class Fleet(WorkerProcesses):
    """The worker processes of one test: started, stopped and killed by slot; every one left is killed at the end."""

    def __init__(self, folder: Path, url: str, concurrency: int, rate: tuple[int, float] | None = None) -> None:
        super().__init__(folder)
        self.url = url
        self.concurrency = concurrency
        self.rate = rate
        self.stopped: set[int] = set()
        (folder / "chaos_tools.py").write_text(TOOLS)
        self.ledger = folder / "ledger.txt"
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"},
            "CHAOS_LEDGER": str(self.ledger),
            "CHAOS_CONCURRENCY": str(concurrency),
            "CHAOS_RATE": "" if rate is None else f"{rate[0]}/{rate[1]}",
            "PYTHONPATH": str(folder),
        }

    def start(self, slot: int, *, skew: float | None = None) -> None:
        """Start (or restart) the worker of `slot`; with `skew`, its wall clock that many seconds off (faketime)."""
        command = [
            str(CLI), "--db", self.url, "worker", "--tools", "chaos_tools:registry", "--queues", "chaos_tools:QUEUES",
            "--executor-id", f"chaos-{slot}-{len(self.all)}", "--lease-timeout", str(LEASE), "--interval", "0.05",
        ]  # fmt: skip
        env = self.env
        if skew is not None:
            # libfaketime preloaded into the worker itself, not the `faketime` wrapper: the wrapper waits for its
            # child, so a signal to it would leave the worker running, orphaned, against the test's database.
            library = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), None)
            assert library is not None, "libfaketime is not installed (Debian: apt-get install faketime)"
            env = {**env, "LD_PRELOAD": library, "FAKETIME": f"{skew:+g}s", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
        self.spawn(slot, command, merge=True, cwd=self.folder, env=env)

    def serving(self, slot: int) -> None:
        """Wait until the worker of `slot` says it serves (its signal handlers are in place)."""
        deadline = time.monotonic() + 30
        while b"serving" not in self.paths[slot].read_bytes():
            assert self.slots[slot].poll() is None, self.errors()
            assert time.monotonic() < deadline, self.errors()
            time.sleep(0.05)

    def kill(self, slot: int) -> int:
        """SIGKILL the worker of `slot` once it serves; return its pid."""
        self.serving(slot)
        return super().kill(slot)

    def interrupt(self, slot: int, signum: int = signal.SIGINT) -> None:
        """SIGINT the worker of `slot` (a deploy's stop) and wait until it has stopped; it must exit 0."""
        self.serving(slot)
        process = self.slots[slot]
        process.send_signal(signum)
        code = process.wait(timeout=30)
        self.stopped.add(process.pid)
        assert code == 0, (code, self.errors())

    def terminate(self, slot: int) -> None:
        """SIGTERM the worker of `slot` (a deploy's stop, as systemd or Kubernetes sends it), as `interrupt`."""
        self.interrupt(slot, signal.SIGTERM)

    def errors(self) -> str:
        """Return the end of what the workers printed."""
        return super().errors()[-6000:]


@dataclass
class Line:
    """One line of the ledger."""

    at: float
    pid: int
    saga_id: str
    key: str
    idempotency_key: str
    event: str


def read_ledger(path: Path) -> list[Line]:
    """Return the ledger's lines, in the order they were written."""
    lines = []
    for text in path.read_text().splitlines():
        at, pid, saga, key, idem, event = text.split(" ")
        lines.append(Line(float(at), int(pid), saga, key, idem, event))
    return lines


async def submit_all(store: SagaStore, count: int) -> None:
    """Submit sagas 0..count-1 to the chaos queue, each under its key."""
    executor = submitter(store)
    for i in range(count):
        await executor.submit(plan_of(i), saga_id=saga_id(i), queue=QUEUE, key=f"k{i % KEYS}")


async def wait_terminal(store: SagaStore, count: int, seconds: float) -> dict[str, SagaStatus]:
    """Wait until all `count` sagas are terminal (at most `seconds`); return every saga's status."""
    deadline = time.monotonic() + seconds
    while True:
        statuses = {s.saga_id: s.status for s in await store.list_sagas(limit=count + 10)}
        if all(status.is_terminal for status in statuses.values()) or time.monotonic() > deadline:
            return statuses
        await asyncio.sleep(0.2)


def overlaps(intervals: list[tuple[float, float]]) -> int:
    """Return the most intervals that overlap at one moment."""
    points = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = running = 0
    for _, step in points:
        running += step
        most = max(most, running)
    return most


async def check(fleet: Fleet, store: SagaStore, count: int, statuses: dict[str, SagaStatus]) -> str:
    """Judge the run (see the module docstring); return a one-line summary of it."""
    unfinished = {saga: status.value for saga, status in statuses.items() if status not in _ENDS}
    assert len(statuses) == count, fleet.errors()
    assert unfinished == {}, (unfinished, fleet.errors())
    wrong = {
        saga_id(i): statuses[saga_id(i)].value
        for i in range(count)
        if statuses[saga_id(i)] is not (SagaStatus.COMPENSATED if fails(i) else SagaStatus.SUCCESS)
    }
    assert wrong == {}, (wrong, fleet.errors())

    lines = read_ledger(fleet.ledger)
    alone = await check_effects(fleet, store, statuses, lines)

    spans: dict[str, tuple[float, float]] = {}
    for line in lines:
        first, last = spans.get(line.saga_id, (line.at, line.at))
        spans[line.saga_id] = (min(first, line.at), max(last, line.at))
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for saga, span in spans.items():
        by_key[saga.split("-")[0]].append(span)
    crowded = {key: overlaps(spans_of) for key, spans_of in by_key.items() if overlaps(spans_of) > 1}
    assert crowded == {}, f"sagas of one key ran at once (key_concurrency=1): {crowded}"
    most = overlaps(list(spans.values()))
    assert most <= fleet.concurrency, f"{most} sagas ran at once (concurrency={fleet.concurrency})"
    rate = ""
    if fleet.rate is not None:
        limit, per = fleet.rate
        # A saga taken over may have made its first call long after its start: only those driven by one worker.
        starts = sorted((spans[saga][0], saga) for saga in alone if saga in spans)
        busiest = most_starts([at for at, _ in starts], per - RATE_SLACK)
        assert busiest <= limit, (
            f"{busiest} sagas started within {per - RATE_SLACK:g}s (at most {limit} per {per:g}s): {starts}"
        )
        rate = f", at most {busiest} started within {per - RATE_SLACK:g}s"
    return (
        f"{count} sagas, {len(lines)} ledger lines, {len(fleet.killed)} SIGKILLed, {len(fleet.stopped)} stopped, "
        f"at most {most} at once{rate}"
    )


async def check_effects(
    fleet: WorkerProcesses, store: SagaStore, statuses: dict[str, SagaStatus], lines: list[Line]
) -> set[str]:
    """Judge each effect of the ledger against the records: once per key unless the run before it was SIGKILLed,
    none without its written intent or outside the record, none undone in a SUCCESS saga, all undone in a
    COMPENSATED one. Return the sagas one worker drove from their start to their end (no takeover)."""
    pids: dict[tuple[str, str], list[int]] = defaultdict(list)  # (key, do|undo) -> the pids, in order
    for line in lines:
        if line.event in ("do", "undo"):
            pids[(line.idempotency_key, line.event)].append(line.pid)
    doubled = {key: runs for key, runs in pids.items() if any(pid not in fleet.killed for pid in runs[:-1])}
    assert doubled == {}, f"an effect repeated after a run that was not SIGKILLed: {doubled}"

    strays, orphans = [], []
    alone: set[str] = set()  # sagas one worker drove from their queue start to their end (no takeover)
    for saga in statuses:
        result = await store.get_saga(saga)
        assert result is not None
        if not result.takeovers:
            alone.add(saga)
        keys = {step.idempotency_key: step for step in result.steps}
        mine = [(n, line) for n, line in enumerate(lines) if line.saga_id == saga]
        strays += [line.idempotency_key for _, line in mine if line.idempotency_key not in keys]
        for key, step in keys.items():
            dos = [n for n, line in mine if line.idempotency_key == key and line.event == "do"]
            undos = [n for n, line in mine if line.idempotency_key == key and line.event == "undo"]
            assert len(dos) <= step.attempts, (saga, step)  # no effect without its written intent
            if result.status is SagaStatus.SUCCESS:
                assert undos == [], (saga, step.step_id, undos)
                assert dos, (saga, step.step_id)  # a SUCCESS step had its effect
            elif dos and not any(u > dos[-1] for u in undos):
                orphans.append((saga, step.step_id))
    assert strays == [], f"effects under keys no step of the record holds: {strays}"
    assert orphans == [], f"effects never undone in COMPENSATED sagas: {orphans}"
    return alone


# A saga's first tool call comes a little after its queue start (the claim, its reads, scheduling): starts are
# counted in a window this much shorter than the rate limit's, so that delay never looks like a breach.
RATE_SLACK = 0.4


def most_starts(starts: list[float], window: float) -> int:
    """Return the most of the (sorted) start times that fall within one `window` of seconds."""
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


_ENDS = (SagaStatus.SUCCESS, SagaStatus.COMPENSATED)


def schedule(seed: int, count: int, low: float, high: float) -> Iterator[float]:
    """Yield `count` pauses between blows, drawn from `seed`."""
    rng = random.Random(seed)
    for _ in range(count):
        yield rng.uniform(low, high)
