"""The protocol's own floor: what a durable 10-step saga one at a time costs with no engine at all.

benchmarks.durable measures the real saga against the raw driver's floor (benchmarks._floors: ten autocommitted
INSERTs). This script puts two kinds of saga between them, measured with the floor and the real saga interleaved
round by round in one process, on a database of its own (PostgreSQL: on the server of
SAGA_RUNTIME_BENCH_POSTGRES_URL, created and dropped; SQLite: a temporary directory):

- REPLAY: the real saga's statements, captured once, sent again with fresh ids through the raw driver exactly as the
  store sends them (PostgreSQL: the store's prepared statements, bound and run on asyncpg's protocol; SQLite: one trip
  to aiosqlite's thread per write, a transaction's statements in one trip, on a connection with the store's pragmas).
  What the durable protocol's statements cost on their own.
- MINIMAL: REPLAY's statements, each row built by hand as the protocol requires (saga id, idempotency keys, the clock
  read before each write, identity links, step and saga seals, JSON) between the sends. The least Python any client
  of the protocol runs. One MINIMAL saga is checked before anything is measured: its rows with the store's
  `verify_saga`, its statements against the real saga's (the same SQL, parameters of the same types); the script
  refuses to report if either fails.

For each run: the median wall-clock time and client CPU time (`time.process_time`, the whole process) per saga of
each kind, and each as a multiple of the floor's, then the medians of the runs. MINIMAL's multiples are about the
least an engine of this protocol can reach on this machine; REPLAY's, what the statements alone cost.

    python -m benchmarks.profile_protocol [postgresql|sqlite] [--sagas N] [--runs R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks._floors import Floor, database, server_floor, sqlite_floor
from benchmarks.durable import PLAN, registry
from saga_runtime import SagaExecutor, open_store
from saga_runtime._records._chain import plan_digest
from saga_runtime._storage import _postgres, _sqlite
from saga_runtime._storage._codec import SAGA_COLUMNS

KINDS = ("floor", "saga", "replay", "minimal")
# Rounds run before the measured ones, each kind once per round: caches, prepared statements, the file's pages.
WARM_UP = 20

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_sha256 = hashlib.sha256
# The protocol's JSON (compact, keys sorted) and JSON string quoting, as the records are sealed with.
_dumps = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode
_quote = json.encoder.encode_basestring

# What one saga's writes are, in order (see `Minimal.writes`): the saga row with the first step's intent; a step's
# outcome with the next step's intent (nine times); the finished saga row with the last step's outcome.
CREATE, STEP, FINISH = 0, 1, 2


def _now() -> tuple[int, str]:
    """Read the clock: microseconds since the epoch, and the ISO text the seals take."""
    micros = time.time_ns() // 1000
    return micros, (_EPOCH + timedelta(microseconds=micros)).isoformat(timespec="microseconds")


class Minimal:
    """The protocol's Python per saga, written by hand: ids, clock, keys, links, seals, JSON, the rows.

    What stays the same from saga to saga (the plan, its hash and digest, the owner, the lease) is taken once from a
    real saga's first and last saga rows; a kept plan's digest is hashed once per plan, not per saga.
    """

    def __init__(
        self,
        created: Sequence[Any],
        finished: Sequence[Any],
        stamp: Callable[[int, str], Any],
        lease: Callable[[tuple[int, str]], Any],
    ) -> None:
        self.kind, self.plan_text, self.plan_hash = created[1], created[2], created[3]
        self.owner, self.final_lease = created[5], finished[6]
        # The lease a new saga is written with, from its creation time.
        self.lease = lease
        self.cost, self.tokens, self.meta = created[8], created[9], created[10]
        # What the store binds for a NULL (SQLite: a NaN float, see saga_runtime._storage._sqlite._null_parameter).
        self.null = created[7]
        # A time as the store binds it, from the clock's microseconds and ISO text.
        self.stamp = stamp
        plan = json.loads(self.plan_text)
        self.digest = plan_digest(plan)
        self.steps = [(group[0]["id"], group[0]["tool"], group[0]["args"]) for group in plan]

    def _saga_seal(self, saga_id: str, status: str, created: str, finished: str | None) -> str:
        end = "null" if finished is None else f'"{finished}"'
        text = (
            f'["saga",{_quote(saga_id)},"{self.kind}","{self.digest}","{self.plan_hash}","{status}",null,'
            f'"{float(self.cost)!r}",{self.tokens},{{}},null,"{created}",{end},null]'
        )
        return _sha256(text.encode()).hexdigest()

    @staticmethod
    def _step_tail(status: str, result: str, started: str, finished: str | None, link: str) -> bytes:
        """The sealed text of a step row after its fixed part (what changes from intent to outcome)."""
        end = "null" if finished is None else f'"{finished}"'
        return f'"{status}",1,{result},null,null,"{started}",{end},null,null,0,"{link}"]'.encode()

    def _saga_row(
        self, saga_id: str, status: str, lease: Any, created: tuple[int, str], end: tuple[int, str] | None
    ) -> list[Any]:
        null = self.null
        created_at = self.stamp(*created)
        updated_at, finished_at = (created_at, null) if end is None else (self.stamp(*end),) * 2
        seal = self._saga_seal(saga_id, status, created[1], None if end is None else end[1])
        return [
            saga_id, self.kind, self.plan_text, self.plan_hash, status, self.owner, lease, null, self.cost,
            self.tokens, self.meta, null, created_at, updated_at, finished_at, 0, null, null, seal,
            null, null, null, null, null,
        ]  # fmt: skip

    def writes(self) -> Iterator[tuple[int, str, list[Any], list[Any]]]:
        """Yield one saga's writes as (what, saga id, first row, second row), the clock read just before each, as
        the engine reads it; the tool (a no-op) runs between a step's intent and its outcome."""
        null = self.null
        saga_id = uuid.uuid4().hex
        quoted = _quote(saga_id)
        created = _now()
        link = _sha256(f'["saga",{quoted}]'.encode()).hexdigest()
        outcome: list[Any] = []
        finished = created
        for seq, (step_id, tool, args) in enumerate(self.steps):
            key = "sr-" + _sha256(f"[{json.dumps(saga_id)}, {json.dumps(step_id)}]".encode()).hexdigest()[:40]
            args_text = _dumps(args)
            # The fixed part of the step's sealed text, hashed once for both its seals (intent and outcome).
            fixed = _sha256(
                f"[{quoted},{seq},{_quote(step_id)},{seq},{_quote(tool)},{args_text},{_quote(key)},".encode()
            )
            started = created if seq == 0 else _now()
            seal = fixed.copy()
            seal.update(self._step_tail("RUNNING", "null", started[1], None, link))
            intent = [
                saga_id, seq, step_id, seq, tool, args_text, key, "RUNNING", 1, null, null, null,
                self.stamp(*started), null, null, null, 0, link, seal.hexdigest(), "1", 0,
            ]  # fmt: skip
            if seq == 0:
                yield CREATE, saga_id, self._saga_row(saga_id, "RUNNING", self.lease(created), created, None), intent
            else:
                yield STEP, saga_id, outcome, intent
            result = _dumps(args["n"])  # Noop's result
            finished = _now()
            seal = fixed.copy()
            seal.update(self._step_tail("SUCCESS", result, started[1], finished[1], link))
            outcome = [
                saga_id, seq, step_id, seq, tool, args_text, key, "SUCCESS", 1, result, null, null,
                self.stamp(*started), self.stamp(*finished), null, null, 0, link, seal.hexdigest(), "1", 0,
            ]  # fmt: skip
            # The next step's identity link: this step's identity, hashed.
            link = _sha256(
                f"[{quoted},{seq},{_quote(step_id)},{seq},{_quote(tool)},{_quote(key)}]".encode()
            ).hexdigest()
        yield FINISH, saga_id, self._saga_row(saga_id, "SUCCESS", self.final_lease, created, finished), outcome


@contextlib.asynccontextmanager
async def _url(store: str) -> AsyncIterator[tuple[str, Path | None]]:
    """Yield the store's URL on a database of the run's own, and (SQLite) the folder the floor's file goes in."""
    if store == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{Path(folder) / 'sagas.db'}", Path(folder)
    else:
        async with database(store) as url:
            yield url, None


class _Fresh:
    """A captured statement's parameters, made a new saga's: its id and idempotency keys replaced.

    Where they are is found once, so a replayed saga pays for the copies of its parameters only.
    """

    __slots__ = ("_ids", "_keys", "_params")

    def __init__(self, params: Sequence[Any], saga_id: str) -> None:
        self._params = list(params)
        self._ids = [i for i, value in enumerate(params) if value == saga_id]
        self._keys = [i for i, value in enumerate(params) if isinstance(value, str) and value.startswith("sr-")]

    def made(self, new_id: str) -> list[Any]:
        params = self._params
        fresh = params.copy()
        for i in self._ids:
            fresh[i] = new_id
        for i in self._keys:
            fresh[i] = params[i] + new_id  # still unique per step, and still a key of the store's form
        return fresh


# A saga of each kind: the round's number in, done when it returns.
Saga = Callable[[int], Awaitable[None]]
# A statement sent: its SQL and parameters.
Statement = tuple[str, Sequence[Any]]


@dataclass
class Kinds:
    """REPLAY and MINIMAL on a store, ready to run, and what checks MINIMAL before it is measured."""

    replay: Saga
    minimal: Saga
    #: One MINIMAL saga, each statement it sends noted in the list given; returns the saga's id.
    one: Callable[[list[Statement] | None], Awaitable[str]]
    #: The statements of the real saga captured, in order.
    captured: Sequence[Statement]
    close: Callable[[], Awaitable[None]]


def _same_shape(sent: Sequence[Statement], captured: Sequence[Statement]) -> str | None:
    """Say how MINIMAL's statements differ from the real saga's (their SQL, or a parameter's type), or None."""
    if [sql for sql, _ in sent] != [sql for sql, _ in captured]:
        return "its statements are not the real saga's"
    for number, ((_, mine), (_, real)) in enumerate(zip(sent, captured, strict=True)):
        kinds = [type(value).__name__ for value in mine]
        if kinds != [type(value).__name__ for value in real]:
            return f"statement {number}'s parameters are {kinds}, not the real saga's"
    return None


async def _postgres_kinds(url: str, executor: SagaExecutor) -> Kinds:
    import asyncpg

    captured: list[tuple[str, list[Any]]] = []
    run_prepared = _postgres._run_prepared

    def capture(con: Any, state: Any, params: Sequence[Any]) -> Awaitable[list[Any]]:
        captured.append((state.query, list(params)))
        return run_prepared(con, state, params)

    _postgres._run_prepared = capture  # the store sends each lone write of a saga one at a time through it
    try:
        await executor.run(PLAN)
    finally:
        _postgres._run_prepared = run_prepared
    assert len(captured) == 11, f"a durable saga sent {len(captured)} statements, not 11"
    saga_id = captured[0][1][0]
    con = await asyncpg.connect(url)
    # Prepared as the store's own; held, as a collected PreparedStatement closes its server statement.
    prepared = {sql: await con.prepare(sql) for sql, _ in captured}
    protocol = con._protocol
    replayed = [(prepared[sql]._state, _Fresh(params, saga_id)) for sql, params in captured]

    async def replay(n: int) -> None:
        new_id = uuid.uuid4().hex
        for state, params in replayed:
            await protocol.bind_execute(state, params.made(new_id), "", 0, False, None)

    # The store binds times as microseconds, and a lease as its length (the server adds it to its clock).
    length = captured[0][1][6]
    minimal = Minimal(captured[0][1], captured[-1][1], lambda micros, _: micros, lambda _: length)
    creates, steps, finishes = (prepared[captured[i][0]]._state for i in (0, 1, -1))
    owner = minimal.owner

    async def one(sent: list[Statement] | None = None) -> str:
        for what, saga_id, first, second in minimal.writes():
            if what == CREATE:
                state, params = creates, first + second
            elif what == STEP:  # the saga's owner checked in the statement
                state, params = steps, [saga_id, owner, *first, *second]
            else:
                state, params = finishes, [*first, owner, *second]
            if sent is not None:
                sent.append((state.query, params))
            rows = await protocol.bind_execute(state, params, "", 0, False, None)
            assert rows, "the saga is no longer this owner's"
        return saga_id

    async def minimal_saga(n: int) -> None:
        await one()

    return Kinds(replay, minimal_saga, one, captured, con.close)


def _trip(conn: Any, cursor: list[Any], statements: Sequence[tuple[str, Sequence[Any]]]) -> list[int]:
    """Run a trip's statements on aiosqlite's thread, through one cursor; return the rows each changed."""
    if not cursor:
        cursor.append(conn._conn.cursor())
    execute = cursor[0].execute
    return [execute(sql, params).rowcount for sql, params in statements]


async def _sqlite_kinds(url: str, executor: SagaExecutor) -> Kinds:
    trips: list[list[tuple[str, tuple[Any, ...]]]] = []
    write_on = _sqlite._write_on

    class Recording:
        """The store's cursor, each statement it runs noted (on aiosqlite's thread) in the trip's list."""

        def __init__(self, cursor: Any, trip: list[tuple[str, tuple[Any, ...]]]) -> None:
            self._cursor, self._trip = cursor, trip

        def __getattr__(self, name: str) -> Any:
            return getattr(self._cursor, name)

        def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
            self._trip.append((sql, tuple(params)))
            return self._cursor.execute(sql, params)

    def capture(tx: Any, q: Any, writes: Any) -> Any:
        trips.append([])
        cursor = tx.cursor
        if cursor is None or cursor.connection is not tx._conn._conn:
            cursor = tx._conn._conn.cursor()
        tx.cursor = Recording(cursor, trips[-1])
        try:
            return write_on(tx, q, writes)
        finally:
            tx.cursor = cursor

    _sqlite._write_on = capture  # each write of a saga is one trip to aiosqlite's thread through it
    try:
        await executor.run(PLAN)
    finally:
        _sqlite._write_on = write_on
    assert len(trips) == 11, f"a durable saga took {len(trips)} trips, not 11"
    saga_id = trips[0][1][1][0]
    conn = await _sqlite._connect(_sqlite._file_of(_sqlite.sqlite_path(url)), "FULL", 5.0, url)  # the store's pragmas
    hops = _sqlite._Hops()  # trips answered as the store's are
    cursor: list[Any] = []

    replayed = [[(sql, _Fresh(params, saga_id)) for sql, params in trip] for trip in trips]

    async def replay(n: int) -> None:
        new_id = uuid.uuid4().hex
        for trip in replayed:
            await hops.run(conn, _trip, conn, cursor, [(sql, params.made(new_id)) for sql, params in trip])

    create, finish = trips[0], trips[-1]
    created_row, finished_update = create[1][1], finish[1][1]
    insert_saga, insert_step = create[1][0], create[2][0]
    update_saga, finish_step = finish[1][0], finish[2][0]
    owned_steps = trips[1][0][0]
    # The lease's length, from the real saga's first row (SQLite keeps the time it runs out at, as text).
    length = datetime.fromisoformat(created_row[6]) - datetime.fromisoformat(created_row[12])

    def lease(created: tuple[int, str]) -> str:
        return (_EPOCH + timedelta(microseconds=created[0]) + length).isoformat(" ", "microseconds")

    # The finished saga row as it is bound in the update (see _sqlite._write): the lease is its 6th column there.
    finished_row = [None, *finished_update[:12]]
    # The store binds times as text with a space between date and time (see _sqlite._time_text).
    minimal = Minimal(created_row, finished_row, lambda _, text: f"{text[:10]} {text[11:]}", lease)
    owner = minimal.owner
    created_at = SAGA_COLUMNS.index("created_at")

    # What each write's statements change: BEGIN and COMMIT nothing (-1), a step's outcome with the next intent two.
    expected = {CREATE: [-1, 1, 1, -1], STEP: [2], FINISH: [-1, 1, 1, -1]}

    async def one(sent: list[Statement] | None = None) -> str:
        for what, saga_id, first, second in minimal.writes():
            if what == CREATE:
                statements = [("BEGIN IMMEDIATE", ()), (insert_saga, first), (insert_step, second), ("COMMIT", ())]
            elif what == STEP:  # the saga's owner checked in the statement
                statements = [(owned_steps, [*first, *second, saga_id, owner, owner])]
            else:  # the update leaving the stored creation time as it is, owner checked
                head, tail = first[1:created_at], [*first[created_at + 1 :], saga_id, owner, owner]
                statements = [
                    ("BEGIN IMMEDIATE", ()),
                    (update_saga, [*head, *tail, first[created_at]]),
                    (finish_step, second),
                    ("COMMIT", ()),
                ]
            if sent is not None:
                sent.extend(statements)
            changed = await hops.run(conn, _trip, conn, cursor, statements)
            assert changed == expected[what], f"the saga is no longer this owner's ({changed})"
        return saga_id

    async def minimal_saga(n: int) -> None:
        await one()

    async def close() -> None:
        await conn.close()
        hops.close()

    return Kinds(replay, minimal_saga, one, [statement for trip in trips for statement in trip], close)


async def _measure(store: str, sagas: int, runs: int) -> list[dict[str, tuple[float, float]]]:
    """Return, per run, the median (wall, CPU) seconds per saga of each kind."""
    results = []
    async with _url(store) as (url, folder), open_store(url) as opened:
        floor: Floor = await (sqlite_floor(folder / "raw.db") if folder else server_floor(store, url, None))
        executor = SagaExecutor(registry, store=opened)
        await executor.run(PLAN)  # warm: the saga captured is like every other
        kinds = await (_postgres_kinds if store == "postgresql" else _sqlite_kinds)(url, executor)
        try:
            # MINIMAL must be the protocol: the real saga's statements, with rows of the same shape, that verify.
            sent: list[Statement] = []
            verified = await opened.verify_saga(await kinds.one(sent))
            if not verified or not verified.saga_sealed:
                raise SystemExit(f"MINIMAL's rows do not verify: {verified.problems}; nothing is reported")
            differs = _same_shape(sent, kinds.captured)
            if differs:
                raise SystemExit(f"MINIMAL is not the real saga's protocol: {differs}; nothing is reported")

            async def saga(n: int) -> None:
                result = await executor.run(PLAN)
                assert result.status.value == "SUCCESS", result.error

            measured = {"floor": floor.saga, "saga": saga, "replay": kinds.replay, "minimal": kinds.minimal}
            n = 0
            for _ in range(runs):
                wall: dict[str, list[float]] = {kind: [] for kind in KINDS}
                cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
                for round_ in range(WARM_UP + sagas):
                    # Each round in a turned order: no kind always runs right after the same other.
                    turn = round_ % len(KINDS)
                    for kind in KINDS[turn:] + KINDS[:turn]:
                        started, cpu_started = time.perf_counter(), time.process_time()
                        await measured[kind](n)
                        if round_ >= WARM_UP:
                            wall[kind].append(time.perf_counter() - started)
                            cpu[kind].append(time.process_time() - cpu_started)
                    n += 1
                median = statistics.median
                results.append({kind: (median(wall[kind]), median(cpu[kind])) for kind in KINDS})
        finally:
            await kinds.close()
            await floor.close()
    return results


def _table(store: str, sagas: int, results: list[dict[str, tuple[float, float]]]) -> str:
    lines = [
        f"{store}, a durable 10-step saga one at a time, {sagas} sagas per run (medians per saga)",
        "",
        "| run | kind | wall ms | wall / floor | CPU ms | CPU / floor |",
        "|---|---|---:|---:|---:|---:|",
    ]
    # Per row: (wall, wall / floor's, CPU, CPU / floor's) of each kind; the runs', then their medians, each ratio the
    # median of the runs' ratios (a run's floor and kinds ran side by side; two runs' need not have).
    rows: list[tuple[str, dict[str, Sequence[float]]]] = []
    for number, run in enumerate(results, 1):
        floor_wall, floor_cpu = run["floor"]
        rows.append((str(number), {k: (w, w / floor_wall, c, c / floor_cpu) for k, (w, c) in run.items()}))
    if len(rows) > 1:
        runs = [row for _, row in rows]
        rows.append(("median", {k: [statistics.median(r[k][i] for r in runs) for i in range(4)] for k in KINDS}))
    for name, row in rows:
        for kind in KINDS:
            wall, wall_ratio, cpu, cpu_ratio = row[kind]
            lines.append(
                f"| {name} | {kind} | {wall * 1e3:.3f} | {wall_ratio:.2f} | {cpu * 1e3:.3f} | {cpu_ratio:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_protocol", description=__doc__.split("\n")[0])
    parser.add_argument("store", nargs="?", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--sagas", type=int, default=200, help="measured sagas of each kind per run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(_table(args.store, args.sagas, asyncio.run(_measure(args.store, args.sagas, args.runs))))


if __name__ == "__main__":
    main()
