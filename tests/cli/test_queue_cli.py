"""The queue commands of `saga-runtime` (queues, queue pause|resume|drain, list --queue) and approve --args-digest,
run for real against SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from saga_runtime import Queue, SagaAdmin, SagaExecutor, StepContext, ToolRegistry, open_store

from .test_cli import cli, one_line_error, populate, run_sync

registry = ToolRegistry()


@registry.tool
class Note:
    async def execute(self, text: str, ctx: StepContext) -> str:
        return text

    async def compensate(self, result: Any) -> None:
        return None


def _plan(text: str) -> list[dict[str, Any]]:
    return [{"tool": "Note", "args": {"text": text}, "id": "note"}]


async def _populate(url: str) -> None:
    """Queue two sagas in `mail`, one in `payouts` (a worker with limits served it once), and run one directly."""
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store)
        await executor.submit(_plan("a"), saga_id="mail-1", queue="mail")
        await executor.submit(_plan("b"), saga_id="mail-2", queue="mail")
        await executor.submit(_plan("c"), saga_id="pay-1", queue="payouts")
        await executor.run(_plan("d"), saga_id="direct-1")
        await store.note_queue_limits(Queue("payouts", concurrency=20, key_concurrency=1), datetime.now(UTC))


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def queue_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Return a database of each kind holding the queued sagas of `_populate`."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'queues.db'}"
    else:
        url = request.getfixturevalue(f"{request.param}_databases").create()
    run_sync(lambda: _populate(url))
    return url


def test_queues_lists_each_queue_with_depth_state_and_limits(queue_db: str) -> None:
    """`queues` shows queued, running, waiting, the oldest and the limits per queue; --json has every field."""
    ran = cli("queues", db=queue_db)
    assert ran.code == 0, ran.err
    lines = {line.split()[0]: line for line in ran.out.splitlines() if line.strip().startswith(("mail", "payouts"))}
    assert lines["mail"].split()[1:5] == ["active", "2", "0", "0"]
    assert "concurrency 20, per key 1" in lines["payouts"]
    rows = {row["name"]: row for row in cli("queues", "--json", db=queue_db).json()}
    assert sorted(rows) == ["mail", "payouts"]
    assert (rows["mail"]["queued"], rows["mail"]["state"], rows["mail"]["oldest_queued_at"] is not None) == (
        2,
        "active",
        True,
    )
    assert (rows["payouts"]["concurrency"], rows["payouts"]["key_concurrency"]) == (20, 1)


def test_queue_pause_drain_resume_are_stored(queue_db: str) -> None:
    """`queue pause|drain|resume NAME` store the queue's state, as `queues` and the store then read it."""
    paused = cli("queue", "pause", "mail", db=queue_db)
    assert paused.code == 0, paused.err
    assert "queue mail paused" in paused.out
    assert cli("queues", "--json", db=queue_db).json()[0]["paused"] is True
    drained = cli("queue", "drain", "payouts", "--json", db=queue_db).json()
    assert (drained["draining"], drained["state"]) == (True, "drained")  # nothing of it runs
    assert cli("queue", "resume", "mail", db=queue_db).code == 0

    async def states() -> list[str]:
        async with open_store(queue_db) as store:
            return [await store.queue_state(name) for name in ("mail", "payouts", "other")]

    assert run_sync(states) == ["active", "draining", "active"]


def test_queue_refuses_a_bad_action_or_name(queue_db: str) -> None:
    """An unknown action exits 2 (usage); an empty name exits 2 with one line; nothing is stored."""
    assert cli("queue", "stop", "mail", db=queue_db).code == 2
    bad = cli("queue", "pause", "", db=queue_db)
    assert bad.code == 2
    assert "queue name" in one_line_error(bad)
    assert all(row["state"] == "active" for row in cli("queues", "--json", db=queue_db).json())


def test_list_by_queue(queue_db: str) -> None:
    """`list --queue NAME` lists that queue's sagas only, newest first, with --status too."""
    assert [r["saga_id"] for r in cli("list", "--queue", "mail", "--json", db=queue_db).json()] == ["mail-2", "mail-1"]
    rows = cli("list", "--queue", "payouts", "--status", "queued", "--json", db=queue_db).json()
    assert [r["saga_id"] for r in rows] == ["pay-1"]
    none = cli("list", "--queue", "nothing", db=queue_db)
    assert none.code == 0
    assert "no sagas in queue 'nothing'" in none.out


@pytest.fixture
def work_db(tmp_path: Path) -> str:
    """Return a SQLite URL of this test alone holding test_cli's sagas, `wait-1` waiting for a decision."""
    url = f"sqlite:///{tmp_path / 'sagas.db'}"
    run_sync(lambda: populate(url, orphans=True))
    return url


def test_approve_checks_the_args_digest(work_db: str) -> None:
    """`approve --args-digest` refuses a digest other than the request's (exit 5, nothing recorded) and records
    the decision with the right one."""
    [request] = cli("approvals", "--json", db=work_db).json()
    wrong = cli("approve", "wait-1", "refund", "--by", "alice", "--args-digest", "0" * 64, db=work_db)
    assert wrong.code == 5
    assert "digest" in one_line_error(wrong)
    assert len(cli("approvals", "--json", db=work_db).json()) == 1  # still undecided
    right = cli("approve", "wait-1", "refund", "--by", "alice", "--args-digest", request["args_digest"], db=work_db)
    assert right.code == 0, right.err
    assert cli("approvals", "--json", db=work_db).json() == []

    async def decided_by() -> str | None:
        async with open_store(work_db) as store:
            result = await SagaAdmin(store).get_saga("wait-1")
            assert result is not None
            return result.approvals[0].decided_by

    assert run_sync(decided_by) == "alice"
