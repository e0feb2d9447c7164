"""The PostgreSQL dialect: sagas in PostgreSQL, shared by any number of executors, on an asyncpg connection pool.

URL: `postgresql://user:password@host:port/database` (`postgres://` too); other query parameters (`sslmode`, ...)
go to asyncpg. Options, as keywords of `open_store` or URL query parameters, keywords winning:

- `min_size` (default 1) and `max_size` (default 10): the pool's connections. Each concurrent store call holds one
  connection for one transaction; size `max_size` to the concurrency of the executors of this process.
- `connect_timeout`: seconds to wait for a connection (default 10).
- `command_timeout`: seconds a statement may run before it is cancelled (default: no limit).
- `retry_for`: seconds an operation that lost its connection (`StoreConnectionError`: the server restarted, the
  backend was terminated) is retried for, with exponential backoff, on a fresh connection (default 30; 0 turns
  retries off). A broken connection is closed, never handed out again; an outage is logged at WARNING on the
  `saga_runtime` logger once when it starts and once when it ends (each retry at DEBUG). Opening the store is
  not retried: a server that cannot be reached fails `open_store`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import operator
import socket
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, suppress
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
import asyncpg

from saga_runtime._exceptions import StoreBusyError, StoreConnectionError, StoreError
from saga_runtime._records import DECISION_WAKE
from saga_runtime._storage._batch import Outcome, Write
from saga_runtime._storage._codec import FLOAT_EXACT_MICROS, RowCodec
from saga_runtime._storage._dialect import Dialect
from saga_runtime._storage._errors import CONNECT_ADVICE, ErrorMap, convert, mapping_errors
from saga_runtime._storage._flavour import Notices
from saga_runtime._storage._open import redact_url
from saga_runtime._storage._outage import Outage
from saga_runtime._storage._sql import (
    DECIDED_CHANNEL,
    QUEUED_CHANNEL,
    SAGA_COLUMNS,
    STEP_COLUMNS,
    Flavour,
    insert_ignore_on_conflict,
    json_columns_retyped,
    numbered_placeholders,
    unasked,
    upsert_on_conflict,
)
from saga_runtime._storage._sqlstore import (
    DEFAULT_RETRY_FOR,
    SQLStore,
    Transaction,
    pool_sizes,
    retry_for_option,
    url_option,
)

__all__ = ["ERROR_MAP", "PostgresDialect", "map_exceptions", "open_sql"]

_exc = asyncpg.exceptions
logger = logging.getLogger("saga_runtime")


class _OutageLog(logging.Filter):
    """asyncpg's reconnect warnings (a traceback each, every retry) become the outage of the open stores (Outage).

    Its records do not say which pool failed: each PostgreSQL store open in the process counts it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.outages: weakref.WeakSet[Outage] = weakref.WeakSet()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING or not record.exc_info or record.exc_info[1] is None:
            return True
        for outage in list(self.outages):
            outage.lost("reconnecting the pool", record.exc_info[1])
        return False


_OUTAGE = _OutageLog()

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
_RELISTEN_SECONDS = 1.0  # between attempts to listen again after the listening connection was lost
# How asyncpg's protocol refuses to start a statement on a connection the server has ended (see PostgresDialect._lost).
_ENDED_BY_SERVER = ("cannot switch to state", "cannot process message")
_CLOSED_ADVICE = "the server closed the connection (a terminated backend, a restart); a new one is used"
# A spare connection unused for this long goes back to the pool before its next use (the pool's checks then apply:
# reconnecting a closed connection, expiring old ones).
_SPARE_IDLE = 10.0


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


def _alive(conn: Any) -> bool:
    """Tell whether a pool connection is still open (one the pool took back when it closed is not)."""
    try:
        return not conn.is_closed()
    except _exc.InterfaceError:  # detached from its connection: "released back to the pool"
        return False


def _rowcount(status: str) -> int:
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


class _PostgresTransaction:
    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return _rowcount(await self._conn.execute(sql, *params))

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Sequence[Any]]:
        return [tuple(record) for record in await self._conn.fetch(sql, *params)]


# The type each column is read as from a batch's JSON rows (text for the others: ids, statuses, JSON, which is
# stored as text).
_ROW_TYPES = {
    "seq": "int4",
    "grp": "int4",
    "attempts": "int4",
    "compensation_attempts": "int4",
    "reconciled": "int4",
    "recovery_attempts": "int4",
    "tokens": "int8",
    "cost": "float8",
    "lease_expires_at": "interval",  # what is left of the lease: written on the database's clock
    "created_at": "timestamptz",
    "updated_at": "timestamptz",
    "finished_at": "timestamptz",
    "purged_at": "timestamptz",
    "wake_at": "timestamptz",
    "started_at": "timestamptz",
    "compensated_at": "timestamptz",
}


_MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COST = SAGA_COLUMNS.index("cost")


def _instant(micros: str) -> str:
    """Return the SQL of the timestamptz `micros` microseconds (an int8 expression) after the epoch.

    Exact integer arithmetic (an interval times a whole number of seconds, then the microseconds left), whatever
    the session's time zone: the instant of the datetime sent, for any datetime. Times travel as these integers:
    the driver's timestamptz parameter compares each with its infinities and converts its zone, and a batch's JSON
    rows would format each as text.
    """
    return (
        f"('epoch'::timestamptz + ({micros} / 1000000) * interval '1 second' "
        f"+ ({micros} % 1000000) * interval '1 microsecond')"
    )


# Microseconds from the epoch a float8 holds exactly (the years 1685 to 2255): a time within them is read by
# `_near_instant`.
_NEAR = FLOAT_EXACT_MICROS
# Its negative, made once: `-_NEAR` written in a comparison makes a new int at every run (3 per step row written).
_FAR = -_NEAR


def _near_instant(micros: str) -> str:
    """Return the SQL of the timestamptz `micros` microseconds (an int8 expression, less than `_NEAR` either way)
    after the epoch.

    One product and one sum (`_instant` takes five operations and two casts: a server's work at every run, for each
    time of a lone write): the int8 becomes a float8 to multiply the interval, exact within `_NEAR`, and an interval
    of microseconds alone adds the same instant whatever the session's time zone.
    """
    return f"('epoch'::timestamptz + {micros} * interval '1 microsecond')"


def _json_default(value: Any) -> int | str:
    """Return a time or a lease length of a batch's rows as the value PostgreSQL reads it from."""
    if isinstance(value, datetime):
        since = value - _EPOCH  # timezone-aware (RowCodec.time_in): read by `_instant`
        return (since.days * 86400 + since.seconds) * 1000000 + since.microseconds
    if isinstance(value, timedelta):
        return f"{value // _MICROSECOND} microseconds"
    raise TypeError(f"{type(value).__name__} is not a column value")


# A batch's rows travel as one JSON array of arrays per part (one text parameter: asyncpg encodes it at once, where
# arrays cost a check of each element), read by the statement as jsonb (`_source`). Floats travel as their repr
# (the shortest text that reads back as the same float, NaN and infinities too), so no number is refused.
_ROWS_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, check_circular=False, separators=(",", ":"), default=_json_default
)
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
# The C encoder made once (`encode` makes one per call, and goes through `iterencode`): rows are flat, no cycle.
_ROWS_FAST: Any = (
    _C_ENCODER(None, _json_default, json.encoder.encode_basestring, None, ":", ",", False, False, False)
    if _C_ENCODER is not None
    else None  # pragma: no cover - CPython has the C encoder
)


def _ROWS_JSON(rows: Any) -> str:
    """Return a batch's rows (arrays of column values) as compact JSON text."""
    if _ROWS_FAST is None:  # pragma: no cover - CPython has the C encoder
        return _ROWS_ENCODER.encode(rows)
    return "".join(_ROWS_FAST(rows, 0))


def _saga_rows_json(rows: Sequence[Sequence[Any]]) -> str:
    """Return saga rows' parameters (and their extra values) as the JSON text `_source` reads."""
    texts = []
    for row in rows:
        cost = row[_COST]
        texts.append([*row[:_COST], None if cost is None else repr(float(cost)), *row[_COST + 1 :]])
    return _ROWS_JSON(texts)


def _jsonb_rows(types: Sequence[str], param: int) -> str:
    """Return the rows of a JSON array of arrays (parameter `param`) as a subquery, each value read as its type."""
    values = ", ".join(
        f"r->>{i}" if t == "text" else _instant(f"(r->>{i})::int8") if t == "timestamptz" else f"(r->>{i})::{t}"
        for i, t in enumerate(types)
    )
    return f"(SELECT {values} FROM jsonb_array_elements(${param}::text::jsonb) r)"


def _value(column: str, source: str) -> str:
    if column == "lease_expires_at":
        return f"clock_timestamp() + {source}.{column}"
    return f"{source}.{column}"


def _updated(column: str, modes: Sequence[str]) -> str:
    """Return what an owner-conditional update (`modes`: "update", "keep" or both) sets `column` to."""
    if column != "lease_expires_at" or modes == ["update"]:
        return _value(column, "u")
    if modes == ["keep"]:
        return f"t.{column}"
    return f"CASE WHEN u.mode = 'keep' THEN t.{column} ELSE {_value(column, 'u')} END"


def _values(columns: Sequence[str], source: str) -> str:
    return ", ".join(_value(column, source) for column in columns)


def _source(
    columns: Sequence[str],
    extra: Sequence[str],
    first: int,
    rows: int,
    constants: Sequence[str] = (),
    *,
    near: bool = False,
) -> tuple[str, int]:
    """Return the rows a part of the batch statement reads, and how many parameters they take.

    `rows` 0: one JSON array of arrays (`columns`, then the `extra` types, in each), one parameter; else that many
    rows of scalar parameters (VALUES), row by row. Scalars cost the client no encoding of a document, and the
    server no parsing; and only a statement of scalars gets a generic plan, kept for the prepared statement instead
    of planning it at every call. `constants` (scalar rows only): SQL literals of the first extra values, the same
    in every row (those of a batch of one write), written into the statement instead of sent as parameters. `near`
    (scalar rows only): every time sent is within `_NEAR` of the epoch (`_scalar`).
    """
    types = [*(_ROW_TYPES.get(c, "text") for c in columns), *extra]
    if not rows:
        assert not constants
        return _jsonb_rows(types, first), 1
    fixed = {len(columns) + i: f"{literal}::{extra[i]}" for i, literal in enumerate(constants)}
    sent = [i for i in range(len(types)) if i not in fixed]
    width = len(sent)

    def row(r: int) -> str:
        at = {i: _scalar(first + r * width + k, types[i], near) for k, i in enumerate(sent)}
        return "(" + ", ".join(fixed[i] if i in fixed else at[i] for i in range(len(types))) + ")"

    return f"(VALUES {', '.join(row(r) for r in range(rows))})", rows * width


def _scalar(param: int, kind: str, near: bool = False) -> str:
    """Return scalar parameter `param` read as `kind`; a time is sent as microseconds since the epoch (`_micros`),
    read by `_near_instant` if `near` (every time of the statement's write is within `_NEAR` of the epoch)."""
    if kind == "timestamptz":
        return _near_instant(f"${param}::int8") if near else _instant(f"${param}::int8")
    return f"${param}::{kind}"


# The positions of the times among a saga row's and a step row's parameters (sent by `_alone_statement` as ints).
_SAGA_TIMES = tuple(i for i, column in enumerate(SAGA_COLUMNS) if _ROW_TYPES.get(column) == "timestamptz")
_STEP_TIMES = tuple(i for i, column in enumerate(STEP_COLUMNS) if _ROW_TYPES.get(column) == "timestamptz")
_step_times = operator.itemgetter(*_STEP_TIMES)


def _micros(params: list[Any], start: int, positions: Sequence[int]) -> bool:
    """Replace the times among `params` (a row's, from `start`) with their microseconds since the epoch; return
    whether each is within `_NEAR` of it."""
    near = True
    for i in positions:
        value = params[start + i]
        if value is not None:
            since = value - _EPOCH  # (`// _MICROSECOND` costs the division of two ints made of each)
            micros = params[start + i] = (since.days * 86400 + since.seconds) * 1000000 + since.microseconds
            if not _FAR < micros < _NEAR:
                near = False
    return near


_SAGAS = ", ".join(SAGA_COLUMNS)
_STEPS = ", ".join(STEP_COLUMNS)
# Step rows a lone write sends as scalar parameters (VALUES) rather than a JSON document: its create (a plan of up
# to this many steps) or save takes a statement of its own shape, prepared once per connection. Batches of several
# writes (group commits under load) and longer plans send JSON rows: one statement whatever their size.
_VALUES_ROWS = 32
_MODES = {mode: frozenset(() if mode is None else (mode,)) for mode in (None, "create", "update", "keep", "upsert")}


@functools.lru_cache(maxsize=256)
def _batch_statement(
    modes: frozenset[str],
    checks: int,
    steps: bool,
    saga_rows: int = 0,
    step_rows: int = 0,
    gated: bool | None = None,
    near: bool = False,
) -> str:
    """Return the one statement that writes a batch of this shape (only the parts it needs: each plans quickly).

    Parameters, for the parts present: the saga rows as one JSON array of arrays, each row's columns then its write
    index, mode and expected owner (or, with `saga_rows`, those values row by row); the owner checks of writes
    without a saga row, and with them those of the owners' saga rows (index, saga id, owner: rows of a JSON array
    locked in their order, or scalars when `checks` is 1); the step rows
    as one JSON array of arrays, each row's columns then its write index and whether it is gated (or, with
    `step_rows`, those values row by row).

    Saga rows are inserted if absent (`create`), upserted (`upsert`: no owner), or updated where the stored owner is
    the expected one (`update`: a conditional UPDATE, which re-checks the owner on the current row once it holds its
    lock; `keep`: the same, leaving the stored lease as it is, so that no indexed column moves). Writes with an
    owner and no saga row lock their saga row `FOR UPDATE` where the owner matches (re-checked likewise). A gated
    step row (of a create or an owner-conditional write) is written only if its write passed.
    Returns the indexes of the writes that passed their condition.

    `gated` given (a batch of one write, in scalars): the write's index (0), its mode and whether its step rows are
    gated are the statement's own constants, not parameters (fewer parameters for the driver to encode); `near`:
    every time among its scalars is within `_NEAR` of the epoch (read the cheaper way: `_near_instant`).
    """
    one = gated is not None
    parts: list[str] = []
    passed: list[str] = []
    n = 1
    if one and modes and "keep" not in modes:
        # The one saga row written straight from its parameters (no rows to scan and join: fewer nodes for the
        # server to set up at every run); the expected owner is a parameter of an update only.
        mode = next(iter(modes))
        given = [_scalar(n + i, _ROW_TYPES.get(column, "text"), near) for i, column in enumerate(SAGA_COLUMNS)]
        at = SAGA_COLUMNS.index("lease_expires_at")
        values = [*given[:at], f"clock_timestamp() + {given[at]}", *given[at + 1 :]]  # a lease: what is left of it
        n += len(SAGA_COLUMNS)
        if mode == "update":
            expected = f"${n}::text"
            n += 1
            update_set = ", ".join(f"{c} = {v}" for c, v in zip(SAGA_COLUMNS[1:], values[1:], strict=True))
            parts.append(
                f"updated AS (UPDATE sagas t SET {update_set} WHERE t.saga_id = {given[0]} AND t.owner = {expected} "
                f"AND {unasked(expected, 't.')} RETURNING 0::int4 AS w)"
            )
            passed.append("SELECT w FROM updated")
        else:
            insert = f"INSERT INTO sagas ({_SAGAS}) VALUES ({', '.join(values)})"
            if mode == "create":
                parts.append(f"created AS ({insert} ON CONFLICT (saga_id) DO NOTHING RETURNING 0::int4 AS w)")
                passed.append("SELECT w FROM created")
            else:
                saga_set = ", ".join(f"{c} = excluded.{c}" for c in SAGA_COLUMNS[1:])
                parts.append(f"upserted AS ({insert} ON CONFLICT (saga_id) DO UPDATE SET {saga_set})")
    elif modes:
        constants = ("0", f"'{next(iter(modes))}'") if one else ()
        source, used = _source(SAGA_COLUMNS, ("int4", "text", "text"), n, saga_rows, constants, near=near)
        parts.append(f"u AS (SELECT * FROM {source} AS u({_SAGAS}, w, mode, expected))")
        n += used
        insert = f"INSERT INTO sagas ({_SAGAS}) SELECT {_values(SAGA_COLUMNS, 'u')} FROM u"
        if "create" in modes:
            parts.append(
                f"created AS ({insert} WHERE u.mode = 'create' ON CONFLICT (saga_id) DO NOTHING RETURNING saga_id)"
            )
            passed.append("SELECT u.w FROM u JOIN created ON created.saga_id = u.saga_id WHERE u.mode = 'create'")
        if "upsert" in modes:
            saga_set = ", ".join(f"{c} = excluded.{c}" for c in SAGA_COLUMNS[1:])
            parts.append(
                f"upserted AS ({insert} WHERE u.mode = 'upsert' ON CONFLICT (saga_id) DO UPDATE SET {saga_set})"
            )
        updates = sorted(modes & {"update", "keep"})
        if updates:
            update_set = ", ".join(f"{c} = {_updated(c, updates)}" for c in SAGA_COLUMNS[1:])
            which = f"u.mode = '{updates[0]}'" if len(updates) == 1 else "u.mode IN ('keep', 'update')"
            parts.append(
                f"updated AS (UPDATE sagas t SET {update_set} FROM u WHERE {which} "
                f"AND t.saga_id = u.saga_id AND t.owner = u.expected AND {unasked('u.expected', 't.')} RETURNING u.w)"
            )
            passed.append("SELECT w FROM updated")
    if checks:
        parts.append(
            # Each check looks its saga row up by the primary key (LATERAL: a nested loop the planner cannot turn
            # into a hash join, which scans every saga row at every batch, as it costs the JSON rows as 100).
            f"checked AS (SELECT c.w FROM {_jsonb_rows(('int4', 'text', 'text'), n)} AS c(w, saga_id, owner) "
            f"CROSS JOIN LATERAL (SELECT FROM sagas t WHERE t.saga_id = c.saga_id AND t.owner = c.owner "
            f"AND {unasked('c.owner', 't.')} FOR UPDATE) AS t)"
            if checks > 1
            # One check (a lone save: the usual case) in scalars: PostgreSQL costs an array as 10 elements, so only
            # this form gets a generic plan, kept for the prepared statement instead of planning it at every call.
            else f"checked AS (SELECT {'0' if one else f'${n}'}::int4 AS w FROM sagas t "
            f"WHERE t.saga_id = ${n + 1 - one}::text AND t.owner = ${n + 2 - one}::text "
            f"AND {unasked(f'${n + 2 - one}::text', 't.')} FOR UPDATE)"
        )
        # First: the rows it locks (in the order of its rows) are locked before any saga row is updated.
        passed.insert(0, "SELECT w FROM checked")
        n += (3 - one) if checks == 1 else 1
    # What holds the indexes of the writes that passed: the one part that tells (a lone save's `checked`, say) as
    # it is, or the union of the parts (each a node less for the server to set up at every run).
    passing = "passed"
    if len(passed) == 1 and passed[0].startswith(_READ_W):
        passing = passed[0].removeprefix(_READ_W)
    elif passed:
        parts.append(f"passed AS ({' UNION ALL '.join(passed)})")
    if steps:
        step_set = ", ".join(f"{c} = excluded.{c}" for c in STEP_COLUMNS[3:])
        if one:
            # The one write's rows: written if it passed (when gated), a test run once (an InitPlan), not a hashed
            # lookup of each row's write index, which they do not carry.
            gate = f" WHERE EXISTS (SELECT FROM {passing})" if passed and gated else ""
            source, _ = _source(STEP_COLUMNS, (), n, step_rows, near=near)
            columns = _STEPS
        else:
            gate = f" WHERE NOT s.gated OR s.w IN (SELECT w FROM {passing})" if passed else ""
            source, _ = _source(STEP_COLUMNS, ("int4", "bool"), n, step_rows)
            columns = f"{_STEPS}, w, gated"
        parts.append(
            f"stepped AS (INSERT INTO steps ({_STEPS}) SELECT {_values(STEP_COLUMNS, 's')} "
            f"FROM {source} AS s({columns}){gate} "
            f"ON CONFLICT (saga_id, step_id) DO UPDATE SET {step_set})"
        )
    # Data-modifying parts run to completion whether or not the final SELECT reads them.
    return f"WITH {', '.join(parts)} SELECT w FROM {passing if passed else '(SELECT 0 AS w) AS nothing WHERE false'}"


_READ_W = "SELECT w FROM "


def _mode(write: Write) -> str:
    """Return how a write's saga row is written (see `_batch_statement`)."""
    if write.create:
        return "create"
    if write.owner is None:
        return "upsert"
    return "keep" if write.keep_lease else "update"


def _alone_statement(write: Write) -> tuple[str, list[Any]]:
    """Return `_batch_statement` for a batch of the one `write` in scalar parameters, and its parameters."""
    saga, owner, steps = write.saga, write.owner, write.steps
    checks = 0
    mode = None
    near = True
    if saga is not None:
        mode = _mode(write)
        params = [*saga]
        near = _micros(params, 0, _SAGA_TIMES)
        if owner is not None and mode != "create":  # the expected owner (`_batch_statement`: a create has none)
            params.append(owner)
    elif owner is not None:
        checks = 1
        params = [write.saga_id, owner]
    else:
        params = []
    for row in steps:
        params += row
        # (Its times are microseconds already: RowCodec's `step_micros`. None of the process's rows has had a far
        # one so far, the usual case: this row has none either.)
        if near and RowCodec.far_step_times:
            started, finished, compensated = _step_times(row)
            if not (
                (started is None or _FAR < started < _NEAR)
                and (finished is None or _FAR < finished < _NEAR)
                and (compensated is None or _FAR < compensated < _NEAR)
            ):
                near = False
    key = (mode, checks, len(steps), write.create or owner is not None, near)
    shape = _ALONE_SHAPES.get(key)
    if shape is None:
        count = len(steps)
        shape = _ALONE_SHAPES[key] = _batch_statement(
            _MODES[mode], checks, count > 0, int(mode is not None), count, key[3], near
        )
    return shape, params


# `_alone_statement`'s statements by their shape: (mode, checks, step rows, conditional, near).
_ALONE_SHAPES: dict[tuple[str | None, int, int, bool, bool], str] = {}


# What PostgreSQL's SQL differs in (saga_runtime._storage._flavour): the database's clock (`now()` is STABLE, so
# the lease index still serves a comparison), row locks skipping those held, numbered placeholders, NOTIFY and
# RETURNING, transactional DDL.
def _enqueued(update: str) -> str:
    """Return the UPDATE setting a saga's queue as one statement notifying the queue channel when it commits."""
    return f"WITH queued AS ({update} RETURNING queue) SELECT pg_notify('{QUEUED_CHANNEL}', queue) FROM queued"


def _message_put(insert: str) -> str:
    """Return a message's INSERT as one statement storing it, making its saga due if it waits, and notifying."""
    return (
        f"WITH m AS ({insert} RETURNING saga_id, sent_at), w AS (UPDATE sagas SET wake_at = m.sent_at FROM m "
        "WHERE sagas.saga_id = m.saga_id AND sagas.status = 'WAITING') "
        f"SELECT pg_notify('{QUEUED_CHANNEL}', 'message:' || saga_id) FROM m"
    )


# PostgreSQL's LISTEN/NOTIFY statements: idle workers listening are told when a statement commits.
NOTICES = Notices(
    enqueued=_enqueued,
    message_put=_message_put,
    queued=f"SELECT pg_notify('{QUEUED_CHANNEL}', ?)",
    decided=f"SELECT pg_notify('{DECIDED_CHANNEL}', '')",
)
# A claim's commit does not wait for the disk: synchronous_commit off for its transaction only.
UNSYNCED_COMMIT = "SELECT set_config('synchronous_commit', 'off', true)"

FLAVOUR = Flavour(
    types={
        "id": 'TEXT COLLATE "C"',
        "short": "TEXT",
        "text": "TEXT",
        "json": "JSONB",
        "time": "TIMESTAMPTZ",
        "int": "INTEGER",
        "bigint": "BIGINT",
        "float": "DOUBLE PRECISION",
    },
    table_suffix="",
    placeholders=numbered_placeholders,
    now_sql="now()",
    lease_sql="clock_timestamp() + ?::interval",
    clock_sql="SELECT clock_timestamp()",
    lock_row=" FOR UPDATE",
    lock_reread="",
    lock_skip=" FOR UPDATE SKIP LOCKED",
    # It locks only the rows it returns and skips those another claimer holds.
    lock_queue_scan=" FOR UPDATE SKIP LOCKED",
    lock_purge_scan=" FOR UPDATE OF s SKIP LOCKED",
    insert_ignore=insert_ignore_on_conflict,
    upsert=upsert_on_conflict,
    table_exists="SELECT COUNT(*) FROM pg_catalog.pg_tables WHERE tablename = ? AND schemaname = current_schema()",
    notices=NOTICES,
    returning=True,
    unsynced_commit=UNSYNCED_COMMIT,
    alter_one_column=False,
    partial_indexes=True,
    # A step row is inserted at its intent, then updated once with its result: with sagas running side by side,
    # full pages leave that update no room, and it writes a new entry in the steps' index.
    steps_fillfactor=70,
    index_renames=True,
    json_as_text=json_columns_retyped,
    time_value=lambda value: value,
    local_clock=False,
    lease_length=lambda length: length,
    ids_as_bytes=False,
    # One text[] of the ids: a list of `count` placeholders would be a statement of its own for every count, each
    # prepared on each connection.
    id_array=" = ANY(?::text[])",
)


class PostgresDialect(Dialect):
    """Sagas in a PostgreSQL database, through a pool of asyncpg connections."""

    name = "postgresql"
    flavour = FLAVOUR

    def __init__(self, url: str, pool: Any, *, retry_for: float = DEFAULT_RETRY_FOR) -> None:
        super().__init__(url, retry_for=retry_for, writers=pool.get_max_size())
        # Step rows' times as microseconds since the epoch, as `_alone_statement`'s scalars and a batch's JSON rows
        # send them: converted once, as the codec makes the row, not again in a copy of its parameters.
        self.codec = RowCodec(self.flavour, step_micros=True)
        self._pool = pool
        # One connection the store keeps between calls instead of handing it back to the pool: a saga written one
        # step at a time then costs one round trip per write and nothing else (a pool's release is a shielded task,
        # three turns of the event loop). Kept only while no call waits for the pool, and never inside a transaction.
        self._spare: Any = None
        # The spare's asyncpg connection itself (the pool's proxy of it, `_spare`, is what goes back to the pool):
        # the hot path calls it directly, without the proxy's wrapper around every method.
        self._spare_con: Any = None
        self._spare_since = 0.0  # when the spare was last kept (time.monotonic)
        # The lone write's statements prepared on one asyncpg connection (`_prepared_on`), by their SQL: run through
        # the driver's protocol directly (`_run_prepared`), without the four coroutines of `fetch` around it (about
        # 25 K instructions a write). Kept by their keys in the driver's own cache, looked up there at each run: a
        # look-up marks the statement used (the cache drops the one used longest ago first) and drops one the driver
        # closed.
        self._prepared: dict[str, Any] = {}
        self._prepared_on: Any = None
        self._direct = True  # False once this asyncpg turned out not to take the direct call: `fetch` always
        self._waiting = 0  # calls waiting for a connection from the pool
        self._listen_dsn: str | None = None  # where queue_wakeups connects (set by connect)
        self._listen_timeout = 10.0

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        min_size: int | None = None,
        max_size: int | None = None,
        connect_timeout: float | None = None,
        command_timeout: float | None = None,
        retry_for: float | None = None,
    ) -> PostgresDialect:
        """Connect a pool to the PostgreSQL database at `url`."""
        redacted = redact_url(url)
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        low, high = pool_sizes(min_size, max_size, query)
        timeout = float(url_option(connect_timeout, query, "connect_timeout", 10.0))
        if command_timeout is None and "command_timeout" in query:
            command_timeout = float(query.pop("command_timeout"))
        retry = retry_for_option(retry_for, query)
        dsn = parts._replace(scheme="postgresql", query=urlencode(query)).geturl()
        logging.getLogger("asyncpg.pool").addFilter(_OUTAGE)  # added once: the same filter object
        with map_exceptions(redacted, connecting=True):
            pool = await asyncpg.create_pool(
                dsn,
                min_size=low,
                max_size=high,
                timeout=timeout,
                command_timeout=command_timeout,
                reset=_keep_session,
            )
        dialect = cls(url, pool, retry_for=retry)
        _OUTAGE.outages.add(dialect.outage)
        dialect._listen_dsn, dialect._listen_timeout = dsn, timeout
        return dialect

    @asynccontextmanager
    async def transaction(self, *, begin: bool) -> AsyncIterator[Transaction]:
        with map_exceptions(self.url):
            conn = await self._connection()
            kept = False
            try:
                try:
                    if not begin:
                        # Autocommit: each statement is atomic on its own, in one round trip.
                        yield _PostgresTransaction(conn)
                    else:
                        async with conn.transaction():
                            yield _PostgresTransaction(conn)
                except _CATCH as exc:
                    raise self._lost(conn, exc) from exc
                kept = self._keep(conn)
            finally:
                if not kept:
                    await self._release(conn)

    async def _release(self, conn: Any) -> None:
        """Give a connection back to the pool, first rolling back what a cancelled caller left open.

        The pool would roll it back too, but saying "Resetting connection with an active transaction" on stderr.
        """
        with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
            with suppress(Exception):  # a lost connection: the pool drops it
                if _alive(conn) and conn.is_in_transaction():
                    await conn.execute("ROLLBACK")
        await self._pool.release(conn)  # shielded by the pool

    async def _autocommit_fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """Run one statement in autocommit and return its records: `transaction(begin=False)`, inlined.

        The hot path of every write: no context manager objects, no pool proxy between the call and asyncpg.
        """
        conn = self._spare
        if conn is not None and time.monotonic() - self._spare_since < _SPARE_IDLE and _alive(conn):
            self._spare = None  # the usual case, without `_connection`'s coroutine
        else:
            try:
                conn = await self._connection()
            except _CATCH as exc:
                raise convert(exc, ERROR_MAP, self.url) from exc
        kept = False
        try:
            try:
                records: list[Any] = await conn.fetch(sql, *params)
            except _CATCH as exc:
                raise self._lost(conn, exc) from exc
            kept = self._keep(conn)
            return records
        finally:
            if not kept:
                await self._give_back(conn)

    async def _give_back(self, conn: Any) -> None:
        """Release a connection of `_autocommit_fetch` (or its inlined copy) to the pool."""
        try:
            await self._pool.release(conn)  # shielded by the pool, as in `transaction`
        except _CATCH as exc:
            raise convert(exc, ERROR_MAP, self.url) from exc

    async def _connection(self) -> Any:
        """Return the spare connection if it is free, else one from the pool (released by `transaction`)."""
        conn, self._spare = self._spare, None
        if conn is not None:
            if time.monotonic() - self._spare_since < _SPARE_IDLE and _alive(conn):
                return conn
            # Closed while it waited (a server restart, an idle timeout: the pool has taken it back already) or
            # idle for long: back to the pool, which reconnects a closed connection and expires old ones.
            await self._pool.release(conn)
        self._waiting += 1
        try:
            return await _whole(self._pool.acquire(), self._pool.release)
        finally:
            self._waiting -= 1

    def _keep(self, conn: Any) -> bool:
        """Keep `conn` as the spare if it is healthy, idle, and no call is waiting for the pool (so none starves)."""
        if self._spare is not None or self._waiting or self.closed:
            return False
        con = conn._con  # the proxy's connection; None once the pool took it back
        if con is None or con.is_closed() or con.is_in_transaction():
            return False
        self._spare, self._spare_con, self._spare_since = conn, con, time.monotonic()
        return True

    def _remember(self, con: Any, sql: str) -> None:
        """Keep the statement `fetch` prepared for `sql` on `con` (its driver's cached one) for `_run_prepared`."""
        if con is not self._prepared_on:
            self._prepared, self._prepared_on = {}, con
        try:
            key = (sql, con._protocol.get_record_class(), False)
            known = con._stmt_cache.get(key) is not None
        except AttributeError:  # pragma: no cover - another asyncpg: `fetch` always
            self._direct = False
            return
        if known:
            self._prepared[sql] = key

    def _lost(self, conn: Any, exc: BaseException) -> StoreError:
        """Return the StoreError of a driver error; if the connection is lost, close it so the pool never reuses it.

        A connection closed under the error is lost whatever the error says ("connection is closed", say).
        """
        try:
            closed = conn.is_closed()
        except _exc.InterfaceError:  # the pool detached it from its connection, which closed
            closed = True
        if isinstance(exc, _exc.InternalClientError) and str(exc).startswith(_ENDED_BY_SERVER):
            # The server ended the connection (a terminated backend, a restart): its last words, an unsolicited
            # error, left asyncpg's protocol waiting for more, and the next statement cannot start ("cannot switch
            # to state ..."). A lost connection, not a bug: nothing was sent, and the call is retried on another.
            if not closed:
                conn.terminate()
            return StoreConnectionError(
                f"lost the connection to {self.url}: the server ended it (its backend was terminated, or the "
                "server restarted); a new connection is used",
                url=self.url,
            )
        error = convert(exc, ERROR_MAP, self.url)
        if closed and not isinstance(error, StoreConnectionError):
            error = convert(exc, ERROR_MAP, self.url, kind=StoreConnectionError, advice=_CLOSED_ADVICE)
        if isinstance(error, StoreConnectionError) and not closed:
            # The pool drops a closed connection on release and opens a new one on the next acquire.
            conn.terminate()
        return error

    async def write_batch(self, writes: Sequence[Write]) -> Sequence[Outcome | Exception]:
        """Write a batch in one statement (see `_batch_statement`): atomic on its own, one round trip.

        Scalars for a lone write (the latency of one saga at a time); a batch of several sends its rows as JSON
        documents (`_source`), so that batches of every size share a few statements instead of preparing one per
        shape on every connection.
        """
        if len(writes) == 1 and len(writes[0].steps) <= _VALUES_ROWS:
            # `_autocommit_fetch`, inlined (a coroutine less per write): the hot path of a saga written alone.
            write = writes[0]
            sql, params = _alone_statement(write)
            conn, con = self._spare, self._spare_con
            if conn is not None and time.monotonic() - self._spare_since < _SPARE_IDLE and not con.is_closed():
                self._spare = None  # the usual case: the spare's own connection, called without the pool's proxy
            else:
                con = None
                try:
                    conn = await self._connection()
                except _CATCH as exc:
                    raise convert(exc, ERROR_MAP, self.url) from exc
            kept = False
            try:
                try:
                    if con is None:
                        records = await conn.fetch(sql, *params)
                    else:
                        key = self._prepared.get(sql) if con is self._prepared_on else None
                        # (None from the cache: the driver dropped or closed it; `fetch` prepares it again)
                        state = None if key is None else con._stmt_cache.get(key)
                        running = None
                        if state is not None:
                            try:
                                running = _run_prepared(con, state, params)
                            except (TypeError, AttributeError):  # pragma: no cover - an asyncpg of other internals
                                self._direct = False
                                self._prepared.clear()
                        if running is not None:
                            records = await running
                        else:
                            records = await con.fetch(sql, *params)
                            if self._direct:
                                self._remember(con, sql)
                except _exc.InvalidCachedStatementError:
                    # The statement outlived a change of its tables (a migration): `fetch` prepares it again.
                    self._prepared.clear()
                    try:
                        records = await conn.fetch(sql, *params)
                    except _CATCH as exc:
                        raise self._lost(conn, exc) from exc
                except _CATCH as exc:
                    raise self._lost(conn, exc) from exc
                kept = self._keep(conn)
            finally:
                if not kept:
                    await self._give_back(conn)
            if records or not (write.create or write.owner is not None):
                return [Outcome.WRITTEN]
            return [Outcome.TAKEN if write.create else Outcome.LOST]
        # Saga rows and owner checks in saga_id order: the order every statement locking several saga rows takes
        # them in (a lease renewal's too), so that two of them never wait on each other's rows (a deadlock).
        ordered = sorted(enumerate(writes), key=lambda pair: pair[1].saga_id)
        sagas = [(i, write, write.saga) for i, write in ordered if write.saga is not None]
        owned = [(i, write) for i, write in ordered if write.owner is not None and not write.create]
        checks = [(i, write) for i, write in owned if write.saga is None]
        if checks and len(checks) < len(owned):
            # Saga rows updated by their owner too: their owners are checked with the others', so that one pass
            # locks every saga in saga_id order (the update, run after it, finds its rows held already).
            checks = owned
        steps = [
            (i, row, write.owner is not None or write.create) for i, write in enumerate(writes) for row in write.steps
        ]
        modes = [_mode(write) for _, write, _ in sagas]
        params = []
        if sagas:
            rows = [(*row, i, mode, write.owner) for (i, write, row), mode in zip(sagas, modes, strict=True)]
            params.append(_saga_rows_json(rows))
        if len(checks) == 1:
            ((i, write),) = checks
            params += [i, write.saga_id, write.owner]
        elif checks:
            params.append(_ROWS_JSON([(i, write.saga_id, write.owner) for i, write in checks]))
        if steps:
            params.append(_ROWS_JSON([(*row, i, gated) for i, row, gated in steps]))
        sql = _batch_statement(frozenset(modes), min(len(checks), 2), bool(steps))
        passed = {record[0] for record in await self._autocommit_fetch(sql, params)}
        outcomes: list[Outcome | Exception] = []
        for i, write in enumerate(writes):
            if i in passed or not (write.create or write.owner is not None):
                outcomes.append(Outcome.WRITTEN)
            else:
                outcomes.append(Outcome.TAKEN if write.create else Outcome.LOST)
        return outcomes

    @asynccontextmanager
    async def queue_wakeups(self, wake: Callable[[str], None]) -> AsyncIterator[bool]:
        """LISTEN for submits on a connection of its own (not the pool's), reconnecting when it is lost."""
        if self._listen_dsn is None:
            yield False
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._listen, wake)
            try:
                yield True
            finally:
                tg.cancel_scope.cancel()

    async def _listen(self, wake: Callable[[str], None]) -> None:
        def notified(_conn: Any, _pid: int, channel: str, payload: str) -> None:
            wake(DECISION_WAKE if channel == DECIDED_CHANNEL else payload)

        down = False
        while True:
            lost = anyio.Event()
            conn: Any = None
            try:
                conn = await _whole(asyncpg.connect(self._listen_dsn, timeout=self._listen_timeout), _close)
                conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                await conn.add_listener(QUEUED_CHANNEL, notified)
                await conn.add_listener(DECIDED_CHANNEL, notified)
                if down:
                    logger.info("listening for submits to %s again", self.url)
                    wake("")  # submits made while it was down were not heard
                down = False
                await lost.wait()
            except Exception as exc:  # a lost wakeup never stops a worker: it polls
                if isinstance(convert(exc, ERROR_MAP, self.url), StoreConnectionError):
                    self.outage.lost("listening for submits", exc)  # the outage's one line, if it is the first
                elif not down:
                    logger.warning(
                        "cannot listen for submits to %s (%s); its workers poll until it can again",
                        self.url,
                        exc,
                    )
                down = True
            finally:
                if conn is not None and not conn.is_closed():
                    with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
                        await conn.close()
            await anyio.sleep(_RELISTEN_SECONDS)

    def schema_transaction(self) -> AbstractAsyncContextManager[Transaction]:
        return self._locked_transaction()

    @asynccontextmanager
    async def _locked_transaction(self) -> AsyncIterator[Transaction]:
        # PostgreSQL's DDL is transactional: a migration is all or nothing, under an advisory lock.
        async with self.transaction(begin=True) as tx:
            await tx.fetch(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})")
            yield tx

    async def close(self) -> None:
        _OUTAGE.outages.discard(self.outage)
        with anyio.move_on_after(_CLEANUP_SECONDS, shield=True) as scope, map_exceptions(self.url):
            spare, self._spare = self._spare, None
            if spare is not None:
                await self._pool.release(spare)  # the pool's close waits for every connection to be released
            await self._pool.close()
        if scope.cancelled_caught:
            self._pool.terminate()


def _run_prepared(con: Any, state: Any, params: Sequence[Any]) -> Awaitable[list[Any]]:
    """Return the run of a statement prepared on `con` with `params`: what `con.fetch` does once it found it.

    Left out, as the store needs none of it: query loggers, the section that refuses a second operation at once (the
    spare connection has one caller), and the retry of a statement invalidated by a schema change (the caller's).
    """
    result: Awaitable[list[Any]] = con._protocol.bind_execute(state, params, "", 0, False, None)
    return result


async def _whole(opening: Coroutine[Any, Any, Any], undo: Callable[[Any], Awaitable[Any]]) -> Any:
    """Return what `opening` opens; if the caller is cancelled meanwhile, let it finish (bounded), then `undo` it.

    asyncpg cut in the middle of opening a connection leaves a future nobody reads: "Future exception was never
    retrieved" at exit, as when a worker is stopped in its first second.
    """
    task = asyncio.ensure_future(opening)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with anyio.move_on_after(_CLEANUP_SECONDS, shield=True):
            try:
                opened = await task
            except Exception:  # the caller left: nobody is told
                pass
            else:
                await undo(opened)
        task.cancel()
        raise


async def _close(conn: Any) -> None:
    await conn.close()


async def open_sql(url: str, **options: Any) -> SQLStore:
    """Open the SQL store on the PostgreSQL database at `url` (options: see PostgresDialect.connect)."""
    return await SQLStore.open(await PostgresDialect.connect(url, **options))
