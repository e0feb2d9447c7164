"""What every saga of one executor shares: its tools, its store, its identity, its limits and its hooks."""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from saga_runtime._engine._events import SagaHook
from saga_runtime._records import SecretKeyring
from saga_runtime._storage import SagaStore
from saga_runtime._tools import Resources, ToolRegistry

__all__ = ["EngineConfig"]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What every saga of one executor shares."""

    registry: ToolRegistry
    store: SagaStore
    executor_id: str
    lease_timeout: float
    compensation_timeout: float
    thread_limiter: anyio.CapacityLimiter
    call_limiter: anyio.CapacityLimiter | None
    hooks: tuple[SagaHook, ...] = ()
    keyring: SecretKeyring | None = None  # opens secret arguments for the tools (SagaExecutor's secret_key)
    resources: Resources | None = None  # the registry's lifespan, entered by the front doors before any tool
    # A saga function's wait longer than this (seconds) releases the saga (WAITING); shorter ones stay in process.
    wait_threshold: float = 5.0
