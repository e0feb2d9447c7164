"""PostgresStore: sagas in PostgreSQL, shared by any number of executors, on an asyncpg connection pool.

URL: `postgresql://user:password@host:port/database` (`postgres://` too); other query parameters (`sslmode`, ...)
go to asyncpg. Options, as keywords of `open_store` or URL query parameters, keywords winning:

- `min_size` (default 1) and `max_size` (default 10): the pool's connections. Each concurrent store call holds one
  connection for one transaction; size `max_size` to the concurrency of the executors of this process.
- `connect_timeout`: seconds to wait for a connection (default 10).
- `command_timeout`: seconds a statement may run before it is cancelled (default: no limit).
- `retry_for`: seconds an operation that lost its connection (`StoreConnectionError`: the server restarted, the
  backend was terminated) is retried for, with exponential backoff, on a fresh connection (default 30; 0 turns
  retries off). A broken connection is closed, never handed out again; each retry is logged at WARNING on the
  `saga_runtime` logger. Opening the store is not retried: a server that cannot be reached fails `open_store`.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
import asyncpg

from saga_runtime._exceptions import StoreBusyError, StoreConnectionError, StoreError
from saga_runtime._storage._errors import CONNECT_ADVICE, ErrorMap, convert, mapping_errors
from saga_runtime._storage._open import redact_url
from saga_runtime._storage._sqlstore import (
    DEFAULT_RETRY_FOR,
    SQLStore,
    Transaction,
    pool_sizes,
    retry_for_option,
    url_option,
)

__all__ = ["ERROR_MAP", "PostgresStore", "map_exceptions"]

_exc = asyncpg.exceptions

# Most specific first is not needed: each error is looked up along its own MRO.
ERROR_MAP: ErrorMap = {
    _exc.InvalidCatalogNameError: (StoreConnectionError, "create the database first (createdb NAME)"),
    _exc.InvalidAuthorizationSpecificationError: (StoreConnectionError, "check the user name and password"),
    _exc.TooManyConnectionsError: (StoreConnectionError, "lower max_size, or raise the server's max_connections"),
    _exc.PostgresConnectionError: (StoreConnectionError, CONNECT_ADVICE),
    _exc.CannotConnectNowError: (StoreConnectionError, "the server is starting or stopping; retry shortly"),
    _exc.AdminShutdownError: (StoreConnectionError, "the server is shutting down; retry when it is back"),
    _exc.CrashShutdownError: (StoreConnectionError, "the server crashed; retry when it is back"),
    _exc.TransactionRollbackError: (StoreBusyError, ""),
    _exc.LockNotAvailableError: (StoreBusyError, ""),
    _exc.QueryCanceledError: (StoreError, "a statement ran past its timeout; raise command_timeout"),
    _exc.IntegrityConstraintViolationError: (StoreError, "a row broke a constraint of the saga tables"),
    _exc.DataError: (StoreError, "PostgreSQL refused a value (a NUL character in text or JSON, say)"),
    _exc.InsufficientPrivilegeError: (StoreError, "grant the user rights on the database's saga tables"),
    _exc.PostgresError: (StoreError, ""),
    _exc.ConnectionDoesNotExistError: (StoreConnectionError, CONNECT_ADVICE),
    _exc.InterfaceError: (StoreError, ""),
    _exc.InternalClientError: (StoreError, "this is a bug in asyncpg or saga_runtime; please report it"),
    socket.gaierror: (StoreConnectionError, "is the host name right?"),
    OSError: (StoreConnectionError, CONNECT_ADVICE),
    TimeoutError: (StoreConnectionError, "the server did not answer in time; is it up and reachable?"),
}
_CATCH: tuple[type[BaseException], ...] = (
    _exc.PostgresError,
    _exc.InterfaceError,
    _exc.InternalClientError,
    OSError,
    TimeoutError,
)
_SCHEMA_LOCK = 0x5A6A_0001  # pg_advisory_xact_lock key: one process migrates the schema at a time
_CLEANUP_SECONDS = 5.0


@contextmanager
def map_exceptions(url: str, *, connecting: bool = False) -> Iterator[None]:
    """Convert asyncpg (and socket) errors raised inside the block into StoreError subclasses."""
    with mapping_errors(_CATCH, ERROR_MAP, url, connecting=connecting):
        yield


async def _keep_session(conn: Any) -> None:
    """Return a connection to the pool as it is.

    asyncpg still rolls back any open transaction; the store changes no session state (its advisory lock is a
    transaction's), so the default reset query (RESET ALL, UNLISTEN, ...) would be one wasted round trip per call.
    """


def _rowcount(status: str) -> int:
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


class _PostgresTransaction:
    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return _rowcount(await self._conn.execute(sql, *params))

    async def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        # asyncpg pipelines the batch: one round trip for every row.
        await self._conn.executemany(sql, params)

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Sequence[Any]]:
        return [tuple(record) for record in await self._conn.fetch(sql, *params)]


class PostgresStore(SQLStore):
    """Keep sagas in a PostgreSQL database, through a pool of asyncpg connections."""

    dialect = "postgresql"
    atomic_batches = True

    def __init__(self, url: str, pool: Any, *, retry_for: float = DEFAULT_RETRY_FOR) -> None:
        super().__init__(url, retry_for=retry_for)
        self._pool = pool

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        min_size: int | None = None,
        max_size: int | None = None,
        connect_timeout: float | None = None,
        command_timeout: float | None = None,
        retry_for: float | None = None,
    ) -> PostgresStore:
        """Connect a pool to the PostgreSQL database at `url` and bring its schema up to date."""
        redacted = redact_url(url)
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        low, high = pool_sizes(min_size, max_size, query)
        timeout = float(url_option(connect_timeout, query, "connect_timeout", 10.0))
        if command_timeout is None and "command_timeout" in query:
            command_timeout = float(query.pop("command_timeout"))
        retry = retry_for_option(retry_for, query)
        dsn = parts._replace(scheme="postgresql", query=urlencode(query)).geturl()
        with map_exceptions(redacted, connecting=True):
            pool = await asyncpg.create_pool(
                dsn,
                min_size=low,
                max_size=high,
                timeout=timeout,
                command_timeout=command_timeout,
                reset=_keep_session,
            )
        store = cls(url, pool, retry_for=retry)
        try:
            await store._migrate()
        except BaseException:
            with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
                await store.close()
            raise
        return store

    @asynccontextmanager
    async def _transaction(self, *, begin: bool) -> AsyncIterator[Transaction]:
        with map_exceptions(self._url):
            # The pool releases a connection shielded and rolls back whatever a cancelled caller left open.
            async with self._pool.acquire() as conn:
                try:
                    if not begin:
                        # Autocommit: each statement is atomic on its own, in one round trip.
                        yield _PostgresTransaction(conn)
                        return
                    async with conn.transaction():
                        yield _PostgresTransaction(conn)
                except _CATCH as exc:
                    raise self._lost(conn, exc) from exc

    def _lost(self, conn: Any, exc: BaseException) -> StoreError:
        """Return the StoreError of a driver error; if the connection is lost, close it so the pool never reuses it.

        A connection closed under the error is lost whatever the error says ("connection is closed", say).
        """
        error = convert(exc, ERROR_MAP, self._url)
        try:
            closed = conn.is_closed()
        except _exc.InterfaceError:  # the pool detached it from its connection, which closed
            closed = True
        if closed and not isinstance(error, StoreConnectionError):
            error = convert(exc, ERROR_MAP, self._url, kind=StoreConnectionError)
        if isinstance(error, StoreConnectionError) and not closed:
            # The pool drops a closed connection on release and opens a new one on the next acquire.
            conn.terminate()
        return error

    def _schema_transaction(self) -> AbstractAsyncContextManager[Transaction]:
        return self._locked_transaction()

    @asynccontextmanager
    async def _locked_transaction(self) -> AsyncIterator[Transaction]:
        # PostgreSQL's DDL is transactional: a migration is all or nothing, under an advisory lock.
        async with self._transaction(begin=True) as tx:
            await tx.fetch(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})")
            yield tx

    async def _close_connections(self) -> None:
        with anyio.move_on_after(_CLEANUP_SECONDS, shield=True) as scope, map_exceptions(self._url):
            await self._pool.close()
        if scope.cancelled_caught:
            self._pool.terminate()
