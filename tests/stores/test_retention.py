"""Retention (API.md §14) on every store: purge to tombstones, archive first, dry runs, holds, bad input."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from saga_runtime import (
    IdempotencyConflictError,
    MemoryStore,
    PurgeReport,
    SagaExecutor,
    SagaStatus,
    ToolRegistry,
    open_store,
    verify_export,
)
from saga_runtime._records import now
from saga_runtime._storage import SagaStore

from .conftest import Stores, make_saga, make_steps

CALLS: list[str] = []
registry = ToolRegistry()


@registry.tool
class Charge:
    async def execute(self, amount: int) -> dict[str, int]:
        CALLS.append(f"charge {amount}")
        return {"charged": amount}

    async def compensate(self, result: Any) -> None:
        return None


def plan(amount: int) -> list[dict[str, Any]]:
    """Return a two-step plan charging `amount` twice."""
    return [
        {"id": "first", "tool": "Charge", "args": {"amount": amount}},
        {"id": "second", "tool": "Charge", "args": {"amount": amount + 1}},
    ]


async def finished_sagas(store: SagaStore, count: int, prefix: str = "old") -> list[str]:
    """Run `count` sagas to SUCCESS on `store`; return their ids, oldest first."""
    executor = SagaExecutor(registry, store=store)
    ids = []
    for n in range(count):
        result = await executor.run(plan(n), saga_id=f"{prefix}-{n}")
        assert result.status is SagaStatus.SUCCESS
        ids.append(result.saga_id)
    return ids


async def test_purge_leaves_a_tombstone_that_never_runs_again(store: SagaStore) -> None:
    """A purged saga's id returns its tombstone (no steps, purged_at set) and calls no tool; another plan conflicts."""
    [saga_id] = await finished_sagas(store, 1)
    before = await store.get_saga(saga_id)
    assert before is not None
    assert len(before.steps) == 2

    report = await store.purge(older_than=0)

    assert report == PurgeReport(1, [saga_id], None, False)
    tomb = await store.get_saga(saga_id)
    assert tomb is not None
    assert (tomb.status, tomb.steps, tomb.metadata, tomb.error) == (SagaStatus.SUCCESS, [], {}, None)
    assert tomb.purged_at is not None
    assert tomb.finished_at == before.finished_at
    assert (tomb.created_at, tomb.cost, tomb.tokens) == (before.created_at, before.cost, before.tokens)
    assert await store.verify_saga(saga_id)

    CALLS.clear()
    executor = SagaExecutor(registry, store=store)
    again = await executor.run(plan(0), saga_id=saga_id)
    assert (again.steps, again.purged_at, CALLS) == ([], tomb.purged_at, [])
    with pytest.raises(IdempotencyConflictError):
        await executor.run(plan(99), saga_id=saga_id)
    await executor.submit(plan(0), saga_id=saga_id)  # the same plan submitted again: nothing is queued
    assert (await store.get_saga(saga_id)) == tomb
    assert (await store.purge(older_than=0)).count == 0  # a tombstone is purged once


async def test_purge_forgets_a_sagas_messages(store: SagaStore) -> None:
    """A purged saga's messages go with its steps; another saga's messages stay."""
    kept, purged = await finished_sagas(store, 2)
    await store.hold(kept, reason="kept")
    for saga_id in (kept, purged):
        assert await store.put_message(saga_id, "m-1", "reply", {"card": "4242"}, now())

    assert (await store.purge(older_than=0)).saga_ids == [purged]

    assert await store.load_messages(purged) == []
    assert [body for _, _, body, _ in await store.load_messages(kept)] == [{"card": "4242"}]


async def test_purge_touches_only_old_terminal_unheld_sagas_of_the_named_statuses(store: SagaStore) -> None:
    """Running, recent, held and COMPENSATION_FAILED sagas stay unless named; COMPENSATED goes by default."""
    old = now() - timedelta(days=40)
    rows = {}
    for saga_id, status in [
        ("done", SagaStatus.SUCCESS),
        ("undone", SagaStatus.COMPENSATED),
        ("failed", SagaStatus.COMPENSATION_FAILED),
        ("running", SagaStatus.RUNNING),
        ("waiting", SagaStatus.WAITING),
        ("held", SagaStatus.SUCCESS),
    ]:
        saga = make_saga(saga_id, created_at=old, status=status)
        if not status.is_terminal:
            saga.finished_at = None
        rows[saga_id] = saga
        await store.create_saga(saga, make_steps(saga_id, 2))
    recent = make_saga("recent", created_at=now(), status=SagaStatus.SUCCESS)
    await store.create_saga(recent, make_steps("recent", 2))
    await store.hold("held", reason="dispute 2026-117")

    report = await store.purge(older_than=timedelta(days=30))
    assert report.saga_ids == ["done", "undone"]
    for saga_id in ("failed", "running", "waiting", "held"):
        loaded = await store.load_saga(saga_id)
        assert loaded is not None, saga_id
        assert (len(loaded[1]), loaded[0].purged_at) == (2, None), saga_id
    loaded = await store.load_saga("recent")
    assert loaded is not None
    assert len(loaded[1]) == 2

    named = await store.purge(older_than=timedelta(days=30), statuses=["COMPENSATION_FAILED"])
    assert named.saga_ids == ["failed"]
    await store.unhold("held")
    assert (await store.purge(older_than=timedelta(days=30))).saga_ids == ["held"]


async def test_archive_file_holds_each_export_before_it_goes_and_verifies_offline(
    store: SagaStore, tmp_path: Path
) -> None:
    """Each purged saga is appended to the archive as its export, one per line, and each verifies offline."""
    ids = await finished_sagas(store, 3)
    exports = [await store.export_saga(saga_id) for saga_id in ids]
    archive = tmp_path / "sagas-2026-10.jsonl"
    archive.write_text('{"earlier": "line"}\n')  # appended to, never truncated

    report = await store.purge(older_than=0, archive=str(archive))

    assert (report.count, report.saga_ids, report.archived_to) == (3, ids, str(archive))
    lines = archive.read_text().splitlines()
    assert json.loads(lines[0]) == {"earlier": "line"}
    archived = [json.loads(line) for line in lines[1:]]
    assert archived == exports
    for document in archived:
        assert verify_export(document, signing_key=store.signing_key)
    forged = json.loads(lines[2])
    forged["steps"][0]["result"] = {"charged": 1_000_000}
    verdict = verify_export(forged)
    assert not verdict
    assert verdict.problems


async def test_a_saga_whose_archiving_fails_stays(store: SagaStore) -> None:
    """The callable archive failing on a saga: those before it are purged, it and the rest stay, the error is raised."""
    ids = await finished_sagas(store, 4)
    seen: list[str] = []

    async def archive(document: dict[str, Any]) -> None:
        if document["saga"]["saga_id"] == ids[2]:
            raise OSError("the archive bucket is full")
        seen.append(document["saga"]["saga_id"])

    with pytest.raises(OSError, match="bucket is full"):
        await store.purge(older_than=0, archive=archive)

    assert seen == ids[:2]
    for saga_id in ids[:2]:
        result = await store.get_saga(saga_id)
        assert result is not None
        assert result.purged_at is not None
    for saga_id in ids[2:]:
        result = await store.get_saga(saga_id)
        assert result is not None
        assert result.purged_at is None
        assert len(result.steps) == 2


async def test_dry_run_changes_nothing_and_says_what_would_go(store: SagaStore, tmp_path: Path) -> None:
    """A dry run lists what would go, oldest first, and leaves every saga and the archive path alone."""
    ids = await finished_sagas(store, 3)
    archive = tmp_path / "never.jsonl"
    report = await store.purge(older_than=0, dry_run=True, archive=str(archive), limit=2)
    assert (report.count, report.saga_ids, report.dry_run) == (2, ids[:2], True)
    assert not archive.exists()
    for saga_id in ids:
        result = await store.get_saga(saga_id)
        assert result is not None
        assert result.purged_at is None


async def test_limit_caps_one_call(store: SagaStore) -> None:
    """`limit` caps how many sagas one call purges, oldest first; the next call goes on."""
    ids = await finished_sagas(store, 5)
    assert (await store.purge(older_than=0, limit=2)).saga_ids == ids[:2]
    assert (await store.purge(older_than=0)).saga_ids == ids[2:]


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"older_than": -1}, ValueError, "older_than"),
        ({"older_than": timedelta(days=-1)}, ValueError, "older_than"),
        ({"older_than": "30d"}, TypeError, "older_than"),
        ({"older_than": 0, "statuses": ["RUNNING"]}, ValueError, "only terminal"),
        ({"older_than": 0, "statuses": ["DONE"]}, ValueError, "unknown saga status"),
        ({"older_than": 0, "limit": -1}, ValueError, "limit"),
        ({"older_than": 0, "archive": "/nonexistent-dir/x/sagas.jsonl"}, ValueError, "cannot be written"),
        ({"older_than": 0, "archive": 42}, TypeError, "archive"),
    ],
)
async def test_bad_input_is_refused_and_changes_nothing(
    store: SagaStore, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    """A negative age, a non-terminal status, a bad limit or an unwritable archive: refused, nothing gone."""
    [saga_id] = await finished_sagas(store, 1)
    with pytest.raises(error, match=match):
        await store.purge(**options)
    result = await store.get_saga(saga_id)
    assert result is not None
    assert result.purged_at is None
    assert len(result.steps) == 2


async def test_archive_directory_is_refused_before_anything_goes(store: SagaStore, tmp_path: Path) -> None:
    """An archive path that is a directory is refused before the first deletion."""
    [saga_id] = await finished_sagas(store, 1)
    with pytest.raises(ValueError, match="directory"):
        await store.purge(older_than=0, archive=tmp_path)
    result = await store.get_saga(saga_id)
    assert result is not None
    assert result.purged_at is None


async def test_holds_are_listed_replaced_and_released(store: SagaStore) -> None:
    """hold records a reason beside the saga (again: a new one), holds lists them, unhold releases; unknown ids fail."""
    ids = await finished_sagas(store, 2)
    await store.hold(ids[1], reason="audit")
    await store.hold(ids[0], reason="dispute")
    await store.hold(ids[0], reason="dispute 2026-117")
    held = await store.holds()
    assert sorted((h.saga_id, h.reason) for h in held) == [(ids[0], "dispute 2026-117"), (ids[1], "audit")]
    assert await store.verify_saga(ids[0])  # not in the record's chain
    with pytest.raises(KeyError, match="nothing was held"):
        await store.hold("no-such-saga", reason="x")
    with pytest.raises(ValueError, match="reason"):
        await store.hold(ids[0], reason=" ")
    assert await store.unhold(ids[0]) is True
    assert await store.unhold(ids[0]) is False
    assert [h.saga_id for h in await store.holds()] == [ids[1]]
    assert (await store.purge(older_than=0)).saga_ids == [ids[0]]


async def test_two_purges_at_once_remove_each_saga_once(stores: Stores, kind: str, tmp_path: Path) -> None:
    """Two purges running at once (two connections) together remove every saga, and none twice."""
    first = await stores.open(kind, wipe=True)
    second = first if kind == "memory" else await stores.open(kind)
    ids = await finished_sagas(first, 30)
    seen: list[str] = []

    async def archive(document: dict[str, Any]) -> None:
        seen.append(document["saga"]["saga_id"])
        await asyncio.sleep(0)

    reports = await asyncio.gather(
        first.purge(older_than=0, archive=archive), second.purge(older_than=0, archive=archive)
    )
    purged = reports[0].saga_ids + reports[1].saga_ids
    assert sorted(purged) == sorted(ids)
    assert sorted(seen) == sorted(ids)


async def test_export_of_a_tombstone_imports_and_verifies(store: SagaStore) -> None:
    """A tombstone exports with purged_at, verifies offline, and imports into another store as the same tombstone."""
    [saga_id] = await finished_sagas(store, 1)
    await store.purge(older_than=0)
    document = await store.export_saga(saga_id)
    assert document["steps"] == []
    assert document["saga"]["purged_at"]
    assert verify_export(document, signing_key=store.signing_key)
    other = MemoryStore(signing_key=store.signing_key)
    await other.import_saga(document)
    assert await other.get_saga(saga_id) == await store.get_saga(saga_id)
    await other.close()


async def test_memory_store_keeps_at_most_keep_finished_sagas() -> None:
    """`memory://?keep=N` purges the oldest finished sagas past N to tombstones; held and running ones stay."""
    store = await open_store("memory://?keep=3")
    try:
        ids = await finished_sagas(store, 2)
        await store.hold(ids[0], reason="audit")
        ids += await finished_sagas(store, 4, prefix="new")
        whole = [s for s in ids if (r := await store.get_saga(s)) is not None and r.purged_at is None]
        assert whole == [ids[0], *ids[-3:]]  # the held one stays whole and no longer counts
        tomb = await store.get_saga(ids[1])
        assert tomb is not None
        assert tomb.steps == []
        assert tomb.purged_at is not None
        CALLS.clear()
        await SagaExecutor(registry, store=store).run(plan(1), saga_id=ids[1])
        assert CALLS == []  # an old id never runs again
    finally:
        await store.close()


async def test_memory_store_keep_refuses_bad_values() -> None:
    """A negative or non-integer keep, or an unknown URL parameter, is refused."""
    for bad in (-1, "ten", 2.5, True):
        with pytest.raises(ValueError, match="keep"):
            MemoryStore(keep=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keep=N"):
        await open_store("memory://?kep=3")


async def test_replay_of_a_tombstone_says_it_was_purged(store: SagaStore) -> None:
    """Replaying a purged saga is refused with a message saying it was purged, not a divergence of its steps."""
    from saga_runtime import ReplayDivergenceError

    [saga_id] = await finished_sagas(store, 1)
    await store.purge(older_than=0)
    with pytest.raises(ReplayDivergenceError, match="was purged at"):
        await SagaExecutor(registry, store=store).replay(saga_id)
