"""The ledger of tool calls, and the registry whose tools write to it and kill the process at its crash point."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from saga_runtime._tools import BUILTIN_TOOLS, StepContext, ToolRegistry, ToolSpec
from saga_runtime.testing._reports import Action, CrashPoint, InjectedFailure, Outcome, Process, ToolCall

__all__ = ["Ledger", "instrument", "load_registry", "read_calls"]

# The StepContext keyword of wrapped methods ("_": never a tool argument).
_CTX = "_saga_runtime_testing_ctx"


# -- the ledger and the wrapped tools


class Ledger:
    """Log wrapped tools' calls, one fsync'ed JSON line each; kill the process at its point."""

    def __init__(self, path: str, process: Process, crash: CrashPoint | None, fail_step: str | None) -> None:
        self._path = path
        self._process = process
        self._crash = crash
        self._fail_step = fail_step
        self._counts: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()  # sync tools call from worker threads

    def _write(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        # O_APPEND: no interleaving; fsync: a kill loses no line.
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
        """Note a call's start (or die, at the crash point); return its occurrence."""
        with self._lock:
            key = (ctx.saga_id, ctx.step_id, action)
            n = self._counts[key] = self._counts.get(key, 0) + 1
        self._die_at("before", action, ctx, n)
        self._write(self._record("begin", action, ctx, n))
        return n

    def end(self, action: Action, ctx: StepContext, n: int, outcome: Outcome, error: BaseException | None) -> None:
        """Note how a call ended (or die, at the crash point)."""
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
    ledger: Ledger, action: Action, fn: Callable[..., Any], is_async: bool, names: tuple[str, ...]
) -> Callable[..., Any]:
    """Return `fn` wrapped to note each call (and maybe die around it), sync or async as `fn`."""

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


def instrument(registry: ToolRegistry, ledger: Ledger) -> ToolRegistry:
    """Return a registry of the same tools, each call noted in `ledger` (a child saga's step too: its crash points
    are before and after its child runs, or is undone)."""
    wrapped = ToolRegistry()
    for spec in [*registry, *BUILTIN_TOOLS.values()]:
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
        # Same spec, wrapped methods.
        wrapped._tools[spec.name] = new
    wrapped._functions = dict(registry._functions)  # saga functions call the wrapped tools through their saga
    return wrapped


def load_registry(target: str) -> ToolRegistry:
    """Return the ToolRegistry at `"package.module:attribute"` (default attribute: `registry`)."""
    module_name, _, attribute = target.partition(":")
    registry = getattr(importlib.import_module(module_name), attribute or "registry")
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"{target!r} is a {type(registry).__name__}, not a ToolRegistry")
    return registry


def read_calls(path: Path, saga_id: str) -> list[ToolCall]:
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
