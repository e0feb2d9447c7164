"""The store calls a woken saga function costs: claimed and read at once, its message read once, one write."""

from __future__ import annotations

from pathlib import Path

from store_calls import count_calls

from saga_runtime import DynamicSaga, SagaExecutor, SagaStatus, ToolRegistry, open_store


async def test_a_woken_saga_function_reaches_its_next_call_in_three_store_calls(tmp_path: Path) -> None:
    """Told of its message, a worker claims the saga (read as claimed), reads its messages, and writes the message
    received with the next call's intent: three store calls before the tool starts (was ten)."""
    calls: list[str] = []
    registry = ToolRegistry()

    @registry.tool
    class Mark:
        async def execute(self, n: int) -> int:
            calls.append("<tool starts>")
            return n

    @registry.saga
    async def woken(saga: DynamicSaga) -> int:
        message = await saga.recv("go")
        return int(await saga.call("Mark", n=message["n"]))

    url = f"sqlite:///{tmp_path / 'wake.db'}"
    async with open_store(url) as store, open_store(url) as served:
        sender = SagaExecutor(registry, store, wait_threshold=0.1)
        assert (await sender.run(woken, saga_id="w")).status is SagaStatus.WAITING
        await sender.send("w", "go", {"n": 7})
        count_calls(served, calls)
        worker = SagaExecutor(registry, served)
        results = await worker.recover()  # goes on with the sagas due: this one, its message stored
    assert [result.status for result in results] == [SagaStatus.SUCCESS]
    assert results[0].output == 7
    woke = calls[calls.index("claim_waiting") : calls.index("<tool starts>")]
    assert woke == ["claim_waiting", "load_messages", "save"], calls
