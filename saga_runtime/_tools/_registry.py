"""ToolRegistry: the named tools a plan may call."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

from saga_runtime._exceptions import UnknownToolError
from saga_runtime._tools._functions import SagaFunction, build_function
from saga_runtime._tools._lifespan import LifespanFunction, check_lifespan
from saga_runtime._tools._retry import RetryPolicy
from saga_runtime._tools._schemas import anthropic_tool, openai_tools
from saga_runtime._tools._spec import RetryScope, ToolSpec, build_spec

__all__ = ["BUILTIN_TOOLS", "CHILD_NOT_UNDONE", "CHILD_TOOL", "ToolRegistry", "builtin_tool_message"]

#: The tool a child saga's step calls (saga_runtime._children).
CHILD_TOOL = "saga.child"

#: The error a child saga's step fails with when the child ended with effects standing (COMPENSATION_FAILED or
#: PARKED): the parent's compensation still undoes that step (saga_runtime._children).
CHILD_NOT_UNDONE = "ChildNotUndoneError"

#: Tools every registry has without registering them, by a name no registered tool can take (it holds a '.'):
#: "saga.child", the step a child saga runs as (saga_runtime._children). Found by `get`/`find` (the engine runs and
#: undoes the steps recorded with it), never listed or exported to a model; a plan step, `saga.call` or an MCP server
#: naming it is refused (`builtin_tool_message`): only `saga.child()` records such a step.
BUILTIN_TOOLS: dict[str, ToolSpec] = {}

T = TypeVar("T", bound=type)
F = TypeVar("F", bound=Callable[..., Any])


class ToolRegistry:
    """Hold the tools sagas may call, by name.

    Register a class with `@registry.tool` (bare or with options), or an instance needing constructor
    arguments with `registry.register(instance)`.
    """

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self._functions: dict[str, SagaFunction] = {}  # saga functions (`@registry.saga`), by name
        self._lock = threading.Lock()
        # Recent plans by content, kept by the planning layer.
        self._built_plans: dict[Any, Any] = {}
        self.lifespan_function: LifespanFunction | None = None

    def lifespan(self, function: F, /) -> F:
        """Register the async generator setting up what tools need, yielded as `ctx.state`.

        Each process running the tools enters it before its first call and leaves it when its executor
        closes. One per registry.
        """
        checked = check_lifespan(function)
        if self.lifespan_function is not None:
            raise ValueError(f"this registry has a lifespan already ({self.lifespan_function.__qualname__})")
        self.lifespan_function = checked
        return function

    @overload
    def tool(self, cls: T, /) -> T: ...

    @overload
    def tool(
        self,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        retry_scope: RetryScope = "saga",
        timeout: float | None = None,
        compensation_retry: RetryPolicy | None = None,
        irreversible: bool = False,
        approval: bool = False,
        approval_timeout: float | None = None,
        version: str = "1",
        compatible: tuple[str, ...] = (),
    ) -> Callable[[T], T]: ...

    def tool(
        self,
        cls: Any = None,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        retry_scope: RetryScope = "saga",
        timeout: float | None = None,
        compensation_retry: RetryPolicy | None = None,
        irreversible: bool = False,
        approval: bool = False,
        approval_timeout: float | None = None,
        version: str = "1",
        compatible: tuple[str, ...] = (),
    ) -> Any:
        """Register a tool class (instantiated once, without arguments); usable bare or with options."""

        def decorate(tool_cls: Any) -> Any:
            if not isinstance(tool_cls, type):
                raise TypeError(f"@registry.tool decorates a class with execute(), got {tool_cls!r}")
            if not callable(getattr(tool_cls, "execute", None)):
                raise TypeError(f"{tool_cls.__name__} cannot be a tool: it has no execute() method")
            try:
                instance = tool_cls()
            except TypeError as exc:
                raise TypeError(
                    f"{tool_cls.__name__}() cannot be created without arguments ({exc}); create it yourself and "
                    f"register the instance: registry.register({tool_cls.__name__}(...))"
                ) from exc
            self.register(
                instance,
                name=name,
                retry=retry,
                retry_scope=retry_scope,
                timeout=timeout,
                compensation_retry=compensation_retry,
                irreversible=irreversible,
                approval=approval,
                approval_timeout=approval_timeout,
                version=version,
                compatible=compatible,
            )
            return tool_cls

        return decorate if cls is None else decorate(cls)

    def register(
        self,
        instance: Any,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        retry_scope: RetryScope = "saga",
        timeout: float | None = None,
        compensation_retry: RetryPolicy | None = None,
        irreversible: bool = False,
        approval: bool = False,
        approval_timeout: float | None = None,
        version: str = "1",
        compatible: tuple[str, ...] = (),
    ) -> ToolSpec:
        """Register a tool instance and return its spec; `name` defaults to its class name.

        `approval`: every call waits for `executor.approve` / `reject`; `approval_timeout` (seconds) until a
        request counts as rejected. `version` is recorded by every step; `compatible` lists older versions
        this code can resume (docs/how-to/upgrading-tools.md).
        """
        if isinstance(instance, type):
            raise TypeError(f"register() takes a tool instance; for the class {instance.__name__} use @registry.tool")
        spec = build_spec(
            instance,
            name=type(instance).__name__ if name is None else name,
            retry=retry,
            retry_scope=retry_scope,
            timeout=timeout,
            compensation_retry=compensation_retry,
            irreversible=irreversible,
            approval=approval,
            approval_timeout=approval_timeout,
            version=version,
            compatible=compatible,
        )
        with self._lock:
            if spec.name in self._tools:
                raise ValueError(f"a tool named {spec.name!r} is already registered; give one of them name=...")
            if spec.name in self._functions:
                raise ValueError(f"{spec.name!r} is the name of a saga function already; give the tool name=...")
            self._tools[spec.name] = spec
        return spec

    @overload
    def saga(self, fn: F, /) -> F: ...

    @overload
    def saga(
        self,
        fn: str | None = None,
        /,
        *,
        name: str | None = None,
        version: str = "1",
        compatible: tuple[str, ...] = (),
    ) -> Callable[[F], F]: ...

    def saga(self, fn: Any = None, /, *, name: str | None = None, version: str = "1", compatible: Any = ()) -> Any:
        """Register a saga function: an `async def` whose first parameter takes the `DynamicSaga`.

        Its other parameters are the saga's arguments, checked from their annotations as a tool's are. `name`
        defaults to the function's name; a name taken by a tool or a saga function raises `ValueError`.
        `version` is recorded with each saga of it; `compatible` lists older versions this code can resume.
        Usable bare (`@registry.saga`) or with options (`@registry.saga(version="2")`, `@registry.saga("name")`).
        """
        if isinstance(fn, str) or fn is None:
            given = name if fn is None else fn
            return lambda function: self._add_function(function, given, version, compatible)
        return self._add_function(fn, name, version, compatible)

    def _add_function(self, fn: Any, name: str | None, version: str, compatible: Any) -> Any:
        function = build_function(fn, name=name, version=version, compatible=compatible)
        with self._lock:
            if function.name in self._tools:
                raise ValueError(f"{function.name!r} is the name of a tool already; give the saga function name=...")
            if function.name in self._functions:
                raise ValueError(f"a saga function named {function.name!r} is already registered")
            self._functions[function.name] = function
        return fn

    def function(self, name_or_fn: Any) -> SagaFunction | None:
        """Return the saga function registered under a name, or as that very function; None if it is not one."""
        if isinstance(name_or_fn, str):
            return self._functions.get(name_or_fn)
        for function in self._functions.values():
            if function.fn is name_or_fn:
                return function
        return None

    def function_names(self) -> list[str]:
        """Return the registered saga function names, sorted."""
        return sorted(self._functions)

    def get(self, name: str) -> ToolSpec:
        """Return the spec of tool `name`; raise `UnknownToolError` listing the known ones."""
        try:
            return self._tools[name]
        except (KeyError, TypeError):
            if isinstance(name, str) and name in BUILTIN_TOOLS:
                return BUILTIN_TOOLS[name]
            raise UnknownToolError([unknown_tool_message(name, self.names())]) from None

    def find(self, name: str) -> ToolSpec | None:
        """Return the spec of tool `name`, or None."""
        return self._tools.get(name) or BUILTIN_TOOLS.get(name)

    def names(self) -> list[str]:
        """Return the registered tool names, sorted."""
        return sorted(self._tools)

    def to_openai_tools(self, strict: bool = False, *, api: str = "chat") -> list[dict[str, Any]]:
        """Return every tool as an OpenAI function tool, in strict-mode schemas if `strict`.

        `api`: "chat" (Chat Completions) or "responses". With `strict`, arguments strict mode cannot express
        (`Any`, free dicts, tuples) raise `ValueError` naming each.
        """
        return openai_tools(self, strict=strict, api=api)

    def to_anthropic_tools(self) -> list[dict[str, Any]]:
        """Return every tool as an Anthropic Messages API tool."""
        return [anthropic_tool(spec) for spec in self]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()!r})"


def builtin_tool_message(name: str) -> str:
    """Return why a built-in tool (`BUILTIN_TOOLS`) cannot be named as a tool: only its own front door runs it."""
    return (
        f"{name!r} is built in, the step a child saga runs as, not a tool to call: run a child saga with "
        "`await saga.child(fn_or_plan, args=...)` in a saga function or a dynamic saga"
    )


def unknown_tool_message(name: object, available: list[str]) -> str:
    """Return the message for an unregistered tool name."""
    known = ", ".join(available) if available else "none are registered"
    return f"unknown tool {name!r} (available: {known})"
