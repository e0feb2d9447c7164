"""The examples are programs: each runs offline and prints what happened."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGED = ROOT / "saga_runtime" / "examples"
LAUNCHERS = ROOT / "examples"


def run_example(name: str, tmp_path: Path) -> str:
    """Run `python -m saga_runtime.examples NAME` (no name: the list) with its own SQLite file; return its output."""
    return run_command([sys.executable, "-m", "saga_runtime.examples", *([name] if name else [])], tmp_path)


def run_command(command: list[str], tmp_path: Path) -> str:
    """Run a command in a subprocess with its own SQLite file; return what it printed."""
    env = {**os.environ, "SAGA_RUNTIME_DATABASE_URL": f"sqlite:///{tmp_path / 'sagas.db'}"}
    env.pop("OPENAI_API_KEY", None)  # examples stay offline in the tests, whatever the machine has
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def printed(out: str, lines: str) -> None:
    """Assert that `out` holds every non-blank line of `lines` (stripped), naming those it lacks."""
    missing = [line.strip() for line in lines.splitlines() if line.strip() and line.strip() not in out]
    assert missing == [], f"missing {missing} in:\n{out}"


def test_order_flow_succeeds_then_rolls_back(tmp_path: Path) -> None:
    """The order example prints one SUCCESS saga and one COMPENSATED saga whose effects were all undone."""
    out = run_example("order", tmp_path)
    printed(
        out,
        """
        : SUCCESS (3 steps
        : COMPENSATED (3 steps
        ConnectionError
        3 attempts
        0 tool calls made
        charges still standing: 1 (order A-1), refunds: 1 (order A-2)
        keyboards in stock: 4 of 5, shipments booked: 1
        """,
    )


def test_order_flow_writes_to_the_sqlite_default(tmp_path: Path) -> None:
    """The order example stores its sagas in the SQLite database named by the environment."""
    out = run_example("order", tmp_path)
    assert "store: sqlite:///" in out
    assert (tmp_path / "sagas.db").exists()


def test_async_order_flow_cancels_the_slow_sibling(tmp_path: Path) -> None:
    """async_order runs a group in parallel and a failure cancels and compensates the slow sibling."""
    out = run_example("async_order", tmp_path)
    printed(
        out,
        """
        saga order-B-1: SUCCESS
        saga order-B-2: COMPENSATED
        cancelled while running: step 'fraud' failed
        shipping quote for 'Seoul' cancelled mid-flight
        (result=None)
        """,
    )
    took = float(out.split("the failing saga took ")[1].split("s")[0])
    assert took < 5, "the 10 s sibling was not cancelled"


def test_retry_flow_shows_backoff_non_retryable_and_step_scope(tmp_path: Path) -> None:
    """retry retries a flaky call, stops at once on a non-retryable error, and tolerates an optional step."""
    out = run_example("retry", tmp_path)
    printed(
        out,
        """
        saga trip-1: SUCCESS
        ExchangeRate attempt 3
        SendSms
        FAILED
        saga trip-2: COMPENSATED
        """,
    )
    assert "ChargeCard attempt 2" not in out
    assert "HoldSeat released KE901-14C" in out


@pytest.mark.parametrize("name", sorted(p.stem for p in PACKAGED.glob("*.py") if not p.name.startswith("_")))
def test_every_example_runs(name: str, tmp_path: Path) -> None:
    """Every packaged example exits 0 and prints something (a module named _x.py is a part they share)."""
    assert run_example(name, tmp_path).strip()


def test_the_examples_are_listed_with_their_summaries(tmp_path: Path) -> None:
    """`python -m saga_runtime.examples` lists every example with the first line of its docstring."""
    out = run_example("", tmp_path)
    assert "order  " in out
    assert "An order as a saga: charge the card" in out
    assert "_trip" not in out


def test_an_unknown_example_is_refused_with_the_list(tmp_path: Path) -> None:
    """An unknown example name exits 2 and names the examples there are."""
    done = subprocess.run(
        [sys.executable, "-m", "saga_runtime.examples", "nope"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "order" in done.stderr


@pytest.mark.parametrize("name", sorted(p.name for p in LAUNCHERS.glob("*.py")))
def test_every_launcher_in_examples_names_a_packaged_example(name: str) -> None:
    """Each examples/*.py launches a packaged example: the code has one source, in saga_runtime/examples."""
    text = (LAUNCHERS / name).read_text()
    assert "saga_runtime.examples." in text
    assert len(text.splitlines()) < 15


def test_the_order_launcher_still_runs_the_order(tmp_path: Path) -> None:
    """`python examples/order_flow.py` runs the packaged order example."""
    out = run_command([sys.executable, str(LAUNCHERS / "order_flow.py")], tmp_path)
    assert ": COMPENSATED (3 steps" in out


def test_agent_loop_rolls_back_then_replays_from_the_database(tmp_path: Path) -> None:
    """agent_loop.py books, fails, undoes in reverse, replays with no tool call, and catches a changed decision."""
    out = run_example("agent_loop", tmp_path)
    assert "saga trip-lisbon: COMPENSATED" in out
    assert "CancelFlight(F-" in out.split("tool calls, in order:")[1].split("CancelHotel")[0]
    printed(
        out,
        """
        tool calls made: 0
        a changed decision is caught
        the record verifies: True
        """,
    )


def test_durable_agent_survives_its_killed_worker_with_no_turn_asked_again(tmp_path: Path) -> None:
    """durable_agent.py SIGKILLs its worker mid-conversation; another worker finishes, each model turn asked once."""
    out = run_example("durable_agent", tmp_path)
    printed(
        out,
        """
        was killed (SIGKILL) while the agent's e-mail call ran
        call_3 EmailCustomer: RUNNING
        the model was asked 3 times: turns [1, 2, 3]
        the saga ended SUCCESS: Refunded 42.00
        taken over by worker-2 from worker-1
        turn 3: asked by worker-1
        turn 4: asked by worker-2
        no model turn asked again: True (4 questions for 4 turns)
        refunds issued: 1, e-mails sent: 1
        the record verifies: True
        """,
    )
    assert "store: sqlite:///" in out


@pytest.mark.parametrize("name", ["pydantic_ai_agent", "langchain_agent", "openai_agents_agent"])
def test_framework_examples_run_steps_tell_failures_and_serve_reentry_from_the_record(
    name: str, tmp_path: Path
) -> None:
    """Each framework example runs its tool calls as steps, reports a failure, and re-runs from the record alone."""
    out = run_example(name, tmp_path)
    first, again = out.split("same saga id again:")
    assert "saga trip-lisbon: SUCCESS, the model was asked 3 times" in first
    assert "RentCar: FAILED LookupError: no rental cars left in Lisbon" in first
    assert "booked a transfer in Lisbon to the hotel" in first
    assert "SUCCESS, the model was asked 0 times" in again
    assert "effects: none (served from the record)" in again
    assert again.count("answer: Booked: the flight to Lisbon") == 1


def test_refund_approval_waits_for_the_cli_approval_then_refunds_once(tmp_path: Path) -> None:
    """refund_approval.py: the refund over the limit waits, is approved from the CLI, runs once, and verifies."""
    out = run_example("refund_approval", tmp_path)
    assert "the saga is WAITING" in out
    assert "refunds made so far: 0" in out
    assert "approved by alice; the saga is WAITING" in out  # the CLI recorded the decision only
    assert "a worker went on with it: SUCCESS" in out
    assert "approved by alice: checked with the bank" in out
    assert out.count("refund 900.00 EUR on A-7") == 1
    assert "approving again is refused" in out
    assert "refunds made: 1; the record verifies: True" in out


def test_console_store_fills_a_store_with_every_kind_of_saga(tmp_path: Path) -> None:
    """console_store.py leaves a SUCCESS, a COMPENSATED, a COMPENSATION_FAILED and a WAITING saga to look at."""
    out = run_example("console_store", tmp_path)
    for line in (
        "order-A-1001: SUCCESS",
        "order-A-1002: COMPENSATED",
        "complaint-77: COMPENSATION_FAILED",
        "refund-A-0990: WAITING",
    ):
        assert line in out
    assert "saga-runtime ui --db" in out


def test_mcp_session_books_two_tickets_over_mcp_and_rolls_them_back(tmp_path: Path) -> None:
    """mcp_session.py: an MCP session books two tickets, its refund waits for a decision, rollback cancels both."""
    out = run_example("mcp_session", tmp_path)
    printed(
        out,
        """
        the MCP server offers: book_ticket, refund, saga_commit, saga_rollback
        waits for a person's decision
        'status': 'COMPENSATED'
        booked KE901-12A; booked KE901-12B; cancelled KE901-12B; cancelled KE901-12A
        saga trip-over-mcp: COMPENSATED
        airline booked OZ202-3C; airline cancelled OZ202-3C
        tickets still booked: 0
        """,
    )
