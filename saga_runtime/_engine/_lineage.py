"""Whose saga a child is: a child saga whose parent is live is driven through its parent only.

Recovery, a restart's take-back and a worker's wake-ups ask `through_parent` before they drive a saga (see
saga_runtime._engine._children for why one driver per child).
"""

from __future__ import annotations

from saga_runtime._records import SagaRow
from saga_runtime._storage import SagaStore

__all__ = ["through_parent"]


async def through_parent(store: SagaStore, saga: SagaRow, *, parent: str | None = None) -> bool:
    """Tell whether `saga` is a child whose parent is live (its parent drives it, nobody else), unless the caller
    is that parent (`parent`)."""
    parent_id = saga.parent_id
    if parent_id is None or parent_id == parent:
        return False
    stored = await store.load_saga(parent_id)
    return stored is not None and not stored[0].status.is_terminal
