"""The schema of SQL stores: created at open, versioned, migrated in place, refused when too new."""

from __future__ import annotations

from typing import Any

import pytest

from saga_runtime._exceptions import SchemaVersionError
from saga_runtime._storage import _sqlstore
from saga_runtime._storage._sql import MIGRATIONS, SCHEMA_VERSION, VERSION_TABLE_DDL, Migration

from .conftest import Stores, make_saga, make_steps, sqlite_query


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
    """Opening an empty database creates the schema and records version 1 once, however often it is opened."""
    url = await stores.blank_url(sql_kind)
    store = await stores.open(sql_kind, url)
    assert await store.schema_version() == SCHEMA_VERSION == 1  # type: ignore[attr-defined]
    await store.close()
    await (await stores.open(sql_kind, url)).close()
    rows = await _query(stores, sql_kind, url, "SELECT version FROM schema_version")
    assert [tuple(row) for row in rows] == [(1,)]


async def test_reopened_store_keeps_its_sagas(stores: Stores, sql_kind: str) -> None:
    """A store closed and opened again on the same database sees every saga, step and field."""
    url = await stores.blank_url(sql_kind)
    store = await stores.open(sql_kind, url)
    saga, steps = make_saga("keep"), make_steps("keep", 3)
    await store.create_saga(saga, steps)
    await store.close()
    reopened = await stores.open(sql_kind, url)
    assert await reopened.load_saga("keep") == (saga, steps)


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


async def test_older_schema_is_migrated_in_place(
    stores: Stores, sql_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version-1 database opened by a library that knows version 2 is migrated in place, its sagas kept."""
    url = await stores.blank_url(sql_kind)
    store = await stores.open(sql_kind, url)
    saga, steps = make_saga("old"), make_steps("old", 2)
    await store.create_saga(saga, steps)
    await store.close()

    def add_note(dialect: str) -> list[str]:
        return ["ALTER TABLE sagas ADD COLUMN note TEXT", "CREATE INDEX steps_tool ON steps (seq, grp)"]

    monkeypatch.setattr(_sqlstore, "MIGRATIONS", [*MIGRATIONS, Migration(2, "a note", add_note)])
    migrated = await stores.open(sql_kind, url)
    assert await migrated.schema_version() == 2  # type: ignore[attr-defined]
    assert await migrated.load_saga("old") == (saga, steps)
    await migrated.save(make_saga("new"), [])
    await migrated.close()
    rows = await _query(stores, sql_kind, url, "SELECT version FROM schema_version ORDER BY version")
    assert [tuple(row) for row in rows] == [(1,), (2,)]
    notes = await _query(stores, sql_kind, url, "SELECT note FROM sagas")
    assert [tuple(row) for row in notes] == [(None,), (None,)]

    monkeypatch.setattr(_sqlstore, "MIGRATIONS", MIGRATIONS)
    with pytest.raises(SchemaVersionError):
        await stores.open(sql_kind, url)


async def test_a_database_with_the_version_table_but_no_rows_is_built_from_scratch(
    stores: Stores, sql_kind: str
) -> None:
    """A version table with no row (an interrupted first open) counts as version 0: the schema is created."""
    url = await stores.blank_url(sql_kind)
    create = VERSION_TABLE_DDL[sql_kind]  # type: ignore[index]
    if sql_kind == "sqlite":
        sqlite_query(url, create)
    else:
        await stores.execute(sql_kind, url, [create])
    store = await stores.open(sql_kind, url)
    assert await store.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]
    await store.create_saga(make_saga("v0"), make_steps("v0", 1))
    assert await store.load_saga("v0") is not None
