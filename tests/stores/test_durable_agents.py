"""Agents as saga functions (API.md §18, §10): `LLMRunner.run(..., saga=saga)` resumed where it stopped.

The model is one of the official SDKs over a scripted in-process transport (`llm_fakes`): each request takes the next
scripted answer, and every request is counted. A worker is stopped while a tool call of the second turn hangs (as a
process that dies mid-call leaves it); another executor's recovery resumes the function over its record.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pydantic
import pytest
from llm_fakes import APIS, MODELS, FakeAPI, args_of, call_id, text_turn, tool_turn

from saga_runtime import (
    DynamicSaga,
    LLMRunner,
    MemoryStore,
    MockLLMClient,
    PlanPolicy,
    ReplayDivergenceError,
    SagaExecutor,
    SagaFailedError,
    SagaStatus,
    SagaStore,
    StepContext,
    ToolRegistry,
)


class Desk:
    """What the tools did, by idempotency key, and the call that hangs once (its worker stopped during it)."""

    def __init__(self) -> None:
        self.lookups: list[str] = []
        self.refunds: list[str] = []  # idempotency keys, one per execute
        self.undone: list[str] = []
        self.hang_once = True
        self.hanging = asyncio.Event()


def make_registry(desk: Desk) -> ToolRegistry:
    """Return Lookup and Refund (which hangs on its first call while `desk.hang_once`)."""
    registry = ToolRegistry()

    @registry.tool
    class Lookup:
        """Find a ticket's order."""

        async def execute(self, ticket: str) -> dict[str, Any]:
            desk.lookups.append(ticket)
            return {"order": f"O-{ticket}", "cents": 4200}

    @registry.tool
    class Refund:
        """Refund an order."""

        async def execute(self, order: str, cents: int, ctx: StepContext) -> dict[str, Any]:
            if desk.hang_once:
                desk.hang_once = False
                desk.hanging.set()
                await asyncio.sleep(60)
            desk.refunds.append(ctx.idempotency_key)
            return {"refund": f"R-{order}", "cents": cents}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            desk.undone.append(ctx.args["order"])

    return registry


def script(api: str) -> list[Any]:
    """Return the model's three turns: look the ticket up, refund its order, answer."""
    return [
        tool_turn(api, [(call_id(api, 1), "Lookup", args_of(api, {"ticket": "T-9"}))]),
        tool_turn(api, [(call_id(api, 2), "Refund", args_of(api, {"order": "O-T-9", "cents": 4200}))]),
        text_turn(api, "Refunded 42.00 on order O-T-9."),
    ]


def desk_and_runner(
    *extra: Any, store: SagaStore | None = None, **options: Any
) -> tuple[Desk, FakeAPI, ToolRegistry, SagaExecutor, LLMRunner]:
    """Return a desk whose calls never hang, the chat model scripted (`script`, then `extra`), an executor of
    `options` and a runner."""
    desk = Desk()
    desk.hang_once = False
    fake = FakeAPI("chat", [*script("chat"), *extra])
    registry = make_registry(desk)
    executor = SagaExecutor(registry, store, **options)
    return desk, fake, registry, executor, LLMRunner(fake.client(), MODELS["chat"], registry, executor, api="chat")


def add_agent(registry: ToolRegistry, runner: dict[str, LLMRunner], *, prompt: str = "Ticket T-9: refund it") -> None:
    """Register `support`: one LLM loop run as calls of the saga function, its answer the output."""

    @registry.saga
    async def support(saga: DynamicSaga, ticket: str) -> dict[str, Any]:
        answer = await runner["now"].run(prompt, saga=saga, max_turns=5)
        return {"ticket": ticket, "answer": answer}


async def stop_mid_refund(executor: SagaExecutor, desk: Desk, saga_id: str) -> None:
    """Submit the agent, let a worker run it, and stop that worker while the refund call hangs."""
    await executor.submit("support", args={"ticket": "T-9"}, saga_id=saga_id)
    worker = asyncio.create_task(executor.serve(interval=0.02))
    await asyncio.wait_for(desk.hanging.wait(), 20)
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker


async def test_an_agent_is_resumed_by_another_executor_asking_no_recorded_turn_again(store: SagaStore) -> None:
    """A stopped agent saga function is resumed by recovery: turns 1-2 served, only turn 3 asked; Lookup ran once."""
    api = "chat"
    desk, fake = Desk(), FakeAPI(api, script(api))
    registry = make_registry(desk)
    runner: dict[str, LLMRunner] = {}
    add_agent(registry, runner)
    first = SagaExecutor(registry, store, compensation_timeout=0.2, lease_timeout=60)
    runner["now"] = LLMRunner(fake.client(), MODELS[api], registry, first, api=api)
    await stop_mid_refund(first, desk, "agent-1")
    assert len(fake.bodies) == 2  # two turns answered before the worker stopped

    second = SagaExecutor(registry, store)
    runner["now"] = LLMRunner(fake.client(), MODELS[api], registry, second, api=api)
    (result,) = await second.recover()
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"ticket": "T-9", "answer": "Refunded 42.00 on order O-T-9."}
    assert len(fake.bodies) == 3  # the third turn only: no recorded turn asked again
    assert desk.lookups == ["T-9"]  # served from the record
    assert desk.refunds == [result.step("call_02").idempotency_key]  # the unknown call run again under its key
    assert desk.undone == []
    (run,) = result.metadata["llm_runs"]
    assert (run["model"], run["api"], run["turns"]) == (MODELS[api], api, 3)
    assert len(run["llm_calls"]) == 3
    assert result.tokens == 3 * 60
    assert await store.verify_saga("agent-1")


@pytest.mark.parametrize("api", APIS)
async def test_every_model_api_resumes_an_agent_where_it_stopped(api: str) -> None:
    """Chat Completions, Responses and Anthropic Messages alike: the resumed agent asks only the unanswered turn."""
    desk, fake = Desk(), FakeAPI(api, script(api))
    registry = make_registry(desk)
    runner: dict[str, LLMRunner] = {}
    add_agent(registry, runner)
    store = MemoryStore()
    first = SagaExecutor(registry, store, compensation_timeout=0.2, lease_timeout=60)
    runner["now"] = LLMRunner(fake.client(), MODELS[api], registry, first, api=api)
    await stop_mid_refund(first, desk, "agent-2")
    (result,) = await SagaExecutor(registry, store).recover()
    assert result.status is SagaStatus.SUCCESS
    assert result.output["answer"] == "Refunded 42.00 on order O-T-9."
    assert len(fake.bodies) == 3
    assert desk.lookups == ["T-9"]


async def test_a_resumed_agent_with_another_prompt_diverges_and_compensates() -> None:
    """Code that runs its loop on another prompt than recorded fails with ReplayDivergenceError and is undone."""
    api = "chat"
    desk, fake = Desk(), FakeAPI(api, script(api))
    store = MemoryStore()
    before = make_registry(desk)
    runner: dict[str, LLMRunner] = {}
    add_agent(before, runner)
    first = SagaExecutor(before, store, compensation_timeout=0.2, lease_timeout=60)
    runner["now"] = LLMRunner(fake.client(), MODELS[api], before, first, api=api)
    await stop_mid_refund(first, desk, "agent-3")

    after = make_registry(desk)
    add_agent(after, runner, prompt="Ticket T-9: close it")
    second = SagaExecutor(after, store)
    runner["now"] = LLMRunner(fake.client(), MODELS[api], after, second, api=api)
    (result,) = await second.recover()
    assert result.status is SagaStatus.COMPENSATED
    assert "ReplayDivergenceError" in (result.error or "")
    assert "LLM loop #1" in (result.error or "")
    assert len(fake.bodies) == 2  # nothing asked after the divergence


async def test_two_loops_in_one_saga_are_recorded_and_served_in_order() -> None:
    """A saga function running two loops records each at its position; a replay serves both without a model."""
    api = "chat"
    _desk, fake, registry, executor, runner = desk_and_runner(text_turn(api, "Told the customer."))

    @registry.saga
    async def twice(saga: DynamicSaga) -> list[str | None]:
        refund = await runner.run("Ticket T-9: refund it", saga=saga)
        mail = await runner.run([{"role": "user", "content": f"Tell the customer: {refund}"}], saga=saga)
        return [refund, mail]

    result = await executor.run(twice, saga_id="twice")
    assert result.status is SagaStatus.SUCCESS
    assert result.output == ["Refunded 42.00 on order O-T-9.", "Told the customer."]
    assert [run["turns"] for run in result.metadata["llm_runs"]] == [3, 1]
    assert len(fake.bodies) == 4

    async with executor.saga(saga_id="twice", replay=True) as saga:
        assert await twice(saga) == result.output  # served from the record
    assert len(fake.bodies) == 4


async def test_a_loop_that_fails_raises_into_the_function_which_compensates() -> None:
    """A loop over max_turns raises TurnLimitError into the saga function; leaving it uncaught undoes every call."""
    desk, _fake, registry, executor, runner = desk_and_runner()

    @registry.saga
    async def hasty(saga: DynamicSaga) -> None:
        await runner.run("Ticket T-9: refund it", saga=saga, max_turns=2)

    result = await executor.run(hasty, saga_id="hasty")
    assert result.status is SagaStatus.COMPENSATED
    assert "TurnLimitError" in (result.error or "")
    assert desk.undone == ["O-T-9"]
    with pytest.raises(SagaFailedError, match="max_turns=2"):
        result.raise_for_status()


async def test_saga_with_an_id_or_budget_or_not_a_saga_is_refused() -> None:
    """saga= with saga_id or budget, or something that is not a DynamicSaga, raises TypeError; nothing is asked."""
    api = "chat"
    fake = FakeAPI(api, script(api))
    registry = make_registry(Desk())
    executor = SagaExecutor(registry)
    runner = LLMRunner(fake.client(), MODELS[api], registry, executor, api=api)
    with pytest.raises(TypeError, match="DynamicSaga"):
        await runner.run("hi", saga=object())  # type: ignore[call-overload]
    async with executor.saga(saga_id="plain") as saga:
        with pytest.raises(TypeError, match="saga_id"):
            await runner.run("hi", saga=saga, saga_id="other")  # type: ignore[call-overload]
    assert fake.bodies == []
    assert (await executor.store.get_saga("plain")) is not None


async def test_an_agent_waiting_for_approval_resumes_once_decided_asking_only_new_turns(store: SagaStore) -> None:
    """A model's call needing approval leaves the agent WAITING; approve() resumes it, no answered turn asked again."""
    api = "chat"
    fake = FakeAPI(api, script(api))
    desk = Desk()
    desk.hang_once = False
    registry = make_registry(desk)
    runner: dict[str, LLMRunner] = {}
    add_agent(registry, runner)
    executor = SagaExecutor(registry, store)
    runner["now"] = LLMRunner(
        fake.client(), MODELS[api], registry, executor, api=api, policy=PlanPolicy(approval_required={"Refund"})
    )
    waiting = await executor.run("support", args={"ticket": "T-9"}, saga_id="agent-approval")
    assert waiting.status is SagaStatus.WAITING
    (request,) = waiting.pending_approvals
    assert (request.tool_name, len(fake.bodies), desk.refunds) == ("Refund", 2, [])

    result = await executor.approve("agent-approval", request.step_id, by="ana")
    assert result.status is SagaStatus.SUCCESS
    assert result.output["answer"] == "Refunded 42.00 on order O-T-9."
    assert len(fake.bodies) == 3
    assert (desk.lookups, len(desk.refunds)) == (["T-9"], 1)


async def test_an_agent_sleeping_between_loops_is_released_and_resumed_from_its_record() -> None:
    """A long sleep after a loop releases the saga; serve() resumes it: the first loop served, the second asked."""
    api = "chat"
    store = MemoryStore()
    desk, fake, registry, executor, runner = desk_and_runner(
        text_turn(api, "Followed up."), store=store, wait_threshold=0.05
    )

    @registry.saga
    async def follow_up(saga: DynamicSaga) -> list[str | None]:
        first = await runner.run("Ticket T-9: refund it", saga=saga)
        await saga.sleep(0.3)
        return [first, await runner.run("Ask the customer how it went", saga=saga)]

    waiting = await executor.run(follow_up, saga_id="follow-up")
    assert waiting.status is SagaStatus.WAITING
    assert len(fake.bodies) == 3
    worker = asyncio.create_task(SagaExecutor(registry, store).serve(interval=0.05))
    try:
        result = await executor.handle("follow-up").result(timeout=20)
    finally:
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
    assert result.status is SagaStatus.SUCCESS
    assert result.output == ["Refunded 42.00 on order O-T-9.", "Followed up."]
    assert len(fake.bodies) == 4  # only the second loop's turn
    assert (desk.lookups, len(desk.refunds)) == (["T-9"], 1)


async def test_an_agents_turn_holding_a_secret_is_recorded_encrypted_and_served_after_approval() -> None:
    """In a saga function, a turn whose call holds a secret argument is kept encrypted in llm_runs; the approved
    saga is resumed from it (the model not asked again) and the tool gets the real value."""
    from cryptography.fernet import Fernet

    seen: list[str] = []
    registry = ToolRegistry()

    @registry.tool(approval=True)
    class Login:
        async def execute(self, user: str, password: pydantic.SecretStr) -> str:
            seen.append(password.get_secret_value())
            return f"hello {user}"

    store = MemoryStore()
    executor = SagaExecutor(registry, store, secret_key=Fernet.generate_key().decode())
    model = MockLLMClient(tool_sequence=[("Login", {"user": "ann", "password": "hunter2-plain"})])
    runner = LLMRunner(model, "gpt-4o-mini", registry, executor)

    @registry.saga
    async def login(saga: DynamicSaga) -> str | None:
        return await runner.run("Log me in", saga=saga)

    waiting = await executor.run(login, saga_id="secret-agent")
    assert waiting.status is SagaStatus.WAITING
    assert "hunter2-plain" not in json.dumps(await store.export_saga("secret-agent"))
    (request,) = waiting.pending_approvals
    done = await executor.approve("secret-agent", request.step_id, by="ana")
    assert done.status is SagaStatus.SUCCESS, done.describe()
    assert seen == ["hunter2-plain"]
    assert len(model.requests) == 2  # the first turn served from its encrypted record
    assert "hunter2-plain" not in json.dumps(await store.export_saga("secret-agent"))


async def test_a_replay_serves_recorded_turns_and_asks_no_model_for_a_turn_never_recorded() -> None:
    """In executor.saga(replay=True), a loop given more turns than recorded raises ReplayDivergenceError unasked."""
    _desk, fake, _registry, executor, runner = desk_and_runner()
    async with executor.saga(saga_id="once") as saga:
        assert await runner.run("Ticket T-9: refund it", saga=saga) == "Refunded 42.00 on order O-T-9."

    async def replay() -> None:
        async with executor.saga(saga_id="once", replay=True) as saga:
            assert await runner.run("Ticket T-9: refund it", saga=saga) == "Refunded 42.00 on order O-T-9."
            await runner.run("Another question", saga=saga)

    with pytest.raises(ReplayDivergenceError, match="model turn #1 was never recorded"):
        await replay()
    assert len(fake.bodies) == 3
