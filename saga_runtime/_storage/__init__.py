"""Storage: the SagaStore protocol and its drivers. Knows rows, never tools or the engine."""

from saga_runtime._storage._base import InlineStore, SagaStore, inline_store
from saga_runtime._storage._memory import MemoryStore
from saga_runtime._storage._open import DEFAULT_URL, ENV_VAR, StoreOpener, open_store, redact_url
from saga_runtime._storage._reading import waiting_counts

__all__ = [
    "DEFAULT_URL",
    "ENV_VAR",
    "InlineStore",
    "MemoryStore",
    "SagaStore",
    "StoreOpener",
    "inline_store",
    "open_store",
    "redact_url",
    "waiting_counts",
]
