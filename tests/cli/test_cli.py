"""The `saga-runtime` console script, run for real in a subprocess against SQLite files and PostgreSQL."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from orphans import orphan_saga

from saga_runtime import Queue, RetryPolicy, SagaExecutor, StepContext, ToolRegistry, open_store
from saga_runtime._cli._app import app
from saga_runtime._records import (
    SagaRow,
    SagaStatus,
    StepRow,
    StepStatus,
    idempotency_key,
    now,
    seal_all,
)

SCRIPT = Path(sys.executable).with_name("saga-runtime")
FAIL_UNDO = {"on": False}  # Reserve.compensate fails while on: makes a COMPENSATION_FAILED saga

registry = ToolRegistry()


@registry.tool
class Charge:
    async def execute(self, amount: int, ctx: StepContext) -> dict[str, int]:
        ctx.charge(cost=0.25, tokens=100)
        return {"charge": amount}

    async def compensate(self, result: Any) -> None:
        return None


@registry.tool(compensation_retry=RetryPolicy(max_attempts=2, initial_interval=0.001))
class Reserve:
    def execute(self, sku: str) -> dict[str, str]:
        return {"sku": sku}

    def compensate(self, result: Any) -> None:
        if FAIL_UNDO["on"]:
            raise ConnectionError("the warehouse is down")


@registry.tool(approval=True)
class Refund:
    async def execute(self, amount: int) -> dict[str, int]:
        return {"refund": amount}


@registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=False))
class Ship:
    async def execute(self, address: str) -> dict[str, str]:
        raise ConnectionError(f"no carrier delivers to {address}")

    async def compensate(self, result: Any) -> None:
        return None


# The tools module the CLI imports for recover / retry-compensation: the same tools, which log their effects.
TOOLS_MODULE = textwrap.dedent(
    """
    from pathlib import Path
    from saga_runtime import ToolRegistry

    registry = ToolRegistry()
    LOG = Path(__file__).with_name("effects.log")


    def log(line):
        with LOG.open("a") as f:
            f.write(line + "\\n")


    @registry.tool
    class Charge:
        def execute(self, amount: int) -> dict:
            log(f"charge {amount}")
            return {"charge": amount}

        def compensate(self, result) -> None:
            log("refund")


    @registry.tool
    class Reserve:
        def execute(self, sku: str) -> dict:
            log(f"reserve {sku}")
            return {"sku": sku}

        def compensate(self, result) -> None:
            log(f"release {result['sku'] if result else None}")


    @registry.tool
    class Ship:
        def execute(self, address: str) -> dict:
            return {"address": address}


    @registry.tool(approval=True)
    class Refund:
        def execute(self, amount: int) -> dict:
            log(f"refund-card {amount}")
            return {"refund": amount}


    @registry.saga
    async def charge_twice(saga, amount: int) -> int:
        for _ in range(2):
            await saga.call("Charge", amount=amount)
        return 2 * amount
    """
)


def run_sync(make: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine on a loop of its own in a thread, whatever loop the test runs on."""

    async def main() -> Any:
        return await make()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


def orphan_rows(saga_id: str, status: SagaStatus = SagaStatus.RUNNING) -> tuple[SagaRow, list[StepRow]]:
    """Return a plan saga as a dead executor leaves it: Charge done, Reserve pending, its lease long expired."""
    plan = [
        [{"id": "charge", "tool": "Charge", "args": {"amount": 7}}],
        [{"id": "reserve", "tool": "Reserve", "args": {"sku": "LAMP"}}],
    ]
    saga = orphan_saga(saga_id, plan, status=status, owner="dead-executor")
    started = saga.created_at
    charge = StepRow(saga_id, 0, "charge", 0, "Charge", {"amount": 7}, idempotency_key(saga_id, "charge"))
    charge.status, charge.attempts, charge.result = StepStatus.SUCCESS, 1, {"charge": 7}
    charge.started_at = charge.finished_at = started
    reserve = StepRow(saga_id, 1, "reserve", 1, "Reserve", {"sku": "LAMP"}, idempotency_key(saga_id, "reserve"))
    rows = [charge, reserve]
    seal_all(rows, None)
    return saga, rows


async def populate(url: str, *, orphans: bool = False) -> None:
    """Store a success, a compensated saga (a step failing after retries), a dynamic saga, a COMPENSATION_FAILED one."""
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store=store)
        await executor.run(
            [
                {"id": "charge", "tool": "Charge", "args": {"amount": 10}},
                {"id": "reserve", "tool": "Reserve", "args": {"sku": "KB"}},
            ],
            saga_id="ok-1",
        )
        await executor.run(
            [
                {"id": "charge", "tool": "Charge", "args": {"amount": 20}},
                {"id": "reserve", "tool": "Reserve", "args": {"sku": "KB"}},
                {"id": "ship", "tool": "Ship", "args": {"address": "Atlantis"}},
            ],
            saga_id="comp-1",
        )
        async with executor.saga("dyn-1") as saga:
            await saga.call("Charge", amount=5)
            await saga.call("Reserve", sku="MOUSE")
        FAIL_UNDO["on"] = True
        try:
            await executor.run(
                [
                    {"id": "reserve", "tool": "Reserve", "args": {"sku": "PEN"}},
                    {"id": "ship", "tool": "Ship", "args": {"address": "Mars"}},
                ],
                saga_id="cfail-1",
            )
        finally:
            FAIL_UNDO["on"] = False
        if orphans:
            assert await store.create_saga(*orphan_rows("orphan-1")) is None
            parked, rows = orphan_rows("parked-1")
            assert await store.create_saga(parked, rows) is None
            parked.status, parked.parked_from, parked.owner, parked.lease_expires_at = (
                SagaStatus.PARKED,
                SagaStatus.RUNNING,
                None,
                None,
            )
            parked.error = "parked: recovery failed 5 times"
            await store.save(parked, [])
            waiting = await executor.run(
                [
                    {"id": "charge", "tool": "Charge", "args": {"amount": 3}},
                    {"id": "refund", "tool": "Refund", "args": {"amount": 3}},
                ],
                saga_id="wait-1",
            )
            assert waiting.status is SagaStatus.WAITING


@dataclass
class Ran:
    """What one run of the console script did."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        """Return stdout parsed as JSON."""
        return json.loads(self.out)


def cli(*args: str, db: str | None = None, cwd: Path | None = None, env: dict[str, str] | None = None) -> Ran:
    """Run the real console script; return its exit code and output."""
    environment = {k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_DATABASE_URL"}
    environment.update({"NO_COLOR": "1", "COLUMNS": "200", **(env or {})})
    command = [str(SCRIPT), *(["--db", db] if db else []), *args]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def one_line_error(ran: Ran) -> str:
    """Return the error line of a failed run, checking it is one line without a traceback."""
    lines = ran.err.strip().splitlines()
    assert len(lines) == 1, ran.err
    assert "Traceback" not in ran.err
    assert lines[0].startswith("saga-runtime: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Return a SQLite URL holding the four sagas, shared by the read-only tests."""
    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'sagas.db'}"
    run_sync(lambda: populate(url))
    return url


@pytest.fixture
def work_db(tmp_path: Path) -> str:
    """Return a SQLite URL of this test alone, with the four sagas and an orphaned and a parked one; tools beside it."""
    url = f"sqlite:///{tmp_path / 'sagas.db'}"
    run_sync(lambda: populate(url, orphans=True))
    (tmp_path / "cli_tools.py").write_text(TOOLS_MODULE)
    return url


@pytest.fixture(scope="module")
def postgres_db(postgres_databases: Any) -> str:
    """Return a PostgreSQL database of its own holding the four sagas (unreachable: skip, under CI fail)."""
    url: str = postgres_databases.create()
    run_sync(lambda: populate(url))
    return url


# -- reading ---------------------------------------------------------------------------------------------------


def test_script_is_installed_and_help_documents_exit_codes() -> None:
    """`saga-runtime --help` runs and its epilog explains every exit code."""
    ran = cli("--help")
    assert ran.code == 0, ran.err
    for text in ("0 ok", "1 saga not found", "2 usage", "3 store error", "4 verify failed", "recover", "replay"):
        assert text in ran.out


def test_list_shows_every_saga_and_parses_as_json(sqlite_db: str) -> None:
    """`list` shows every saga with its status; `--json` gives summaries a script can read."""
    ran = cli("list", db=sqlite_db)
    assert ran.code == 0, ran.err
    for saga_id, status in [
        ("ok-1", "SUCCESS"),
        ("comp-1", "COMPENSATED"),
        ("dyn-1", "SUCCESS"),
        ("cfail-1", "COMPENSATION_FAILED"),
    ]:
        assert saga_id in ran.out
        assert status in ran.out
    rows = cli("list", "--json", db=sqlite_db).json()
    assert {row["saga_id"]: row["status"] for row in rows} == {
        "ok-1": "SUCCESS",
        "comp-1": "COMPENSATED",
        "dyn-1": "SUCCESS",
        "cfail-1": "COMPENSATION_FAILED",
    }
    assert {row["saga_id"]: row["kind"] for row in rows}["dyn-1"] == "dynamic"


def test_list_filters_by_status_age_limit_and_offset(sqlite_db: str) -> None:
    """--status, --since, --limit and --offset narrow the list; a bad status or age is a usage error (2)."""

    def ids(*args: str) -> list[str]:
        return [row["saga_id"] for row in cli("list", "--json", *args, db=sqlite_db).json()]

    assert ids("--status", "compensated") == ["comp-1"]
    everything = ids()
    assert ids("--limit", "2") == everything[:2]
    assert ids("--limit", "2", "--offset", "1") == everything[1:3]
    assert set(ids("--since", "1h")) == set(everything)
    assert ids("--since", "2099-01-01") == []
    assert cli("list", "--status", "DONE", db=sqlite_db).code == 2
    bad = cli("list", "--since", "yesterday", db=sqlite_db)
    assert bad.code == 2
    assert "30m, 1h, 2d" in one_line_error(bad)


def test_show_prints_the_complete_timeline_of_a_compensated_saga(sqlite_db: str) -> None:
    """`show` of a compensated saga names each group, step, status, attempts, error, compensation and the cost."""
    ran = cli("show", "comp-1", db=sqlite_db)
    assert ran.code == 0, ran.err
    out = ran.out
    for text in (
        "saga comp-1",
        "COMPENSATED",
        "group 0",
        "group 2",
        "charge",
        "Charge",
        "Ship",
        "FAILED",
        "3 attempts",
        "ConnectionError: no carrier delivers to Atlantis",
        "undone by compensate()",
        "not compensated: it raised",
        "cost      0.25, 100 tokens",
    ):
        assert text in out, text
    assert "\x1b[" not in out  # readable without colour


def test_show_tells_what_was_not_undone(sqlite_db: str) -> None:
    """`show` of a COMPENSATION_FAILED saga shows the compensation's attempts and error."""
    out = cli("show", "cfail-1", db=sqlite_db).out
    assert "COMPENSATION_FAILED" in out
    assert "NOT undone: compensate() gave up after 2 attempts: ConnectionError: the warehouse is down" in out


def test_show_json_and_verbose(sqlite_db: str) -> None:
    """`show --json` is the saga's result as data; `show -v` adds args, results and idempotency keys."""
    data = cli("show", "dyn-1", "--json", db=sqlite_db).json()
    assert data["kind"] == "dynamic"
    assert data["status"] == "SUCCESS"
    assert [step["tool_name"] for step in data["steps"]] == ["Charge", "Reserve"]
    out = cli("show", "ok-1", "-v", db=sqlite_db).out
    assert 'args: {"sku": "KB"}' in out
    assert 'result: {"charge": 10}' in out
    assert "idempotency key: sr-" in out


def test_export_import_round_trip_into_another_file(sqlite_db: str, tmp_path: Path) -> None:
    """`export -o` then `import` into another SQLite file gives the same saga, intact; a second import is a no-op."""
    exported = tmp_path / "comp-1.json"
    ran = cli("export", "comp-1", "-o", str(exported), db=sqlite_db)
    assert ran.code == 0, ran.err
    assert json.loads(exported.read_text())["saga"]["saga_id"] == "comp-1"
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert cli("import", str(exported), db=other).code == 0
    assert cli("import", str(exported), db=other).code == 0
    assert cli("show", "comp-1", "--json", db=other).json() == cli("show", "comp-1", "--json", db=sqlite_db).json()
    assert cli("verify", "comp-1", db=other).code == 0
    stdout_doc = cli("export", "comp-1", db=sqlite_db).json()
    assert stdout_doc == json.loads(exported.read_text())


def test_import_of_many_sagas_and_of_a_conflict(sqlite_db: str, tmp_path: Path) -> None:
    """`import` takes JSON lines of many exports; other content under a stored id exits 5; junk exits 3."""
    docs = [cli("export", saga_id, db=sqlite_db).json() for saga_id in ("ok-1", "dyn-1")]
    lines = tmp_path / "many.jsonl"
    lines.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    other = f"sqlite:///{tmp_path / 'other.db'}"
    ran = cli("import", str(lines), db=other)
    assert ran.code == 0, ran.err
    assert "imported 2 saga(s)" in ran.out
    docs[0]["steps"][0]["result"] = {"charge": 11}
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(docs[0]))
    conflict = cli("import", str(changed), db=other)
    assert conflict.code == 5
    assert "already exists" in one_line_error(conflict)
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    assert cli("import", str(junk), db=other).code == 3


def test_verify_passes_then_fails_on_a_tampered_row(sqlite_db: str, tmp_path: Path) -> None:
    """`verify` exits 0 on an intact saga and 4, naming the altered record, after a row is edited behind its back."""
    copy = tmp_path / "tampered.db"
    copy.write_bytes(Path(sqlite_db.removeprefix("sqlite:///")).read_bytes())
    url = f"sqlite:///{copy}"
    ok = cli("verify", "ok-1", db=url)
    assert ok.code == 0
    assert "intact" in ok.out
    conn = sqlite3.connect(copy)
    with conn:
        conn.execute("UPDATE steps SET result = '{\"charge\": 1000000}' WHERE saga_id = 'ok-1' AND step_id = 'charge'")
    conn.close()
    broken = cli("verify", "ok-1", db=url)
    assert broken.code == 4
    assert "BROKEN" in broken.out
    assert "record #0 (step 'charge')" in broken.out
    assert "altered" in broken.out
    data = cli("verify", "ok-1", "--json", db=url)
    assert data.code == 4
    assert data.json()["ok"] is False
    assert data.json()["problems"]


def test_replay_rebuilds_a_plan_saga_without_tools(sqlite_db: str) -> None:
    """`replay` of a recorded plan saga succeeds with no tools at hand; `--json` is its result."""
    ran = cli("replay", "comp-1", db=sqlite_db)
    assert ran.code == 0, ran.err
    assert "no tool called" in ran.out
    assert cli("replay", "comp-1", "--json", db=sqlite_db).json()["status"] == "COMPENSATED"


def test_replay_of_a_record_that_diverges_exits_4(sqlite_db: str, tmp_path: Path) -> None:
    """`replay` exits 4 when a step's recorded args differ from its plan's."""
    copy = tmp_path / "diverged.db"
    copy.write_bytes(Path(sqlite_db.removeprefix("sqlite:///")).read_bytes())
    conn = sqlite3.connect(copy)
    with conn:
        conn.execute("UPDATE steps SET args = '{\"amount\": 99}' WHERE saga_id = 'ok-1' AND step_id = 'charge'")
    conn.close()
    ran = cli("replay", "ok-1", db=f"sqlite:///{copy}")
    assert ran.code == 4
    one_line_error(ran)


# -- operating -------------------------------------------------------------------------------------------------


def test_recover_drives_an_orphaned_saga_with_the_users_tools(work_db: str, tmp_path: Path) -> None:
    """`recover --tools module:attr` imports the registry, resumes the orphan forward, and reports it."""
    ran = cli("recover", "--tools", "cli_tools:registry", db=work_db, cwd=tmp_path)
    assert ran.code == 0, ran.err
    assert "recovered 1 saga(s)" in ran.out
    assert "orphan-1" in ran.out
    assert "SUCCESS" in ran.out
    assert (tmp_path / "effects.log").read_text().splitlines() == ["reserve LAMP"]  # Charge had run: not again
    again = cli("recover", "--tools", "cli_tools.py:registry", "--json", db=work_db, cwd=tmp_path)
    assert again.code == 0
    assert again.json() == []


def test_unpark_compensate_undoes_a_parked_saga_here(work_db: str, tmp_path: Path) -> None:
    """`unpark --compensate --tools` gives up on a PARKED saga: every step it did is undone now (COMPENSATED)."""
    ran = cli("unpark", "parked-1", "--compensate", "--tools", "cli_tools:registry", db=work_db, cwd=tmp_path)
    assert ran.code == 0, ran.err
    assert "compensated by an operator, COMPENSATED" in ran.out
    shown = cli("show", "parked-1", "--json", db=work_db).json()
    assert shown["status"] == "COMPENSATED"
    assert "an operator chose to compensate it after it was parked" in shown["error"]


def test_unpark_compensate_without_tools_leaves_the_undoing_to_recover(work_db: str, tmp_path: Path) -> None:
    """`unpark --compensate` without --tools makes the saga COMPENSATING; the next `recover` undoes it."""
    ran = cli("unpark", "parked-1", "--compensate", db=work_db)
    assert ran.code == 0, ran.err
    assert "COMPENSATING again" in ran.out
    recovered = cli("recover", "--tools", "cli_tools:registry", "--json", db=work_db, cwd=tmp_path).json()
    assert {r["saga_id"]: r["status"] for r in recovered}["parked-1"] == "COMPENSATED"


def test_unpark_then_recover(work_db: str, tmp_path: Path) -> None:
    """`unpark` makes a PARKED saga live again, so the next `recover` finishes it; unparking a finished one exits 5."""
    ran = cli("unpark", "parked-1", db=work_db)
    assert ran.code == 0, ran.err
    assert "RUNNING again" in ran.out
    recovered = cli("recover", "--tools", "cli_tools:registry", "--json", db=work_db, cwd=tmp_path).json()
    assert {r["saga_id"]: r["status"] for r in recovered} == {"orphan-1": "SUCCESS", "parked-1": "SUCCESS"}
    wrong = cli("unpark", "ok-1", db=work_db)
    assert wrong.code == 5
    assert "not PARKED" in one_line_error(wrong)


def test_a_saga_waiting_for_a_renamed_tool_shows_why_and_can_be_given_up_on(work_db: str, tmp_path: Path) -> None:
    """`show` gives the tool it waits for; `unpark --compensate --tools` undoes it with the tools that are present."""
    (tmp_path / "old_tools.py").write_text(TOOLS_MODULE.replace("class Reserve", "class Reservation"))
    assert cli("recover", "--tools", "old_tools:registry", db=work_db, cwd=tmp_path).code == 0
    shown = cli("show", "orphan-1", "--json", db=work_db).json()
    assert shown["status"] == "RUNNING"
    assert "Reserve" in shown["error"]
    assert "Reserve" in cli("show", "orphan-1", db=work_db).out
    ran = cli("unpark", "orphan-1", "--compensate", "--tools", "old_tools:registry", db=work_db, cwd=tmp_path)
    assert ran.code == 0, ran.err
    assert "compensated by an operator, COMPENSATED" in ran.out
    assert (tmp_path / "effects.log").read_text().splitlines() == ["refund"]


def test_bulk_retry_compensation_and_unpark_act_on_every_matching_saga(work_db: str, tmp_path: Path) -> None:
    """`retry-compensation --all` and `unpark --all --compensate` act on each matching saga once and summarize."""
    broken = TOOLS_MODULE.replace("log(f\"release {result['sku'] if result else None}\")", "raise OSError('down')")
    assert broken != TOOLS_MODULE
    (tmp_path / "broken_tools.py").write_text(broken)
    failed = cli("retry-compensation", "--all", "--tools", "broken_tools:registry", db=work_db, cwd=tmp_path)
    assert failed.code == 6, failed.err
    assert "retry-compensation: 1 saga(s): 1 COMPENSATION_FAILED" in failed.out
    retried = cli(
        "retry-compensation", "--all", "--since", "1h", "--tools", "cli_tools:registry", db=work_db, cwd=tmp_path
    )
    assert retried.code == 0, retried.err
    assert "cfail-1" in retried.out
    assert "retry-compensation: 1 saga(s): 1 COMPENSATED" in retried.out
    unparked = cli("unpark", "--all", "--compensate", "--tools", "cli_tools:registry", db=work_db, cwd=tmp_path)
    assert unparked.code == 0, unparked.err
    assert "unpark: 1 saga(s): 1 COMPENSATED" in unparked.out
    assert cli("unpark", "--all", "--compensate", db=work_db).out.strip() == "unpark: 0 saga(s)"
    assert cli("unpark", db=work_db).code == 2
    assert cli("unpark", "parked-1", "--all", db=work_db).code == 2
    assert cli("retry-compensation", "cfail-1", "--since", "1h", "--tools", "cli_tools:registry", db=work_db).code == 2


def test_retry_compensation_undoes_what_was_left(work_db: str, tmp_path: Path) -> None:
    """`retry-compensation` of a COMPENSATION_FAILED saga compensates it with the user's tools; on another saga, 5."""
    ran = cli("retry-compensation", "cfail-1", "--tools", "cli_tools:registry", db=work_db, cwd=tmp_path)
    assert ran.code == 0, ran.err
    assert "every effect is undone now (COMPENSATED)" in ran.out
    assert (tmp_path / "effects.log").read_text().splitlines() == ["release PEN"]
    wrong = cli("retry-compensation", "ok-1", "--tools", "cli_tools:registry", db=work_db, cwd=tmp_path)
    assert wrong.code == 5
    one_line_error(wrong)


def test_approvals_lists_the_waiting_steps(work_db: str) -> None:
    """`approvals` lists each waiting step with its tool and arguments; `--json` gives the requests in full."""
    ran = cli("approvals", db=work_db)
    assert ran.code == 0, ran.err
    for text in ("wait-1", "refund", "Refund", '{"amount": 3}', "approve SAGA STEP --by NAME"):
        assert text in ran.out
    (request,) = cli("approvals", "--json", db=work_db).json()
    assert (request["saga_id"], request["step_id"], request["args"]) == ("wait-1", "refund", {"amount": 3})
    assert request["decision"] is None


def test_approve_without_tools_records_and_a_worker_goes_on(work_db: str, tmp_path: Path) -> None:
    """`approve` without --tools records the decision only; `recover` then runs the step, once; again: exit 5."""
    ran = cli("approve", "wait-1", "refund", "--by", "alice", "--note", "under the limit", db=work_db)
    assert ran.code == 0, ran.err
    assert "approved by alice; the saga is WAITING" in ran.out
    assert not (tmp_path / "effects.log").exists()
    assert cli("approvals", "--json", db=work_db).json() == []
    recovered = cli("recover", "--tools", "cli_tools:registry", "--json", db=work_db, cwd=tmp_path).json()
    assert {r["saga_id"]: r["status"] for r in recovered} == {"wait-1": "SUCCESS", "orphan-1": "SUCCESS"}
    assert (tmp_path / "effects.log").read_text().splitlines().count("refund-card 3") == 1
    again = cli("approve", "wait-1", "refund", "--by", "carol", db=work_db)
    assert again.code == 5
    assert "approved by alice" in one_line_error(again)
    shown = cli("show", "wait-1", db=work_db)
    assert "approved by alice: under the limit" in shown.out


def test_reject_with_tools_compensates_at_once(work_db: str, tmp_path: Path) -> None:
    """`reject --tools` records the refusal and compensates the saga here: the step never runs."""
    ran = cli("reject", "wait-1", "refund", "--by", "bob", "--tools", "cli_tools:registry", db=work_db, cwd=tmp_path)
    assert ran.code == 0, ran.err
    assert "REJECTED" in ran.out
    assert "the saga is COMPENSATED" in ran.out
    assert (tmp_path / "effects.log").read_text().splitlines() == ["refund"]  # Charge's undo; Refund never ran
    assert cli("reject", "nope", "refund", "--by", "bob", db=work_db).code == 1


def test_a_bad_tools_option_is_a_usage_error(work_db: str, tmp_path: Path) -> None:
    """An unimportable module, a missing attribute or a non-registry exits 2 with one line saying what to pass."""
    for spec, text in [
        ("nowhere:registry", "cannot import the tools module 'nowhere'"),
        ("cli_tools:nothing", "has no 'nothing'"),
        ("cli_tools:LOG", "not a saga_runtime.ToolRegistry"),
        ("cli_tools", "module:attribute"),
    ]:
        ran = cli("recover", "--tools", spec, db=work_db, cwd=tmp_path)
        assert ran.code == 2, (spec, ran.err)
        assert text in one_line_error(ran), spec


# -- the store options, before or after the command -----------------------------------------------------------

# Each command with arguments that succeed on the store of `placed_db`, and a text its output then holds.
COMMANDS: dict[str, tuple[list[str], str]] = {
    "list": (["list", "--json"], '"saga_id": "orphan-1"'),
    "show": (["show", "ok-1"], "saga ok-1"),
    "export": (["export", "ok-1"], '"saga_id": "ok-1"'),
    "verify": (["verify", "ok-1"], "the record is intact"),
    "replay": (["replay", "ok-1"], "no tool called"),
    "import": (["import", "ok-1.json"], "placed.db"),  # the same saga again: a no-op, into the store named
    "recover": (["recover", "--tools", "cli_tools:registry"], "orphan-1"),
    "retry-compensation": (["retry-compensation", "cfail-1", "--tools", "cli_tools:registry"], "(COMPENSATED)"),
    "unpark": (["unpark", "parked-1"], "RUNNING again"),
    "approvals": (["approvals", "--json"], '"saga_id": "wait-1"'),
    "approve": (["approve", "wait-1", "refund", "--by", "alice"], "approved by alice"),
    "reject": (["reject", "wait-1", "refund", "--by", "bob", "--tools", "cli_tools:registry"], "rejected by bob"),
    "ui": (["ui", "--check"], "the console can serve"),  # serving itself: tests/console/test_console.py
    "mcp": (["mcp", "--tools", "cli_tools:registry"], ""),  # stdin at its end: serves nothing; tests/integrations
    "cancel": (["cancel", "ok-1"], "saga ok-1: SUCCESS"),  # a terminal saga: unchanged
    "worker": (["worker", "--help"], "SIGTERM"),  # serving until a signal: tests/cli/test_worker.py
    "purge": (["purge", "--older-than", "0s", "--dry-run"], "would purge 3 saga(s)"),  # tests/cli/test_retention_cli
    "hold": (["hold", "ok-1", "--reason", "audit"], "saga ok-1: held (audit)"),
    "unhold": (["unhold", "ok-1"], "was not held"),
    "holds": (["holds"], "no saga is held"),
    "schedules": (["schedules"], "no schedule in"),
    "schedule": (["schedule", "--help"], "pause|resume|delete"),  # steering one: tests/cli/test_schedules_cli.py
    "queues": (["queues"], "no queue holds a saga"),  # with queues: tests/cli/test_queue_cli.py
    "queue": (["queue", "pause", "payouts"], "queue payouts paused"),
    "submit": (["submit", "charge_twice", "--tools", "cli_tools:registry", "--args", '{"amount": 3}'], "QUEUED"),
    "send": (["send", "orphan-1", "reply", '{"ok": true}'], "sent to saga orphan-1"),
}
SIGNING_KEY = "the signing key of the test"


def placed(placement: str, option: str, value: str, args: list[str]) -> tuple[list[str], dict[str, str]]:
    """Return the command line and environment that give `option` before the command, after it, or in the env."""
    if placement == "before":
        return [option, value, *args], {}
    if placement == "after":
        return [*args, option, value], {}
    variable = {"--db": "SAGA_RUNTIME_DATABASE_URL", "--signing-key": "SAGA_RUNTIME_SIGNING_KEY"}[option]
    return args, {variable: value}


@pytest.fixture
def placed_db(tmp_path: Path) -> str:
    """Return the URL of a store in a folder of its own (not ./sagas.db), with an export of ok-1 and tools in cwd."""
    (tmp_path / "store").mkdir()
    url = f"sqlite:///{tmp_path / 'store' / 'placed.db'}"
    run_sync(lambda: populate(url, orphans=True))

    async def export() -> Any:
        async with open_store(url) as store:
            return await store.export_saga("ok-1")

    (tmp_path / "ok-1.json").write_text(json.dumps(run_sync(export)))
    (tmp_path / "cli_tools.py").write_text(TOOLS_MODULE)
    return url


@pytest.fixture(scope="module")
def signed_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Return a SQLite URL holding one saga whose records are signed with SIGNING_KEY."""
    url = f"sqlite:///{tmp_path_factory.mktemp('signed') / 'signed.db'}"

    async def sign() -> None:
        async with open_store(url, signing_key=SIGNING_KEY) as store:
            plan = [{"id": "charge", "tool": "Charge", "args": {"amount": 3}}]
            await SagaExecutor(registry, store=store).run(plan, saga_id="signed-1")

    run_sync(sign)
    return url


@pytest.mark.parametrize("placement", ["before", "after", "env"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_takes_db_before_or_after_its_name_or_from_the_env(
    command: str, placement: str, placed_db: str, tmp_path: Path
) -> None:
    """Each command works on the store of `--db` given before its name, after it, or of SAGA_RUNTIME_DATABASE_URL."""
    args, text = COMMANDS[command]
    argv, env = placed(placement, "--db", placed_db, args)
    ran = cli(*argv, cwd=tmp_path, env=env)
    assert ran.code == 0, (argv, ran.err)
    assert text in ran.out, (argv, ran.out)
    assert not (tmp_path / "sagas.db").exists()  # not the default store of the working directory


@pytest.mark.timeout(240)  # a run of the console script per command, on a busy machine
def test_every_command_is_covered_and_its_help_shows_the_store_options() -> None:
    """`COMMAND --help` of every command lists --db and --signing-key, their env variables, and which one wins."""
    group = typer.main.get_command(app)
    assert sorted(group.commands) == sorted(COMMANDS)  # a new command joins COMMANDS, and so its tests
    for command in COMMANDS:
        ran = cli(command, "--help")
        assert ran.code == 0, ran.err
        for text in (
            "--db",
            "SAGA_RUNTIME_DATABASE_URL",
            "--signing-key",
            "SAGA_RUNTIME_SIGNING_KEY",
            "before or after the command name; given in both places, the one after it wins",
        ):
            assert text in " ".join(ran.out.split()), (command, text)


def test_db_after_the_command_wins_over_db_before_it_and_both_over_the_env(sqlite_db: str, tmp_path: Path) -> None:
    """--db after the command wins over --db before it; either, typed, wins over SAGA_RUNTIME_DATABASE_URL."""
    absent = f"sqlite:///{tmp_path / 'absent.db'}"
    assert cli("--db", absent, "list", "--db", sqlite_db, "--json").json()  # the issue's `list --db URL --json`
    assert cli("--db", absent, "show", "--db", sqlite_db, "ok-1").code == 0
    wrong = cli("--db", sqlite_db, "show", "ok-1", "--db", absent)
    assert wrong.code == 3
    assert "absent.db" in one_line_error(wrong)
    in_env = {"SAGA_RUNTIME_DATABASE_URL": absent}
    assert cli("--db", sqlite_db, "verify", "ok-1", env=in_env).code == 0  # the command's own env does not undo it
    assert cli("verify", "ok-1", "--db", sqlite_db, env=in_env).code == 0
    assert cli("--db", absent, "verify", "ok-1", env={"SAGA_RUNTIME_DATABASE_URL": sqlite_db}).code == 3


@pytest.mark.parametrize("placement", ["before", "after", "env"])
def test_signing_key_before_or_after_the_command_or_from_the_env(placement: str, signed_db: str) -> None:
    """--signing-key given before the command, after it, or as SAGA_RUNTIME_SIGNING_KEY verifies a signed saga."""
    argv, env = placed(placement, "--signing-key", SIGNING_KEY, ["verify", "signed-1"])
    ran = cli(*argv, db=signed_db, env=env)
    assert ran.code == 0, ran.out
    assert "intact (signed and chained)" in ran.out
    unsigned = cli("verify", "signed-1", db=signed_db)
    assert unsigned.code == 4
    assert "configure the signing key" in unsigned.out


def test_signing_key_after_the_command_wins_over_one_before_it_and_the_env(signed_db: str) -> None:
    """--signing-key after the command wins over one before it; either, typed, wins over SAGA_RUNTIME_SIGNING_KEY."""
    right, wrong = ["--signing-key", SIGNING_KEY], ["--signing-key", "another key"]
    verify = ["verify", "signed-1", "--db", signed_db]
    assert cli(*wrong, *verify, *right).code == 0
    altered = cli(*right, *verify, *wrong)
    assert altered.code == 4
    assert "does not match its seal" in altered.out
    assert cli(*right, *verify, env={"SAGA_RUNTIME_SIGNING_KEY": "another key"}).code == 0
    assert cli(*verify, *right, env={"SAGA_RUNTIME_SIGNING_KEY": "another key"}).code == 0
    assert cli(*wrong, *verify, env={"SAGA_RUNTIME_SIGNING_KEY": SIGNING_KEY}).code == 4


# -- errors ----------------------------------------------------------------------------------------------------


def test_a_missing_saga_exits_1_in_one_line(sqlite_db: str) -> None:
    """Every command given an unknown id exits 1 with one line naming the id and how to list ids."""
    for command in (["show", "nope"], ["export", "nope"], ["verify", "nope"], ["replay", "nope"], ["unpark", "nope"]):
        ran = cli(*command, db=sqlite_db)
        assert ran.code == 1, (command, ran.err)
        assert "'nope'" in one_line_error(ran)
        assert "saga-runtime list" in ran.err


def test_bad_urls_and_missing_files_exit_3_in_one_line(tmp_path: Path) -> None:
    """A URL of an unknown scheme, a malformed one, or a SQLite file that is not there exits 3 saying what to do."""
    unknown = cli("list", db="oracle://db")
    assert unknown.code == 3
    assert "use one of" in one_line_error(unknown)
    missing = cli("list", db=f"sqlite:///{tmp_path / 'absent.db'}")
    assert missing.code == 3
    assert "--db URL" in one_line_error(missing)
    assert not (tmp_path / "absent.db").exists()  # reading never creates an empty database


def test_the_environment_variable_names_the_store(sqlite_db: str, tmp_path: Path) -> None:
    """Without --db, SAGA_RUNTIME_DATABASE_URL names the store; without either, ./sagas.db is the default."""
    ran = cli("list", "--json", env={"SAGA_RUNTIME_DATABASE_URL": sqlite_db})
    assert len(ran.json()) == 4
    default = cli("list", cwd=tmp_path)
    assert default.code == 3
    assert "'sagas.db'" in one_line_error(default)


def test_an_unreachable_server_exits_3_in_one_line() -> None:
    """A PostgreSQL server that does not answer exits 3 with one line naming the URL, password hidden."""
    ran = cli("list", db="postgresql://someone:secret@127.0.0.1:1/nothing")
    assert ran.code == 3
    line = one_line_error(ran)
    assert "cannot connect" in line
    assert "secret" not in line


def test_without_the_cli_extra_the_script_says_what_to_install(tmp_path: Path) -> None:
    """When typer is not importable, the entry point exits 3 with the pip command to run."""
    (tmp_path / "typer.py").write_text("raise ImportError('hidden for the test', name='typer')\n")
    code = "import sys; sys.path.insert(0, sys.argv[1]); from saga_runtime._cli import main; main()"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=False)
    assert done.returncode == 3
    assert "pip install 'saga-runtime[cli]'" in done.stderr
    assert "Traceback" not in done.stderr


# -- PostgreSQL ------------------------------------------------------------------------------------------------


def test_postgres_list_show_verify_export(postgres_db: str, tmp_path: Path) -> None:
    """Against PostgreSQL: list (filtered, JSON), show, verify and an export imported into SQLite agree."""
    rows = cli("list", "--json", db=postgres_db).json()
    assert {row["saga_id"] for row in rows} == {"ok-1", "comp-1", "dyn-1", "cfail-1"}
    assert [r["saga_id"] for r in cli("list", "--json", "--status", "COMPENSATED", db=postgres_db).json()] == ["comp-1"]
    show = cli("show", "comp-1", db=postgres_db)
    assert show.code == 0
    assert "ConnectionError: no carrier delivers to Atlantis" in show.out
    assert cli("verify", "comp-1", db=postgres_db).code == 0
    assert cli("replay", "comp-1", db=postgres_db).code == 0
    exported = tmp_path / "pg.json"
    assert cli("export", "comp-1", "-o", str(exported), db=postgres_db).code == 0
    local = f"sqlite:///{tmp_path / 'from-pg.db'}"
    assert cli("import", str(exported), db=local).code == 0
    assert cli("verify", "comp-1", db=local).code == 0
    missing = cli("show", "nope", db=postgres_db)
    assert missing.code == 1
    one_line_error(missing)


LIFESPAN = """

@registry.lifespan
async def resources():
    log("enter")
    yield {}
    log("leave")  # only when left properly: a lifespan abandoned is closed at the yield, with GeneratorExit
"""


def test_commands_with_tools_leave_the_lifespan_they_entered(work_db: str, tmp_path: Path) -> None:
    """`recover` and `unpark --compensate` with --tools leave the registry's lifespan (its cleanup runs) at the end."""
    (tmp_path / "cli_tools.py").write_text(TOOLS_MODULE + LIFESPAN)
    ran = cli("recover", "--tools", "cli_tools:registry", db=work_db, cwd=tmp_path)
    assert ran.code == 0, ran.err
    assert (tmp_path / "effects.log").read_text().splitlines() == ["enter", "reserve LAMP", "leave"]
    (tmp_path / "effects.log").unlink()
    ran = cli("unpark", "parked-1", "--compensate", "--tools", "cli_tools:registry", db=work_db, cwd=tmp_path)
    assert ran.code == 0, ran.err
    lines = (tmp_path / "effects.log").read_text().splitlines()
    assert (lines[0], lines[-1]) == ("enter", "leave")


# -- how a saga ended, why it waits (API.md §19) -----------------------------------------------------------------


def test_show_and_list_say_how_a_saga_ended(sqlite_db: str) -> None:
    """`show` names the end reason; `list` has it in its "why" column; `list --reason R` keeps those sagas."""
    shown = cli("show", "comp-1", db=sqlite_db)
    assert shown.code == 0, shown.err
    assert "ended     failed" in shown.out
    assert cli("show", "comp-1", "--json", db=sqlite_db).json()["end_reason"] == "failed"
    listed = cli("list", db=sqlite_db)
    (line,) = [row for row in listed.out.splitlines() if "comp-1" in row]
    assert line.split()[1:3] == ["COMPENSATED", "failed"]
    rows = cli("list", "--reason", "failed", "--json", db=sqlite_db).json()
    assert sorted(row["saga_id"] for row in rows) == ["cfail-1", "comp-1"]
    assert {row["end_reason"] for row in rows} == {"failed"}
    assert cli("list", "--reason", "budget", "--json", db=sqlite_db).json() == []
    bad = cli("list", "--reason", "bored", db=sqlite_db)
    assert bad.code == 2
    assert "failed, cancelled, rejected" in one_line_error(bad)


def test_show_says_a_queued_saga_waits_for_its_keys_limit(tmp_path: Path) -> None:
    """`show` of a QUEUED saga whose key is at the queue's key_concurrency (the other saga of the key running under
    a worker's lease) says it waits for the limit, naming the key."""
    url = f"sqlite:///{tmp_path / 'sagas.db'}"

    async def setup() -> None:
        async with open_store(url) as store:
            executor = SagaExecutor(registry, store=store)
            plan = [{"id": "charge", "tool": "Charge", "args": {"amount": 1}}]
            for saga_id in ("first", "second"):
                await executor.submit(plan, saga_id=saga_id, queue="pay", key="acct-7")
            queue = Queue("pay", key_concurrency=1)
            await store.note_queue_limits(queue, now())  # as a worker serving the queue does
            started = await store.claim_queued("w1", now() + timedelta(minutes=5), now(), queue, 10)
            assert [saga.saga_id for saga, _ in started] == ["first"]

    run_sync(setup)
    shown = cli("show", "second", db=url)
    assert shown.code == 0, shown.err
    assert "waits for  limit: key 'acct-7' of queue 'pay' has 1 running" in shown.out
    assert cli("show", "second", "--json", db=url).json()["waiting_for"]["kind"] == "limit"


def test_list_says_a_queued_saga_waits_for_a_limit_a_time_or_a_paused_queue(tmp_path: Path) -> None:
    """`list` (and `list --queue`, and --json) says what `show` says of QUEUED sagas held back in their queue: a
    key at its limit, a start time not reached, a paused queue; a saga free to start waits for nothing."""
    url = f"sqlite:///{tmp_path / 'sagas.db'}"

    async def setup() -> None:
        async with open_store(url) as store:
            executor = SagaExecutor(registry, store=store)
            plan = [{"id": "charge", "tool": "Charge", "args": {"amount": 1}}]
            for saga_id in ("first", "second"):
                await executor.submit(plan, saga_id=saga_id, queue="pay", key="acct-7")
            await executor.submit(plan, saga_id="later", queue="pay", not_before=3600)
            await executor.submit(plan, saga_id="free", queue="pay")
            await executor.submit(plan, saga_id="stopped", queue="held")
            queue = Queue("pay", key_concurrency=1)
            await store.note_queue_limits(queue, now())  # as a worker serving the queue does
            started = await store.claim_queued("w1", now() + timedelta(minutes=5), now(), queue, 1)
            assert [saga.saga_id for saga, _ in started] == ["first"]

    run_sync(setup)
    assert cli("queue", "pause", "held", db=url).code == 0
    listed = cli("list", db=url)
    assert listed.code == 0, listed.err
    rows = {line.split()[0]: line for line in listed.out.splitlines() if line.split()}
    assert "waits: limit" in rows["second"]
    assert "waits: time" in rows["later"]
    assert "waits: queue_paused" in rows["stopped"]
    assert rows["free"].split()[1:3] == ["QUEUED", "-"]
    assert rows["first"].split()[1:3] == ["RUNNING", "-"]
    by_queue = {s["saga_id"]: s["waiting_for"] for s in cli("list", "--queue", "pay", "--json", db=url).json()}
    assert by_queue["second"]["kind"] == "limit"
    assert "key 'acct-7'" in by_queue["second"]["detail"]
    assert by_queue["later"]["kind"] == "time"
    assert by_queue["free"] is None
    assert set(by_queue) == {"first", "second", "later", "free"}


def test_show_and_list_say_why_a_saga_waits(work_db: str) -> None:
    """A saga waiting for a decision, and a parked one, say so in `show` and in the list's "why" column."""
    shown = cli("show", "wait-1", db=work_db)
    assert shown.code == 0, shown.err
    assert "waits for  decision: a decision on step 'refund' (Refund)" in shown.out
    assert cli("show", "wait-1", "--json", db=work_db).json()["waiting_for"]["kind"] == "decision"
    parked = cli("show", "parked-1", "--json", db=work_db).json()["waiting_for"]
    assert parked == {"kind": "parked", "detail": "parked: recovery failed 5 times"}
    lines = cli("list", db=work_db).out.splitlines()
    assert "waits: decision" in next(row for row in lines if "wait-1" in row)
    assert "waits: parked" in next(row for row in lines if "parked-1" in row)
    assert next(row for row in lines if "ok-1" in row).split()[1:3] == ["SUCCESS", "-"]
