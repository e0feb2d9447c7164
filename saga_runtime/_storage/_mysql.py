"""The MySQL dialect: sagas in MySQL 8.0+ or MariaDB 10.6+, shared by any number of executors, on an aiomysql pool.

URL: `mysql://user:password@host:port/database` (`mariadb://` too; `?unix_socket=/path` for a local socket).
Options, as keywords of `open_store` or URL query parameters, keywords winning:

- `min_size` (default 1) and `max_size` (default 10): the pool's connections. Each concurrent store call holds one
  connection for one transaction; size `max_size` to the concurrency of the executors of this process.
- `connect_timeout`: seconds to wait for a connection (default 10).
- `pool_recycle`: seconds after which an idle connection is replaced, to stay under the server's `wait_timeout`
  (default 3600).
- `retry_for`: seconds an operation that lost its connection (`StoreConnectionError`: the server restarted, the
  connection was killed) is retried for, with exponential backoff, on a fresh connection (default 30; 0 turns
  retries off). A broken connection is closed, never handed out again; an outage is logged at WARNING on the
  `saga_runtime` logger once when it starts and once when it ends (each retry at DEBUG). Opening the store is
  not retried: a server that cannot be reached fails `open_store`.

The server must be MySQL 8.0 or MariaDB 10.6 or newer: recovery takes leases with `FOR UPDATE SKIP LOCKED`, and
the schema uses JSON and DATETIME(6) columns. Sessions run in strict SQL mode (`TRADITIONAL`), so a value that
does not fit fails instead of being silently cut.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import aiomysql
import anyio
import pymysql
from pymysql.constants import SERVER_STATUS

from saga_runtime._exceptions import StoreBusyError, StoreConnectionError, StoreError
from saga_runtime._storage._batch import Outcome, Write
from saga_runtime._storage._dialect import Dialect
from saga_runtime._storage._errors import CONNECT_ADVICE, ErrorMap, convert
from saga_runtime._storage._open import redact_url
from saga_runtime._storage._sql import (
    SAGA_COLUMNS,
    STEP_COLUMNS,
    Flavour,
    format_placeholders,
    insert_ignore_on_duplicate,
    json_columns_modified,
    unasked,
    upsert_on_duplicate,
)
from saga_runtime._storage._sqlstore import (
    DEFAULT_RETRY_FOR,
    SQLStore,
    Transaction,
    pool_sizes,
    retry_for_option,
    url_option,
)
from saga_runtime._storage._sqlwrite import KEPT_LEASE_COLUMNS, kept_lease

__all__ = ["CODE_MAP", "ERROR_MAP", "MySQLDialect", "map_exceptions", "open_sql", "store_error"]

_err = pymysql.err

# Every pymysql (so aiomysql) error derives from pymysql.err.MySQLError; a few server codes get their own class.
ERROR_MAP: ErrorMap = {
    _err.IntegrityError: (StoreError, "a row broke a constraint of the saga tables (a duplicate key?)"),
    _err.DataError: (StoreError, "MySQL refused a value (too long for its column, or not valid)"),
    _err.OperationalError: (StoreError, ""),
    _err.ProgrammingError: (StoreError, "this is a bug in saga_runtime's MySQL store; please report it"),
    _err.NotSupportedError: (StoreError, "the server lacks a feature the store needs; use MySQL 8 or MariaDB 10.6+"),
    _err.InternalError: (StoreError, ""),
    _err.InterfaceError: (StoreConnectionError, CONNECT_ADVICE),
    _err.DatabaseError: (StoreError, ""),
    _err.MySQLError: (StoreError, ""),
    OSError: (StoreConnectionError, CONNECT_ADVICE),
    TimeoutError: (StoreConnectionError, "the server did not answer in time; is it up and reachable?"),
}
# Server error codes that change the class or the advice: (class, advice).
CODE_MAP: dict[int, tuple[type[StoreError], str]] = {
    1040: (StoreConnectionError, "the server has too many connections; lower max_size or raise max_connections"),
    1044: (StoreConnectionError, "the user may not use this database; GRANT it the rights"),
    1045: (StoreConnectionError, "check the user name and password"),
    1049: (StoreConnectionError, "create the database first (CREATE DATABASE name)"),
    1053: (StoreConnectionError, "the server is shutting down; retry when it is back"),
    1205: (StoreBusyError, "a lock wait timed out; nothing was written, retry it"),
    1213: (StoreBusyError, "the server broke a deadlock by rolling this transaction back; retry it"),
    1927: (StoreConnectionError, "the server killed the connection (KILL, or a restart); is it up?"),
    2002: (StoreConnectionError, CONNECT_ADVICE),
    2003: (StoreConnectionError, CONNECT_ADVICE),
    2005: (StoreConnectionError, "is the host name right?"),
    2006: (StoreConnectionError, "the server closed the connection; is it up?"),
    2013: (StoreConnectionError, "the connection was lost mid-query; is the server up?"),
    2055: (StoreConnectionError, "the connection was lost; is the server up?"),
    4031: (StoreConnectionError, "the server closed the idle connection; lower pool_recycle below wait_timeout"),
}
# Server codes that mean the connection could not be made at all (the others lost one that was made).
_CONNECT_CODES = frozenset({1040, 1044, 1045, 1049})
_CATCH: tuple[type[BaseException], ...] = (_err.MySQLError, OSError, TimeoutError)
_CLEANUP_SECONDS = 5.0
# JSON bytes of a batch past which it is sent statement by statement, a row each: pymysql may escape each byte into
# two, and MariaDB's max_allowed_packet is 16 MiB by default. A row at the value limits (arguments and result of
# 4,000,000 bytes each, see saga_runtime._records) still fits one packet.
_SCRIPT_BYTES = 6 << 20
_MIN_VERSION = {"MariaDB": (10, 6), "MySQL": (8, 0)}
# A spare connection unused for this long goes back to the pool before its next use (the pool's checks then apply:
# dropping a closed connection, recycling old ones); never longer than `pool_recycle`.
_SPARE_IDLE = 10.0


def store_error(exc: BaseException, url: str, *, connecting: bool = False) -> StoreError:
    """Return the StoreError subclass of a pymysql/aiomysql (or socket) error, refined by its server code."""
    code = exc.args[0] if isinstance(exc, _err.MySQLError) and exc.args else None
    if isinstance(code, int) and code in CODE_MAP:
        kind, advice = CODE_MAP[code]
        return convert(exc, ERROR_MAP, url, kind=kind, advice=advice, connecting=connecting or code in _CONNECT_CODES)
    return convert(exc, ERROR_MAP, url, connecting=connecting)


@contextmanager
def map_exceptions(url: str, *, connecting: bool = False) -> Iterator[None]:
    """Convert pymysql/aiomysql (and socket) errors raised inside the block into StoreError subclasses."""
    try:
        yield
    except _CATCH as exc:
        raise store_error(exc, url, connecting=connecting) from exc


def _alive(conn: Any) -> bool:
    """Return whether `conn` is open and its server has not ended it (the checks aiomysql's pool makes)."""
    if conn.closed:
        return False
    reader = conn._reader
    return not (reader.at_eof() or reader.exception() is not None or getattr(reader, "eof_received", False))


def _check_server(version: str, url: str) -> str:
    """Return the server's product ("MariaDB" or "MySQL"); raise StoreError unless it is MySQL 8.0+ or MariaDB
    10.6+."""
    product = "MariaDB" if "mariadb" in version.lower() else "MySQL"
    match = re.match(r"(\d+)\.(\d+)", version)
    found = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    need = _MIN_VERSION[product]
    if found < need:
        raise StoreError(
            f"the server at {url} is {product} {version}; saga_runtime needs {product} "
            f"{need[0]}.{need[1]} or newer (for FOR UPDATE SKIP LOCKED and JSON columns): upgrade the server",
            url=url,
        )
    return product


# pymysql's escapes of a string literal (pymysql.converters.escape_string), for `_literals`: a table of the 128
# ASCII characters, as pymysql's, not a dict (str.translate raises and catches a KeyError per character a dict
# lacks; a character past the table is kept as it is).
_SPECIAL = {"\0": "\\0", "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\x1a": "\\Z", '"': '\\"', "'": "\\'"}
_ESCAPES = [_SPECIAL.get(chr(code), chr(code)) for code in range(128)]


def _literals(conn: Any, params: Sequence[Any]) -> tuple[str, ...]:
    """Return the SQL literals of `params`, as pymysql writes them (its `escape`, a few Python calls a value).

    The store's own values (text, integers, NULL, naive times) are written here; any other type goes to pymysql.
    """
    escape = conn.escape
    if conn.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES:
        return tuple(escape(value) for value in params)
    literals = []
    for value in params:
        kind = type(value)
        if kind is str:
            # Letters and digits only (ids, hashes, statuses) need no escape: a check far cheaper than translate.
            literals.append("'" + (value if value.isalnum() else value.translate(_ESCAPES)) + "'")
        elif value is None:
            literals.append("NULL")
        elif kind is int:
            literals.append(int.__repr__(value))
        elif kind is datetime and value.tzinfo is None:
            literals.append("'" + value.isoformat(" ") + "'")
        else:
            literals.append(escape(value))
    return tuple(literals)


class _MySQLTransaction:
    __slots__ = ("_cursor",)

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def _sql(self, sql: str, params: Sequence[Any]) -> str:
        """Return `sql` with its parameters written in (none: as it is, not %-formatted, as pymysql does)."""
        return sql % _literals(self._cursor.connection, params) if params else sql

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        await self._cursor.execute(self._sql(sql, params))
        return int(self._cursor.rowcount)

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Sequence[Any]]:
        await self._cursor.execute(self._sql(sql, params))
        return list(await self._cursor.fetchall())

    async def script(self, sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
        """Run several statements in one round trip; return the rows of the last that has any.

        The server stops at a failing statement: a transaction the script opened is rolled back before the error
        goes on, so the connection goes back to the pool clean.
        """
        cursor = self._cursor
        rows: Sequence[Sequence[Any]] = []
        try:
            await cursor.execute(self._sql(sql, params))
            while True:
                if cursor.description:
                    rows = list(await cursor.fetchall())
                if not await cursor.nextset():
                    return rows
        except _err.MySQLError:
            if not cursor.connection or cursor.connection.closed:
                raise
            with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
                try:
                    await cursor.execute("ROLLBACK")
                except (_err.MySQLError, OSError):
                    cursor.connection.close()
            raise


# The batch script (see MySQLDialect.write_batch): column lists, one row's placeholders, and the upserts' updates.
_SAGAS = ", ".join(SAGA_COLUMNS)
_STEPS = ", ".join(STEP_COLUMNS)
# A saga row's lease is what is left of it (RowCodec.lease_in), written on the database's clock.
# A lease written: the database's time plus what is left of it by the writer's clock (RowCodec.lease_in).
_LEASE_SQL = "TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6))"
_LEASE = _LEASE_SQL.replace("?", "%s")
_SAGA_ROW = "(" + ", ".join(_LEASE if c == "lease_expires_at" else "%s" for c in SAGA_COLUMNS) + ")"
_STEP_ROW = "(" + ", ".join(["%s"] * len(STEP_COLUMNS)) + ")"
_SAGA_SET = ", ".join(f"{c} = VALUES({c})" for c in SAGA_COLUMNS[1:])
# ON DUPLICATE KEY fires on any unique key: a new step taking another step's idempotency key must fail, not
# overwrite that step (NULL into NOT NULL fails in strict mode; it comes first, as MySQL assigns left to right).
# Qualified: a gated insert's rows come from a derived table with the same column names.
_STEP_SET = ", ".join(
    [
        "steps.idempotency_key = IF(steps.saga_id = VALUES(saga_id) AND steps.step_id = VALUES(step_id), "
        "VALUES(idempotency_key), NULL)",
        *(f"steps.{c} = VALUES({c})" for c in STEP_COLUMNS[3:] if c != "idempotency_key"),
    ]
)
_STEP_SELECT = "SELECT " + ", ".join(f"%s AS {c}" for c in STEP_COLUMNS)
_STEP_SELECT_NEXT = "SELECT " + ", ".join(["%s"] * len(STEP_COLUMNS))
_UPDATE_SET = ", ".join(f"{c} = {_LEASE if c == 'lease_expires_at' else '%s'}" for c in SAGA_COLUMNS[1:])
# The update of a write leaving the stored lease as it is (Write.keep_lease): its parameters are `kept_lease`'s.
_UPDATE_SET_KEPT = ", ".join(f"{c} = %s" for c in KEPT_LEASE_COLUMNS[1:])


def _update_set(write: Write) -> tuple[str, list[Any]]:
    """Return the SET list of an owner-conditional update of `write`'s saga row and its parameters (the id aside)."""
    assert write.saga is not None
    if write.keep_lease:
        return _UPDATE_SET_KEPT, list(kept_lease(write.saga)[1:])
    return _UPDATE_SET, list(write.saga[1:])


def _gate(i: int) -> str:
    """Return the session variable holding whether write `i` of a batch passed its condition (1) or not (0)."""
    return f"@saga_runtime_write_{i}"


Statement = tuple[str, list[Any]]


def _batch_script(writes: Sequence[Write], *, split: bool = False) -> tuple[list[Statement], list[int]]:
    """Return the statements writing a batch with their parameters, and the writes whose outcome the script reports.

    Conditions first, under row locks: an owner-conditional write counts its saga row with that owner `FOR UPDATE`
    into a session variable; a create inserts its saga if the id is free and keeps ROW_COUNT() likewise. Then every
    row is written, a conditional write's only where its variable says it passed; the last statement reads the
    variables back. Only the statements' shape comes from the batch; every value is a parameter. With `split`,
    each statement writes one row (a batch too large for one packet is sent statement by statement).
    """
    statements: list[Statement] = []
    gated: list[int] = []
    # Conditions and saga rows in saga_id order: the order every statement locking several saga rows takes them in
    # (a lease renewal's too), so that two transactions never wait on each other's rows (a deadlock).
    ordered = sorted(enumerate(writes), key=lambda pair: pair[1].saga_id)
    for i, write in ordered:
        if write.owner is not None:
            statements.append(
                (
                    f"SELECT COUNT(*) INTO {_gate(i)} FROM sagas WHERE saga_id = %s AND owner = %s "
                    f"AND {unasked('%s')} FOR UPDATE",
                    [write.saga_id, write.owner, write.owner],
                )
            )
            gated.append(i)
        elif write.create:
            assert write.saga is not None
            statements.append(
                (
                    f"INSERT INTO sagas ({_SAGAS}) VALUES {_SAGA_ROW} ON DUPLICATE KEY UPDATE saga_id = saga_id",
                    list(write.saga),
                )
            )
            statements.append((f"SET {_gate(i)} = ROW_COUNT()", []))
            gated.append(i)
    conditional = set(gated)
    sagas = [write.saga for i, write in ordered if write.saga is not None and i not in conditional]
    for chunk in _chunks(sagas, split):
        values = ", ".join([_SAGA_ROW] * len(chunk))
        statements.append(
            (
                f"INSERT INTO sagas ({_SAGAS}) VALUES {values} ON DUPLICATE KEY UPDATE {_SAGA_SET}",
                [value for row in chunk for value in row],
            )
        )
    steps = [row for i, write in enumerate(writes) if i not in conditional for row in write.steps]
    for chunk in _chunks(steps, split):
        values = ", ".join([_STEP_ROW] * len(chunk))
        statements.append(
            (
                f"INSERT INTO steps ({_STEPS}) VALUES {values} ON DUPLICATE KEY UPDATE {_STEP_SET}",
                [value for row in chunk for value in row],
            )
        )
    selects = [(i, row) for i in gated for row in writes[i].steps]
    for chunk in _chunks(selects, split):
        union = " UNION ALL ".join(
            f"{_STEP_SELECT_NEXT if n else _STEP_SELECT} FROM DUAL WHERE {_gate(i)} = 1"
            for n, (i, _) in enumerate(chunk)
        )
        statements.append(
            (
                f"INSERT INTO steps ({_STEPS}) SELECT * FROM ({union}) AS v ON DUPLICATE KEY UPDATE {_STEP_SET}",
                [value for _, row in chunk for value in row],
            )
        )
    for i in gated:
        write = writes[i]
        if write.owner is not None and write.saga is not None:
            sets, saga = _update_set(write)
            statements.append(
                (f"UPDATE sagas SET {sets} WHERE saga_id = %s AND {_gate(i)} = 1", [*saga, write.saga_id])
            )
    if gated:
        statements.append(("SELECT " + ", ".join(_gate(i) for i in gated), []))
    return statements, gated


# A lone write's one statement, its condition folded in (the saga row locked FOR UPDATE while it is checked): one
# result to parse, no script, no session variable.
_OWNED = f"EXISTS (SELECT 1 FROM sagas WHERE saga_id = %s AND owner = %s AND {unasked('%s')} FOR UPDATE)"
_HOLDS = f"SELECT COUNT(*) FROM sagas WHERE saga_id = %s AND owner = %s AND {unasked('%s')}"


_COMPOUND_START = "BEGIN NOT ATOMIC START TRANSACTION; "


def _compound(write: Write) -> Statement | None:
    """MariaDB: return the one compound statement writing a lone conditional write with step rows, or None.

    A compound statement (MariaDB runs one outside a stored program; MySQL does not) in a transaction of its own,
    COMMIT included: the condition first (the saga row locked FOR UPDATE while its owner is checked, or a create's
    insert of its saga if the id is free), then the rows as plain VALUES only if it held. One result, its count the
    sum of its statements' (so 0 when the condition failed). For the server's time: an INSERT ... SELECT from a
    derived table of the rows (MySQL's form) costs it about twice a VALUES insert, and a script of the statements
    costs the client a result each.
    """
    if not write.steps or (write.owner is None) == (not write.create):
        return None
    values = ", ".join([_STEP_ROW] * len(write.steps))
    steps = f"INSERT INTO steps ({_STEPS}) VALUES {values} ON DUPLICATE KEY UPDATE {_STEP_SET}; "
    params = [value for row in write.steps for value in row]
    if write.create:
        assert write.saga is not None
        return (
            f"{_COMPOUND_START}INSERT INTO sagas ({_SAGAS}) VALUES {_SAGA_ROW} ON DUPLICATE KEY "
            f"UPDATE saga_id = saga_id; IF ROW_COUNT() = 1 THEN {steps}END IF; COMMIT; END",
            [*write.saga, *params],
        )
    update = ""
    if write.saga is not None:
        sets, saga = _update_set(write)
        update = f"UPDATE sagas SET {sets} WHERE saga_id = %s; "
        params += [*saga, write.saga_id]
    return (
        f"{_COMPOUND_START}IF {_OWNED} THEN {steps}{update}END IF; COMMIT; END",
        [write.saga_id, write.owner, write.owner, *params],
    )


def _one_statement(write: Write, compound: bool = False) -> Statement | None:
    """Return the one statement writing `write` on its own (autocommitted), or None if it takes a script.

    With `compound` (MariaDB), a conditional write with step rows (an owner's, or a create's) is a `_compound`.
    """
    if compound and (statement := _compound(write)) is not None:
        return statement
    if write.create:
        if write.steps:
            return None
        assert write.saga is not None
        return (
            f"INSERT INTO sagas ({_SAGAS}) VALUES {_SAGA_ROW} ON DUPLICATE KEY UPDATE saga_id = saga_id",
            [*write.saga],
        )
    if write.saga is not None:
        if write.steps or write.owner is None:
            return None
        sets, saga = _update_set(write)
        return (
            f"UPDATE sagas SET {sets} WHERE saga_id = %s AND owner = %s AND {unasked('%s')}",
            [*saga, write.saga_id, write.owner, write.owner],
        )
    params = [value for row in write.steps for value in row]
    if write.owner is None:
        values = ", ".join([_STEP_ROW] * len(write.steps))
        return (f"INSERT INTO steps ({_STEPS}) VALUES {values} ON DUPLICATE KEY UPDATE {_STEP_SET}", params)
    rows = " UNION ALL ".join([_STEP_SELECT, *[_STEP_SELECT_NEXT] * (len(write.steps) - 1)])
    return (
        f"INSERT INTO steps ({_STEPS}) SELECT * FROM ({rows}) AS v WHERE {_OWNED} ON DUPLICATE KEY UPDATE {_STEP_SET}",
        [*params, write.saga_id, write.owner, write.owner],
    )


_T = TypeVar("_T")


def _chunks(items: list[_T], split: bool) -> list[list[_T]]:
    """Return `items` as the lists one statement each writes: all at once, or (`split`) one by one."""
    if not items:
        return []
    return [[item] for item in items] if split else [items]


# What MySQL's and MariaDB's SQL differs in (saga_runtime._storage._flavour): the database's clock, ids as bytes
# (string collations ignore case or trailing spaces), naive UTC times, `%s` placeholders, ON DUPLICATE KEY, no
# partial index, DDL committing statement by statement.
FLAVOUR = Flavour(
    types={
        "id": "VARBINARY(512)",
        "short": "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "text": "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "json": "JSON",
        "time": "DATETIME(6)",
        "int": "INTEGER",
        "bigint": "BIGINT",
        "float": "DOUBLE",
    },
    table_suffix=" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    placeholders=format_placeholders,
    now_sql="UTC_TIMESTAMP(6)",
    lease_sql=_LEASE_SQL,
    clock_sql="SELECT UTC_TIMESTAMP(6)",
    lock_row=" FOR UPDATE",
    # After waiting on a concurrent insert of the same id, read the committed row, not the snapshot.
    lock_reread=" FOR UPDATE",
    lock_skip=" FOR UPDATE SKIP LOCKED",
    # Its locking scans lock rows they then pass over (a recovery scan of the same table), so skipping would start
    # sagas out of order: it waits for such a row a moment, and re-reads it (no longer QUEUED if taken).
    lock_queue_scan=" FOR UPDATE",
    lock_purge_scan=" FOR UPDATE SKIP LOCKED",
    # InnoDB locks the rows a statement reads as it reads them: on the primary key, in saga_id order.
    by_key=" FORCE INDEX (PRIMARY)",
    insert_ignore=insert_ignore_on_duplicate,
    upsert=upsert_on_duplicate,
    table_exists="SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
    notices=None,
    returning=False,
    unsynced_commit=None,
    alter_one_column=False,
    partial_indexes=False,
    json_as_text=json_columns_modified,
    time_value=lambda value: value.replace(tzinfo=None),
    local_clock=False,
    lease_length=lambda length: length // timedelta(microseconds=1),
    ids_as_bytes=True,
)


class MySQLDialect(Dialect):
    """Sagas in a MySQL or MariaDB database, through a pool of aiomysql connections."""

    name = "mysql"
    flavour = FLAVOUR
    counts_changed_rows = True

    def __init__(
        self,
        url: str,
        pool: Any,
        database: str,
        *,
        retry_for: float = DEFAULT_RETRY_FOR,
        spare_idle: float = _SPARE_IDLE,
    ) -> None:
        super().__init__(url, retry_for=retry_for, writers=pool.maxsize)
        self._pool = pool
        self._wakeups: set[asyncio.Future[None]] = set()
        # One free connection kept out of the pool for the next call (see `_release`), and since when.
        self._spare: Any = None
        self._spare_since = 0.0
        self._spare_idle = spare_idle
        self._waiting = 0  # calls waiting for a connection of the pool
        self._database = database
        self._compound = False  # MariaDB: a lone conditional write with step rows is one compound statement

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        min_size: int | None = None,
        max_size: int | None = None,
        connect_timeout: float | None = None,
        pool_recycle: float | None = None,
        retry_for: float | None = None,
    ) -> MySQLDialect:
        """Connect a pool to the MySQL/MariaDB database at `url` and check the server's version."""
        redacted = redact_url(url)
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        low, high = pool_sizes(min_size, max_size, query)
        timeout = float(url_option(connect_timeout, query, "connect_timeout", 10.0))
        recycle = float(url_option(pool_recycle, query, "pool_recycle", 3600))
        unix_socket = query.pop("unix_socket", None)
        retry = retry_for_option(retry_for, query)
        if query:
            raise TypeError(f"unknown MySQL store options in {redacted!r}: {sorted(query)}")
        database = unquote(parts.path.lstrip("/"))
        if not database:
            raise StoreError(f"the MySQL URL {redacted!r} names no database: add /DATABASE", url=redacted)
        with map_exceptions(redacted, connecting=True):
            pool = await aiomysql.create_pool(
                host=parts.hostname or "localhost",
                port=parts.port or 3306,
                user=unquote(parts.username or "root"),
                password=unquote(parts.password or ""),
                db=database,
                unix_socket=unix_socket,
                minsize=low,
                maxsize=high,
                connect_timeout=timeout,
                pool_recycle=int(recycle),
                charset="utf8mb4",
                # Strict: a value that does not fit is an error, never silently truncated.
                sql_mode="TRADITIONAL",
                # Autocommit for single-statement reads; writes open their own transaction with BEGIN.
                autocommit=True,
            )
        dialect = cls(url, pool, database, retry_for=retry, spare_idle=min(_SPARE_IDLE, recycle))
        try:
            async with dialect.transaction(begin=False) as tx:
                product = _check_server(str((await tx.fetch("SELECT VERSION()"))[0][0]), redacted)
            dialect._compound = product == "MariaDB"
        except BaseException:
            with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
                await dialect.close()
            raise
        return dialect

    async def _acquire(self) -> Any:
        """Return the spare connection if it is free and fit, else one from the pool (given back by `_release`)."""
        conn, self._spare = self._spare, None
        if conn is not None:
            if time.monotonic() - self._spare_since < self._spare_idle and _alive(conn):
                return conn  # the usual case one saga at a time: no pool lock, no wake-up task
            # Lost while it waited, or idle for long: back to the pool, which drops or expires it.
            self._give_back(conn)
        self._waiting += 1
        try:
            if self._wakeups:  # the pool is waking callers that waited for it: they take what was given back first
                await asyncio.wait(list(self._wakeups))
            return await self._pool.acquire()
        except _CATCH as exc:
            raise store_error(exc, self.url) from exc
        finally:
            self._waiting -= 1

    def _release(self, conn: Any) -> None:
        """Keep `conn` as the spare if it is fit, idle, and no call waits for the pool (none starves); else give it
        back to the pool (a closed one, or one left in a transaction, is dropped there).

        Synchronous, so a cancellation cannot interrupt it.
        """
        kept = self._spare is None and not self._waiting and not self.closed
        if kept and _alive(conn) and not conn.get_transaction_status():
            self._spare, self._spare_since = conn, time.monotonic()
            return
        self._give_back(conn)

    def _give_back(self, conn: Any) -> None:
        """Give `conn` back to the pool; the pool's wake-up of its waiters (a task) runs on its own, kept referenced
        here until it ends."""
        wakeup = self._pool.release(conn)
        if wakeup.done() and self._waiting and not self.closed:
            # A closed connection (or one left in a transaction) was dropped, and the pool wakes nobody then: wake a
            # waiter, which opens a new connection in its place.
            wakeup = asyncio.ensure_future(self._pool._wakeup())
        if not wakeup.done():
            self._wakeups.add(wakeup)
            wakeup.add_done_callback(self._wakeups.discard)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        conn = await self._acquire()
        try:
            yield conn
        finally:
            self._release(conn)

    @asynccontextmanager
    async def transaction(self, *, begin: bool, isolation: str | None = None) -> AsyncIterator[Transaction]:
        async with self._connection() as conn:
            with map_exceptions(self.url):
                cursor = await conn.cursor()
                try:
                    if begin:
                        if isolation is not None:
                            # Applies to the next transaction of this session only.
                            await cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
                        await conn.begin()
                    yield _MySQLTransaction(cursor)
                    if begin:
                        await conn.commit()
                    # Reads what results are left (none after a statement read to its end): unshielded, a cancel
                    # here drops the connection below.
                    await cursor.close()
                except _err.MySQLError as exc:
                    if isinstance(store_error(exc, self.url), StoreConnectionError):
                        # Lost (killed, server gone): closed, so the pool drops it instead of handing it out again.
                        conn.close()
                    elif begin:
                        await self._rollback(conn)
                    if not conn.closed:
                        with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
                            await cursor.close()
                    raise
                except BaseException:
                    # Cancelled mid-statement (or worse): the protocol state is unknown, so drop the connection;
                    # the server rolls its transaction back.
                    conn.close()
                    raise

    @staticmethod
    async def _rollback(conn: Any) -> None:
        with anyio.move_on_after(_CLEANUP_SECONDS, shield=True) as scope:
            try:
                await conn.rollback()
            except (_err.MySQLError, OSError):
                conn.close()
        if scope.cancelled_caught:
            conn.close()

    async def write_batch(self, writes: Sequence[Write]) -> Sequence[Outcome | Exception]:
        """Write a batch in one round trip: one statement alone, else a script in a transaction of its own.

        aiomysql always lets a connection run several statements at once (CLIENT.MULTI_STATEMENTS); pymysql
        escapes every value into the text, so only the script's shape is built here (see `_batch_script`). A batch
        whose text could pass the server's packet limit (a lone write too large to share a batch) is sent
        statement by statement, a row each, in one transaction.
        """
        split = sum(write.size for write in writes) > _SCRIPT_BYTES
        alone = _one_statement(writes[0], self._compound) if len(writes) == 1 and not split else None
        if alone is not None:
            return [await self._write_alone(writes[0], alone)]
        statements, gated = _batch_script(writes, split=split)
        rows: Sequence[Sequence[Any]] = ()
        if split:
            async with self.transaction(begin=True) as tx:
                for sql, params in statements[:-1] if gated else statements:
                    await tx.execute(sql, params)
                if gated:  # the last statement reads the outcomes back
                    rows = await tx.fetch(*statements[-1])
        else:
            async with self.transaction(begin=False) as tx:
                assert isinstance(tx, _MySQLTransaction)
                if len(statements) == 1:  # one statement commits on its own, atomically
                    await tx.execute(*statements[0])
                    return [Outcome.WRITTEN] * len(writes)
                script = "; ".join(["START TRANSACTION", *(sql for sql, _ in statements), "COMMIT"])
                rows = await tx.script(script, [value for _, params in statements for value in params])
        passed = {i for i, value in zip(gated, rows[0] if gated else (), strict=True) if int(value) == 1}
        outcomes: list[Outcome | Exception] = []
        for i, write in enumerate(writes):
            if (write.owner is None and not write.create) or i in passed:
                outcomes.append(Outcome.WRITTEN)
            else:
                outcomes.append(Outcome.TAKEN if write.create else Outcome.LOST)
        return outcomes

    async def _write_alone(self, write: Write, statement: Statement) -> Outcome:
        """Write a lone write with its one statement, atomic on its own; return its outcome."""
        if await self._autocommit(*statement):
            return Outcome.WRITTEN
        if write.create:
            return Outcome.TAKEN
        if write.owner is None:
            return Outcome.WRITTEN
        # MySQL counts changed rows: 0 also when every row was stored as it is already (a retried write).
        async with self.transaction(begin=False) as tx:
            held = await tx.fetch(_HOLDS, (write.saga_id, write.owner, write.owner))
        return Outcome.WRITTEN if int(held[0][0]) else Outcome.LOST

    async def _autocommit(self, sql: str, params: Sequence[Any]) -> int:
        """Run one statement (autocommitted) on a connection of the pool; return the number of rows it changed.

        `transaction(begin=False)` with one `execute`, inlined for a lone write: no cursor, no context managers. A
        `_compound` opens a transaction of its own: when one of its statements fails the server runs none after it,
        and that transaction is rolled back here.
        """
        conn = await self._acquire()
        try:
            return int(await conn.query(sql % _literals(conn, params) if params else sql))
        except BaseException as exc:
            if not isinstance(exc, _CATCH):
                # Cancelled mid-statement (or worse): the protocol state is unknown, so drop the connection.
                conn.close()
                raise
            error = store_error(exc, self.url)
            if isinstance(error, StoreConnectionError):
                # Lost (killed, server gone): closed, so the pool drops it instead of handing it out again.
                conn.close()
            elif not conn.closed and sql.startswith(_COMPOUND_START):
                # A compound's statement failed (a step's key taken): roll back what it wrote before, and let its
                # lock go. Always: an error's packet carries no status, so the connection cannot tell.
                await self._rollback(conn)
            raise error from exc
        finally:
            self._release(conn)

    def claim_transaction(self) -> AbstractAsyncContextManager[Transaction]:
        # READ COMMITTED: the claim's scan takes no gap locks and keeps no locks on rows it did not return, so it
        # neither blocks new sagas being inserted nor other claimers (which SKIP LOCKED past what it holds).
        return self.transaction(begin=True, isolation="READ COMMITTED")

    def schema_transaction(self) -> AbstractAsyncContextManager[Transaction]:
        return self._locked_schema()

    @asynccontextmanager
    async def _locked_schema(self) -> AsyncIterator[Transaction]:
        # MySQL's DDL commits on its own, so a named lock (per server, hence the database in its name) keeps two
        # processes from migrating at once.
        name = f"saga_runtime.schema.{self._database}"[:64]
        async with self.transaction(begin=False) as tx:
            got = (await tx.fetch("SELECT GET_LOCK(?, 30)".replace("?", "%s"), (name,)))[0][0]
            if got != 1:
                raise StoreBusyError(
                    f"another process has held the schema lock of {self.url} for 30 seconds; retry", url=self.url
                )
            try:
                yield tx
            finally:
                with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
                    await tx.fetch("SELECT RELEASE_LOCK(%s)", (name,))

    async def close(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            self._give_back(spare)  # the pool's close waits for every connection to be given back
        self._pool.close()
        with anyio.move_on_after(_CLEANUP_SECONDS, shield=True) as scope, map_exceptions(self.url):
            await self._pool.wait_closed()
        if scope.cancelled_caught:
            self._pool.terminate()


async def open_sql(url: str, **options: Any) -> SQLStore:
    """Open the SQL store on the MySQL/MariaDB database at `url` (options: see MySQLDialect.connect)."""
    return await SQLStore.open(await MySQLDialect.connect(url, **options))
