"""The indexes of schema 17 hold only the rows their queries can find: every query that read one still reads it."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from saga_runtime._storage._approval_sql import ApprovalQueries, due_work_sql
from saga_runtime._storage._queue_sql import QueueControlQueries
from saga_runtime._storage._sql import Queries, ids_param
from saga_runtime._storage._sql_retention import _Statements

from .conftest import Stores, sqlite_query
from .test_schema import _build_v1, _query

_OLD, _LATE = "'2020-01-01 00:00:00'", "'2100-01-01 00:00:00'"
# Sagas of each kind the indexes leave out or hold: never queued, waited or ended (every column NULL but
# finished_at); finished sagas of a queue (queue, started_at); ended ones (end_reason); waiting ones, unfinished and
# due long after the queries' "now"; running ones (every column NULL).
_ROWS = (
    ("plain", 3000, "SUCCESS", "NULL", "NULL", "NULL", "NULL", _OLD),
    ("queued", 2000, "SUCCESS", "'bench'", _OLD, "NULL", "NULL", _OLD),
    ("ended", 2000, "COMPENSATED", "NULL", "NULL", "NULL", "'failed'", _OLD),
    ("waits", 1000, "WAITING", "NULL", "NULL", _LATE, "NULL", "NULL"),
    ("runs", 1000, "RUNNING", "NULL", "NULL", "NULL", "NULL", "NULL"),
)


# The index each rebuilt one holds rows of, by the column its WHERE names.
_PARTIAL = {
    "sagas_wake": "wake_at",
    "sagas_queue": "queue",
    "sagas_queue_started": "started_at",
    "sagas_end_reason": "end_reason",
    "sagas_retention": "finished_at",
}
# Queries whose generic plan (PostgreSQL, any values) read another index, or the table, before schema 17 as after:
# PostgreSQL keeps a statement's custom plans while the generic one costs more (the due look's wake scan, the
# queue's page, walked on sagas_created), and counts() reads either status index.
_GENERIC_ELSEWHERE = {"due work", "listed", "counts"}


def _statements(store: Any) -> dict[str, tuple[str, str, tuple[Any, ...]]]:
    """Return each query reading one of the four indexes: (the index, the SQL, its parameters)."""
    flavour = store.dialect.flavour
    q, qc, aq = Queries(flavour), QueueControlQueries(flavour), ApprovalQueries(flavour)
    purge = _Statements(flavour)
    at = store._codec.time_in(datetime.now(UTC))
    live = ("RUNNING", "COMPENSATING")
    clock = (at,) if flavour.now_sql == "?" else ()  # SQLite: the clock is a parameter
    statements: dict[str, tuple[str, str, tuple[Any, ...]]] = {
        "ready": ("sagas_wake", aq.ready, ("WAITING", at, *clock, 10, 0)),
        "due work": (
            "sagas_wake",
            due_work_sql(flavour, 1),
            ("bench", *clock, *clock, "WAITING", at, "WAITING", at, *clock, *clock),
        ),
        "depth": ("sagas_queue", q.queue_depth, ("bench", "QUEUED")),
        "running": ("sagas_queue", q.queue_running, ("bench", *live)),
        "counts": ("sagas_status_lease|sagas_queue", qc.counts, ("QUEUED", *live, "WAITING")),
        "listed": ("sagas_queue", qc.listed[1], ("bench", "QUEUED", 10, 0)),
        "states": ("sagas_queue", qc.saga_states(1), (*live, *live, *ids_param(flavour, ["queued0"]))),
        "window": ("sagas_queue_started", q.queue_started, ("bench", at, 100)),
        "window (queues)": ("sagas_queue_started", qc.started, ("bench", at, 100)),
        "reason": ("sagas_end_reason", q.list_reason(False), ("budget", 100, 0)),
        "reason and status": ("sagas_end_reason", q.list_reason(True), ("budget", "COMPENSATED", 100, 0)),
        "purge": ("sagas_retention", purge.candidates(2, locked=False), ("SUCCESS", "COMPENSATED", at, 100)),
    }
    for keyed in (False, True):
        for after in (False, True):
            params: tuple[Any, ...] = ("bench", "QUEUED", at)
            params += ("bench", *live, 2) if keyed else ()
            params += (0, 0, at, at, "x") if after else ()
            statements[f"waiting keyed={keyed} after={after}"] = (
                "sagas_queue",
                q.queue_waiting(keyed=keyed, after=after),
                (*params, 10),
            )
    return statements


def _literal(value: Any) -> str:
    if isinstance(value, list):
        return "ARRAY[" + ", ".join(map(_literal, value)) + "]"
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"


async def test_each_query_of_a_partial_index_reads_it(stores: Stores, sql_kind: str) -> None:
    """The wake, queue-claim, queue-count, rate-window, end-reason and purge queries each read their index by name, with
    10,000 sagas stored, most outside it (on PostgreSQL in the plan for given values and in the generic plan)."""
    store: Any = await stores.open(sql_kind, wipe=True)
    insert = (
        "INSERT INTO sagas (saga_id, kind, status, metadata, created_at, updated_at, queue, started_at, wake_at, "
        "end_reason, finished_at) VALUES "
    )
    values = ", ".join(
        f"('{prefix}{n}', 'plan', '{status}', '{{}}', {_OLD}, {_OLD}, {queue}, {started}, {wake}, {reason}, {done})"
        for prefix, count, status, queue, started, wake, reason, done in _ROWS
        for n in range(count)
    )
    statements = _statements(store)
    plans: dict[str, str] = {}
    async with store._transaction(begin=True) as tx:
        await tx.execute(insert + values)
        explain = "EXPLAIN QUERY PLAN " if sql_kind == "sqlite" else "EXPLAIN "
        for name, (_, sql, params) in statements.items():
            plans[name] = " | ".join(" ".join(map(str, row)) for row in await tx.fetch(explain + sql, params))
        if sql_kind == "postgresql":  # the plan a prepared statement keeps, for any values
            await tx.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            for n, (name, (_, sql, params)) in enumerate(statements.items()):
                await tx.execute(f"PREPARE partial_{n} AS {sql}")
                rows = await tx.fetch(f"EXPLAIN EXECUTE partial_{n} ({', '.join(map(_literal, params))})")
                plans[f"{name} (generic)"] = " | ".join(" ".join(map(str, row)) for row in rows)
                await tx.execute(f"DEALLOCATE partial_{n}")
    for name, plan in plans.items():
        if name.removesuffix(" (generic)") in _GENERIC_ELSEWHERE and name.endswith(" (generic)"):
            continue
        index = statements[name.removesuffix(" (generic)")][0]
        if name == "purge" and sql_kind == "sqlite":  # no statistics: SQLite reads it by status, before 17 as after
            index = "sagas_retention|sagas_status_lease"
        assert re.search(rf"\b({index})\b", plan), (name, plan)


async def test_a_version_16_database_gets_the_partial_indexes(stores: Stores, sql_kind: str) -> None:
    """Opening a version-16 database rebuilds the five indexes WHERE their column IS NOT NULL (SQLite, PostgreSQL),
    rows kept and found by them, and PostgreSQL's steps pages filled to 70%; MySQL/MariaDB keep their indexes whole."""
    url = await stores.blank_url(sql_kind)
    await _build_v1(stores, sql_kind, url, [], version=16)
    insert = (
        "INSERT INTO sagas (saga_id, kind, status, metadata, created_at, updated_at, end_reason) "
        f"VALUES ('e', 'plan', 'COMPENSATED', '{{}}', {_OLD}, {_OLD}, 'budget')"
    )
    if sql_kind == "sqlite":
        sqlite_query(url, insert)
    else:
        await stores.execute(sql_kind, url, [insert])
    store = await stores.open(sql_kind, url)
    assert await store.schema_version() == 17
    assert [s.saga_id for s in await store.list_sagas(reason="budget")] == ["e"]
    await store.close()
    if sql_kind == "sqlite":
        rows = sqlite_query(url, "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sagas'")
    elif sql_kind == "postgresql":
        rows = await _query(
            stores, sql_kind, url, "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'sagas'"
        )
    else:
        rows = await _query(
            stores,
            sql_kind,
            url,
            "SELECT index_name, MAX(column_name) FROM information_schema.statistics "
            "WHERE table_schema = DATABASE() AND table_name = 'sagas' GROUP BY index_name",
        )
    if sql_kind == "postgresql":  # step pages keep room for the update of their rows (a HOT update)
        options = await _query(stores, sql_kind, url, "SELECT reloptions FROM pg_class WHERE relname = 'steps'")
        assert options[0][0] == ["fillfactor=70"], options
    definitions = {name: str(sql) for name, sql in rows}
    for name, column in _PARTIAL.items():
        assert name in definitions, definitions
        partial = re.search(rf"WHERE .*\b{column} IS NOT NULL\)*$", definitions[name]) is not None
        assert partial is (sql_kind != "mysql"), (name, definitions[name])


def test_postgresql_builds_the_new_indexes_before_it_drops_the_old_ones() -> None:
    """On PostgreSQL, schema 17 builds each index beside the old one, then drops and renames: no read waits on a
    build (a drop keeps readers out until the commit)."""
    from saga_runtime._storage._postgres import FLAVOUR as POSTGRES
    from saga_runtime._storage._sql import MIGRATIONS

    statements = list(MIGRATIONS[16].statements(POSTGRES))
    creates = [i for i, sql in enumerate(statements) if sql.startswith("CREATE INDEX")]
    drops = [i for i, sql in enumerate(statements) if sql.startswith("DROP INDEX")]
    renames = [i for i, sql in enumerate(statements) if sql.startswith("ALTER INDEX")]
    assert MIGRATIONS[16].version == 17
    assert len(creates) == len(drops) == len(renames) == 5
    assert max(creates) < min(drops)
    assert max(drops) < min(renames)
