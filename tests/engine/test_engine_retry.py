"""Retries and timeouts: attempts, non_retryable, per-attempt timeouts, scope "step", and StepContext."""

from __future__ import annotations

import threading

import anyio
from shop_tools import boom_tool

from saga_runtime import RetryPolicy, SagaExecutor, SagaStatus, StepContext, StepStatus, ToolRegistry

FAST = {"initial_interval": 0, "jitter": False}


async def test_retries_until_success_and_records_attempts() -> None:
    """A step failing twice with max_attempts=3 succeeds on attempt 3; attempts=3 is recorded."""
    registry = ToolRegistry()
    seen: list[int] = []

    @registry.tool(retry=RetryPolicy(max_attempts=3, **FAST))
    class Flaky:
        async def execute(self, ctx: StepContext) -> str:
            seen.append(ctx.attempt)
            if ctx.attempt < 3:
                raise ConnectionError("flaky")
            return "ok"

    result = await SagaExecutor(registry).run([{"id": "flaky", "tool": "Flaky"}])

    assert result.status is SagaStatus.SUCCESS
    assert seen == [1, 2, 3]
    record = result.step("flaky")
    assert record.status is StepStatus.SUCCESS
    assert record.attempts == 3
    assert record.result == "ok"
    assert record.error is None


async def test_exhausted_retries_fail_the_step_with_attempts() -> None:
    """A step failing every attempt is FAILED after max_attempts, with the last error and the attempt count."""
    registry = ToolRegistry()
    calls = 0

    @registry.tool(retry=RetryPolicy(max_attempts=4, initial_interval=0.001, max_interval=0.002))
    class Down:
        async def execute(self) -> None:
            nonlocal calls
            calls += 1
            raise ConnectionError(f"down #{calls}")

    result = await SagaExecutor(registry).run([{"id": "down", "tool": "Down"}])

    assert calls == 4
    assert result.status is SagaStatus.COMPENSATED
    record = result.step("down")
    assert record.status is StepStatus.FAILED
    assert record.attempts == 4
    assert record.error_type == "ConnectionError"
    assert "down #4" in (record.error or "")


async def test_non_retryable_fails_at_once() -> None:
    """An exception whose type (or a subclass) is in non_retryable fails the step on its first attempt."""
    registry = ToolRegistry()
    calls = 0

    class Declined(ValueError):
        pass

    @registry.tool(retry=RetryPolicy(max_attempts=5, non_retryable=(ValueError,), **FAST))
    class Pay:
        async def execute(self) -> None:
            nonlocal calls
            calls += 1
            raise Declined("card declined")

    result = await SagaExecutor(registry).run([{"id": "pay", "tool": "Pay"}])

    assert calls == 1
    record = result.step("pay")
    assert record.status is StepStatus.FAILED
    assert record.attempts == 1
    assert record.error_type == "Declined"
    assert result.status is SagaStatus.COMPENSATED


async def test_timeout_cancels_a_slow_attempt_and_the_next_attempt_runs() -> None:
    """A per-attempt timeout cancels a slow attempt (its cancellation seen in the tool); the next attempt succeeds."""
    registry = ToolRegistry()
    cancelled_attempts: list[int] = []

    @registry.tool(timeout=0.05, retry=RetryPolicy(max_attempts=2, **FAST))
    class Slow:
        async def execute(self, ctx: StepContext) -> int:
            if ctx.attempt == 1:
                try:
                    await anyio.Event().wait()
                except anyio.get_cancelled_exc_class():
                    cancelled_attempts.append(ctx.attempt)
                    raise
            return ctx.attempt

    result = await SagaExecutor(registry).run([{"id": "slow", "tool": "Slow"}])

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert cancelled_attempts == [1]
    record = result.step("slow")
    assert record.attempts == 2
    assert record.result == 2
    assert record.status is StepStatus.SUCCESS


async def test_timeout_counts_as_a_failed_attempt_seen_by_the_retry_policy() -> None:
    """A timed-out attempt is a TimeoutError to the retry policy: non_retryable=(TimeoutError,) stops at once."""
    registry = ToolRegistry()
    calls = 0

    @registry.tool(timeout=0.02, retry=RetryPolicy(max_attempts=3, non_retryable=(TimeoutError,), **FAST))
    class Slow:
        async def execute(self) -> None:
            nonlocal calls
            calls += 1
            await anyio.Event().wait()

    result = await SagaExecutor(registry).run([{"id": "slow", "tool": "Slow"}])

    assert calls == 1
    assert result.step("slow").attempts == 1
    assert result.step("slow").error_type == "TimeoutError"


async def test_all_attempts_timing_out_is_unknown_and_compensated_with_none() -> None:
    """A last attempt timing out is unknown (CANCELLED/TimeoutError): compensated with None, earlier steps too."""
    registry = ToolRegistry()
    compensated: list[tuple[str, object]] = []

    @registry.tool
    class Effect:
        async def execute(self) -> str:
            return "done"

        async def compensate(self, result: object) -> None:
            compensated.append(("effect", result))

    @registry.tool(timeout=0.02, retry=RetryPolicy(max_attempts=2, **FAST))
    class Slow:
        async def execute(self) -> str:
            await anyio.Event().wait()
            return "never"

        async def compensate(self, result: object) -> None:
            compensated.append(("slow", result))

    result = await SagaExecutor(registry).run([{"id": "effect", "tool": "Effect"}, {"id": "slow", "tool": "Slow"}])

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert compensated == [("slow", None), ("effect", "done")]
    slow = result.step("slow")
    assert slow.status is StepStatus.COMPENSATED
    assert slow.error_type == "TimeoutError"
    assert slow.attempts == 2
    assert slow.compensated_at is not None
    assert result.step("effect").status is StepStatus.COMPENSATED


async def test_timed_out_step_without_compensate_stays_cancelled() -> None:
    """A timed-out step of a tool without compensate ends CANCELLED with error_type TimeoutError."""
    registry = ToolRegistry()

    @registry.tool(timeout=0.02)
    class Slow:
        async def execute(self) -> None:
            await anyio.Event().wait()

    result = await SagaExecutor(registry).run([{"id": "slow", "tool": "Slow"}])

    assert result.status is SagaStatus.COMPENSATED
    slow = result.step("slow")
    assert slow.status is StepStatus.CANCELLED
    assert slow.error_type == "TimeoutError"
    assert slow.attempts == 1


async def test_timeout_bounds_each_compensation_attempt() -> None:
    """A compensation attempt running past the tool's timeout is cut off and retried; the next attempt succeeds."""
    registry = ToolRegistry()
    comp_attempts: list[int] = []

    @registry.tool(timeout=0.05, compensation_retry=RetryPolicy(max_attempts=2, **FAST))
    class Effect:
        async def execute(self) -> str:
            return "done"

        async def compensate(self, result: str, ctx: StepContext) -> None:
            comp_attempts.append(ctx.attempt)
            if ctx.attempt == 1:
                await anyio.Event().wait()

    boom_tool(registry)

    result = await SagaExecutor(registry).run([{"id": "effect", "tool": "Effect"}, {"id": "boom", "tool": "Boom"}])

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    assert comp_attempts == [1, 2]
    effect = result.step("effect")
    assert effect.status is StepStatus.COMPENSATED
    assert effect.compensation_attempts == 2


async def test_compensation_timing_out_on_every_attempt_is_compensation_failed() -> None:
    """A compensation timing out on every attempt ends COMPENSATION_FAILED naming the timeout."""
    registry = ToolRegistry()

    @registry.tool(timeout=0.02, compensation_retry=RetryPolicy(max_attempts=2, **FAST))
    class Effect:
        async def execute(self) -> str:
            return "done"

        async def compensate(self, result: str) -> None:
            await anyio.Event().wait()

    boom_tool(registry)

    result = await SagaExecutor(registry).run([{"id": "effect", "tool": "Effect"}, {"id": "boom", "tool": "Boom"}])

    assert result.status is SagaStatus.COMPENSATION_FAILED
    effect = result.step("effect")
    assert effect.status is StepStatus.COMPENSATION_FAILED
    assert effect.compensation_attempts == 2
    assert "timeout" in (effect.compensation_error or "").lower()


async def test_timed_out_attempts_are_recorded_as_timeout_error() -> None:
    """A timed-out execute or compensate is recorded as TimeoutError, never as a private exception class."""
    registry = ToolRegistry()

    @registry.tool(timeout=0.02, compensation_retry=RetryPolicy(max_attempts=1))
    class Effect:
        async def execute(self, slow: bool = False) -> str:
            if slow:
                await anyio.Event().wait()
            return "done"

        async def compensate(self, result: object) -> None:
            await anyio.Event().wait()

    plan = [{"id": "effect", "tool": "Effect"}, {"id": "slow", "tool": "Effect", "args": {"slow": True}}]
    result = await SagaExecutor(registry).run(plan)

    texts = [result.step("slow").error or "", result.step("effect").compensation_error or ""]
    for text in texts:
        assert "_AttemptTimeout" not in text, text
        assert "TimeoutError" in text, text


async def test_retry_scope_step_records_failed_and_the_saga_goes_on() -> None:
    """With retry_scope="step" an exhausted step is FAILED and the saga goes on to SUCCESS, nothing compensated."""
    registry = ToolRegistry()
    compensated: list[object] = []
    after_calls = 0

    @registry.tool
    class Effect:
        async def execute(self) -> str:
            return "done"

        async def compensate(self, result: object) -> None:
            compensated.append(result)

    @registry.tool(retry=RetryPolicy(max_attempts=2, **FAST), retry_scope="step")
    class Optional:
        async def execute(self) -> None:
            raise RuntimeError("optional failed")

        async def compensate(self, result: object) -> None:
            compensated.append(("optional", result))

    @registry.tool
    class After:
        async def execute(self) -> str:
            nonlocal after_calls
            after_calls += 1
            return "after"

    plan = [
        {"id": "effect", "tool": "Effect"},
        [{"id": "optional", "tool": "Optional"}, {"id": "peer", "tool": "Effect"}],
        {"id": "after", "tool": "After"},
    ]
    result = await SagaExecutor(registry).run(plan)

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert after_calls == 1
    assert compensated == []
    optional = result.step("optional")
    assert optional.status is StepStatus.FAILED
    assert optional.attempts == 2
    assert "optional failed" in (optional.error or "")
    assert result.step("peer").status is StepStatus.SUCCESS
    assert result.step("after").status is StepStatus.SUCCESS
    assert result.raise_for_status() is result


async def test_retry_scope_step_timeout_is_compensated_at_once_with_none() -> None:
    """A timed-out scope-"step" step is compensated at once with None (COMPENSATED) and the saga goes on."""
    registry = ToolRegistry()
    log: list[tuple[str, object]] = []

    @registry.tool(timeout=0.02, retry_scope="step")
    class Slow:
        async def execute(self) -> None:
            await anyio.Event().wait()

        async def compensate(self, result: object) -> None:
            log.append(("compensate slow", result))

    @registry.tool
    class After:
        async def execute(self) -> str:
            log.append(("after", None))
            return "after"

    result = await SagaExecutor(registry).run([{"id": "slow", "tool": "Slow"}, {"id": "after", "tool": "After"}])

    assert result.status is SagaStatus.SUCCESS, result.describe()
    assert log == [("compensate slow", None), ("after", None)]
    slow = result.step("slow")
    assert slow.status is StepStatus.COMPENSATED
    assert slow.error_type == "TimeoutError"
    assert slow.compensated_at is not None


async def test_context_attempt_counts_and_idempotency_key_is_stable_per_step() -> None:
    """ctx.attempt counts 1, 2, 3; ctx.idempotency_key is stable across a step's attempts, differs between steps."""
    registry = ToolRegistry()
    seen: list[tuple[str, int, str, str]] = []

    @registry.tool(retry=RetryPolicy(max_attempts=3, **FAST))
    class Keyed:
        async def execute(self, fail_until: int, ctx: StepContext) -> str:
            seen.append((ctx.step_id, ctx.attempt, ctx.idempotency_key, ctx.saga_id))
            assert ctx.tool_name == "Keyed"
            assert ctx.args == {"fail_until": fail_until}
            if ctx.attempt < fail_until:
                raise ConnectionError("again")
            return ctx.idempotency_key

    plan = [
        [
            {"id": "a", "tool": "Keyed", "args": {"fail_until": 3}},
            {"id": "b", "tool": "Keyed", "args": {"fail_until": 2}},
        ]
    ]
    result = await SagaExecutor(registry).run(plan, saga_id="saga-1")

    assert result.status is SagaStatus.SUCCESS
    by_step: dict[str, list[tuple[int, str]]] = {}
    for step_id, attempt, key, saga_id in seen:
        assert saga_id == "saga-1"
        by_step.setdefault(step_id, []).append((attempt, key))
    assert [attempt for attempt, _ in by_step["a"]] == [1, 2, 3]
    assert [attempt for attempt, _ in by_step["b"]] == [1, 2]
    keys_a = {key for _, key in by_step["a"]}
    keys_b = {key for _, key in by_step["b"]}
    assert len(keys_a) == 1
    assert len(keys_b) == 1
    assert keys_a != keys_b
    assert result.step("a").idempotency_key == result.result_of("a") == next(iter(keys_a))
    assert result.step("b").idempotency_key == next(iter(keys_b))

    # The same step in another saga gets another key.
    other = await SagaExecutor(registry).run(plan, saga_id="saga-2")
    assert other.step("a").idempotency_key not in (keys_a | keys_b)
    assert other.step("b").idempotency_key not in (keys_a | keys_b)


async def test_sync_tool_retries_with_context() -> None:
    """A sync tool in a worker thread is retried too, seeing the attempt number in its StepContext."""
    registry = ToolRegistry()
    seen: list[int] = []

    @registry.tool(retry=RetryPolicy(max_attempts=2, **FAST))
    class SyncFlaky:
        def execute(self, ctx: StepContext) -> int:
            seen.append(ctx.attempt)
            if ctx.attempt == 1:
                raise OSError("first try fails")
            return ctx.attempt

    result = await SagaExecutor(registry).run([{"id": "s", "tool": "SyncFlaky"}])

    assert seen == [1, 2]
    assert result.result_of("s") == 2
    assert result.step("s").attempts == 2


async def test_a_tool_raising_timeout_error_itself_is_failed_not_unknown() -> None:
    """A TimeoutError the tool raises itself (not the step timeout) is a plain failure: FAILED, not compensated."""
    registry = ToolRegistry()
    compensated: list[object] = []

    @registry.tool
    class Remote:
        async def execute(self) -> None:
            raise TimeoutError("the remote API timed out before accepting the request")

        async def compensate(self, result: object) -> None:
            compensated.append(result)

    result = await SagaExecutor(registry).run([{"id": "remote", "tool": "Remote"}])

    assert result.status is SagaStatus.COMPENSATED
    assert result.step("remote").status is StepStatus.FAILED
    assert compensated == []


async def test_sync_tool_timeout_abandons_the_thread_and_compensates_with_none() -> None:
    """A sync tool past its timeout is abandoned: CANCELLED/TimeoutError, compensated with None."""
    registry = ToolRegistry()
    release = threading.Event()
    compensated: list[object] = []

    @registry.tool(timeout=0.03)
    class Blocking:
        def execute(self) -> str:
            release.wait(timeout=2.0)
            return "late"

        def compensate(self, result: object) -> None:
            compensated.append(result)

    try:
        result = await SagaExecutor(registry).run([{"id": "blocking", "tool": "Blocking"}])
    finally:
        release.set()

    assert result.status is SagaStatus.COMPENSATED
    record = result.step("blocking")
    assert record.status is StepStatus.COMPENSATED
    assert record.error_type == "TimeoutError"
    assert compensated == [None]
