"""The messages table on every store (schema version 9): stored once per id, read back oldest first, as JSON."""

from __future__ import annotations

from datetime import timedelta

from saga_runtime._records import now
from saga_runtime._storage import SagaStore


async def test_a_message_is_stored_once_per_id_and_read_oldest_first(store: SagaStore) -> None:
    """put_message stores a JSON value under its id once; load_messages returns a saga's messages in send order."""
    start = now()
    assert await store.put_message("s1", "m-2", "reply", {"cents": 4200, "note": "é"}, start + timedelta(seconds=1))
    assert await store.put_message("s1", "m-1", "reply", [1, 2.5, None, True], start)
    assert await store.put_message("s1", "m-3", "other", None, start + timedelta(seconds=2))
    assert not await store.put_message("s1", "m-1", "reply", "changed", start + timedelta(seconds=3))
    messages = await store.load_messages("s1")
    assert [(mid, topic, body) for mid, topic, body, _ in messages] == [
        ("m-1", "reply", [1, 2.5, None, True]),
        ("m-2", "reply", {"cents": 4200, "note": "é"}),
        ("m-3", "other", None),
    ]
    assert abs((messages[0][3] - start).total_seconds()) < 0.01


async def test_messages_belong_to_their_saga(store: SagaStore) -> None:
    """The same message id in two sagas is two messages; a saga without messages reads none."""
    at = now()
    assert await store.put_message("a", "k", "t", 1, at)
    assert await store.put_message("b", "k", "t", 2, at)
    assert [body for _, _, body, _ in await store.load_messages("a")] == [1]
    assert [body for _, _, body, _ in await store.load_messages("b")] == [2]
    assert await store.load_messages("nobody") == []
