"""Prove your tools crash-safe: run a plan, kill its process at every crash point, recover it, check the records.

A saga survives a crash only if its tools cooperate: a step re-run after a crash must pass its idempotency key on
to the outside world, and a compensation must find what to undo by that key (and tolerate "nothing to undo").
`check_crash_points` tests exactly that, with real process kills, against any store::

    from saga_runtime.testing import check_crash_points

    report = await check_crash_points(
        "myapp.tools:registry",                      # module:attribute of your ToolRegistry
        [
            {"id": "charge", "tool": "ChargeCard", "args": {"order_id": "A1", "amount_cents": 500}},
            {"id": "ship", "tool": "Ship", "args": {"address": "Atlantis"}},   # fails: the saga compensates
        ],
        url="postgresql://postgres@127.0.0.1/scratch",  # default: a temporary SQLite file
    )
    print(report)        # one line per crash point: where it was killed, how the saga ended, what the tools did
    report.assert_ok()   # raise AssertionError listing every broken invariant

How it works:

1. A probe run: the plan runs once in a child process (`python -m saga_runtime.testing`) with no crash. The
   harness wraps every tool of the registry so that each call of `execute` and `compensate` is appended, with
   its step id and idempotency key, to a ledger file (fsync'ed line by line). The calls of the probe give the
   crash points, two per call: **before** it (no effect yet) and **after** it returned or raised (the effect
   happened, the engine has not recorded the outcome yet). Calls of `compensate` give the points "during
   compensation".
2. For each crash point, a fresh child runs the plan under its own saga id and kills itself with SIGKILL at that
   point (`os._exit` where there is no SIGKILL). Children run a few at a time (`concurrency`), with a short
   `lease_timeout` so their sagas can be taken over soon.
3. The harness reads what each dead process left in the store, then recovers: `SagaExecutor.recover()`, in this
   process, with the same wrapped registry, until every saga is finished (or `time_limit` runs out).
4. A `PointReport` per point holds the records at the crash (`at_crash`), the final result, every tool call of
   the saga (`calls`, from the ledger) and the invariants it broke (`problems`):

   - the saga ends terminal (SUCCESS, COMPENSATED or COMPENSATION_FAILED);
   - every call of a step used the step's recorded idempotency key;
   - a step recorded SUCCESS at the crash is never executed again;
   - a step recorded COMPENSATED at the crash is never compensated again;
   - a step whose outcome was unknown at the crash (recorded started, no outcome) is re-run with its key, or
     compensated;
   - recovery executes (and compensates) a step at most once;
   - a saga that ended COMPENSATED has undone every effect (each `execute` that returned is followed by a
     `compensate` that returned, for tools that can compensate); a saga that ended SUCCESS compensated nothing;
   - the saga's hash chain verifies.

Point it at a scratch database: recovery takes over every saga there whose owner is gone. The tools run for real
(in the children and in this process), so give them a test double of the outside world, not production. A plan
must fail somewhere for the compensation points to exist: use arguments your tool refuses, or `fail_step=` to
make one step fail without calling its tool.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from saga_runtime._executor import SagaExecutor
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaResult, SagaStatus, StepStatus
from saga_runtime._storage import SagaStore, open_store
from saga_runtime._tools import StepContext, ToolRegistry, ToolSpec

__all__ = ["CrashPoint", "CrashReport", "InjectedFailure", "PointReport", "ToolCall", "check_crash_points"]

Action = Literal["execute", "compensate"]
Process = Literal["run", "recovery"]
Outcome = Literal["returned", "raised", "cancelled", "interrupted"]

# The keyword the wrapped methods receive the StepContext under (never a tool argument: it starts with "_").
_CTX = "_saga_runtime_testing_ctx"
_UNKNOWN = (StepStatus.RUNNING, StepStatus.CANCELLED)


class InjectedFailure(RuntimeError):
    """The failure `fail_step=` puts in place of a step's `execute`: the tool is not called."""


@dataclass(frozen=True, slots=True)
class CrashPoint:
    """Where a run is killed: `when` ("before" or "after") the `occurrence`-th call of a step's `action`."""

    when: Literal["before", "after"]
    action: Action
    step_id: str
    occurrence: int = 1

    @property
    def name(self) -> str:
        """Return a short unique name, e.g. `after-execute-charge`."""
        suffix = f"-{self.occurrence}" if self.occurrence != 1 else ""
        return f"{self.when}-{self.action}-{self.step_id}{suffix}"

    def describe(self) -> str:
        """Return the point in words."""
        nth = f" (call {self.occurrence})" if self.occurrence != 1 else ""
        if self.action == "execute":
            if self.when == "before":
                return f"before step {self.step_id!r} executes{nth}"
            return f"after step {self.step_id!r} executed{nth}, before its outcome is recorded"
        if self.when == "before":
            return f"during compensation, before step {self.step_id!r} is compensated{nth}"
        return f"during compensation, after step {self.step_id!r} was compensated{nth}, before that is recorded"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of a tool's `execute` or `compensate`, as the harness's ledger saw it.

    `process` is "run" (the process that was killed) or "recovery"; `outcome` is "returned", "raised",
    "cancelled", or "interrupted" (the process died during the call).
    """

    action: Action
    tool_name: str
    step_id: str
    idempotency_key: str
    attempt: int
    process: Process
    outcome: Outcome
    error: str | None = None

    def __str__(self) -> str:
        return f"{self.process}:{self.action}({self.step_id})={self.outcome}"


@dataclass(frozen=True)
class PointReport:
    """What happened at one crash point: the records at the crash, the final result, the calls, the problems."""

    point: CrashPoint
    saga_id: str
    crashed: bool
    at_crash: SagaResult | None
    result: SagaResult | None
    calls: tuple[ToolCall, ...]
    problems: tuple[str, ...]

    @property
    def status(self) -> SagaStatus | None:
        """Return the saga's status after recovery (None if it is not in the store)."""
        return None if self.result is None else self.result.status

    @property
    def ok(self) -> bool:
        """Tell whether the run was killed at the point and recovery broke no invariant."""
        return not self.problems

    def calls_of(
        self, step_id: str | None = None, *, action: Action | None = None, process: Process | None = None
    ) -> list[ToolCall]:
        """Return the calls of one step (or all), optionally only of one action or one process."""
        return [
            call
            for call in self.calls
            if (step_id is None or call.step_id == step_id)
            and (action is None or call.action == action)
            and (process is None or call.process == process)
        ]

    def by_tool(self) -> dict[str, list[ToolCall]]:
        """Return the calls grouped by tool name, in order."""
        grouped: dict[str, list[ToolCall]] = {}
        for call in self.calls:
            grouped.setdefault(call.tool_name, []).append(call)
        return grouped

    def __str__(self) -> str:
        status = "missing" if self.status is None else self.status.value
        calls = " ".join(str(call) for call in self.calls) or "no calls"
        line = f"{'ok  ' if self.ok else 'FAIL'} {self.point.name}: {status}; {calls}"
        return "\n".join([line, *(f"       - {problem}" for problem in self.problems)])


@dataclass(frozen=True)
class CrashReport:
    """The report of `check_crash_points`: the probe run (`baseline`) and one `PointReport` per crash point."""

    baseline: SagaResult
    baseline_calls: tuple[ToolCall, ...]
    points: tuple[PointReport, ...]

    @property
    def ok(self) -> bool:
        """Tell whether every point held every invariant."""
        return all(point.ok for point in self.points)

    @property
    def problems(self) -> list[str]:
        """Return every problem, prefixed by its point's name."""
        return [f"{point.point.name}: {problem}" for point in self.points for problem in point.problems]

    def point(self, name: str) -> PointReport:
        """Return the report of the point called `name` (see `CrashPoint.name`)."""
        for report in self.points:
            if report.point.name == name:
                return report
        raise KeyError(f"no crash point {name!r} (points: {[p.point.name for p in self.points]})")

    def assert_ok(self) -> CrashReport:
        """Return the report if every invariant held; raise `AssertionError` listing the broken ones otherwise."""
        if not self.ok:
            raise AssertionError(f"{len(self.problems)} crash-safety problem(s):\n" + "\n".join(self.problems))
        return self

    def __str__(self) -> str:
        head = f"probe run: {self.baseline.status.value}; {len(self.points)} crash points"
        return "\n".join([head, *(str(point) for point in self.points)])


# -- the ledger and the wrapped tools ----------------------------------------------------------------------------


class _Ledger:
    """Append the calls of wrapped tools to a file, one fsync'ed JSON line each; kill the process at its point."""

    def __init__(self, path: str, process: Process, crash: CrashPoint | None, fail_step: str | None) -> None:
        self._path = path
        self._process = process
        self._crash = crash
        self._fail_step = fail_step
        self._counts: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()  # sync tools call from worker threads

    def _write(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        # O_APPEND: lines of concurrent processes never interleave; fsync: a kill right after loses none.
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _die_at(self, when: str, action: Action, ctx: StepContext, n: int) -> None:
        crash = self._crash
        if crash and (crash.when, crash.action, crash.step_id, crash.occurrence) == (when, action, ctx.step_id, n):
            kill = getattr(signal, "SIGKILL", None)
            if kill is not None:
                os.kill(os.getpid(), kill)
            os._exit(137)

    def begin(self, action: Action, ctx: StepContext) -> int:
        """Count the call, die here if it is the crash point, else note the call; return its occurrence."""
        with self._lock:
            key = (ctx.saga_id, ctx.step_id, action)
            n = self._counts[key] = self._counts.get(key, 0) + 1
        self._die_at("before", action, ctx, n)
        self._write(self._record("begin", action, ctx, n))
        return n

    def end(self, action: Action, ctx: StepContext, n: int, outcome: Outcome, error: BaseException | None) -> None:
        """Note how the call ended; die here if it is the crash point (the outcome is not recorded yet)."""
        record = self._record("end", action, ctx, n)
        record.update(outcome=outcome, error=None if error is None else f"{type(error).__name__}: {error}")
        self._write(record)
        if outcome != "cancelled":
            self._die_at("after", action, ctx, n)

    def _record(self, edge: str, action: Action, ctx: StepContext, n: int) -> dict[str, Any]:
        return {
            "edge": edge,
            "saga": ctx.saga_id,
            "step": ctx.step_id,
            "tool": ctx.tool_name,
            "action": action,
            "key": ctx.idempotency_key,
            "attempt": ctx.attempt,
            "process": self._process,
            "pid": os.getpid(),
            "n": n,
        }

    def fails(self, ctx: StepContext) -> bool:
        """Tell whether this step is the one `fail_step` makes fail."""
        return ctx.step_id == self._fail_step


def _wrap(
    ledger: _Ledger, action: Action, fn: Callable[..., Any], is_async: bool, names: tuple[str, ...]
) -> Callable[..., Any]:
    """Return `fn` wrapped to note each call in the ledger (and maybe die around it); same sync-ness as `fn`."""

    def prepare(kwargs: dict[str, Any]) -> StepContext:
        ctx: StepContext = kwargs.pop(_CTX)
        kwargs.update(dict.fromkeys(names, ctx))
        return ctx

    def inject(ctx: StepContext) -> None:
        if action == "execute" and ledger.fails(ctx):
            raise InjectedFailure(f"step {ctx.step_id!r} fails on purpose (fail_step={ctx.step_id!r})")

    if is_async:

        async def call_async(*args: Any, **kwargs: Any) -> Any:
            ctx = prepare(kwargs)
            n = ledger.begin(action, ctx)
            try:
                inject(ctx)
                value = await fn(*args, **kwargs)
            except Exception as exc:
                ledger.end(action, ctx, n, "raised", exc)
                raise
            except BaseException as exc:
                ledger.end(action, ctx, n, "cancelled", exc)
                raise
            ledger.end(action, ctx, n, "returned", None)
            return value

        return call_async

    def call_sync(*args: Any, **kwargs: Any) -> Any:
        ctx = prepare(kwargs)
        n = ledger.begin(action, ctx)
        try:
            inject(ctx)
            value = fn(*args, **kwargs)
        except Exception as exc:
            ledger.end(action, ctx, n, "raised", exc)
            raise
        ledger.end(action, ctx, n, "returned", None)
        return value

    return call_sync


def _instrument(registry: ToolRegistry, ledger: _Ledger) -> ToolRegistry:
    """Return a registry of the same tools, each call noted in `ledger`; names, arguments and options unchanged."""
    wrapped = ToolRegistry()
    for spec in registry:
        changes: dict[str, Any] = {
            "execute": _wrap(ledger, "execute", spec.execute, spec.execute_is_async, spec.execute_ctx_params),
            "execute_ctx_params": (_CTX,),
        }
        if spec.compensate is not None:
            changes["compensate"] = _wrap(
                ledger, "compensate", spec.compensate, spec.compensate_is_async, spec.compensate_ctx_params
            )
            changes["compensate_ctx_params"] = (_CTX,)
        new: ToolSpec = dataclasses.replace(spec, **changes)
        # The spec is what the engine calls: same argument model, retry and timeout, wrapped methods.
        wrapped._tools[spec.name] = new
    return wrapped


def load_registry(target: str) -> ToolRegistry:
    """Import `"package.module:attribute"` (attribute defaults to `registry`) and return that ToolRegistry."""
    module_name, _, attribute = target.partition(":")
    registry = getattr(importlib.import_module(module_name), attribute or "registry")
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"{target!r} is a {type(registry).__name__}, not a ToolRegistry")
    return registry


def _read_calls(path: Path, saga_id: str) -> list[ToolCall]:
    """Return the calls of one saga from the ledger, in order, each begin paired with its end."""
    calls: list[dict[str, Any]] = []
    open_calls: dict[tuple[Any, ...], dict[str, Any]] = {}
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["saga"] != saga_id:
            continue
        key = (record["pid"], record["step"], record["action"], record["n"])
        if record["edge"] == "begin":
            open_calls[key] = {**record, "outcome": "interrupted", "error": None}
            calls.append(open_calls[key])
        elif key in open_calls:
            open_calls.pop(key).update(outcome=record["outcome"], error=record["error"])
    return [
        ToolCall(c["action"], c["tool"], c["step"], c["key"], c["attempt"], c["process"], c["outcome"], c["error"])
        for c in calls
    ]


# -- the invariants ------------------------------------------------------------------------------------------------


def _problems(
    registry: ToolRegistry,
    crashed: bool,
    at_crash: SagaResult | None,
    final: SagaResult | None,
    calls: Sequence[ToolCall],
) -> list[str]:
    """Return the invariants one crash point broke, in words."""
    problems: list[str] = []
    if not crashed:
        problems.append("the run was not killed: it never reached the crash point (it took another path)")
    if final is None:
        return [*problems, "the saga is not in the store"]
    if not final.status.is_terminal:
        problems.append(f"the saga is {final.status.value} after recovery, not finished")
    keys = {step.step_id: step.idempotency_key for step in final.steps}
    problems += [
        f"{call}: called with idempotency key {call.idempotency_key!r}, not its step's {keys.get(call.step_id)!r}"
        for call in calls
        if call.idempotency_key != keys.get(call.step_id)
    ]
    recovered = [call for call in calls if call.process == "recovery"]
    for step in at_crash.steps if at_crash is not None else ():
        redo = [c for c in recovered if c.step_id == step.step_id and c.action == "execute"]
        undo = [c for c in recovered if c.step_id == step.step_id and c.action == "compensate"]
        if step.status is StepStatus.SUCCESS and redo:
            problems.append(f"step {step.step_id!r} was recorded SUCCESS before the crash, yet recovery executed it")
        if step.status is StepStatus.COMPENSATED and undo:
            problems.append(
                f"step {step.step_id!r} was recorded COMPENSATED before the crash, yet recovery compensated it again"
            )
        if step.status in _UNKNOWN and not redo and not undo:
            problems.append(
                f"step {step.step_id!r} had an unknown outcome at the crash ({step.status.value}), and recovery "
                "neither re-ran it nor compensated it"
            )
    for step in final.steps:
        for action in ("execute", "compensate"):
            done = [
                c for c in recovered if c.step_id == step.step_id and c.action == action and c.outcome == "returned"
            ]
            if len(done) > 1:
                problems.append(f"recovery ran {action} of step {step.step_id!r} {len(done)} times")
        mine = [c for c in calls if c.step_id == step.step_id and c.outcome == "returned"]
        last_effect = max((i for i, c in enumerate(mine) if c.action == "execute"), default=None)
        undone = any(c.action == "compensate" for c in mine[(last_effect or 0) :])
        compensable = step.tool_name in registry and registry.get(step.tool_name).has_compensate
        if final.status is SagaStatus.COMPENSATED and last_effect is not None and compensable and not undone:
            problems.append(
                f"step {step.step_id!r} had its effect and was never undone, yet the saga ended COMPENSATED"
            )
        if final.status is SagaStatus.SUCCESS and any(c.action == "compensate" for c in mine):
            problems.append(f"step {step.step_id!r} was compensated, yet the saga ended SUCCESS")
    return problems


# -- running ------------------------------------------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    """Return the environment of a child: this one, with this process's import path, so the same tools import."""
    paths = [path for path in sys.path if path]
    inherited = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, *([inherited] if inherited else [])])}


async def _spawn(config: Mapping[str, Any], time_limit: float) -> tuple[int, str]:
    """Run one child with `config`; return its exit code (negative: killed by that signal) and its stderr."""
    command = [sys.executable, "-m", "saga_runtime.testing", "_run", json.dumps(config)]
    async with await anyio.open_process(
        command, env=_child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    ) as process:
        chunks: list[bytes] = []
        with anyio.move_on_after(time_limit) as scope:
            assert process.stderr is not None
            async for chunk in process.stderr:
                chunks.append(chunk)
            await process.wait()
        if scope.cancelled_caught:
            process.kill()
            await process.wait()
            chunks.append(f"\n(killed by the harness after {time_limit:g}s)".encode())
        assert process.returncode is not None
        return process.returncode, b"".join(chunks).decode(errors="replace")


def _killed(code: int) -> bool:
    return code == -getattr(signal, "SIGKILL", 9) or code == 137


async def _recover_all(
    executor: SagaExecutor, store: SagaStore, saga_ids: Sequence[str], time_limit: float, pause: float
) -> dict[str, SagaResult | None]:
    """Call `recover()` until every saga of `saga_ids` is finished (or parked), or `time_limit` runs out."""
    results: dict[str, SagaResult | None] = dict.fromkeys(saga_ids)
    pending = set(saga_ids)
    with anyio.move_on_after(time_limit):
        while pending:
            await executor.recover()
            for saga_id in sorted(pending):
                result = results[saga_id] = await store.get_saga(saga_id)
                if result is not None and (result.status.is_terminal or result.status is SagaStatus.PARKED):
                    pending.discard(saga_id)
            if pending:
                await anyio.sleep(pause)
    for saga_id in pending:  # what the timeout left: read once more
        results[saga_id] = await store.get_saga(saga_id)
    return results


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="saga-crash-") as folder:
        yield Path(folder)


async def check_crash_points(
    registry: str,
    plan: Sequence[Any],
    *,
    url: str | None = None,
    points: Sequence[CrashPoint] | None = None,
    fail_step: str | None = None,
    lease_timeout: float = 0.5,
    concurrency: int = 4,
    time_limit: float = 60.0,
    saga_prefix: str | None = None,
) -> CrashReport:
    """Run `plan` in child processes killed at each crash point, recover every saga, and report per point.

    `registry` names your ToolRegistry as `"package.module:attribute"` (importable here and in the children).
    `url` is a scratch store (default: a temporary SQLite file). `points` limits the run to those points
    (default: every point the probe run reaches). `fail_step` makes that step's `execute` raise
    `InjectedFailure` without calling its tool, so the saga compensates. `lease_timeout` is the children's lease:
    recovery starts once it ran out. `concurrency` children run at once; `time_limit` bounds each child and the
    recovery. Raises `PlanValidationError` for a plan the registry refuses, `RuntimeError` if the probe run fails.
    """
    tools = load_registry(registry)
    stored_plan = build_plan(plan, tools).to_json()  # explicit ids: every child names the steps alike
    prefix = saga_prefix or f"crash-{secrets.token_hex(4)}"
    with _workdir() as folder:
        url = url or f"sqlite:///{folder / 'sagas.db'}"
        ledger_path = folder / "ledger.jsonl"

        def config(saga_id: str, point: CrashPoint | None) -> dict[str, Any]:
            return {
                "registry": registry,
                "plan": stored_plan,
                "url": url,
                "saga_id": saga_id,
                "point": None if point is None else dataclasses.asdict(point),
                "ledger": str(ledger_path),
                "lease_timeout": lease_timeout,
                "fail_step": fail_step,
            }

        probe_id = f"{prefix}-probe"
        code, errors = await _spawn(config(probe_id, None), time_limit)
        if code != 0:
            raise RuntimeError(f"the probe run of the plan failed (exit code {code}):\n{errors}")
        probe_calls = _read_calls(ledger_path, probe_id)
        if points is None:
            points = _points_of(probe_calls)

        saga_ids = {point: f"{prefix}-{point.name}" for point in points}
        crashed: dict[CrashPoint, bool] = {}
        at_crash: dict[CrashPoint, SagaResult | None] = {}
        async with open_store(url) as store:
            probe = await store.get_saga(probe_id)
            if probe is None:
                raise RuntimeError(f"the probe run left no saga {probe_id!r} in {store.url}")
            limiter = anyio.CapacityLimiter(max(1, concurrency))
            notes: dict[CrashPoint, str] = {}

            async def crash_at(point: CrashPoint) -> None:
                async with limiter:
                    code, errors = await _spawn(config(saga_ids[point], point), time_limit)
                crashed[point] = _killed(code)
                if code not in (0,) and not crashed[point]:
                    notes[point] = f"the run exited with code {code}: {errors.strip()[-2000:]}"
                at_crash[point] = await store.get_saga(saga_ids[point])

            async with anyio.create_task_group() as tg:
                for point in points:
                    tg.start_soon(crash_at, point)

            recovering = _Ledger(str(ledger_path), "recovery", None, fail_step)
            executor = SagaExecutor(
                _instrument(tools, recovering),
                store=store,
                executor_id=f"crash-harness-recovery-{os.getpid()}",
                lease_timeout=max(lease_timeout, 1.0),
            )
            finals = await _recover_all(executor, store, list(saga_ids.values()), time_limit, lease_timeout / 5)
            reports = []
            for point in points:
                saga_id = saga_ids[point]
                calls = _read_calls(ledger_path, saga_id)
                found = _problems(tools, crashed[point], at_crash[point], finals[saga_id], calls)
                if point in notes:
                    found.insert(0, notes[point])
                if finals[saga_id] is not None and not await store.verify_saga(saga_id):
                    found.append(f"the saga's hash chain does not verify: {await store.verify_saga(saga_id)!r}")
                reports.append(
                    PointReport(
                        point, saga_id, crashed[point], at_crash[point], finals[saga_id], tuple(calls), tuple(found)
                    )
                )
        return CrashReport(probe, tuple(probe_calls), tuple(reports))


def _points_of(calls: Sequence[ToolCall]) -> list[CrashPoint]:
    """Return the crash points of a run's calls: before and after each."""
    seen: dict[tuple[str, str], int] = {}
    points = []
    for call in calls:
        n = seen[(call.action, call.step_id)] = seen.get((call.action, call.step_id), 0) + 1
        points += [
            CrashPoint("before", call.action, call.step_id, n),
            CrashPoint("after", call.action, call.step_id, n),
        ]
    return points


# -- the child process, and a command line -----------------------------------------------------------------------


async def _run(config: Mapping[str, Any]) -> int:
    """Run the plan once as the crash point's child: killed at the point, or returning 0 if it never gets there."""
    point = None if config["point"] is None else CrashPoint(**config["point"])
    ledger = _Ledger(config["ledger"], "run", point, config["fail_step"])
    registry = _instrument(load_registry(config["registry"]), ledger)
    async with open_store(config["url"]) as store:
        executor = SagaExecutor(
            registry,
            store=store,
            executor_id=f"crash-harness-run-{os.getpid()}",
            lease_timeout=float(config["lease_timeout"]),
        )
        await executor.run(config["plan"], saga_id=config["saga_id"])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Check a plan from the command line: `python -m saga_runtime.testing module:registry plan.json [--url URL]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["_run"]:
        return anyio.run(_run, json.loads(args[1]))
    parser = argparse.ArgumentParser(prog="python -m saga_runtime.testing", description=main.__doc__)
    parser.add_argument("registry", help="the ToolRegistry to test, as package.module:attribute")
    parser.add_argument("plan", help="a JSON file holding the plan")
    parser.add_argument("--url", help="a scratch store (default: a temporary SQLite file)")
    parser.add_argument("--fail-step", help="make this step fail without calling its tool, to test compensation")
    parser.add_argument("--concurrency", type=int, default=4, help="children running at once (default 4)")
    options = parser.parse_args(args)
    plan = json.loads(Path(options.plan).read_text())

    async def check() -> CrashReport:
        return await check_crash_points(
            options.registry, plan, url=options.url, fail_step=options.fail_step, concurrency=options.concurrency
        )

    report = anyio.run(check)
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
