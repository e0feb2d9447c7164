"""The SQLite dialect: the embedded default, one file on one machine, on aiosqlite.

URLs: `sqlite:///relative/path.db` (relative to the working directory), `sqlite:////absolute/path.db`, and
`sqlite:///:memory:` (private to the store object). Options, as keywords of `open_store` or URL query parameters
(`sqlite:///sagas.db?synchronous=NORMAL`), keywords winning:

- `synchronous`: `"FULL"` (default) syncs the write-ahead log at every commit, so a committed step survives a power
  cut; `"NORMAL"` skips that sync and is several times faster on slow disks, at the price of losing the last
  commits (never the file's consistency) if the machine loses power. A process crash loses nothing with either.
- `busy_timeout`: seconds a write waits for another process's write lock before failing with `StoreBusyError`
  (default 5).
- `retry_for`: seconds an operation whose connection was lost (`StoreConnectionError`: the file could not be
  opened again, the connection was closed under the store) is retried for, with exponential backoff, reopening
  the file (default 30; 0 turns retries off). An outage is logged at WARNING on the `saga_runtime` logger once
  when it starts and once when it ends (each retry at DEBUG).

The store keeps to the file it opened: should the file at its path be deleted or replaced while the store is open,
whatever it wrote would be lost with the old file, so every call from then on raises `StoreFileError` (checked at
the end of each transaction: a write is reported done only once the file at the path holds it), and a lost
connection is never reopened on another file.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from datetime import datetime
from itertools import chain
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import aiosqlite
import anyio

from saga_runtime._exceptions import StoreBusyError, StoreConnectionError, StoreError, StoreFileError
from saga_runtime._records._times import iso_text_micro
from saga_runtime._storage._batch import Outcome, Write
from saga_runtime._storage._dialect import Dialect
from saga_runtime._storage._errors import ErrorMap, convert
from saga_runtime._storage._open import redact_url
from saga_runtime._storage._sql import (
    SAGA_COLUMNS,
    STEP_COLUMNS,
    Flavour,
    Queries,
    insert_ignore_on_conflict,
    json_text_already,
    unasked,
    upsert_on_conflict,
)
from saga_runtime._storage._sqlstore import DEFAULT_RETRY_FOR, SQLStore, Transaction, retry_for_option, url_option
from saga_runtime._storage._sqlwrite import KEPT_LEASE_COLUMNS, kept_lease

__all__ = ["ERROR_MAP", "SQLiteDialect", "map_exceptions", "open_sql"]

# Every sqlite3 error derives from sqlite3.Error; the subclasses below get their own advice.
ERROR_MAP: ErrorMap = {
    sqlite3.IntegrityError: (StoreError, "a row broke a constraint of the saga tables (a duplicate key?)"),
    sqlite3.OperationalError: (StoreError, "check the file, its directory, and free disk space"),
    sqlite3.DatabaseError: (StoreError, "is the file a saga_runtime SQLite database, and intact?"),
    sqlite3.ProgrammingError: (StoreError, "this is a bug in saga_runtime's SQLite store; please report it"),
    sqlite3.Error: (StoreError, ""),
    sqlite3.Warning: (StoreError, "this is a bug in saga_runtime's SQLite store; please report it"),
}


def _null_parameter() -> float | None:
    """Return what the hot writes bind for a NULL: a NaN float if this SQLite stores a bound NaN as NULL, else None.

    sqlite3 binds str, int, float and bytearray as they are and sends every other value through its adapters; None,
    which has none, costs a failed lookup of the protocol's and the value's own adaptation (about 3,000 instructions
    each, a dozen in a durable saga's every write) before it is bound as NULL. A NaN float is bound as it is, and
    SQLite stores a bound NaN as NULL (a NaN is no number), so the same NULL costs nothing more. Asked
    once of the library itself, not assumed; registering an adapter for None would change every sqlite3 user's
    process, so none is.
    """
    nan = float("nan")
    with contextlib.closing(sqlite3.connect(":memory:")) as probe:
        stored = probe.execute("SELECT ? IS NULL", (nan,)).fetchone()
    return nan if stored == (1,) else None


_NULL = _null_parameter()
# sqlite3's adapters, and the key of one for float: registered by any code of the process, it would take the NaN
# standing for a NULL too (sqlite3 then sends every float through it), so the writes bind None while one is.
_ADAPTERS = sqlite3.adapters
_FLOAT_ADAPTED = (float, sqlite3.PrepareProtocol)


def _null() -> float | None:
    """Return what a write binds for a NULL now: `_NULL`, or None while an adapter for float is registered."""
    return None if _FLOAT_ADAPTED in _ADAPTERS else _NULL


_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_T = TypeVar("_T")
_CLEANUP_SECONDS = 5.0


@contextmanager
def map_exceptions(url: str, *, connecting: bool = False) -> Iterator[None]:
    """Convert sqlite3 (and so aiosqlite) errors raised inside the block into StoreError subclasses."""
    try:
        yield
    except (sqlite3.Error, sqlite3.Warning) as exc:
        name = getattr(exc, "sqlite_errorname", "") or ""
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            raise convert(
                exc,
                ERROR_MAP,
                url,
                kind=StoreBusyError,
                advice="another process held the write lock longer than busy_timeout; nothing was written, "
                "retry, or open the store with a larger busy_timeout",
            ) from exc
        if name.startswith("SQLITE_CANTOPEN"):
            raise convert(
                exc,
                ERROR_MAP,
                url,
                kind=StoreConnectionError,
                connecting=True,
                advice="does the file's directory exist, and may this process write there?",
            ) from exc
        raise convert(exc, ERROR_MAP, url, connecting=connecting) from exc


def _identity(path: str) -> tuple[int, int] | None:
    """Return the (device, inode) of the file at `path`, or None if there is none."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def _file_of(path: str) -> str:
    """Return a database path made absolute (a chdir of the process later must not point it at another file)."""
    return path if path == ":memory:" else os.path.abspath(path)  # getcwd: no disk access


def sqlite_path(url: str) -> str:
    """Return the file path of a `sqlite:///` URL: three slashes for a relative path, four for an absolute one."""
    parts = urlsplit(url)
    if parts.netloc or not parts.path.startswith("/") or parts.path == "/":
        raise StoreError(
            f"malformed SQLite URL {redact_url(url)!r}: use sqlite:///relative.db or sqlite:////absolute/path.db",
            url=redact_url(url),
        )
    return parts.path[1:]


# The aiosqlite versions whose thread answers each call it runs with `future.get_loop().call_soon_threadsafe(callback,
# future, value)`, `callback` its own function setting the value (or the error) on the future if it is not done yet
# (read in the source of 0.20 to 0.22; 0.22 skips the answer of a call queued without a future). `_Hops` hands them
# an `_Answer` of its own for the future; any other version is sent its calls through its own `_execute`.
_ANSWERED_THROUGH_LOOP = ((0, 20), (0, 22))


def _aiosqlite_answers_through_loop(version: str) -> bool:
    """Tell whether the aiosqlite of `version` answers a call as `_ANSWERED_THROUGH_LOOP` says."""
    try:
        major_minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return False
    return _ANSWERED_THROUGH_LOOP[0] <= major_minor <= _ANSWERED_THROUGH_LOOP[1]


_HOPS_ANSWERED = hasattr(os, "eventfd") and _aiosqlite_answers_through_loop(aiosqlite.__version__)


class _Hops:
    """Trips to aiosqlite's thread, answered through an eventfd of the store's own instead of the event loop's.

    aiosqlite answers each call with `call_soon_threadsafe`: a write to the loop's self-pipe, which the loop then
    reads twice (the second read failing, an OSError made and dropped) before it runs the answer; about a third of a
    trip's cost, and a store's write is one trip. Here the thread's answer goes on a queue of the store's own and wakes
    the loop through an eventfd the loop watches (one read, no error): the same answer, set on the same future by
    aiosqlite's own function, in the loop's thread. Where that is not to be had (no eventfd: not Linux; a loop that
    cannot watch a file, as Windows' proactor; a loop other than the first watching one still open; an aiosqlite
    not known to answer so), a trip is aiosqlite's own `_execute`.
    """

    __slots__ = ("__weakref__", "_answered", "_fd", "_loop")

    def __init__(self) -> None:
        # (aiosqlite's function setting an answer, the future, the value or error) of each answer back, in order.
        self._answered: deque[tuple[Callable[[asyncio.Future[Any], Any], None], asyncio.Future[Any], Any]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        if _HOPS_ANSWERED:
            self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            # Closed once nothing refers to the hops any longer: a call still running on a thread holds its answer,
            # and so the hops, so it never writes to a closed (or reused) descriptor.
            weakref.finalize(self, os.close, self._fd)

    def run(self, conn: aiosqlite.Connection, function: Callable[..., _T], *args: Any) -> Awaitable[_T]:
        """Run `function(*args)` on `conn`'s thread; return what to await for its value (or its error).

        Raises ValueError, as aiosqlite does, if the connection is closed: its thread would never run the call.
        """
        loop = asyncio.get_running_loop()
        if loop is not self._loop and not self._watch(loop):
            execute: Callable[..., Awaitable[_T]] = conn._execute
            return execute(function, *args)
        if not conn._running or conn._connection is None:  # aiosqlite's own check (Connection._execute)
            raise ValueError("Connection closed")
        future: asyncio.Future[_T] = loop.create_future()
        queue: Any = conn._tx
        queue.put_nowait((_Answer(self, future), functools.partial(function, *args)))
        return future

    def _watch(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Have `loop` watch the eventfd, unless it cannot or another open loop does; tell whether it does."""
        if self._fd < 0 or (self._loop is not None and not self._loop.is_closed()):
            return False
        try:
            loop.add_reader(self._fd, self._ready)
        except NotImplementedError:
            return False
        self._loop = loop
        return True

    def _ready(self) -> None:
        """Set the answers that came back on their futures (in the loop's thread, woken by the eventfd)."""
        try:  # noqa: SIM105 - a try costs nothing here, contextlib.suppress a context manager per wake-up
            os.eventfd_read(self._fd)
        except BlockingIOError:  # read already, by the call that took the answers this signal was for
            pass
        answered = self._answered
        while answered:
            callback, future, value = answered.popleft()
            try:
                callback(future, value)
            except Exception as exc:  # reported as the loop reports a failed callback
                # An answer that cannot be set (a future of a loop closed since) must not hold back those behind it.
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "an answer of SQLite's thread could not be set", "exception": exc, "future": future}
                )

    def close(self) -> None:
        """Stop watching the eventfd (the store closes: its connection answered every call it ran)."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._fd)
            self._ready()  # answers already back, and not yet set


class _Answer:
    """What aiosqlite's thread is given for a call's future (see `_Hops`): both the future and its loop to it."""

    __slots__ = ("_future", "_hops")

    def __init__(self, hops: _Hops, future: asyncio.Future[Any]) -> None:
        self._hops = hops
        self._future = future

    def get_loop(self) -> _Answer:
        return self

    def call_soon_threadsafe(self, callback: Callable[[asyncio.Future[Any], Any], None], _: Any, value: Any) -> None:
        """Keep the answer and wake the loop (in aiosqlite's thread; nothing here can fail)."""
        hops = self._hops
        hops._answered.append((callback, self._future, value))
        os.eventfd_write(hops._fd, 1)


class _SQLiteTransaction:
    """A transaction's statements, each one trip to aiosqlite's thread; BEGIN IMMEDIATE rides with the first."""

    __slots__ = ("_conn", "_hops", "begun", "cursor", "unbegun")

    def __init__(self, conn: aiosqlite.Connection, hops: _Hops) -> None:
        self._conn = conn
        self._hops = hops
        # The batch writes' one cursor, made on aiosqlite's thread by the first (`_write_on`): the connection's own
        # execute makes and drops a cursor per statement.
        self.cursor: sqlite3.Cursor | None = None
        # unbegun: the transaction is to begin with its first statement (SQLiteDialect.transaction); begun: it did.
        self.unbegun = False
        self.begun = False

    def _begins(self) -> int:
        """Tell what the next trip finds: `_ALONE` (no transaction: autocommit), `_BEGIN` (it opens the transaction,
        noted as begun) or `_INSIDE` (the transaction is open)."""
        if self.unbegun:
            self.unbegun = False
            self.begun = True
            return _BEGIN
        return _INSIDE if self.begun else _ALONE

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        # One trip: aiosqlite's own execute is one, and closing its cursor (`async with`) a second.
        return await self._hops.run(self._conn, _changes, self._conn, self._begins(), sql, params)

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Sequence[Any]]:
        return await self._hops.run(self._conn, _rows, self._conn, self._begins(), sql, params)

    async def call(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run `function` on the connection's own thread, given the sqlite3 connection: one hop for many statements."""
        conn = self._conn
        state = self._begins()
        # The sqlite3 connection is looked up on aiosqlite's thread, so a closed one fails as any call on it does.
        return await self._hops.run(conn, lambda: function(_opened(conn, state)))


# What a trip to aiosqlite's thread finds (`_SQLiteTransaction._begins`).
_ALONE, _BEGIN, _INSIDE = 0, 1, 2


def _opened(conn: aiosqlite.Connection, state: int) -> sqlite3.Connection:
    """Return the sqlite3 connection on aiosqlite's thread (a closed one fails), its transaction begun if `state` is
    `_BEGIN`.

    Inside a transaction that is no longer open (its BEGIN failed and the caller went on, or SQLite rolled it back
    whole: a full disk, an I/O error), a statement fails instead of committing on its own.
    """
    connection = conn._conn
    if state == _BEGIN:
        # IMMEDIATE: the write lock first, before the transaction's first statement (see SQLiteDialect.transaction).
        connection.execute("BEGIN IMMEDIATE")
    elif state == _INSIDE and not connection.in_transaction:
        raise sqlite3.OperationalError("the transaction is not open (its BEGIN failed, or SQLite rolled it back)")
    return connection


def _changes(conn: aiosqlite.Connection, state: int, sql: str, params: Sequence[Any]) -> int:
    """Run one statement on aiosqlite's thread; return the rows it changed."""
    # sqlite3 runs a statement that returns no rows to its end within execute(), and resets it there.
    return _opened(conn, state).execute(sql, params).rowcount


def _rows(conn: aiosqlite.Connection, state: int, sql: str, params: Sequence[Any]) -> list[Any]:
    """Run a query on aiosqlite's thread; return all its records."""
    return _opened(conn, state).execute(sql, params).fetchall()


# Errors of one write of a batch (a constraint, a value the driver refuses): the batch is written again write by
# write, so it fails alone. Others (I/O, a full disk, a lock) are the batch's.
_WRITE_ERRORS = (
    sqlite3.IntegrityError,
    sqlite3.InterfaceError,
    sqlite3.ProgrammingError,
    sqlite3.DataError,
    OverflowError,
)


def _write_all(cursor: sqlite3.Cursor, q: Queries, writes: Sequence[Write]) -> list[Outcome]:
    """Write a batch on aiosqlite's thread: one statement alone in autocommit, else one transaction.

    A write's own error (a duplicate idempotency key) rolls the batch back; the batcher then writes each alone.
    """
    if len(writes) == 1 and _statements(writes[0]) == 1:
        return [_write(cursor, q, writes[0])]  # one statement commits on its own, atomically
    # IMMEDIATE: take the write lock now (see SQLiteDialect.transaction).
    cursor.execute("BEGIN IMMEDIATE")
    try:
        outcomes = [_write(cursor, q, write) for write in writes]
        cursor.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            cursor.execute("ROLLBACK")
        raise
    return outcomes


def _write_on(tx: _SQLiteTransaction, q: Queries, writes: Sequence[Write]) -> list[Outcome]:
    """Write a batch on aiosqlite's thread, its sqlite3 connection looked up there (a closed one fails), through the
    connection's cursor for writes."""
    cursor = tx.cursor
    connection = tx._conn._conn
    if cursor is None or cursor.connection is not connection:
        cursor = tx.cursor = connection.cursor()
    if len(writes) == 1:
        write = writes[0]
        rows = write.steps
        if write.saga is None and 0 < len(rows) <= _CHUNK:
            # A durable saga's most frequent write (a step's result and the next step's intent): one statement,
            # alone in autocommit, straight (what _write_all and _write would do for it, without their checks).
            owner = write.owner
            gate = () if owner is None else (write.saga_id, owner, owner)
            return [Outcome.WRITTEN if _write_chunk(cursor, rows, gate) else Outcome.LOST]
    return _write_all(cursor, q, writes)


def _statements(write: Write) -> int:
    """Return how many statements `write` takes (one needs no transaction of its own)."""
    chunks = -(-len(write.steps) // _CHUNK)
    return chunks + (write.saga is not None)


def _write(cursor: sqlite3.Cursor, q: Queries, write: Write) -> Outcome:
    """Write one write's rows, its condition folded into its statements; return its outcome."""
    saga = write.saga
    if saga is not None:
        null = _null()  # (see _null_parameter)
        saga = tuple([null if value is None else value for value in saga])
    if write.create:
        assert saga is not None
        if cursor.execute(q.insert_saga, saga).rowcount != 1:
            return Outcome.TAKEN
    elif saga is not None and write.owner is not None:
        if write.keep_lease:
            values, created, update, same_created = kept_lease(saga), _KEPT_CREATED, _UPDATE_OWNED_KEPT, _KEPT_SAME
        else:
            values, created, update, same_created = saga, _CREATED, _UPDATE_OWNED, _OWNED_SAME
        # First the update leaving the stored creation time (and so its index entry) as it is; a saga whose
        # creation time changed (or that is not this owner's) is not updated by it: then the whole row.
        head, tail = values[1:created], (*values[created + 1 :], write.saga_id, write.owner, write.owner)
        if (
            cursor.execute(same_created, (*head, *tail, values[created])).rowcount != 1
            and cursor.execute(update, (*head, values[created], *tail)).rowcount != 1
        ):
            return Outcome.LOST
    elif saga is not None:
        cursor.execute(q.upsert_saga, saga)
    # Steps alone under an owner: each statement inserts only while the saga names that owner.
    gate = (write.saga_id, write.owner, write.owner) if saga is None and write.owner is not None else ()
    rows = write.steps
    for start in range(0, len(rows), _CHUNK):
        if not _write_chunk(cursor, rows[start : start + _CHUNK], gate):
            return Outcome.LOST  # the first chunk: nothing was written
    return Outcome.WRITTEN


def _write_chunk(cursor: sqlite3.Cursor, rows: Sequence[tuple[Any, ...]], gate: tuple[str, ...]) -> bool:
    """Upsert up to _CHUNK step rows; `gate` (saga id, owner, owner), if given: only while the saga names that
    owner. Return False if the gate let nothing through (the saga is not that owner's), else True."""
    gated = bool(gate)
    count = len(rows)
    # One row or two (a durable saga's writes: a step's result, the next step's intent) unpacked straight: a third
    # of the cost of chaining them. Each None bound as `_null()` says (the gate's values are never None).
    null = None if _FLOAT_ADAPTED in _ADAPTERS else _NULL  # (`_null()`, without its frame: a write each)
    if count == 2:
        params = [null if value is None else value for value in (*rows[0], *rows[1])]
    elif count == 1:
        params = [null if value is None else value for value in rows[0]]
    else:
        params = [null if value is None else value for value in chain.from_iterable(rows)]
    params += gate
    # First the upsert leaving a stored row's idempotency key (and so its index entry) as it is; a row whose key
    # changed is skipped by it, so fewer rows written means: write the chunk again, keys included.
    if cursor.execute(_upsert_steps(count, gated, True), params).rowcount == count:
        return True
    return cursor.execute(_upsert_steps(count, gated, False), params).rowcount != 0 or not gated


# Step rows per statement: 19 parameters each, well under SQLite's 32,766.
_CHUNK = 500
_UPDATE_OWNED = (
    f"UPDATE sagas SET {', '.join(f'{c} = ?' for c in SAGA_COLUMNS[1:])} WHERE saga_id = ? AND owner = ? "
    f"AND {unasked('?')}"
)
# The same, leaving the stored lease as it is (Write.keep_lease).
_UPDATE_OWNED_KEPT = (
    f"UPDATE sagas SET {', '.join(f'{c} = ?' for c in KEPT_LEASE_COLUMNS[1:])} WHERE saga_id = ? AND owner = ? "
    f"AND {unasked('?')}"
)
# The same two, leaving created_at as it is (SQLite rewrites the entry of every indexed column a SET assigns, equal
# or not: a page more in the log), only for a saga whose stored creation time is the one given (the last parameter).
_CREATED = SAGA_COLUMNS.index("created_at")
_KEPT_CREATED = KEPT_LEASE_COLUMNS.index("created_at")
_OWNED_SAME = (
    f"UPDATE sagas SET {', '.join(f'{c} = ?' for c in SAGA_COLUMNS[1:] if c != 'created_at')} WHERE saga_id = ? "
    f"AND owner = ? AND {unasked('?')} AND created_at = ?"
)
_KEPT_SAME = (
    f"UPDATE sagas SET {', '.join(f'{c} = ?' for c in KEPT_LEASE_COLUMNS[1:] if c != 'created_at')} "
    f"WHERE saga_id = ? AND owner = ? AND {unasked('?')} AND created_at = ?"
)
_STEP_ROW = "(" + ", ".join("?" * len(STEP_COLUMNS)) + ")"
_STEP_SET = ", ".join(f"{c} = excluded.{c}" for c in STEP_COLUMNS[3:])
# The same, for a row keeping its idempotency key: SQLite rewrites the entry of every indexed column a SET assigns,
# equal or not (a page more in the log per commit), so the key is left out and the update is only for rows whose
# stored key is the one given (the others are not written, and not counted in the statement's changes).
_STEP_SET_SAME_KEY = (
    ", ".join(f"{c} = excluded.{c}" for c in STEP_COLUMNS[3:] if c != "idempotency_key")
    + " WHERE steps.idempotency_key = excluded.idempotency_key"
)


@functools.lru_cache(maxsize=64)
def _upsert_steps(rows: int, gated: bool, same_key: bool) -> str:
    """Return the upsert of `rows` step rows; `gated`: only while the saga has the owner given after them.

    `same_key`: an update only of a stored row with the same idempotency key (see _STEP_SET_SAME_KEY).
    """
    values = ", ".join([_STEP_ROW] * rows)
    head = f"INSERT INTO steps ({', '.join(STEP_COLUMNS)}) "
    tail = f" ON CONFLICT (saga_id, step_id) DO UPDATE SET {_STEP_SET_SAME_KEY if same_key else _STEP_SET}"
    if not gated:
        return f"{head}VALUES {values}{tail}"
    # WHERE before ON CONFLICT: SQLite's documented way to keep an INSERT ... SELECT upsert unambiguous.
    owned = f"EXISTS (SELECT 1 FROM sagas WHERE saga_id = ? AND owner = ? AND {unasked('?')})"
    return f"{head}SELECT * FROM (VALUES {values}) WHERE {owned}{tail}"


def _usable(conn: aiosqlite.Connection) -> bool:
    """Tell whether an aiosqlite connection still runs (closed, every call on it raises ValueError)."""
    # aiosqlite 0.22 has no public "is it open"; these are the attributes its own _execute checks.
    return bool(getattr(conn, "_running", False)) and getattr(conn, "_connection", None) is not None


async def _worker_stopped(conn: aiosqlite.Connection) -> None:
    """Wait (bounded, shielded) for the thread of a connection that failed to open, or was closed, to end.

    aiosqlite stops that thread without waiting for it; if the event loop closed first, the thread would fail
    answering it ("Event loop is closed"), an unhandled exception in a thread.
    """
    thread = getattr(conn, "_thread", None)
    with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
        while thread is not None and thread.is_alive():  # noqa: ASYNC110 - a foreign thread sets no event
            await anyio.sleep(0.001)


async def _connect(path: str, synchronous: str, busy_timeout: float, url: str) -> aiosqlite.Connection:
    """Open the file at `path` with the store's pragmas; raise StoreConnectionError if it cannot be opened."""
    # isolation_level=None: the store issues BEGIN IMMEDIATE / COMMIT itself.
    pending = aiosqlite.connect(path, isolation_level=None)
    try:
        with map_exceptions(url, connecting=True):
            conn = await pending
    except BaseException:
        await _worker_stopped(pending)
        raise
    try:
        with map_exceptions(url, connecting=True):
            # Wait for another process's write lock instead of failing at once.
            await conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            # WAL: readers never block the writer, and a commit appends to the log instead of rewriting pages.
            await _switch_to_wal(conn, busy_timeout)
            # FULL by default: a commit is on disk when save() returns (see the module docstring).
            await conn.execute(f"PRAGMA synchronous = {synchronous}")
    except BaseException:
        with anyio.move_on_after(_CLEANUP_SECONDS, shield=True), contextlib.suppress(sqlite3.Error, ValueError):
            await conn.close()
        raise
    return conn


async def _switch_to_wal(conn: aiosqlite.Connection, busy_timeout: float) -> None:
    """Put the file in WAL mode, waiting up to `busy_timeout` for another process's write to end.

    SQLite answers a journal-mode switch that finds another connection writing with "database is locked" at once,
    without calling the busy handler: two processes opening a new file together would fail. The switch is tried
    again until the wait runs out, and then fails as a busy write does.
    """
    deadline = anyio.current_time() + busy_timeout
    while True:
        try:
            await conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or anyio.current_time() >= deadline:
                raise
        await anyio.sleep(0.01)


# The text of the times written lately, by identity (each time kept, so its id is not reused while it is here): a
# step row's times are written again with each write of the row (two in three of a durable saga's times).
_WRITTEN: dict[int, tuple[datetime, str]] = {}
_WRITTEN_KEPT = 4096


def _time_text(value: datetime) -> str:
    """Return a UTC time as `value.isoformat(" ", "microseconds")` does, at half its cost (RowCodec.time_in)."""
    known = _WRITTEN.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    if len(_WRITTEN) >= _WRITTEN_KEPT:
        _WRITTEN.clear()
    # (A subclass's own isoformat is not asked: the column holds the base text, which sorts as time does.)
    text = iso_text_micro(value, " ") if type(value) is datetime else datetime.isoformat(value, " ", "microseconds")
    _WRITTEN[id(value)] = (value, text)
    return text


# What SQLite's SQL differs in (saga_runtime._storage._flavour): the one machine's clock, no row locks (BEGIN
# IMMEDIATE takes the whole file), text times of fixed width (text order is time order), one column per ALTER.
FLAVOUR = Flavour(
    types={
        "id": "TEXT",
        "short": "TEXT",
        "text": "TEXT",
        "json": "TEXT",
        "time": "TEXT",
        "int": "INTEGER",
        "bigint": "INTEGER",
        "float": "REAL",
    },
    table_suffix="",
    placeholders=lambda sql: sql,
    now_sql="?",
    lease_sql="?",
    clock_sql=None,
    lock_row="",
    lock_reread="",
    lock_skip="",
    lock_queue_scan="",
    lock_purge_scan="",
    insert_ignore=insert_ignore_on_conflict,
    upsert=upsert_on_conflict,
    table_exists="SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
    notices=None,
    returning=False,
    unsynced_commit=None,
    alter_one_column=True,
    partial_indexes=True,
    json_as_text=json_text_already,
    # "2024-05-17 09:30:15.123456+00:00": fixed width, so text order is time order.
    time_value=_time_text,
    local_clock=True,
    lease_length=lambda length: length,
    ids_as_bytes=False,
)


class SQLiteDialect(Dialect):
    """Sagas in a SQLite file, in WAL mode, written through one connection."""

    name = "sqlite"
    flavour = FLAVOUR
    write_errors = _WRITE_ERRORS

    def __init__(
        self,
        url: str,
        conn: aiosqlite.Connection,
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 5.0,
        retry_for: float = DEFAULT_RETRY_FOR,
    ) -> None:
        # One writer: a batch at a time (SQLite has one write lock; the next batch gathers while one commits).
        super().__init__(url, retry_for=retry_for, writers=1)
        self._conn = conn
        # The store's trips to aiosqlite's thread, whatever its connection (see _Hops).
        self._hops = _Hops()
        self._tx = _SQLiteTransaction(conn, self._hops)
        # One connection for the store: transactions of its tasks must not interleave on it.
        self._lock = asyncio.Lock()
        # What a new connection needs, should this one be lost; and whether it was.
        path = _file_of(sqlite_path(url))
        self._connect_args = (path, synchronous, busy_timeout, self.url)
        self._broken = False
        # The file the store opened (device, inode), checked at the end of every transaction; None: in memory.
        self._identity = None if path == ":memory:" else _identity(path)
        self._file_error: StoreFileError | None = None

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        synchronous: str | None = None,
        busy_timeout: float | None = None,
        retry_for: float | None = None,
    ) -> SQLiteDialect:
        """Open (creating if needed) the SQLite database at `url`."""
        redacted = redact_url(url)
        path = sqlite_path(url)
        query = dict(parse_qsl(urlsplit(url).query))
        level = str(url_option(synchronous or None, query, "synchronous", "FULL")).upper()
        timeout = float(url_option(busy_timeout, query, "busy_timeout", 5.0))
        retry = retry_for_option(retry_for, query)
        if query:
            raise TypeError(f"unknown SQLite store options in {redacted!r}: {sorted(query)}")
        if level not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, not {level!r}")
        conn = await _connect(_file_of(path), level, timeout, redacted)
        return cls(url, conn, synchronous=level, busy_timeout=timeout, retry_for=retry)

    async def _reconnect(self) -> None:
        """Replace a lost connection with a new one; raise StoreConnectionError if the file cannot be opened."""
        with anyio.move_on_after(_CLEANUP_SECONDS, shield=True), contextlib.suppress(sqlite3.Error, ValueError):
            await self._conn.close()
        if self._connect_args[0] == ":memory:":
            # Not a StoreConnectionError, so not retried: a new connection would be a new, empty database.
            raise StoreError(
                f"the in-memory database of {self.url} was lost with its connection; open a new store", url=self.url
            )
        self._check_file()  # never reopen the path onto another file (SQLite would create an empty one)
        self._conn = await _connect(*self._connect_args)
        self._tx = _SQLiteTransaction(self._conn, self._hops)
        self._broken = False

    def _check_file(self) -> None:
        """Raise StoreFileError if the file at the store's path is no longer the one it opened."""
        if self._file_error is None and self._identity is not None:
            found = _identity(self._connect_args[0])
            if found != self._identity:
                what = "deleted" if found is None else "replaced by another file"
                self._file_error = StoreFileError(
                    f"the SQLite file of {self.url} was {what} while the store had it open: what the store "
                    "writes now is lost with the old file, so nothing more is reported written. Close the store, "
                    "restore the file (from a backup) or move the new one away, and open a new store",
                    url=self.url,
                )
        if self._file_error is not None:
            raise self._file_error

    @asynccontextmanager
    async def transaction(self, *, begin: bool) -> AsyncIterator[Transaction]:
        async with self._lock:
            await self._ready()
            try:
                with map_exceptions(self.url):
                    if not begin:
                        # Autocommit: each statement is atomic (and durable) on its own.
                        yield self._tx
                    else:
                        # IMMEDIATE: take the write lock before the first statement, so two processes never both
                        # read then write (no upgrade deadlock) and a busy database fails at BEGIN, before anything
                        # was done. BEGIN runs in the first statement's trip to aiosqlite's thread (one trip fewer);
                        # a transaction that runs no statement begins and commits nothing.
                        tx = self._tx
                        tx.unbegun, tx.begun = True, False
                        try:
                            # Inside the try: a caller cancelled while BEGIN runs on aiosqlite's thread still rolls
                            # back.
                            yield tx
                            if tx.begun:
                                await tx.execute("COMMIT")
                        except BaseException:
                            if tx.begun:
                                await self._rollback()
                            raise
                        finally:
                            tx.unbegun = tx.begun = False
            except ValueError as exc:
                lost = self._lost(exc)
                if lost is exc:
                    raise
                raise lost from exc
            except StoreConnectionError:
                self._broken = True
                raise
            # Last, after the commit: what was written is reported done only if the file at the path is the one
            # it went to (one stat per transaction).
            self._check_file()

    async def _ready(self) -> None:
        """Raise the store's file error, if any; reopen a lost connection (the store's lock held)."""
        if self._file_error is not None:
            raise self._file_error
        if self._broken:
            await self._reconnect()

    def _lost(self, exc: ValueError) -> Exception:
        """Return what a ValueError of aiosqlite means: a lost connection if the connection is closed, else `exc`."""
        if _usable(self._conn):
            return exc
        # aiosqlite's connection was closed under the store (or its thread is gone): a lost connection.
        self._broken = True
        return convert(
            exc,
            ERROR_MAP,
            self.url,
            kind=StoreConnectionError,
            advice="the store's SQLite connection was closed; it is reopened on the next call",
        )

    async def _rollback(self) -> None:
        # Shielded and bounded: a cancelled caller must still leave the connection out of its transaction.
        with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
            # sqlite3.Error: no transaction was open (BEGIN failed, or COMMIT went through); ValueError: the
            # connection is closed, so is its transaction.
            with contextlib.suppress(sqlite3.Error, ValueError):
                await self._conn.execute("ROLLBACK")

    async def write_batch(self, writes: Sequence[Write]) -> Sequence[Outcome | Exception]:
        """Write a batch in one transaction run whole on aiosqlite's thread: one hop, one commit (one fsync).

        `transaction(begin=False)` written out: a store's hottest path, without two context managers' frames.
        """
        async with self._lock:
            if self._broken or self._file_error is not None:
                await self._ready()
            try:
                # Cancelled while it runs, the thread still finishes the transaction (commit or rollback) on its own.
                outcomes = await self._hops.run(self._conn, _write_on, self._tx, self.queries, writes)
            except ValueError as exc:
                lost = self._lost(exc)
                if lost is exc:
                    raise
                raise lost from exc
            except (sqlite3.Error, sqlite3.Warning):
                try:
                    with map_exceptions(self.url):
                        raise
                except StoreConnectionError:
                    self._broken = True
                    raise
            self._check_file()
            return outcomes

    def schema_transaction(self) -> AbstractAsyncContextManager[Transaction]:
        # BEGIN IMMEDIATE is the schema lock; SQLite's DDL is transactional, so a migration is all or nothing.
        return self.transaction(begin=True)

    async def close(self) -> None:
        if not _usable(self._conn):  # lost already: nothing to close
            return
        with map_exceptions(self.url):
            await self._conn.close()
        # Only once its thread ended (aiosqlite before 0.22 returns from close before it does, with calls queued
        # ahead of its stop still to run): every call the connection ran has answered then. A store lost, or whose
        # close was interrupted, keeps the eventfd watched for calls still to answer; its loop's end lets it go.
        await _worker_stopped(self._conn)
        self._hops.close()


async def open_sql(url: str, **options: Any) -> SQLStore:
    """Open the SQL store on the SQLite database at `url` (options: see SQLiteDialect.connect)."""
    return await SQLStore.open(await SQLiteDialect.connect(url, **options))
