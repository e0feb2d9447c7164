"""The Invoker: calls a tool's `execute` or `compensate` with its StepContext injected, under the executor's call
limiter, within the tool's timeout, and in a worker thread for a sync method.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio

from saga_runtime._exceptions import SecretKeyError
from saga_runtime._records import SecretKeyring, StepRow, own_copy, reveal
from saga_runtime._tools import Resources, StepContext, ToolSpec

__all__ = ["AttemptTimeout", "Invoker"]


class Invoker:
    """Invoke tool methods for one saga (see the module docstring)."""

    __slots__ = ("_call_limiter", "_charge", "_keyring", "_resources", "_thread_limiter", "direct_ok")

    def __init__(
        self,
        thread_limiter: anyio.CapacityLimiter,
        call_limiter: anyio.CapacityLimiter | None,
        charge: Callable[[float, int], None],
        keyring: SecretKeyring | None = None,
        resources: Resources | None = None,
    ) -> None:
        self._thread_limiter = thread_limiter
        self._call_limiter = call_limiter
        self._charge = charge
        self._keyring = keyring  # opens the secrets of `ctx.args`
        self._resources = resources  # what the lifespan yielded: `ctx.state`
        # No layer of the invoker's is needed (see `direct`) for an async method taking no context, without timeout.
        self.direct_ok = call_limiter is None

    def direct(self, is_async: bool, ctx_params: tuple[str, ...], spec: ToolSpec) -> bool:
        """Tell whether a tool method can be awaited as it is: what `invoke` would do, without its layers."""
        return is_async and not ctx_params and spec.timeout is None and self._call_limiter is None

    def context(self, row: StepRow, attempt: int, phase: Any) -> StepContext:
        """Return the StepContext handed to a tool method of `row` (its `args` with secrets in clear)."""
        args = own_copy(row.args)
        if self._keyring is not None:
            with contextlib.suppress(SecretKeyError):  # a key no longer held: the tool sees the envelope
                args = reveal(args, self._keyring)
        return StepContext(
            saga_id=row.saga_id,
            step_id=row.step_id,
            tool_name=row.tool_name,
            args=args,
            attempt=attempt,
            idempotency_key=row.idempotency_key,
            phase=phase,
            _charge=self._charge,
            state=self._resources.state if self._resources is not None else {},
        )

    async def execute(self, spec: ToolSpec, row: StepRow, kwargs: dict[str, Any]) -> Any:
        """Run one attempt of `spec.execute(**kwargs)` for `row` (its attempt number is `row.attempts`)."""
        params = spec.execute_ctx_params
        ctx = self.context(row, row.attempts, "execute") if params else None
        return await self.invoke(spec, spec.execute, spec.execute_is_async, (), kwargs, params, ctx)

    async def compensate(self, spec: ToolSpec, row: StepRow, attempt: int, value: Any) -> None:
        """Run one attempt of `spec.compensate(value)` for `row`."""
        compensate = spec.compensate
        assert compensate is not None
        params = spec.compensate_ctx_params
        ctx = self.context(row, attempt, "compensate") if params else None
        await self.invoke(spec, compensate, spec.compensate_is_async, (value,), {}, params, ctx)

    async def reconcile(self, spec: ToolSpec, row: StepRow, attempt: int) -> Any:
        """Run one attempt of `spec.reconcile(**arguments)` for `row`, its arguments validated as execute's are."""
        reconcile = spec.reconcile
        assert reconcile is not None
        args = own_copy(row.args)
        if self._keyring is not None:
            args = reveal(args, self._keyring)
        kwargs = spec.validate_args(args)
        params = spec.reconcile_ctx_params
        ctx = self.context(row, attempt, "reconcile") if params else None
        return await self.invoke(spec, reconcile, spec.reconcile_is_async, (), kwargs, params, ctx)

    async def invoke(
        self,
        spec: ToolSpec,
        fn: Callable[..., Any],
        is_async: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        ctx_params: tuple[str, ...],
        ctx: StepContext | None,
    ) -> Any:
        """Call `fn` as the tool's method: context injected, limited, timed, in a thread if sync."""
        if ctx_params:
            kwargs = {**kwargs, **dict.fromkeys(ctx_params, ctx)}
        limiter = self._call_limiter
        if limiter is not None:
            async with limiter:
                return await self._timed(spec, fn, is_async, args, kwargs)
        return await self._timed(spec, fn, is_async, args, kwargs)

    async def _timed(
        self,
        spec: ToolSpec,
        fn: Callable[..., Any],
        is_async: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if spec.timeout is None:
            return await self._call(fn, is_async, args, kwargs)
        with anyio.move_on_after(spec.timeout):
            return await self._call(fn, is_async, args, kwargs)
        raise AttemptTimeout(f"{spec.name} did not finish within its timeout of {spec.timeout:g}s")

    async def _call(self, fn: Callable[..., Any], is_async: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if is_async:
            return await fn(*args, **kwargs)
        # A sync tool runs in a worker thread; on cancellation or timeout the thread is abandoned, not stopped.
        value = await anyio.to_thread.run_sync(
            partial(fn, *args, **kwargs), abandon_on_cancel=True, limiter=self._thread_limiter
        )
        if inspect.isawaitable(value):  # a sync wrapper around a coroutine function
            return await value
        return value


class AttemptTimeout(TimeoutError):
    """Internal: an attempt ran past the tool's timeout (a TimeoutError, so retry policies see one)."""

    def __str__(self) -> str:
        return self.args[0] if self.args else ""


# Recorded and logged under the documented name: users match on TimeoutError, not on an internal class.
AttemptTimeout.__name__ = AttemptTimeout.__qualname__ = "TimeoutError"
