"""check_crash_points: the probe run, a killed child per crash point, recovery, and the invariants checked."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from saga_runtime._exceptions import PlanValidationError
from saga_runtime._executor import SagaExecutor
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaResult, SagaStatus, StepStatus
from saga_runtime._storage import SagaStore, open_store, sagas
from saga_runtime._tools import ToolRegistry
from saga_runtime.testing._ledger import Ledger, instrument, load_registry, read_calls
from saga_runtime.testing._reports import CrashPoint, CrashReport, PointReport, ToolCall

__all__ = ["check_crash_points"]

_UNKNOWN = (StepStatus.RUNNING, StepStatus.CANCELLED)


# -- the invariants


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


# -- running


def _child_env() -> dict[str, str]:
    """Return a child's environment: this one, with this process's import path."""
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
                result = results[saga_id] = await sagas.get_saga(store, saga_id)
                if result is not None and (result.status.is_terminal or result.status is SagaStatus.PARKED):
                    pending.discard(saga_id)
            if pending:
                await anyio.sleep(pause)
    for saga_id in pending:  # what the timeout left: read once more
        results[saga_id] = await sagas.get_saga(store, saga_id)
    return results


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="saga-crash-") as folder:
        yield Path(folder)


async def check_crash_points(
    registry: str,
    plan: Sequence[Any] | str,
    *,
    args: Mapping[str, Any] | None = None,
    url: str | None = None,
    points: Sequence[CrashPoint] | None = None,
    fail_step: str | None = None,
    lease_timeout: float = 0.5,
    concurrency: int = 4,
    time_limit: float = 60.0,
    saga_prefix: str | None = None,
) -> CrashReport:
    """Run `plan` in child processes killed at each crash point, recover every saga, and report per point.

    `registry`: `"package.module:attribute"`. `plan` may name a saga function of it (`@registry.saga`), run with
    `args`: its crash points are its calls', and recovery resumes it by running it again over its record. `url`: a
    scratch store (default: temporary SQLite). `points`: a subset (default: all the probe reaches). `fail_step`:
    that step raises `InjectedFailure` without its tool. `lease_timeout`: the children's lease; `concurrency`:
    children at once; `time_limit` bounds each child and the recovery. Raises `PlanValidationError`, or
    `RuntimeError` if the probe run fails.
    """
    tools = load_registry(registry)
    if isinstance(plan, str):
        if tools.function(plan) is None:
            raise PlanValidationError([f"{plan!r} is not a saga function of {registry}"])
        stored_plan: Any = plan
    else:
        stored_plan = build_plan(plan, tools).to_json()  # explicit ids for every child
    prefix = saga_prefix or f"crash-{secrets.token_hex(4)}"
    with _workdir() as folder:
        url = url or f"sqlite:///{folder / 'sagas.db'}"
        ledger_path = folder / "ledger.jsonl"

        def config(saga_id: str, point: CrashPoint | None) -> dict[str, Any]:
            return {
                "registry": registry,
                "plan": stored_plan,
                "args": None if args is None else dict(args),
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
        probe_calls = read_calls(ledger_path, probe_id)
        if points is None:
            points = _points_of(probe_calls)

        saga_ids = {point: f"{prefix}-{point.name}" for point in points}
        crashed: dict[CrashPoint, bool] = {}
        at_crash: dict[CrashPoint, SagaResult | None] = {}
        async with open_store(url) as store:
            probe = await sagas.get_saga(store, probe_id)
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
                at_crash[point] = await sagas.get_saga(store, saga_ids[point])

            async with anyio.create_task_group() as tg:
                for point in points:
                    tg.start_soon(crash_at, point)

            recovering = Ledger(str(ledger_path), "recovery", None, fail_step)
            executor = SagaExecutor(
                instrument(tools, recovering),
                store=store,
                executor_id=f"crash-harness-recovery-{os.getpid()}",
                lease_timeout=max(lease_timeout, 1.0),
            )
            finals = await _recover_all(executor, store, list(saga_ids.values()), time_limit, lease_timeout / 5)
            reports = []
            for point in points:
                saga_id = saga_ids[point]
                calls = read_calls(ledger_path, saga_id)
                found = _problems(tools, crashed[point], at_crash[point], finals[saga_id], calls)
                if point in notes:
                    found.insert(0, notes[point])
                if finals[saga_id] is not None and not await sagas.verify_saga(store, saga_id):
                    found.append(f"the saga's hash chain does not verify: {await sagas.verify_saga(store, saga_id)!r}")
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
