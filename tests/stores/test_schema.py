"""The schema of SQL stores: created at open, versioned, migrated in place, refused when too new."""

from __future__ import annotations

import sqlite3
from typing import Any

import asyncpg
import pytest
from conftest import mysql_connect

from saga_runtime import SagaExecutor, ToolRegistry
from saga_runtime._exceptions import SchemaVersionError
from saga_runtime._records import SagaRow, SagaStatus, StepRow
from saga_runtime._storage import MemoryStore, _sqlstore
from saga_runtime._storage._sql import (
    MIGRATIONS,
    SAGA_COLUMNS,
    SCHEMA_VERSION,
    STEP_COLUMNS,
    RowCodec,
    _placeholders,
    version_table_ddl,
)

from .conftest import T0, Stores, as_stored, flavour_of, make_saga, make_steps, sqlite_file, sqlite_query

_registry = ToolRegistry()


@_registry.tool
class Add:
    async def execute(self, x: int, y: float) -> float:
        return x + y


async def _query(stores: Stores, kind: str, url: str, sql: str) -> list[Any]:
    """Return the rows of a query run with the raw driver."""
    if kind == "sqlite":
        return sqlite_query(url, sql)
    store = await stores.open(kind, url)
    async with store._transaction(begin=False) as tx:  # type: ignore[attr-defined]
        rows = list(await tx.fetch(sql))
    await store.close()
    return rows


async def test_open_records_the_schema_version(stores: Stores, sql_kind: str) -> None:
    """Opening an empty database creates the schema and records each version once, however often it is opened."""
    url = await stores.blank_url(sql_kind)
    store = await stores.open(sql_kind, url)
    assert await store.schema_version() == SCHEMA_VERSION == MIGRATIONS[-1].version  # type: ignore[attr-defined]
    await store.close()
    await (await stores.open(sql_kind, url)).close()
    rows = await _query(stores, sql_kind, url, "SELECT version FROM schema_version ORDER BY version")
    assert [tuple(row) for row in rows] == [(m.version,) for m in MIGRATIONS]


async def test_reopened_store_keeps_its_sagas(stores: Stores, sql_kind: str) -> None:
    """A store closed and opened again on the same database sees every saga, step and field."""
    url = await stores.blank_url(sql_kind)
    store = await stores.open(sql_kind, url)
    saga, steps = make_saga("keep"), make_steps("keep", 3)
    await store.create_saga(saga, steps)
    await store.close()
    reopened = await stores.open(sql_kind, url)
    assert await reopened.load_saga("keep") == (as_stored(reopened, saga), steps)


async def test_newer_schema_is_refused_with_the_upgrade_message(stores: Stores, sql_kind: str) -> None:
    """A database whose schema version is newer than the library's is refused: upgrade saga-runtime."""
    url = await stores.blank_url(sql_kind)
    await (await stores.open(sql_kind, url)).close()
    insert = "INSERT INTO schema_version (version, description, applied_at) VALUES (99, 'future', '2030-01-01')"
    if sql_kind == "sqlite":
        sqlite_query(url, insert)
    else:
        await stores.execute(sql_kind, url, [insert])
    with pytest.raises(SchemaVersionError, match="upgrade saga-runtime") as caught:
        await stores.open(sql_kind, url)
    assert caught.value.found == 99
    assert caught.value.supported == SCHEMA_VERSION
    assert caught.value.url is not None
    assert caught.value.url in str(caught.value)


def stores_row(row: Any) -> tuple[str, int, str | None]:
    """Return a (saga_id, recovery_attempts, parked_from) record with ids as text (MySQL gives bytes)."""
    saga_id = row[0].decode() if isinstance(row[0], bytes | bytearray) else row[0]
    return saga_id, int(row[1]), row[2]


def _unversioned(rows: list[StepRow]) -> list[StepRow]:
    """Return step rows as a database older than version 6 holds them: tool version "1", not reconciled."""
    for row in rows:
        row.tool_version, row.reconciled = "1", False
    return rows


async def _build_v1(
    stores: Stores, kind: str, url: str, rows: list[tuple[SagaRow, list[StepRow]]], version: int = 1
) -> None:
    """Create a database of an old `version` at `url` (its DDL and version rows) holding `rows`, with the raw driver."""
    dialect = flavour_of(kind)
    codec = RowCodec(dialect)
    v1_sagas = SAGA_COLUMNS[: SAGA_COLUMNS.index("finished_at" if version == 1 else "parked_from") + 1]
    insert_saga = _placeholders(
        dialect, f"INSERT INTO sagas ({', '.join(v1_sagas)}) VALUES ({', '.join('?' * len(v1_sagas))})"
    )
    v1_steps = STEP_COLUMNS[: STEP_COLUMNS.index("hash") + 1]  # tool versions came with version 6
    insert_step = _placeholders(
        dialect, f"INSERT INTO steps ({', '.join(v1_steps)}) VALUES ({', '.join('?' * len(v1_steps))})"
    )
    record = _placeholders(dialect, "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)")
    ddl = [version_table_ddl(dialect), *(sql for m in MIGRATIONS[:version] for sql in m.statements(dialect))]
    writes: list[tuple[str, tuple[Any, ...]]] = [
        (record, (m.version, m.description, codec.time_in(T0))) for m in MIGRATIONS[:version]
    ]
    for saga, steps in rows:
        params = list(codec.saga_params(saga))
        params[SAGA_COLUMNS.index("lease_expires_at")] = codec.time_in(saga.lease_expires_at)  # as stored
        writes.append((insert_saga, tuple(params[: len(v1_sagas)])))
        writes.extend((insert_step, codec.step_params(row)[: len(v1_steps)]) for row in steps)
    if kind == "sqlite":
        conn = sqlite3.connect(sqlite_file(url))
        try:
            with conn:
                for statement in ddl:
                    conn.execute(statement)
                for sql, params in writes:
                    conn.execute(sql, params)
        finally:
            conn.close()
    elif kind == "postgresql":
        pg = await asyncpg.connect(url, timeout=5)
        try:
            async with pg.transaction():
                for statement in ddl:
                    await pg.execute(statement)
                for sql, params in writes:
                    await pg.execute(sql, *params)
        finally:
            await pg.close()
    else:
        my = await mysql_connect(url)
        try:
            async with my.cursor() as cursor:
                for statement in ddl:
                    await cursor.execute(statement)
                for sql, params in writes:
                    await cursor.execute(sql, params)
        finally:
            my.close()


async def test_a_version_1_database_is_migrated_in_place(stores: Stores, sql_kind: str) -> None:
    """A real version-1 database (v1 tables, rows in them) opened by this library gains the later columns and the
    approvals table, rows kept.

    The old sagas read back with recovery_attempts 0, parked_from and seal NULL, and no approvals; the new fields
    are written and read; schema_version says the latest version, each version recorded once.
    """
    url = await stores.blank_url(sql_kind)
    old = [(make_saga("old-1"), _unversioned(make_steps("old-1", 2))), (make_saga("old-2", full=False), [])]
    for saga, _ in old:  # what a version-1 database can hold
        saga.recovery_attempts, saga.parked_from, saga.parent_id = 0, None, None
    await _build_v1(stores, sql_kind, url, old)

    store = await stores.open(sql_kind, url)
    assert await store.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]
    for saga, steps in old:
        assert await store.load_saga(saga.saga_id) == (saga, steps)
        assert await store.load_approvals(saga.saga_id) == []
    parked = make_saga("new", status=SagaStatus.PARKED)
    parked.recovery_attempts, parked.parked_from = 6, SagaStatus.COMPENSATING
    await store.create_saga(parked, make_steps("new", 1))
    assert await store.load_saga("new") == (as_stored(store, parked), make_steps("new", 1))
    await store.close()

    columns = await _query(stores, sql_kind, url, "SELECT saga_id, recovery_attempts, parked_from FROM sagas")
    assert sorted(stores_row(row) for row in columns) == [
        ("new", 6, "COMPENSATING"),
        ("old-1", 0, None),
        ("old-2", 0, None),
    ]
    versions = await _query(stores, sql_kind, url, "SELECT version FROM schema_version ORDER BY version")
    assert [tuple(row) for row in versions] == [(m.version,) for m in MIGRATIONS]
    reopened = await stores.open(sql_kind, url)  # already at the latest version: nothing to do
    assert await reopened.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]
    await reopened.close()


async def test_a_library_knowing_only_version_1_refuses_a_migrated_database(
    stores: Stores, sql_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once migrated to the latest version, a database is too new for a saga-runtime that knows only version 1."""
    url = await stores.blank_url(sql_kind)
    await (await stores.open(sql_kind, url)).close()
    monkeypatch.setattr(_sqlstore, "MIGRATIONS", MIGRATIONS[:1])
    with pytest.raises(SchemaVersionError) as caught:
        await stores.open(sql_kind, url)
    assert (caught.value.found, caught.value.supported) == (SCHEMA_VERSION, 1)


async def test_a_database_with_the_version_table_but_no_rows_is_built_from_scratch(
    stores: Stores, sql_kind: str
) -> None:
    """A version table with no row (an interrupted first open) counts as version 0: the schema is created."""
    url = await stores.blank_url(sql_kind)
    create = version_table_ddl(flavour_of(sql_kind))
    if sql_kind == "sqlite":
        sqlite_query(url, create)
    else:
        await stores.execute(sql_kind, url, [create])
    store = await stores.open(sql_kind, url)
    assert await store.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]
    await store.create_saga(make_saga("v0"), make_steps("v0", 1))
    assert await store.load_saga("v0") is not None


async def test_a_version_2_database_keeps_verifying_its_unsealed_saga_rows(stores: Stores, sql_kind: str) -> None:
    """A saga recorded under schema version 2 (no saga seal, JSON columns of the time) verifies after the migration,
    on its step rows alone (`saga_sealed` False); once written again its saga row is sealed."""
    source = MemoryStore()
    executor = SagaExecutor(_registry, store=source)
    await executor.run([{"id": "a", "tool": "Add", "args": {"x": 2, "y": 0.5}}], saga_id="legacy")
    loaded = await source.load_saga("legacy")
    assert loaded is not None
    saga, steps = loaded
    saga.seal = None
    url = await stores.blank_url(sql_kind)
    await _build_v1(stores, sql_kind, url, [(saga, steps)], version=2)

    store = await stores.open(sql_kind, url)
    assert await store.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]
    verdict = await store.verify_saga("legacy")
    assert verdict, verdict.problems
    assert not verdict.saga_sealed
    assert await store.load_saga("legacy") == (saga, steps)
    await store.save(saga, [])
    verdict = await store.verify_saga("legacy")
    assert verdict
    assert verdict.saga_sealed


async def test_sagas_ended_before_the_end_reason_column_are_listed_by_their_reason(
    stores: Stores, sql_kind: str
) -> None:
    """A database of version 13 (end reasons only in the history) migrated: list_sagas(reason=) finds its ended
    sagas by the reason their history gives ("failed" when it gives none), and no SUCCESS saga."""
    url = await stores.blank_url(sql_kind)
    await _build_v1(stores, sql_kind, url, [], version=13)
    stamp = "'2020-01-01 00:00:0{n}'"
    ended = [
        ("b", "COMPENSATED", """'[{"kind":"end","reason":"budget","effects_standing":[]}]'"""),
        ("c", "COMPENSATED", """'[{"kind":"cancel","reason":"not needed"}]'"""),
        ("f", "COMPENSATION_FAILED", "NULL"),
        ("ok", "SUCCESS", """'[{"kind":"end","reason":null,"effects_standing":[]}]'"""),
    ]
    values = ", ".join(
        f"('{saga_id}', 'plan', '{status}', '{{}}', {stamp.format(n=n)}, {stamp.format(n=n)}, {history})"
        for n, (saga_id, status, history) in enumerate(ended)
    )
    insert = f"INSERT INTO sagas (saga_id, kind, status, metadata, created_at, updated_at, history) VALUES {values}"
    if sql_kind == "sqlite":
        sqlite_query(url, insert)
    else:
        await stores.execute(sql_kind, url, [insert])
    store = await stores.open(sql_kind, url)
    for reason, ids in (("budget", ["b"]), ("cancelled", ["c"]), ("failed", ["f"]), ("timeout", [])):
        listed = await store.list_sagas(reason=reason)
        assert [(s.saga_id, s.end_reason) for s in listed] == [(saga_id, reason) for saga_id in ids]
    await store.close()
