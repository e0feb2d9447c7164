"""open_store with SQL URLs: paths, options, and failures that name the URL and say what to do."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from saga_runtime._exceptions import StoreConnectionError, StoreError
from saga_runtime._storage import open_store

from .conftest import Stores, make_saga, make_steps, sqlite_query


async def test_sqlite_relative_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite:///name.db creates name.db in the current directory."""
    monkeypatch.chdir(tmp_path)
    async with open_store("sqlite:///relative.db") as store:
        assert store.url == "sqlite:///relative.db"
        await store.create_saga(make_saga("r"), [])
    assert (tmp_path / "relative.db").exists()


async def test_sqlite_absolute_url_has_four_slashes(tmp_path: Path) -> None:
    """sqlite:////abs/path.db opens the absolute path."""
    path = tmp_path / "deep" / "abs.db"
    path.parent.mkdir()
    async with open_store(f"sqlite:///{path}") as store:
        assert str(path).startswith("/")
        await store.create_saga(make_saga("a"), make_steps("a", 1))
    assert sqlite_query(f"sqlite:///{path}", "SELECT saga_id FROM sagas") == [("a",)]


async def test_sqlite_in_a_missing_directory_says_so(tmp_path: Path) -> None:
    """A SQLite file in a directory that does not exist: StoreConnectionError naming the URL and the directory."""
    url = f"sqlite:///{tmp_path}/missing/dir/sagas.db"
    with pytest.raises(StoreConnectionError, match="directory") as caught:
        await open_store(url)
    assert url in str(caught.value)


async def test_malformed_sqlite_url_is_refused() -> None:
    """sqlite://host/x.db (two slashes) is refused with the forms to use."""
    with pytest.raises(StoreError, match=r"sqlite:////absolute"):
        await open_store("sqlite://host/x.db")


async def test_sqlite_options(tmp_path: Path) -> None:
    """WAL and synchronous FULL by default; synchronous and busy_timeout set by keyword or URL query."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    async with open_store(url) as store:
        conn = store.dialect._conn  # type: ignore[attr-defined]
        assert await conn.execute_fetchall("PRAGMA journal_mode") == [("wal",)]
        assert await conn.execute_fetchall("PRAGMA synchronous") == [(2,)]
        assert await conn.execute_fetchall("PRAGMA busy_timeout") == [(5000,)]
    async with open_store(url, synchronous="normal", busy_timeout=0.25) as store:
        conn = store.dialect._conn  # type: ignore[attr-defined]
        assert await conn.execute_fetchall("PRAGMA synchronous") == [(1,)]
        assert await conn.execute_fetchall("PRAGMA busy_timeout") == [(250,)]
    async with open_store(f"{url}?synchronous=NORMAL") as store:
        assert await store.dialect._conn.execute_fetchall("PRAGMA synchronous") == [(1,)]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="synchronous"):
        await open_store(url, synchronous="SOMETIMES")
    with pytest.raises(TypeError, match="speed"):
        await open_store(f"{url}?speed=max")


async def test_pool_sizes_are_options(stores: Stores) -> None:
    """PostgreSQL and MySQL pools are sized by min_size/max_size; impossible sizes are refused."""
    pg = await stores.open("postgresql", min_size=2, max_size=3)
    assert (pg.dialect._pool.get_min_size(), pg.dialect._pool.get_max_size()) == (2, 3)  # type: ignore[attr-defined]
    my = await stores.open("mysql", stores.url("mysql") + "?min_size=2&max_size=4")
    assert (my.dialect._pool.minsize, my.dialect._pool.maxsize) == (2, 4)  # type: ignore[attr-defined]
    for kind in ("postgresql", "mysql"):
        with pytest.raises(ValueError, match="max_size"):
            await open_store(stores.url(kind), min_size=5, max_size=2)


async def test_store_url_hides_the_password(stores: Stores) -> None:
    """A store's url and its error messages never show the password."""
    parts = urlsplit(stores.url("postgresql"))
    url = parts._replace(netloc=f"postgres:hunter2@{parts.hostname}:{parts.port}").geturl()
    store = await stores.open("postgresql", url)  # trust authentication ignores the password
    assert "hunter2" not in store.url
    assert "postgres:***@" in store.url


@pytest.mark.parametrize("scheme", ["postgresql", "mysql"])
async def test_unreachable_server_names_the_url_and_asks_if_it_is_up(scheme: str) -> None:
    """Nothing listening at the URL: StoreConnectionError with the URL (password hidden) and the question."""
    url = f"{scheme}://user:secret@127.0.0.1:1/db"
    with pytest.raises(StoreConnectionError) as caught:
        await asyncio.wait_for(open_store(url, connect_timeout=5), 30)
    message = str(caught.value)
    assert f"{scheme}://user:***@127.0.0.1:1/db" in message
    assert "secret" not in message
    assert "is the server up" in message


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_missing_database_says_to_create_it(stores: Stores, kind: str) -> None:
    """A server without the named database: StoreConnectionError telling to create it."""
    url = urlsplit(stores.url(kind))._replace(path="/saga_rt_no_such_db").geturl()
    with pytest.raises(StoreConnectionError, match="create the database"):
        await open_store(url)


async def test_unknown_scheme_is_refused() -> None:
    """An unknown URL scheme is a StoreError listing the schemes there are."""
    with pytest.raises(StoreError, match="mysql://"):
        await open_store("oracle://x/y")
