"""What a store of your own is written with: the core protocol, the rows it keeps, and the helpers it builds on.

A store implements `SagaStore`'s primitives (create, save, load, insert, list, claim, change, renew, claim
expired, close), subclasses `StoreBase` for the conveniences built on them (get, verify, export, import, list),
and seals what it writes with `Sealing`. Hand it to `SagaExecutor(registry, store=...)`. The guide is
docs/how-to/custom-store.md; the example store, `saga_runtime/examples/dict_store.py`, imports nothing else from
the package than this module and the package root::

    from saga_runtime.stores import SagaRow, SagaStatus, Sealing, StepRow, StoreBase, now

The store's errors are the package root's: `StoreError` (the store cannot do it), `LeaseLostError` (an
owner-conditional write found another owner). This module's `SagaStore` is the core alone, what every store
implements; the package root's `saga_runtime.SagaStore` is what the built-in stores offer: the core and every
capability.
"""

from saga_runtime._records import EndReason as _EndReason
from saga_runtime._records import SagaRow, SagaStatus, StepRow, StepStatus, end_of, now
from saga_runtime._storage._base import Capability as _Capability
from saga_runtime._storage._base import InlineWrite as _InlineWrite
from saga_runtime._storage._base import SagaStore
from saga_runtime._storage._reading import StoreBase
from saga_runtime._storage._sealing import Sealing

__all__ = [
    "Capability",
    "EndReason",
    "InlineWrite",
    "SagaRow",
    "SagaStatus",
    "SagaStore",
    "Sealing",
    "StepRow",
    "StepStatus",
    "StoreBase",
    "end_of",
    "now",
]

Capability = _Capability
"""What a store may offer beyond the core, declared in `SagaStore.capabilities`: "queues", "cancels", "waits",
"messages", "retention", "schedules" or "due_work". A store of your own declares none (`StoreBase`'s default)."""

EndReason = _EndReason
"""Why a terminal saga ended: "failed", "cancelled", "rejected", "budget", "deadline", "diverged" or "timeout"
(`list_rows`' `reason` filter; `end_of` reads it from a saga's rows)."""

InlineWrite = _InlineWrite
"""What a store whose writes never pause does in place of `save`: called with (saga, steps, owner, reseal, lease),
no await. A store of your own returns None from `SagaStore.writes_inline`: the engine awaits `save`."""
