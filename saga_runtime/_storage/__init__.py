"""Storage: the SagaStore protocol and its drivers. Knows rows, never tools or the engine."""

from saga_runtime._storage import _reading as sagas
from saga_runtime._storage import _retention as retention
from saga_runtime._storage._base import InlineWrite, SagaStore, Store
from saga_runtime._storage._memory import MemoryStore
from saga_runtime._storage._open import DEFAULT_URL, ENV_VAR, StoreOpener, open_store, redact_url
from saga_runtime._storage._reading import waiting_counts

__all__ = [
    "DEFAULT_URL",
    "ENV_VAR",
    "InlineWrite",
    "MemoryStore",
    "SagaStore",
    "Store",
    "StoreOpener",
    "open_store",
    "redact_url",
    "retention",
    "sagas",
    "waiting_counts",
]
