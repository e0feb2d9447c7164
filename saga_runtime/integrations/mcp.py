"""MCP: an MCP server's tools run as saga steps, and an executor served over MCP.

```python
async with Client(tickets_server) as client:             # or a connected ClientSession
    await register_mcp_tools(
        registry, client, compensations={"book": ("cancel", lambda result, args: {"id": result["id"]})}
    )
    async with executor.saga(saga_id="trip-7") as saga:
        ticket = await saga.call("book", seat="12A")    # checked against book's inputSchema, then called
```

Arguments are checked against `inputSchema` before anything is recorded; `isError` (a tool error) fails the
attempt; a lost connection or a server error mid-call (a JSON-RPC error other than a refusal) leaves the outcome
unknown. `saga_mcp_server(executor)` serves tools, each call a saga step.
Extra: `saga-runtime[mcp]`.
"""

from __future__ import annotations

import inspect
import keyword
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

import pydantic

from saga_runtime import OutcomeUnknownError, RetryPolicy, SagaError, StepContext, ToolRegistry
from saga_runtime.integrations._common import missing_extra

try:
    import jsonschema
    import mcp_types as types
    from jsonschema.exceptions import best_match
    from mcp import Client, ClientSession
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise missing_extra("mcp", "mcp") from exc

from saga_runtime.integrations._mcp_server import saga_mcp_server

__all__ = ["MCPToolError", "register_mcp_tools", "saga_mcp_server"]

logger = logging.getLogger("saga_runtime")

# (result, arguments) -> the undoing tool's arguments, or None.
ArgsBuilder = Callable[[Any, dict[str, Any]], Mapping[str, Any] | None]

_NAME_RULE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# What a property's `$ref`s resolve against.
_DOCUMENT_KEYS = ("$schema", "$id", "$defs", "definitions")
# The server refused the request itself: nothing ran. Any other error code (the connection lost, the server
# failing while it handled the call: INTERNAL_ERROR, its own -32000..-32099) leaves the outcome unknown.
_REFUSED_CODES = frozenset({types.PARSE_ERROR, types.INVALID_REQUEST, types.METHOD_NOT_FOUND, types.INVALID_PARAMS})


class MCPToolError(SagaError):
    """An MCP tool answered with `isError`: the attempt failed."""

    def __init__(self, message: str, *, tool_name: str) -> None:
        self.tool_name = tool_name
        super().__init__(message)


async def register_mcp_tools(
    registry: ToolRegistry,
    session: ClientSession | Client,
    *,
    names: Iterable[str] | None = None,
    compensations: Mapping[str, tuple[str, ArgsBuilder]] | None = None,
    prefix: str = "",
    retry: RetryPolicy | None = None,
    timeout: float | None = None,  # noqa: ASYNC109  (per attempt, as registry.tool(timeout=))
) -> list[str]:
    """Register the tools `session` lists (or `names`) as `prefix + name`; return those names.

    `compensations`: tool -> (undoing tool, `(result, args)` -> its arguments or None; result None if
    unknown). Tools neither compensated nor `readOnlyHint` are irreversible; a malformed `inputSchema` is
    skipped with a warning. `retry`, `timeout`: for every tool.
    """
    listed = {tool.name: tool for tool in await _list_tools(session)}
    wanted = list(listed) if names is None else list(names)
    undoers = dict(compensations or {})
    problems = [f"{name!r} is not a tool of this MCP server" for name in wanted if name not in listed]
    problems += [
        f"the compensation of {name!r} names {undo!r}, which is not a tool of this MCP server"
        for name, (undo, _) in undoers.items()
        if undo not in listed
    ]
    if problems:
        raise ValueError(f"{'; '.join(problems)} (it lists: {', '.join(sorted(listed)) or 'none'})")
    registered = []
    for name in wanted:
        tool = listed[name]
        full = prefix + name
        if not _NAME_RULE.match(full):
            logger.warning("MCP tool %r skipped: %r is not a valid saga tool name", name, full)
            continue
        try:
            checker = _Checker(tool.input_schema)
        except ValueError as exc:
            logger.warning("MCP tool %r skipped: its inputSchema is malformed: %s", name, exc)
            continue
        undo = undoers.get(name)
        read_only = tool.annotations is not None and bool(tool.annotations.read_only_hint)
        instance = _tool_instance(session, tool, checker, undo)
        registry.register(
            instance, name=full, retry=retry, timeout=timeout, irreversible=undo is None and not read_only
        )
        registered.append(full)
    return registered


async def _list_tools(session: ClientSession | Client) -> list[types.Tool]:
    """Return every tool the server lists, page by page."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        if isinstance(session, Client):
            page = await session.list_tools(cursor=cursor)
        else:
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


class _Checker:
    """A tool's inputSchema, checked whole or one property at a time."""

    def __init__(self, schema: Any) -> None:
        if not isinstance(schema, Mapping):
            raise ValueError(f"expected a JSON object, got {type(schema).__name__}")
        schema = dict(schema)
        kind = jsonschema.validators.validator_for(schema)
        try:
            kind.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ValueError(exc.message) from None
        if schema.get("type", "object") != "object":
            raise ValueError(f"a tool's arguments are an object, but its type is {schema.get('type')!r}")
        properties = schema.get("properties") or {}
        self.schema = schema
        self.properties: dict[str, Any] = dict(properties)
        self.required = frozenset(schema.get("required") or ())
        self.closed = schema.get("additionalProperties", True) is False
        self._whole = kind(schema)
        document = {key: schema[key] for key in _DOCUMENT_KEYS if key in schema}
        self._each = kind({**document, "type": "object", "properties": self.properties})

    def problem(self, args: Mapping[str, Any]) -> str | None:
        """Return why `args` do not fit the whole schema, or None."""
        error = best_match(self._whole.iter_errors(dict(args)))
        return None if error is None else _describe(error)

    def check(self, name: str) -> Callable[[Any], Any]:
        """Return a pydantic after-validator of one property's value."""

        def check(value: Any) -> Any:
            error = best_match(self._each.iter_errors({name: value}))
            if error is not None:
                raise ValueError(error.message)
            return value

        return check


def _describe(error: Any) -> str:
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}" if where else str(error.message)


def _parameters(checker: _Checker, ctx_name: str) -> list[inspect.Parameter]:
    """Return execute's keyword parameters, one per nameable property, then **extra if needed."""
    params = [inspect.Parameter(ctx_name, inspect.Parameter.KEYWORD_ONLY, annotation=StepContext)]
    unnamed = False
    for name, sub in checker.properties.items():
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_") or name == ctx_name:
            unnamed = True  # checked by the whole schema
            continue
        annotation = Annotated[
            Any,
            pydantic.AfterValidator(checker.check(name)),
            pydantic.WithJsonSchema(sub if isinstance(sub, dict) else {}),
        ]
        default = inspect.Parameter.empty if name in checker.required else None
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    if unnamed or not checker.closed:
        params.append(inspect.Parameter("extra", inspect.Parameter.VAR_KEYWORD, annotation=Any))
    return params


def _tool_instance(
    session: ClientSession | Client, tool: types.Tool, checker: _Checker, undo: tuple[str, ArgsBuilder] | None
) -> Any:
    """Return a saga tool calling `tool` on `session`."""
    ctx_name = next(name for name in ("ctx", "step_ctx", "saga_step_ctx") if name not in checker.properties)

    async def execute(**kwargs: Any) -> Any:
        ctx: StepContext = kwargs[ctx_name]
        args = dict(ctx.args)  # as given, no defaults filled in
        problem = checker.problem(args)
        if problem is not None:
            raise ValueError(f"arguments refused by the inputSchema of {tool.name}: {problem}")
        return await _call(session, tool.name, args, ctx.idempotency_key)

    parameters = _parameters(checker, ctx_name)
    execute.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    execute.__annotations__ = {param.name: param.annotation for param in parameters}
    namespace: dict[str, Any] = {"__doc__": tool.description or tool.title or tool.name}
    instance = type(f"MCP_{tool.name}", (), namespace)()
    instance.execute = execute
    if undo is not None:
        undo_name, build = undo

        async def compensate(result: Any, ctx: StepContext) -> None:
            args = build(result, dict(ctx.args))
            if args is not None:
                await _call(session, undo_name, dict(args), f"{ctx.idempotency_key}/undo")

        instance.compensate = compensate
    return instance


async def _call(session: ClientSession | Client, name: str, args: dict[str, Any], key: str) -> Any:
    """Call an MCP tool; return its structured content, else its text."""
    try:
        meta = types.RequestParamsMeta(idempotency_key=key)  # type: ignore[typeddict-unknown-key]
        result = await session.call_tool(name, args, meta=meta)
    except MCPError as exc:
        if exc.code not in _REFUSED_CODES:
            raise OutcomeUnknownError(
                f"MCP tool {name}: the call was lost or the server failed mid-call (error {exc.code}: {exc.message})"
            ) from exc
        raise  # refused by the server: nothing ran
    except Exception as exc:
        raise OutcomeUnknownError(f"MCP tool {name}: the call was cut off ({type(exc).__name__}: {exc})") from exc
    if result.is_error:
        raise MCPToolError(f"MCP tool {name} failed: {_text(result) or 'no message'}", tool_name=name)
    if result.structured_content is not None:
        return result.structured_content
    text = _text(result)
    if text is not None:
        return text
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]


def _text(result: types.CallToolResult) -> str | None:
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    return "\n".join(texts) if texts else None
