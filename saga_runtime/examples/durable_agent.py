"""A durable agent: its worker is killed mid-conversation, and another worker finishes it, no model turn asked again.

A support agent is an LLM loop registered as a saga function (`@registry.saga`), the loop run as its calls
(`LLMRunner.run(..., saga=saga)`). It is submitted to a queue; worker-1, a real child process, takes it, and is
killed (SIGKILL) while the agent's third tool call, the e-mail to the customer, is running. Worker-2 (this process)
finds the saga orphaned once worker-1's lease expires and resumes it by running the function again over its record:
the model's three recorded turns and the two finished tool calls are served from the record, the e-mail (whose
outcome is unknown) runs again under its idempotency key, and only the fourth turn is asked of the model.

The "model" is scripted and offline (no network, no API key): it answers like OpenAI's Chat Completions, choosing
its next call from the tool results in the conversation, as an LLM would. Every question put to it is written to a
file both processes share, so the count below covers both workers.

Run it: `python -m saga_runtime.examples durable_agent`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from saga_runtime import DynamicSaga, LLMRunner, SagaExecutor, SagaStatus, StepContext, ToolRegistry, open_store

registry = ToolRegistry()
runner: LLMRunner | None = None  # set by the process that serves the queue
FOLDER = Path(os.environ.get("DURABLE_AGENT_FOLDER", "."))
WORKER = os.environ.get("DURABLE_AGENT_WORKER", "worker-2")
DIES = os.environ.get("DURABLE_AGENT_DIES") == "1"  # worker-1: it hangs in the e-mail call, and is killed there


def note(kind: str, **fields: Any) -> None:
    """Append one line to the log both workers share (model questions, effects)."""
    with (FOLDER / "log.jsonl").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"kind": kind, "worker": WORKER, **fields}) + "\n")


def logged(kind: str) -> list[dict[str, Any]]:
    """Return the shared log's lines of one kind."""
    path = FOLDER / "log.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [entry for entry in map(json.loads, lines) if entry["kind"] == kind]


def effect_once(kind: str, key: str, **fields: Any) -> bool:
    """Record an effect under its idempotency key, once (as a payment API does); tell whether it was new."""
    if any(entry["key"] == key for entry in logged(kind)):
        return False
    note(kind, key=key, **fields)
    return True


@registry.tool
class LookupOrder:
    """Find the order a support ticket is about."""

    async def execute(self, ticket: str) -> dict[str, Any]:
        note("tool", name="LookupOrder")
        return {"order": "A-1042", "paid_cents": 4200, "email": "kim@example.com"}


@registry.tool
class RefundCard:
    """Refund an order to the card it was paid with."""

    async def execute(self, order: str, cents: int, ctx: StepContext) -> dict[str, Any]:
        note("tool", name="RefundCard")
        effect_once("refund", ctx.idempotency_key, order=order, cents=cents)
        return {"refund": f"re_{ctx.idempotency_key[-6:]}", "cents": cents}

    async def compensate(self, result: Any, ctx: StepContext) -> None:
        note("undo", name="RefundCard")


@registry.tool
class EmailCustomer:
    """E-mail the customer."""

    async def execute(self, to: str, text: str, ctx: StepContext) -> dict[str, Any]:
        note("tool", name="EmailCustomer")
        if DIES:
            (FOLDER / "mid-email").touch()  # worker-1 is killed here, the e-mail not yet sent
            await asyncio.sleep(3600)
        effect_once("email", ctx.idempotency_key, to=to)
        return {"sent": True}


class ScriptedModel:
    """Stand in for an OpenAI chat model: the next call is chosen from the tool results so far."""

    def __init__(self) -> None:
        self.chat = self
        self.completions = self

    async def create(self, *, model: str, messages: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
        """Answer one chat completion request (a JSON body, as the API sends it)."""
        results = [json.loads(m["content"]).get("result") for m in messages if m["role"] == "tool"]
        turn = len(results) + 1
        note("model", turn=turn)
        calls = {
            1: ("LookupOrder", {"ticket": "T-77"}),
            2: ("RefundCard", {"order": "A-1042", "cents": 4200}),
            3: ("EmailCustomer", {"to": "kim@example.com", "text": "Your 42.00 refund is on its way."}),
        }
        message: dict[str, Any]
        if turn in calls:
            name, args = calls[turn]
            call = {"id": f"call_{turn}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            refund = results[1]["refund"]
            message = {"role": "assistant", "content": f"Refunded 42.00 ({refund}) and told the customer."}
            finish = "stop"
        usage = {"prompt_tokens": 120 * turn, "completion_tokens": 20, "total_tokens": 120 * turn + 20}
        return {"model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


@registry.saga
async def support_agent(saga: DynamicSaga, ticket: str) -> dict[str, Any]:
    """Handle a support ticket: the model decides each call; its final answer is the saga's output."""
    assert runner is not None
    answer = await runner.run(f"Ticket {ticket}: the customer wants a refund. Refund them and tell them.", saga=saga)
    return {"ticket": ticket, "answer": answer}


def serving(executor: SagaExecutor) -> asyncio.Task[None]:
    """Give the agent its model, and serve the agents queue in a task."""
    global runner
    runner = LLMRunner(ScriptedModel(), "scripted-1", registry, executor, prices={"scripted-1": (2.0, 8.0)})
    return asyncio.create_task(executor.serve(queues=["agents"], interval=0.1))


async def worker(url: str) -> None:
    """Worker-1 (the child process): serve the queue until killed."""
    async with open_store(url) as store:
        await serving(SagaExecutor(registry, store, executor_id=WORKER, lease_timeout=1.0))


async def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="durable-agent-"))
    url = os.environ.get("SAGA_RUNTIME_DATABASE_URL") or f"sqlite:///{folder}/agents.db"
    global FOLDER
    FOLDER = folder
    async with open_store(url) as store:
        executor = SagaExecutor(registry, store, executor_id="worker-2", lease_timeout=1.0)
        print(f"store: {store.url}")
        saga_id = f"ticket-T-77-{folder.name.rsplit('-', 1)[-1]}"  # a database shared by runs gets a new saga each run
        handle = await executor.submit("support_agent", args={"ticket": "T-77"}, saga_id=saga_id, queue="agents")
        print(f"submitted {saga_id} to the queue 'agents'\n")

        env = {**os.environ, "DURABLE_AGENT_FOLDER": str(folder), "DURABLE_AGENT_WORKER": "worker-1"}
        env["DURABLE_AGENT_DIES"] = "1"
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "saga_runtime.examples", "durable_agent", "--worker", url, env=env
        )
        deadline = time.monotonic() + 60
        while not (folder / "mid-email").exists():
            if child.returncode is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker-1 ended before reaching the e-mail (exit code {child.returncode})")
            await asyncio.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        await child.wait()
        stored = await store.get_saga(saga_id)
        assert stored is not None
        print(f"worker-1 (pid {child.pid}) was killed (SIGKILL) while the agent's e-mail call ran")
        print(f"  the saga stands {stored.status.value}, its calls recorded:")
        for step in stored.steps:
            print(f"    {step.step_id} {step.tool_name}: {step.status.value}")
        asked = logged("model")
        print(f"  the model was asked {len(asked)} times: turns {[entry['turn'] for entry in asked]}\n")

        print("worker-2 serves the queue; it takes the saga over once worker-1's lease expires, and resumes it")
        task = serving(executor)
        try:
            result = await handle.result(timeout=60)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        print(f"  the saga ended {result.status.value}: {result.output['answer']}")
        for takeover in result.takeovers:
            print(f"  taken over by {takeover.by} from {takeover.from_owner} ({takeover.reason})")
        print("\nevery question put to the model, by both workers:")
        turns = [entry["turn"] for entry in logged("model")]
        for entry in logged("model"):
            print(f"  turn {entry['turn']}: asked by {entry['worker']}")
        again = len(turns) != len(set(turns))
        print(f"no model turn asked again: {not again} ({len(turns)} questions for {len(set(turns))} turns)")
        tools = [f"{entry['name']} by {entry['worker']}" for entry in logged("tool")]
        print(f"tool calls: {', '.join(tools)}")
        print(f"refunds issued: {len(logged('refund'))}, e-mails sent: {len(logged('email'))}")
        verified = bool(await store.verify_saga(result.saga_id))
        print(f"cost {result.cost:g} USD for {result.tokens} tokens; the record verifies: {verified}")
        assert result.status is SagaStatus.SUCCESS
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        asyncio.run(worker(sys.argv[2]))
    else:
        asyncio.run(main())
