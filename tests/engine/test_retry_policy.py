"""RetryPolicy: defaults, geometric capped backoff, equal jitter, what is retried, and what is refused."""

import asyncio
import dataclasses
import random
from collections.abc import Iterator

import pytest

from saga_runtime import RetryPolicy, SagaExecutor, SagaStatus, StepContext, StepStatus, ToolRegistry


@pytest.fixture
def seeded_random() -> Iterator[None]:
    """Make `random` deterministic for one test, then give the rest of the session its state back."""
    state = random.getstate()
    random.seed(20240611)
    yield
    random.setstate(state)


def test_defaults_are_those_of_the_api() -> None:
    """RetryPolicy() is one attempt, 0.1 s initial interval, coefficient 2, 30 s cap, jitter on, nothing exempt."""
    policy = RetryPolicy()
    assert policy.max_attempts == 1
    assert policy.initial_interval == 0.1
    assert policy.backoff_coefficient == 2.0
    assert policy.max_interval == 30.0
    assert policy.jitter is True
    assert policy.non_retryable == ()


def test_policy_is_a_frozen_value() -> None:
    """A RetryPolicy cannot be changed after creation, and equal settings make equal policies."""
    policy = RetryPolicy(max_attempts=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.max_attempts = 5  # type: ignore[misc]
    assert policy == RetryPolicy(max_attempts=3)


def test_delays_grow_geometrically_and_are_capped_without_jitter() -> None:
    """Without jitter the delay after attempt n is initial * coefficient**(n-1), capped at max_interval."""
    policy = RetryPolicy(
        max_attempts=10, initial_interval=0.5, backoff_coefficient=3.0, max_interval=10.0, jitter=False
    )
    assert [policy.delay(n) for n in range(1, 7)] == [0.5, 1.5, 4.5, 10.0, 10.0, 10.0]


def test_default_backoff_doubles() -> None:
    """With the default coefficient 2 and no jitter, delays double from initial_interval."""
    policy = RetryPolicy(initial_interval=0.1, jitter=False)
    assert [policy.delay(n) for n in range(1, 5)] == pytest.approx([0.1, 0.2, 0.4, 0.8])


def test_coefficient_one_gives_constant_delays() -> None:
    """backoff_coefficient=1 keeps every delay at initial_interval."""
    policy = RetryPolicy(initial_interval=0.3, backoff_coefficient=1.0, jitter=False)
    assert {policy.delay(n) for n in range(1, 20)} == {0.3}


def test_cap_below_initial_interval_caps_the_first_delay_too() -> None:
    """max_interval caps every delay, even the first."""
    policy = RetryPolicy(initial_interval=5.0, max_interval=1.0, jitter=False)
    assert policy.delay(1) == 1.0


def test_zero_interval_means_no_wait() -> None:
    """initial_interval=0 retries at once, with or without jitter."""
    assert RetryPolicy(initial_interval=0.0).delay(1) == 0.0
    assert RetryPolicy(initial_interval=0.0, jitter=False).delay(5) == 0.0


@pytest.mark.usefixtures("seeded_random")
def test_jitter_is_equal_jitter_within_the_upper_half() -> None:
    """With jitter, each delay is drawn from [base/2, base] ("equal jitter", as the docstring says), capped too."""
    assert "equal jitter" in (RetryPolicy.__doc__ or "")
    policy = RetryPolicy(max_attempts=10, initial_interval=1.0, backoff_coefficient=2.0, max_interval=5.0)
    for attempt, base in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (8, 5.0)]:
        samples = [policy.delay(attempt) for _ in range(2000)]
        assert all(base / 2 <= d <= base for d in samples), attempt
        # Spread over the whole half-interval, not stuck at one value or one end.
        assert min(samples) < base * 0.55
        assert max(samples) > base * 0.95
        assert len(set(samples)) > 1900


@pytest.mark.usefixtures("seeded_random")
def test_jitter_mean_is_three_quarters_of_the_base() -> None:
    """Equal jitter is uniform on [base/2, base], so its mean is 0.75 * base."""
    policy = RetryPolicy(initial_interval=2.0)
    samples = [policy.delay(1) for _ in range(5000)]
    assert sum(samples) / len(samples) == pytest.approx(1.5, abs=0.03)


def test_should_retry_until_max_attempts() -> None:
    """should_retry is true for attempts before max_attempts and false at (and after) it."""
    policy = RetryPolicy(max_attempts=3)
    error = ConnectionError("flaky")
    assert [policy.should_retry(error, n) for n in (1, 2, 3, 4)] == [True, True, False, False]


def test_default_policy_never_retries() -> None:
    """The default max_attempts=1 means the first failure is final."""
    assert RetryPolicy().should_retry(RuntimeError("x"), 1) is False


def test_non_retryable_types_and_their_subclasses_fail_at_once() -> None:
    """An exception whose type (or a base of it) is in non_retryable is not retried, even with attempts left."""

    class PaymentDeclined(ValueError):
        pass

    policy = RetryPolicy(max_attempts=5, non_retryable=(ValueError, KeyError))
    assert policy.should_retry(ValueError("bad"), 1) is False
    assert policy.should_retry(PaymentDeclined("no"), 1) is False
    assert policy.should_retry(KeyError("k"), 1) is False
    assert policy.should_retry(RuntimeError("transient"), 1) is True
    assert policy.should_retry(LookupError("base of KeyError, not listed"), 1) is True


def test_non_retryable_accepts_any_iterable_and_stores_a_tuple() -> None:
    """non_retryable given as a list is kept as a tuple."""
    policy = RetryPolicy(non_retryable=[ValueError])  # type: ignore[arg-type]
    assert policy.non_retryable == (ValueError,)


@pytest.mark.parametrize(
    "exc", [KeyboardInterrupt(), asyncio.CancelledError(), SystemExit(1), GeneratorExit()], ids=type
)
def test_base_exceptions_are_never_retried(exc: BaseException) -> None:
    """Only Exception is retried: KeyboardInterrupt, CancelledError and other BaseExceptions never are."""
    policy = RetryPolicy(max_attempts=100)
    assert policy.should_retry(exc, 1) is False


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_attempts": 0}, ValueError),
        ({"max_attempts": -1}, ValueError),
        ({"max_attempts": 1.5}, TypeError),
        ({"max_attempts": True}, TypeError),
        ({"initial_interval": -0.1}, ValueError),
        ({"max_interval": -1.0}, ValueError),
        ({"backoff_coefficient": 0.5}, ValueError),
        ({"backoff_coefficient": 0.0}, ValueError),
        ({"non_retryable": (42,)}, TypeError),
        ({"non_retryable": ("ValueError",)}, TypeError),
        ({"non_retryable": (int,)}, TypeError),
        ({"non_retryable": (ValueError("an instance, not a type"),)}, TypeError),
    ],
    ids=lambda value: repr(value) if isinstance(value, dict) else value.__name__,
)
def test_invalid_values_are_refused(kwargs: dict[str, object], error: type[Exception]) -> None:
    """max_attempts below 1 or not an int, negative intervals, coefficient < 1 and non-exception types are refused."""
    with pytest.raises(error):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_delay_stays_capped_for_any_attempt_number() -> None:
    """delay(n) is max_interval for every large n, even past the float range of coefficient**(n-1)."""
    policy = RetryPolicy(max_attempts=10_000, initial_interval=0.1, max_interval=1.0, jitter=False)
    assert policy.delay(2000) == 1.0


# -- the policy in the engine --------------------------------------------------------------------------------------


async def test_engine_retries_up_to_max_attempts_then_fails() -> None:
    """A tool that always fails runs max_attempts times; the step records that many attempts."""
    registry = ToolRegistry()
    attempts: list[int] = []

    @registry.tool(retry=RetryPolicy(max_attempts=4, initial_interval=0.0))
    class Down:
        async def execute(self, ctx: StepContext) -> None:
            attempts.append(ctx.attempt)
            raise ConnectionError("down")

    result = await SagaExecutor(registry).run([{"tool": "Down", "id": "d"}])
    assert attempts == [1, 2, 3, 4]
    record = result.step("d")
    assert record.status is StepStatus.FAILED
    assert record.attempts == 4
    assert record.error_type == "ConnectionError"
    assert result.status is SagaStatus.COMPENSATED


async def test_engine_does_not_retry_non_retryable_errors() -> None:
    """A non_retryable error fails the step after its first attempt."""
    registry = ToolRegistry()
    attempts: list[int] = []

    class Declined(ValueError):
        pass

    @registry.tool(retry=RetryPolicy(max_attempts=5, initial_interval=0.0, non_retryable=(ValueError,)))
    class Pay:
        def execute(self, ctx: StepContext) -> None:
            attempts.append(ctx.attempt)
            raise Declined("card declined")

    result = await SagaExecutor(registry).run([{"tool": "Pay", "id": "p"}])
    assert attempts == [1]
    assert result.step("p").attempts == 1
    assert result.step("p").error_type == "Declined"


async def test_engine_survives_many_attempts() -> None:
    """A step given more than a thousand fast attempts ends FAILED; run() does not raise."""
    registry = ToolRegistry()
    attempts: list[int] = []

    @registry.tool(retry=RetryPolicy(max_attempts=1100, initial_interval=0.0, jitter=False))
    class Down:
        async def execute(self, ctx: StepContext) -> None:
            attempts.append(ctx.attempt)
            raise ConnectionError("down")

    result = await SagaExecutor(registry).run([{"tool": "Down", "id": "d"}])
    assert len(attempts) == 1100
    assert result.step("d").status is StepStatus.FAILED
