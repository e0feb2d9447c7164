"""Storage: the SagaStore protocol and its drivers. Knows rows, never tools or the engine."""

from saga_runtime._storage import _reading as sagas
from saga_runtime._storage import _retention as retention
from saga_runtime._storage._base import (
    EVERY_CAPABILITY,
    Capability,
    InlineWrite,
    SagaStore,
    Store,
    cancels_of,
    due_work_of,
    has,
    messages_of,
    queues_of,
    retention_of,
    schedules_of,
    waits_of,
)
from saga_runtime._storage._memory import MemoryStore
from saga_runtime._storage._open import DEFAULT_URL, ENV_VAR, StoreOpener, open_store, redact_url
from saga_runtime._storage._reading import approvals_of, cancel_requested, messages_for, waiting_counts

__all__ = [
    "DEFAULT_URL",
    "ENV_VAR",
    "EVERY_CAPABILITY",
    "Capability",
    "InlineWrite",
    "MemoryStore",
    "SagaStore",
    "Store",
    "StoreOpener",
    "approvals_of",
    "cancel_requested",
    "cancels_of",
    "due_work_of",
    "has",
    "messages_for",
    "messages_of",
    "open_store",
    "queues_of",
    "redact_url",
    "retention",
    "retention_of",
    "sagas",
    "schedules_of",
    "waiting_counts",
    "waits_of",
]
