"""MariaDB/MySQL: the dialect writes values into its statements itself, exactly as pymysql would escape them."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import aiomysql
import pytest
from pymysql.constants import SERVER_STATUS

from saga_runtime._storage._mysql import _literals

from .conftest import Stores, as_stored, make_saga, make_steps

# Every character pymysql escapes, a quote of each kind, and text past ASCII (which a 128-entry table leaves as is).
AWKWARD = "it's \"quoted\" \\ back\nslash\r\x1a\x00 ünïcødé ✓ 💳 ' \\'"
VALUES: list[Any] = [
    AWKWARD,
    "",
    "plain-0123",
    "0123abcDEF",  # letters and digits only: written without translate
    "ünïcødé",
    None,
    0,
    -(2**63),
    True,
    False,
    1.5,
    1e-300,
    Decimal("12.50"),
    datetime(2026, 1, 2, 3, 4, 5, 6),
    datetime(2026, 1, 2, 3, 4, 5),
    datetime(999, 1, 2, 3, 4, 5, 600),
    datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
]


class _Connection:
    """aiomysql's escaping, on a connection that needs no server."""

    _charset = "utf8mb4"
    escape = aiomysql.Connection.escape
    escape_string = aiomysql.Connection.escape_string

    def __init__(self, server_status: int = 0) -> None:
        self.server_status = server_status


@pytest.mark.parametrize("status", [0, SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES])
def test_literals_are_pymysqls_escapes(status: int) -> None:
    """Each value's literal is what aiomysql's escape writes, quotes doubled where the server takes no backslash."""
    conn = _Connection(status)
    assert _literals(conn, VALUES) == tuple(conn.escape(value) for value in VALUES)


async def test_awkward_text_round_trips(stores: Stores) -> None:
    """Text holding every escaped character and non-ASCII is stored and read back as it was, by a lone write."""
    store = await stores.open("mysql", wipe=True)
    saga, steps = make_saga("awkward"), make_steps("awkward", 2)
    saga.owner = "me"
    await store.create_saga(saga, [])
    for row in steps:
        row.error = AWKWARD
        row.args = {"note": AWKWARD, AWKWARD: [AWKWARD]}
    await store.save(None, steps, owner="me")
    assert await store.load_saga("awkward") == (as_stored(store, saga), steps)
