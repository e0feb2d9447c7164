"""An executor served over MCP: every tool call a saga step, undone in reverse on rollback.

A call's saga is `_meta.saga_id`, else `mcp-<session id>`, else its own, ended with the call. One task per
saga runs its calls in order. Ending a session with neither `saga_commit` nor `saga_rollback` detaches the
saga for `recover()`; re-entered, it replays its record.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from saga_runtime import (
    ApprovalPendingError,
    ApprovalRejectedError,
    BudgetExceededError,
    DynamicSaga,
    PlanValidationError,
    SagaError,
    SagaExecutor,
    SagaNotFoundError,
    SagaResult,
    SagaStatus,
    StepFailedError,
    StepStatus,
)
from saga_runtime._published import follow, published
from saga_runtime._records import SagaRow
from saga_runtime._storage import sagas as stored
from saga_runtime._tools import BUILTIN_TOOLS, SagaFunction, builtin_tool_message
from saga_runtime.integrations._common import missing_extra, schema_of

try:
    import mcp_types as types
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.tools import Tool
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise missing_extra("mcp", "mcp") from exc

__all__ = ["saga_mcp_server"]

logger = logging.getLogger("saga_runtime")

META_KEY = "saga_id"
_SESSION_KEY = "saga_runtime.session"
_DRIVERS_KEY = "saga_runtime.drivers"
# Seconds a stopping server lets calls finish.
_DETACH_BOUND = 30.0


class _Arguments(ArgModelBase):
    """Any arguments: the executor checks them."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


# A call (tool, arguments), or "rollback".
_Call = tuple[str, dict[str, Any]] | str


class _Refused(Exception):
    """A call refused with a tool error, nothing run."""


@dataclass
class _Job:
    """One request to a saga's driver, and its answer."""

    kind: str  # "call", "commit", "rollback" or "detach"
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    step_id: str | None = None  # from the call's idempotency key: a retry is the same step
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: types.CallToolResult | None = None
    waiting: bool = False  # the saga is WAITING
    unknown: bool = False  # the saga stopped while the call ran: its outcome is unknown


class _Driver:
    """The task holding one saga's block open, running its jobs."""

    def __init__(self, sagas: _Sagas, saga_id: str, record: SagaResult | None) -> None:
        self.sagas = sagas
        self.saga_id = saga_id
        self.record = record
        self.send, self.receive = anyio.create_memory_object_stream[_Job](math.inf)
        self.ready = anyio.Event()
        self.refusal: str | None = None  # why it could not be entered
        self.ended = False
        # The answers of the calls made with an idempotency key, by step id: a retry gets the same answer.
        self.keyed: dict[str, types.CallToolResult] = {}

    async def run(self) -> None:
        """Drive the saga until it ends, detaches or waits; never raises."""
        ending: _Job | None = None
        current: _Job | None = None
        saga: DynamicSaga | None = None
        try:
            async with self.sagas.executor.saga(saga_id=self.saga_id) as saga:
                await self._replay(saga)
                self.ready.set()
                async for job in self.receive:
                    current = job
                    if job.kind == "call":
                        job.answer, job.waiting = await self._call(saga, job)
                        job.done.set()
                        if job.waiting:
                            break  # the block is left as it stands
                        continue
                    ending = job
                    if job.kind == "rollback":
                        raise RollbackRequested("its MCP client called saga_rollback")
                    if job.kind == "detach":
                        await saga.detach()
                    break
        except RollbackRequested:
            pass
        except Exception as exc:
            logger.warning("saga %s: served over MCP, it stopped: %s", self.saga_id, exc)
            self.refusal = self.refusal or f"saga {self.saga_id!r} cannot go on here: {exc}"
        finally:
            self.ended = True
            self.sagas.held.pop(self.saga_id, None)
            self.ready.set()
            self.send.close()
            result = saga.result if saga is not None else None
            if ending is not None:
                ending.answer = _ended(self.saga_id, ending.kind, result)
                ending.done.set()
            elif current is not None and not current.done.is_set():
                current.answer = _error(self.saga_id, self.refusal or f"saga {self.saga_id!r} stopped")
                current.unknown = current.kind == "call"
                current.done.set()
            # Jobs after the end: refused.
            while True:
                try:
                    late = self.receive.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break
                late.answer = _error(self.saga_id, f"saga {self.saga_id!r} ended before this call could run")
                late.done.set()
            self.receive.close()

    async def _replay(self, saga: DynamicSaga) -> None:
        """Replay the recorded calls."""
        if self.record is None:
            return
        groups: dict[int, list[tuple[str, dict[str, Any]]]] = {}
        for step in self.record.steps:
            if step.status is not StepStatus.WAITING:
                groups.setdefault(step.group, []).append((step.tool_name, dict(step.args)))
        for group in sorted(groups):
            await saga.group(groups[group], return_exceptions=True)

    async def _call(self, saga: DynamicSaga, job: _Job) -> tuple[types.CallToolResult, bool]:
        """Run one call as a step; return the answer and whether the saga now waits.

        A call made again with the same idempotency key is the same step: answered as it was, run once.
        """
        if job.step_id is None:
            return await self._run_call(saga, job)
        answered = self.keyed.get(job.step_id) or self._recorded(job.step_id)
        if answered is not None:
            return answered, False
        answer, waiting = await self._run_call(saga, job)
        if not waiting:
            self.keyed[job.step_id] = answer
        return answer, waiting

    def _recorded(self, step_id: str) -> types.CallToolResult | None:
        """Return the answer of a step recorded before this saga was entered here (None: not run yet)."""
        step = next((s for s in self.record.steps if s.step_id == step_id), None) if self.record else None
        if step is None or step.status in (StepStatus.PENDING, StepStatus.WAITING):
            return None
        if step.status is StepStatus.SUCCESS:
            return _success(self.saga_id, step.result)
        return _error(
            self.saga_id,
            f"call {step_id!r} ({step.tool_name}) already ran: {step.status.value}"
            + (f": {step.error}" if step.error else ""),
        )

    async def _run_call(self, saga: DynamicSaga, job: _Job) -> tuple[types.CallToolResult, bool]:
        call = (job.tool, job.args) if job.step_id is None else (job.tool, job.args, job.step_id)
        try:
            (outcome,) = await saga.group([call], return_exceptions=True)
        except ApprovalPendingError as exc:
            return _error(self.saga_id, _pending(exc)), True
        except ApprovalRejectedError as exc:
            return _error(self.saga_id, f"{exc}; decided by {exc.by}" + (f": {exc.note}" if exc.note else "")), False
        except PlanValidationError as exc:
            return _error(self.saga_id, f"refused before running: {exc}"), False
        if isinstance(outcome, ApprovalRejectedError):
            return _error(self.saga_id, f"{outcome}; decided by {outcome.by}"), False
        if isinstance(outcome, StepFailedError | BudgetExceededError):
            return _error(self.saga_id, str(outcome)), False
        return _success(self.saga_id, outcome), False


class RollbackRequested(Exception):
    """Raised in a saga's block to compensate it on saga_rollback."""


class _Sagas:
    """The sagas one server holds, by id."""

    def __init__(self, executor: SagaExecutor) -> None:
        self.executor = executor
        self.held: dict[str, _Driver] = {}
        self.waiting_own: dict[tuple[str, str], str] = {}  # waiting own-saga call -> saga id
        self.lock = anyio.Lock()  # one driver per saga id

    @asynccontextmanager
    async def lifespan(self, server: Any) -> AsyncIterator[dict[str, Any]]:
        """Own the drivers; detach those still held when serving stops."""
        started: list[_Driver] = []
        async with anyio.create_task_group() as tasks:
            yield {_DRIVERS_KEY: (tasks, started)}
            with anyio.move_on_after(_DETACH_BOUND, shield=True):
                for driver in started:
                    await self.detach(driver.saga_id)
            tasks.cancel_scope.cancel()  # past the bound: compensated

    async def driver(self, ctx: Context, saga_id: str, *, waiting_call: _Call | None) -> _Driver:
        """Return `saga_id`'s driver, started if needed; a WAITING saga only for `waiting_call`."""
        async with self.lock:
            driver = self.held.get(saga_id)
            if driver is not None and not driver.ended:
                return driver
            record = await stored.get_saga(self.executor.store, saga_id)
            if record is not None:
                _check_enterable(record, waiting_call)
            tasks, started = ctx.request_context.lifespan_context[_DRIVERS_KEY]
            driver = _Driver(self, saga_id, record)
            self.held[saga_id] = driver
            started.append(driver)
            tasks.start_soon(driver.run)
        await driver.ready.wait()
        if driver.refusal is not None:
            raise _Refused(driver.refusal)
        return driver

    async def ask(self, driver: _Driver, job: _Job) -> types.CallToolResult:
        """Hand a job to a driver and return its answer."""
        try:
            driver.send.send_nowait(job)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return _error(driver.saga_id, f"saga {driver.saga_id!r} ended before this call could run")
        await job.done.wait()
        assert job.answer is not None
        return job.answer

    async def call(self, ctx: Context, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        """Run one tool call as a step of its saga."""
        problems = self.executor.registry.get(tool).check_args(args)
        if problems:
            return _error(None, f"refused before running: {'; '.join(problems)}")
        saga_id, own = self.saga_of(ctx)
        same = (tool, json.dumps(args, sort_keys=True))
        if saga_id is None:
            # A repeated call reuses its saga, so no effect runs twice.
            waited = self.waiting_own.pop(same, None)
            saga_id = waited or _own_saga_id(ctx)
            if waited is None and saga_id in self.held:
                return _error(saga_id, "a call with this idempotency key is still running; make it again later")
        try:
            driver = await self.driver(ctx, saga_id, waiting_call=(tool, args))
        except _Refused as exc:
            return _error(saga_id, str(exc))
        job = _Job("call", tool, args, _step_of(ctx))
        answer: types.CallToolResult | None = None
        try:
            answer = await self.ask(driver, job)
        finally:
            if own and answer is None:
                # The client left: the saga still ends with the call.
                with anyio.CancelScope(shield=True):
                    await job.done.wait()
                    if not job.waiting and job.answer is not None:
                        await self.ask(driver, _Job("rollback" if job.answer.is_error else "commit"))
        if own and job.waiting:
            self.waiting_own[same] = saga_id
        elif own:
            await self.ask(driver, _Job("rollback" if answer.is_error else "commit"))
        if job.unknown:  # not a tool error: the server failed while the call ran, its outcome is unknown
            raise MCPError(code=types.INTERNAL_ERROR, message=_text_of(answer))
        return answer

    def saga_of(self, ctx: Context, *, session_only: bool = False) -> tuple[str | None, bool]:
        """Return the call's saga id (None: new), and whether it is the call's own."""
        given = (ctx.request_context.meta or {}).get(META_KEY)
        if isinstance(given, str) and given:
            return given, False
        session = self.session_id(ctx)
        if session is not None:
            return f"mcp-{session}", False
        return None, not session_only

    def session_id(self, ctx: Context) -> str | None:
        """Return the call's session id, if any."""
        request = ctx.request_context
        if request.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return None  # every request stands alone
        # Only the session proxy knows the connection.
        connection = getattr(request.session, "_connection", None)
        state = getattr(connection, "state", None)
        if connection is None or not isinstance(state, dict):
            return None
        session = state.get(_SESSION_KEY)
        if session is None:
            session = state[_SESSION_KEY] = connection.session_id or uuid.uuid4().hex
            connection.exit_stack.push_async_callback(self.detach, f"mcp-{session}")
        return str(session)

    async def detach(self, saga_id: str) -> None:
        """Leave a saga to recovery."""
        driver = self.held.get(saga_id)
        if driver is not None and not driver.ended:
            await self.ask(driver, _Job("detach"))

    async def end(self, ctx: Context, kind: str) -> types.CallToolResult:
        """Commit or roll back the call's saga (`_meta.saga_id`, else the session's)."""
        saga_id, _ = self.saga_of(ctx, session_only=True)
        if saga_id is None:
            return _error(
                None, f"saga_{kind}: which saga? Give its id in the call's _meta ({META_KEY!r}) or use a session"
            )
        if saga_id not in self.held and await stored.get_saga(self.executor.store, saga_id) is None:
            return _ended(saga_id, kind, None)
        try:
            driver = await self.driver(ctx, saga_id, waiting_call=kind if kind == "rollback" else None)
        except _Refused as exc:
            return _error(saga_id, str(exc))
        return await self.ask(driver, _Job(kind))


def _check_enterable(record: SagaResult, waiting_call: _Call | None) -> None:
    """Refuse a finished saga, or a waiting one but for its waiting call."""
    if record.status.is_terminal:
        raise _Refused(f"saga {record.saga_id!r} has ended ({record.status.value}); use another saga id")
    if record.status is not SagaStatus.WAITING:
        return
    step = next(step for step in record.steps if step.status is StepStatus.WAITING)
    if waiting_call != "rollback" and waiting_call != (step.tool_name, dict(step.args)):
        raise _Refused(
            f"saga {record.saga_id!r} waits for a decision on call {step.step_id!r} ({step.tool_name} "
            f"{json.dumps(step.args, sort_keys=True)}); once it is decided, make that same call again"
        )


def _success(saga_id: str, value: Any) -> types.CallToolResult:
    structured = value if isinstance(value, dict) else {"result": value}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(value))],
        structured_content=structured,
        _meta={META_KEY: saga_id},
    )


def _error(saga_id: str | None, message: str) -> types.CallToolResult:
    meta = None if saga_id is None else {META_KEY: saga_id}
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True, _meta=meta)


def _ended(saga_id: str, kind: str, result: SagaResult | None) -> types.CallToolResult:
    if result is None:
        return _success(saga_id, {"saga_id": saga_id, "status": None, "steps": 0})
    failed = kind == "commit" and result.status is not SagaStatus.SUCCESS
    body = {"saga_id": saga_id, "status": result.status.value, "steps": len(result.steps), "error": result.error}
    if failed:
        return _error(saga_id, json.dumps(body))
    return _success(saga_id, body)


def _pending(exc: ApprovalPendingError) -> str:
    return (
        f"call {exc.step_id!r} ({exc.tool_name}) of saga {exc.saga_id!r} waits for a person's decision: "
        f"`saga-runtime approve {exc.saga_id} {exc.step_id} --by NAME` (or reject); then make the same call again"
    )


def _tool(name: str, description: str, schema: dict[str, Any], run: Any) -> Tool:
    async def fn(arguments: dict[str, Any], ctx: Context) -> types.CallToolResult:
        result: types.CallToolResult = await run(ctx, arguments)
        return result

    return Tool(
        fn=fn,
        name=name,
        title=None,
        description=description,
        parameters=schema,
        annotations=None,
        fn_metadata=FuncMetadata(arg_model=_Arguments),
        is_async=True,
        context_kwarg="ctx",
    )


def _function_tool(executor: SagaExecutor, function: SagaFunction) -> Tool:
    """Return the MCP tool that runs a saga function as a saga of its own, reporting its streams as progress."""
    doc = (function.fn.__doc__ or "").strip()
    description = doc or f"Run the saga function {function.name} (a durable saga: resumed by any worker)."

    async def run(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
        return await _run_function(executor, function, ctx, arguments)

    return _tool(function.name, description, function.args_model.model_json_schema(), run)


async def _run_function(
    executor: SagaExecutor, function: SagaFunction, ctx: Context, arguments: dict[str, Any]
) -> types.CallToolResult:
    """Run a saga function for a tool call (its id `_meta.saga_id`, else one of its own), reporting each stream
    value as progress, and answer with its output."""
    problems, _ = function.check_args(arguments)
    if problems:
        return _error(None, f"refused before running: {'; '.join(problems)}")
    given = (ctx.request_context.meta or {}).get(META_KEY)
    saga_id = given if isinstance(given, str) and given else _own_saga_id(ctx)
    progress = _Progress(executor, saga_id, ctx)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(progress.follow)
        try:
            result = await executor.run(function.name, args=arguments, saga_id=saga_id)
        except SagaError as exc:  # refused before it ran (a saga of that id with other arguments)
            tasks.cancel_scope.cancel()
            return _error(saga_id, f"{type(exc).__name__}: {exc}")
        await progress.finish()
        tasks.cancel_scope.cancel()  # the follower: everything is reported
    if result.status is SagaStatus.SUCCESS:
        return _success(saga_id, result.output)
    if result.status.is_terminal:
        return _error(saga_id, f"saga {saga_id!r} ended {result.status.value}: {result.error}")
    waiting = result.waiting_for
    waits = f" ({waiting['kind']}: {waiting['detail']})" if waiting else ""
    return _error(
        saga_id,
        f"saga {saga_id!r} is {result.status.value}{waits}; a worker (serve()) goes on with it: make the same call "
        f"again with _meta {{{META_KEY!r}: {saga_id!r}}} for its result",
    )


class _Progress:
    """Reports a saga's stream values, in the order written, as the tool call's progress notifications."""

    def __init__(self, executor: SagaExecutor, saga_id: str, ctx: Context) -> None:
        self.store = executor.store
        self.saga_id = saga_id
        self.ctx = ctx
        self.reported = 0  # stream values reported: the progress count
        self.lock = anyio.Lock()  # the follower and the last report never report a value twice

    async def follow(self) -> None:
        """Report stream values as the saga writes them (until cancelled once the run returned)."""
        while True:
            try:
                async for saga in follow(self.store, self.saga_id):
                    await self.report(saga)
                return
            except SagaNotFoundError:  # not stored yet: run() stores it first thing
                await anyio.sleep(0.05)
            except Exception as exc:  # the store failed: the values are reported once the run returns
                logger.warning("saga %s: its stream values are reported at its end: %s", self.saga_id, exc)
                return

    async def finish(self) -> None:
        """Report the values not reported yet (the run returned: its record is whole)."""
        try:
            stored = await self.store.load_saga(self.saga_id)
        except Exception as exc:  # the saga ended: its answer matters more than its last progress
            logger.warning("saga %s: its last stream values were not reported: %s", self.saga_id, exc)
            return
        if stored is not None:
            await self.report(stored[0])

    async def report(self, saga: SagaRow) -> None:
        values = [entry["value"] for entry in published(saga) if entry["kind"] == "stream"]
        async with self.lock:
            while self.reported < len(values):
                value = values[self.reported]
                self.reported += 1
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                await self.ctx.report_progress(self.reported, None, text)


def saga_mcp_server(executor: SagaExecutor, *, names: Iterable[str] | None = None, name: str = "saga-runtime") -> Any:
    """Return an `MCPServer` offering the executor's tools and saga functions, plus saga_commit and saga_rollback.

    A saga function's call runs it as a saga of its own, its output the call's result; each value it writes to a
    stream is reported as a progress notification when the client asked for progress (a `progressToken`).
    `names`: the tools and saga functions to offer (all by default); a built-in tool ("saga.child") raises
    `ValueError`: it is never offered.
    Run it as any `MCPServer` (`run_stdio_async()`, `streamable_http_app()`, `Client(server)`).
    """
    sagas = _Sagas(executor)
    registry = executor.registry
    wanted = None if names is None else list(names)
    for tool in wanted or ():
        if isinstance(tool, str) and tool in BUILTIN_TOOLS:
            raise ValueError(f"{builtin_tool_message(tool)} (an MCP server never offers it)")
    functions = [
        function
        for function in (registry.function(name) for name in registry.function_names())
        if function is not None and (wanted is None or function.name in wanted)
    ]
    served = {function.name for function in functions}
    specs = list(registry) if wanted is None else [registry.get(tool) for tool in wanted if tool not in served]
    tools = []
    for spec in specs:

        async def run(ctx: Context, arguments: dict[str, Any], tool: str = spec.name) -> types.CallToolResult:
            return await sagas.call(ctx, tool, arguments)

        tools.append(_tool(spec.name, spec.description or spec.name, schema_of(spec), run))
    tools += [_function_tool(executor, function) for function in functions]
    empty = {"type": "object", "properties": {}}
    for kind, text in (
        ("commit", "End the saga (_meta saga_id, else this session's) SUCCESS: its steps stay done."),
        ("rollback", "Undo every step of the saga (_meta saga_id, else this session's), in reverse order."),
    ):

        async def end(ctx: Context, arguments: dict[str, Any], kind: str = kind) -> types.CallToolResult:
            return await sagas.end(ctx, kind)

        tools.append(_tool(f"saga_{kind}", text, empty, end))
    return MCPServer(name, tools=tools, lifespan=sagas.lifespan, log_level="WARNING")


def _step_of(ctx: Context) -> str | None:
    """Return the step id of a call made with an idempotency key (a retry is the same step), else None."""
    key = (ctx.request_context.meta or {}).get("idempotency_key")
    if isinstance(key, str) and key:
        return f"mcp-{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:24]}"
    return None


def _text_of(answer: types.CallToolResult) -> str:
    return "\n".join(block.text for block in answer.content if isinstance(block, types.TextContent))


def _own_saga_id(ctx: Context) -> str:
    """Return a call's own saga id, from its idempotency key if given."""
    key = (ctx.request_context.meta or {}).get("idempotency_key")
    if isinstance(key, str) and key:
        return f"mcp-call-{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:32]}"
    return f"mcp-call-{uuid.uuid4().hex}"
