"""SagaHandle: a submitted saga's id, status, and result."""

from __future__ import annotations

import math

import anyio

from saga_runtime._exceptions import SagaNotFoundError
from saga_runtime._records import SagaResult, SagaStatus
from saga_runtime._storage import SagaStore, sagas

__all__ = ["SagaHandle"]

# Poll soon, then further apart.
_FIRST_POLL = 0.01
_MAX_POLL = 0.25


class SagaHandle:
    """A saga in the store, by id: `await handle.status()`, `await handle.result(timeout=...)`."""

    __slots__ = ("_store", "saga_id")

    def __init__(self, store: SagaStore, saga_id: str) -> None:
        self._store = store
        self.saga_id = saga_id

    def __repr__(self) -> str:
        return f"SagaHandle({self.saga_id!r})"

    async def status(self) -> SagaStatus:
        """Return the saga's status; raise `SagaNotFoundError` (a `KeyError`) if not stored."""
        return (await self._result()).status

    async def _result(self) -> SagaResult:
        result = await sagas.get_saga(self._store, self.saga_id)
        if result is None:
            raise SagaNotFoundError(f"no saga {self.saga_id!r} in {self._store.url}", saga_id=self.saga_id)
        return result

    async def result(self, timeout: float | None = None) -> SagaResult:  # noqa: ASYNC109 (the API's name)
        """Return the saga's result once terminal; raise `TimeoutError` after `timeout` seconds."""
        if timeout is not None and (isinstance(timeout, bool) or not timeout >= 0 or math.isnan(timeout)):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        pause = _FIRST_POLL
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while True:
                result = await self._result()
                if result.status.is_terminal:
                    return result
                await anyio.sleep(pause)
                pause = min(pause * 2, _MAX_POLL)
        raise TimeoutError(f"saga {self.saga_id!r} did not end within {timeout}s")
