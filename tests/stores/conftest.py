"""Fixtures of the store contract suite: one store of every kind, and rows with every field set."""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from saga_runtime._records import SagaRow, SagaStatus, StepRow, StepStatus, idempotency_key
from saga_runtime._storage import SagaStore, open_store
from saga_runtime._storage._flavour import Flavour
from saga_runtime.examples.dict_store import DictStore

KINDS = ("memory", "sqlite", "postgresql", "mysql")
# The example store of your own (saga_runtime/examples/dict_store.py, docs/guides/custom-store.md): the core only.
EXAMPLE_KIND = "dict"
SQL_KINDS = ("sqlite", "postgresql", "mysql")
T0 = datetime(2024, 5, 17, 9, 30, 15, 123456, tzinfo=UTC)
# The plan hash of rows tests write by hand (make_saga): not the engine's, so its invariants are not checked.
RAW_PLAN_HASH = "ab" * 32
# How far a lease stored on a database's clock may end from where it was asked to (its clock and the machine's
# are the same here; the time between writing and reading it is not).
SLACK = timedelta(seconds=60)


def flavour_of(kind: str) -> Flavour:
    """Return the SQL flavour the dialect module of `kind` (sqlite, postgresql, mysql) declares."""
    module = {"sqlite": "_sqlite", "postgresql": "_postgres", "mysql": "_mysql"}[kind]
    flavour: Flavour = importlib.import_module(f"saga_runtime._storage.{module}").FLAVOUR
    return flavour


class Stores:
    """Open stores of any kind for one test, and close them all at its end."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self._request = request
        self._tmp_path = tmp_path
        self._opened: list[SagaStore] = []
        self._files = 0

    def _databases(self, kind: str) -> Any:
        """Return the session's TestDatabases of a server (see tests/conftest.py)."""
        return self._request.getfixturevalue("postgres_databases" if kind == "postgresql" else "mysql_databases")

    def url(self, kind: str) -> str:
        """Return the URL of the test's shared database of `kind` (its rows are wiped by `open(wipe=True)`)."""
        if kind == "memory":
            return "memory://"
        if kind == "sqlite":
            return f"sqlite:///{self._tmp_path / 'sagas.db'}"
        databases = self._databases(kind)
        return str(databases.url_of(databases.names[0]))

    async def blank_url(self, kind: str) -> str:
        """Return the URL of a database with no saga tables at all."""
        if kind == "memory":
            return "memory://"
        if kind == "sqlite":
            self._files += 1
            return f"sqlite:///{self._tmp_path / f'blank{self._files}.db'}"
        databases = self._databases(kind)
        if len(databases.names) < 2:
            databases.create()
        url = str(databases.url_of(databases.names[1]))
        await databases.execute(
            url,
            [
                "DROP TABLE IF EXISTS sagas, steps, approvals, queue_locks, holds, schedules, queue_states, messages, "
                "schema_version"
            ],
        )
        return url

    async def open(self, kind: str, url: str | None = None, *, wipe: bool = False, **options: Any) -> SagaStore:
        """Open a store of `kind` (at `url`, else the shared database), closed when the test ends."""
        if kind == EXAMPLE_KIND:
            example: SagaStore = DictStore()
            self._opened.append(example)
            return example
        store = await open_store(url or self.url(kind), **options)
        self._opened.append(store)
        if wipe and kind in ("postgresql", "mysql"):
            statement = (
                "TRUNCATE sagas, steps, approvals, holds, schedules, queue_states, messages"
                if kind == "postgresql"
                else "DELETE FROM steps"
            )
            tables = ("approvals", "holds", "schedules", "queue_states", "messages", "sagas")
            extra = [] if kind == "postgresql" else [f"DELETE FROM {table}" for table in tables]
            await self._databases(kind).execute(url or self.url(kind), [statement, *extra])
        return store

    async def execute(self, kind: str, url: str, statements: list[str]) -> None:
        """Run statements on a database of a server (not SQLite) with its raw driver."""
        await self._databases(kind).execute(url, statements)

    async def close_all(self) -> None:
        """Close every store opened by the test, first checking what the engine left in it."""
        problems = []
        for store in self._opened:
            problems += await _contradictions(store)
            await store.close()
        self._opened.clear()
        assert problems == [], "a terminal saga holds a step that is still running or waiting"


async def _contradictions(store: SagaStore) -> list[str]:
    """Return the steps RUNNING or WAITING in a terminal saga the engine wrote (none may be)."""
    try:
        summaries = await store.list_sagas(limit=10_000)
    except Exception:  # closed by the test, or a database the test broke on purpose
        return []
    found = []
    for summary in summaries:
        if not summary.status.is_terminal:
            continue
        loaded = await store.load_saga(summary.saga_id)
        if loaded is None or loaded[0].plan_hash == RAW_PLAN_HASH:
            continue
        for row in loaded[1]:
            if row.status in (StepStatus.RUNNING, StepStatus.WAITING):
                found.append(f"{summary.saga_id}/{row.step_id}: {row.status.value} in a {summary.status.value} saga")
    return found


@pytest.fixture
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    """Return a factory of stores of every kind, closed at the end of the test."""
    factory = Stores(request, tmp_path)
    try:
        yield factory
    finally:
        await factory.close_all()


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """Return each kind of store in turn."""
    value: str = request.param
    return value


@pytest.fixture(params=SQL_KINDS)
def sql_kind(request: pytest.FixtureRequest) -> str:
    """Return each kind of SQL store in turn."""
    value: str = request.param
    return value


@pytest.fixture
async def store(stores: Stores, kind: str) -> SagaStore:
    """Return an empty store of each kind in turn."""
    return await stores.open(kind, wipe=True)


def make_saga(
    saga_id: str,
    *,
    created_at: datetime = T0,
    status: SagaStatus = SagaStatus.RUNNING,
    full: bool = True,
) -> SagaRow:
    """Return a saga row; with `full`, every optional field holds a value that is not its default."""
    row = SagaRow(
        saga_id=saga_id,
        kind="plan",
        plan={"steps": [{"id": "a", "tool": "charge", "args": {"amount": 12.5}}], "note": "ünïcødé ✓"},
        plan_hash=RAW_PLAN_HASH,
        status=status,
        created_at=created_at,
        updated_at=created_at + timedelta(seconds=1),
    )
    if full:
        row.owner = "executor-1"
        row.lease_expires_at = created_at + timedelta(seconds=30)
        row.budget = {"max_cost": 2.5, "max_tokens": 1000}
        row.cost = 0.1 + 0.2  # 0.30000000000000004: doubles must round-trip exactly
        row.tokens = 2**40
        row.metadata = {"user": "ann", "tags": ["a", "b"], "nested": {"x": None, "y": [1, 2.0, True]}}
        row.error = "ValueError: boom"
        row.finished_at = created_at + timedelta(minutes=2, microseconds=1)
        row.recovery_attempts = 3
        row.parked_from = SagaStatus.COMPENSATION_FAILED  # the longest status name fits the column too
        row.parent_id = f"parent of {saga_id} ✓"
    return row


class Near:
    """Equal to a time within SLACK of `at`: a lease a database stored on its own clock, as written."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __eq__(self, other: object) -> bool:
        return isinstance(other, datetime) and abs(other - self.at) < SLACK

    def __repr__(self) -> str:
        return f"Near({self.at!r})"


def local_clock(store: SagaStore) -> bool:
    """Tell whether a store keeps its writers' lease times as given (memory, SQLite: one machine's clock)."""
    return store.url.startswith(("memory:", "sqlite:", "dict:"))


def as_stored(store: SagaStore, saga: SagaRow) -> SagaRow:
    """Return `saga` as `store` holds it once written: on PostgreSQL and MySQL, its lease on the database's clock."""
    if saga.lease_expires_at is None or local_clock(store):
        return saga
    row = saga.copy()
    row.lease_expires_at = Near(saga.lease_expires_at)  # type: ignore[assignment]
    return row


def make_steps(saga_id: str, count: int = 3, *, full: bool = True) -> list[StepRow]:
    """Return step rows; with `full`, every optional field holds a value that is not its default."""
    rows = []
    for seq in range(count):
        step_id = f"step-{seq}"
        row = StepRow(
            saga_id=saga_id,
            seq=seq,
            step_id=step_id,
            group=seq // 2,
            tool_name=f"tool_{seq}",
            args={"n": seq, "items": [1, "two", None], "price": 9.99},
            idempotency_key=idempotency_key(saga_id, step_id),
        )
        if full:
            row.status = list(StepStatus)[seq % len(StepStatus)]
            row.attempts = seq + 1
            row.result = {"id": f"r{seq}", "ok": True, "values": [0.5, -3, "x"]}
            row.error = f"RuntimeError: failed {seq}"
            row.error_type = "RuntimeError"
            row.started_at = T0 + timedelta(seconds=seq, microseconds=7)
            row.finished_at = T0 + timedelta(seconds=seq + 1)
            row.compensated_at = T0 + timedelta(seconds=seq + 2, microseconds=999999)
            row.compensation_error = "TimeoutError"
            row.compensation_attempts = seq
            row.prev_hash = None if seq == 0 else f"{seq - 1:064x}"
            row.hash = f"{seq:064x}"
            row.tool_version = f"v{seq + 2}"
            row.reconciled = seq % 2 == 1
        rows.append(row)
    return rows


def sqlite_file(url: str) -> str:
    """Return the file of a `sqlite:///` URL of the tests (always absolute)."""
    return url.removeprefix("sqlite:///")


def sqlite_query(url: str, sql: str) -> list[Any]:
    """Run one statement on a SQLite file with the standard library; return its rows."""
    conn = sqlite3.connect(sqlite_file(url))
    try:
        with conn:
            return conn.execute(sql).fetchall()
    finally:
        conn.close()
