"""Driver errors become StoreError subclasses at one boundary per driver, with messages that say what to do."""

from __future__ import annotations

import sqlite3
from types import ModuleType
from typing import Any

import asyncpg
import pymysql
import pytest

from saga_runtime._exceptions import StoreBusyError, StoreConnectionError, StoreError
from saga_runtime._storage import _mysql, _postgres, _sqlite

URL = "db://user:***@host/name"


def _classes(module: ModuleType, base: type[BaseException]) -> list[type[BaseException]]:
    return sorted(
        {value for value in vars(module).values() if isinstance(value, type) and issubclass(value, base)},
        key=lambda cls: cls.__qualname__,
    )


def _instance(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, pymysql.err.MySQLError):
        return cls(1105, f"a {cls.__name__}")
    return cls(f"a {cls.__name__}")


DRIVER_ERRORS: list[tuple[Any, type[BaseException]]] = [
    *((_sqlite, cls) for cls in _classes(sqlite3, sqlite3.Error)),
    (_sqlite, sqlite3.Warning),
    *((_postgres, cls) for cls in _classes(asyncpg.exceptions, asyncpg.PostgresError)),
    *((_postgres, cls) for cls in _classes(asyncpg.exceptions, asyncpg.InterfaceError)),
    *((_postgres, cls) for cls in _classes(asyncpg.exceptions, asyncpg.exceptions.InternalClientError)),
    *((_mysql, cls) for cls in _classes(pymysql.err, pymysql.err.MySQLError)),
    (_postgres, ConnectionRefusedError),
    (_postgres, TimeoutError),
    (_mysql, ConnectionResetError),
]


@pytest.mark.parametrize(
    ("module", "error_class"), DRIVER_ERRORS, ids=lambda v: getattr(v, "__qualname__", getattr(v, "__name__", v))
)
def test_every_driver_error_has_a_store_error_counterpart(module: Any, error_class: type[BaseException]) -> None:
    """Every error class a driver defines comes out of its map_exceptions as a StoreError naming the URL."""
    error = _instance(error_class)
    with pytest.raises(StoreError) as caught, module.map_exceptions(URL):
        raise error
    assert caught.value.__cause__ is error
    assert caught.value.url == URL
    assert URL in str(caught.value)
    assert error_class.__name__ in str(caught.value)


@pytest.mark.parametrize("module", [_sqlite, _postgres, _mysql], ids=lambda m: m.__name__)
def test_every_mapped_class_converts_to_its_counterpart(module: Any) -> None:
    """Each entry of a driver's ERROR_MAP is what an error of exactly that class becomes."""
    for error_class, (store_error_class, advice) in module.ERROR_MAP.items():
        assert issubclass(store_error_class, StoreError)
        with pytest.raises(StoreError) as caught, module.map_exceptions(URL):
            raise _instance(error_class)
        assert type(caught.value) is store_error_class, error_class
        assert advice in str(caught.value)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (1045, StoreConnectionError),
        (1049, StoreConnectionError),
        (2003, StoreConnectionError),
        (1213, StoreBusyError),
        (1927, StoreConnectionError),
        (2013, StoreConnectionError),
    ],
)
def test_mysql_server_codes_refine_the_class(code: int, expected: type[StoreError]) -> None:
    """MySQL errors whose server code means "cannot connect" or "busy" get that StoreError subclass."""
    assert _mysql.CODE_MAP[code][0] is expected
    with pytest.raises(expected, match=str(code)), _mysql.map_exceptions(URL):
        raise pymysql.err.OperationalError(code, "server said no")


def test_sqlite_busy_and_cannot_open_refine_the_class() -> None:
    """SQLite's BUSY becomes StoreBusyError and CANTOPEN StoreConnectionError, by error name."""
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorname = "SQLITE_BUSY"
    with pytest.raises(StoreBusyError, match="busy_timeout"), _sqlite.map_exceptions(URL):
        raise busy
    cant = sqlite3.OperationalError("unable to open database file")
    cant.sqlite_errorname = "SQLITE_CANTOPEN"
    with pytest.raises(StoreConnectionError, match="directory"), _sqlite.map_exceptions(URL):
        raise cant


def test_other_errors_pass_through() -> None:
    """Errors that are not the driver's are not disguised as StoreError."""
    for module in (_sqlite, _postgres, _mysql):
        with pytest.raises(KeyError), module.map_exceptions(URL):
            raise KeyError("not a database error")


@pytest.mark.parametrize(("code", "head"), [(1045, "cannot connect"), (1927, "lost the connection")])
def test_mysql_server_codes_say_whether_the_connection_was_made(code: int, head: str) -> None:
    """A refused login cannot connect; a killed connection (1927) was lost, and is retried as such."""
    with pytest.raises(StoreConnectionError, match=head), _mysql.map_exceptions(URL):
        raise pymysql.err.OperationalError(code, "server said no")
