"""A refund above a limit waits for a person: the agent asks, a person approves from the command line, it runs once.

A scripted support agent (no network, no API key) looks an order up and asks to refund it in full. The
application turns the model's tool calls into a plan and marks every refund above its limit as needing a
person's approval. The saga records the request (the exact arguments, and their digest) and stops WAITING before
the refund's group: nothing of it runs, no worker holds it. A person lists the waiting steps and approves from
the command line (`saga-runtime approvals`, `saga-runtime approve SAGA STEP --by NAME`); a worker then goes on
with the saga, and the refund runs, once. Approving again is refused: a decision is consumed once.

Run it: `python -m saga_runtime.examples refund_approval` (the command line comes with
`pip install 'saga-runtime[cli]'`; without it, the example approves through `executor.approve`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import tempfile
from typing import Any

from saga_runtime import (
    ApprovalError,
    MockLLMClient,
    SagaExecutor,
    StepContext,
    ToolRegistry,
    open_store,
    plan_from_openai,
)

LIMIT_CENTS = 500_00  # refunds above this need a person
registry = ToolRegistry()
refunds: list[str] = []


@registry.tool
class LookUpOrder:
    """Look an order up: what was paid, and how."""

    async def execute(self, order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, "paid_cents": 900_00, "card": "visa-4242"}


@registry.tool
class RefundCard:
    """Refund a card payment (the payment provider takes the idempotency key)."""

    async def execute(self, order_id: str, amount_cents: int, ctx: StepContext) -> dict[str, Any]:
        refunds.append(f"refund {amount_cents / 100:.2f} EUR on {order_id} (key {ctx.idempotency_key[:12]}...)")
        return {"refund_id": f"re_{ctx.idempotency_key[3:11]}", "amount_cents": amount_cents}

    async def compensate(self, result: dict[str, Any] | None, ctx: StepContext) -> None:
        refunds.append(f"refund reversed ({ctx.idempotency_key[:12]}...)")


def cli(url: str, *args: str) -> str:
    """Run `saga-runtime ARGS --db URL` as a person would; return what it printed."""
    command = [sys.executable, "-c", "from saga_runtime._cli import main; main()", *args, "--db", url]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"(exit {done.returncode}) {done.stderr.strip()}"
    return done.stdout.rstrip()


def gate_refunds(plan: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """Mark every refund above the limit as needing a person's approval (the application's rule, not the model's)."""
    return [
        [
            {**step, "approval": True}
            if step["tool"] == "RefundCard" and step["args"].get("amount_cents", 0) > LIMIT_CENTS
            else step
            for step in group
        ]
        for group in plan
    ]


async def main() -> None:
    url = os.environ.get("SAGA_RUNTIME_DATABASE_URL") or f"sqlite:///{tempfile.mkdtemp()}/refunds.db"
    print(f"store: {url}")
    has_cli = importlib.util.find_spec("typer") is not None and importlib.util.find_spec("rich") is not None
    async with open_store(url) as store:
        agent = SagaExecutor(registry, store=store, executor_id="support-agent")
        model = MockLLMClient(
            tool_sequence=[
                [
                    ("LookUpOrder", {"order_id": "A-7"}),
                    ("RefundCard", {"order_id": "A-7", "amount_cents": 900_00}),
                ]
            ]
        )
        completions: Any = model.chat.completions  # sync or async, as the client was built
        answer = await completions.create(model="mock", messages=[{"role": "user", "content": "refund A-7 in full"}])
        plan = gate_refunds(plan_from_openai(answer.choices[0].message))
        result = await agent.run(plan, saga_id="refund-A-7")
        print(
            f"\nthe agent asked to refund 900.00 EUR (limit {LIMIT_CENTS / 100:.2f}): the saga is {result.status.value}"
        )
        request = result.pending_approvals[0]
        print(
            f"  waiting: step {request.step_id} {request.tool_name}({request.args}), digest {request.args_digest[:12]}"
        )
        print(f"  refunds made so far: {len(refunds)}")

        print("\n$ saga-runtime approvals")
        if has_cli:
            print(cli(url, "approvals"))
            print(f"\n$ saga-runtime approve refund-A-7 {request.step_id} --by alice --note 'checked with the bank'")
            print(
                cli(url, "approve", "refund-A-7", request.step_id, "--by", "alice", "--note", "checked with the bank")
            )
        else:
            print("(the command line is not installed: approving with executor.approve instead)")
            await agent.approve("refund-A-7", request.step_id, by="alice", note="checked with the bank", resume=False)

        worker = SagaExecutor(registry, store=store, executor_id="worker-1")
        (finished,) = await worker.recover()  # what `executor.serve()` does in a loop
        print(f"\na worker went on with it: {finished.status.value}")
        print(finished.describe())
        print("\nwhat the payment provider saw:")
        for line in refunds:
            print(f"  {line}")
        try:
            await agent.approve("refund-A-7", request.step_id, by="mallory")
        except ApprovalError as exc:
            print(f"\napproving again is refused: {exc}")
        print(f"refunds made: {len(refunds)}; the record verifies: {bool(await store.verify_saga('refund-A-7'))}")


if __name__ == "__main__":
    asyncio.run(main())
