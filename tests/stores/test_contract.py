"""The SagaStore contract, pinned on every store: memory, SQLite, PostgreSQL and MySQL/MariaDB, and the example
store of your own (saga_runtime/examples/dict_store.py), which implements the primitives only."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from saga_runtime._exceptions import StoreError
from saga_runtime._records import SagaStatus, StepStatus, idempotency_key
from saga_runtime._storage import SagaStore

from .conftest import EXAMPLE_KIND, KINDS, T0, Stores, as_stored, make_saga, make_steps


@pytest.fixture(params=(*KINDS, EXAMPLE_KIND))
def kind(request: pytest.FixtureRequest) -> str:
    """Return each kind of store in turn, the example store of your own among them."""
    value: str = request.param
    return value


async def test_create_and_load_round_trip_every_field(store: SagaStore) -> None:
    """Every field of a saga and its steps comes back equal, times as UTC-aware datetimes, statuses as enums."""
    saga, steps = make_saga("s-1"), make_steps("s-1", 7)
    assert await store.create_saga(saga, steps) is None
    loaded = await store.load_saga("s-1")
    assert loaded is not None
    assert loaded == (as_stored(store, saga), steps)
    got_saga, got_steps = loaded
    assert got_saga.created_at.tzinfo is not None
    assert got_saga.created_at.utcoffset() == timedelta(0)
    assert isinstance(got_saga.status, SagaStatus)
    assert all(isinstance(row.status, StepStatus) for row in got_steps)
    assert got_saga.cost == 0.1 + 0.2


async def test_minimal_rows_round_trip(store: SagaStore) -> None:
    """Rows with every optional field at its default (None JSON, no times) come back equal."""
    saga = make_saga("s-min", full=False)
    saga.plan = None
    steps = make_steps("s-min", 2, full=False)
    steps[0].args = None
    await store.create_saga(saga, steps)
    assert await store.load_saga("s-min") == (as_stored(store, saga), steps)


async def test_times_in_other_offsets_come_back_as_the_same_instant_in_utc(store: SagaStore) -> None:
    """An aware time in another offset is stored as its instant and read back in UTC."""
    saga = make_saga("s-tz", created_at=datetime(2024, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=5))))
    await store.create_saga(saga, [])
    loaded = await store.load_saga("s-tz")
    assert loaded is not None
    assert loaded[0].created_at == datetime(2024, 1, 1, 7, 0, tzinfo=UTC)


async def test_load_of_unknown_id_is_none(store: SagaStore) -> None:
    """load_saga and get_saga of an id never stored return None."""
    assert await store.load_saga("nope") is None
    assert await store.get_saga("nope") is None


async def test_create_on_taken_id_writes_nothing_and_returns_existing(store: SagaStore) -> None:
    """create_saga on a taken id returns what is stored and leaves it untouched."""
    saga, steps = make_saga("s-2"), make_steps("s-2", 2)
    assert await store.create_saga(saga, steps) is None
    other = make_saga("s-2", status=SagaStatus.SUCCESS, full=False)
    other_steps = make_steps("s-2", 5, full=False)
    assert await store.create_saga(other, other_steps) == (as_stored(store, saga), steps)
    assert await store.load_saga("s-2") == (as_stored(store, saga), steps)


async def test_concurrent_creates_of_one_id_create_once(store: SagaStore) -> None:
    """Ten concurrent create_saga calls of one id on one store: exactly one creates, the rest see its rows."""
    results = await asyncio.gather(
        *(store.create_saga(make_saga("s-race", full=False), make_steps("s-race", 2)) for _ in range(10))
    )
    assert sum(result is None for result in results) == 1
    winner = await store.load_saga("s-race")
    assert all(result == winner for result in results if result is not None)


async def test_concurrent_creates_through_two_store_objects_create_once(stores: Stores, sql_kind: str) -> None:
    """Two store objects on one database (as two processes would be) racing on ids: each id is created once."""
    first = await stores.open(sql_kind, wipe=True)
    second = await stores.open(sql_kind)
    calls = [
        target.create_saga(make_saga(f"s-{n}", full=False), make_steps(f"s-{n}", 3))
        for n in range(10)
        for target in (first, second, first, second)
    ]
    results = await asyncio.gather(*calls)
    assert sum(result is None for result in results) == 10
    assert len(await first.list_sagas()) == 10
    assert all(summary.step_count == 3 for summary in await second.list_sagas())


async def test_save_upserts_steps_and_writes_the_saga(store: SagaStore) -> None:
    """save() updates existing steps, adds new ones, rewrites the saga row, and save(None, ...) keeps the saga."""
    saga, steps = make_saga("s-3", full=False), make_steps("s-3", 2, full=False)
    await store.create_saga(saga, steps)
    steps[1].status = StepStatus.RUNNING
    steps[1].attempts = 1
    steps[1].started_at = T0
    extra = make_steps("s-3", 3)[2]
    await store.save(None, [steps[1], extra])
    saga.status = SagaStatus.SUCCESS
    saga.finished_at = T0 + timedelta(hours=1)
    saga.cost = 1.25
    await store.save(saga, [])
    assert await store.load_saga("s-3") == (as_stored(store, saga), [*steps, extra])


async def test_save_with_nothing_to_write_is_a_no_op(store: SagaStore) -> None:
    """save(None, []) does nothing and does not fail."""
    await store.save(None, [])
    assert await store.list_sagas() == []


async def test_get_saga_returns_the_result(store: SagaStore) -> None:
    """get_saga builds the SagaResult of the stored rows, steps in seq order."""
    saga, steps = make_saga("s-4"), make_steps("s-4", 3)
    await store.create_saga(saga, list(reversed(steps)))
    result = await store.get_saga("s-4")
    assert result is not None
    assert result.saga_id == "s-4"
    assert result.status is SagaStatus.RUNNING
    assert [record.step_id for record in result.steps] == ["step-0", "step-1", "step-2"]
    assert result.step("step-1").result == steps[1].result
    assert result.metadata == saga.metadata


async def test_list_sagas_order_filter_limit_offset_step_count(store: SagaStore) -> None:
    """list_sagas: newest first (ties by id, descending), filtered by status, paginated, with step counts."""
    specs = [
        ("a", 0, SagaStatus.SUCCESS, 1),
        ("b", 1, SagaStatus.RUNNING, 0),
        ("c", 2, SagaStatus.SUCCESS, 3),
        ("d", 2, SagaStatus.COMPENSATED, 2),
        ("e", 3, SagaStatus.SUCCESS, 4),
    ]
    for saga_id, minutes, status, count in specs:
        saga = make_saga(saga_id, created_at=T0 + timedelta(minutes=minutes), status=status)
        await store.create_saga(saga, make_steps(saga_id, count))
    everything = await store.list_sagas()
    assert [s.saga_id for s in everything] == ["e", "d", "c", "b", "a"]
    assert [s.step_count for s in everything] == [4, 2, 3, 0, 1]
    assert everything[0].created_at == T0 + timedelta(minutes=3)
    assert everything[0].cost == 0.1 + 0.2
    assert [s.saga_id for s in await store.list_sagas(status=SagaStatus.SUCCESS)] == ["e", "c", "a"]
    assert [s.saga_id for s in await store.list_sagas(status="SUCCESS", limit=1, offset=1)] == ["c"]
    assert [s.saga_id for s in await store.list_sagas(limit=2, offset=2)] == ["c", "b"]
    assert await store.list_sagas(status=SagaStatus.COMPENSATION_FAILED) == []


async def test_list_rows_of_one_owner(store: SagaStore) -> None:
    """list_rows(owner=X): only the sagas X holds, with the status filter and pages, newest first."""
    specs = [("a", "x", SagaStatus.RUNNING), ("b", "y", SagaStatus.RUNNING), ("c", "x", SagaStatus.COMPENSATING)]
    specs += [("d", "x", SagaStatus.RUNNING), ("e", None, SagaStatus.RUNNING)]
    for minutes, (saga_id, owner, status) in enumerate(specs):
        saga = make_saga(saga_id, created_at=T0 + timedelta(minutes=minutes), status=status)
        saga.owner = owner
        await store.create_saga(saga, make_steps(saga_id, 1))

    async def ids(status: SagaStatus | None, owner: str, limit: int = 10, offset: int = 0) -> list[str]:
        return [saga.saga_id for saga, _ in await store.list_rows(status, limit, offset, owner=owner)]

    assert await ids(None, "x") == ["d", "c", "a"]
    assert await ids(SagaStatus.RUNNING, "x") == ["d", "a"]
    assert await ids(SagaStatus.RUNNING, "x", limit=1, offset=1) == ["a"]
    assert await ids(SagaStatus.COMPENSATING, "y") == []
    assert await ids(SagaStatus.RUNNING, "nobody") == []
    [(row, count)] = await store.list_rows(SagaStatus.RUNNING, 10, 0, owner="y")
    assert (row.saga_id, row.owner, count) == ("b", "y", 1)


async def test_a_parked_saga_round_trips_and_is_listed(store: SagaStore) -> None:
    """PARKED fits the status column, with the status it left (parked_from) and its recovery attempts."""
    saga = make_saga("p-1", status=SagaStatus.PARKED)
    saga.parked_from, saga.recovery_attempts = SagaStatus.COMPENSATING, 5
    await store.create_saga(saga, make_steps("p-1", 1))
    await store.create_saga(make_saga("p-2", full=False), [])
    assert await store.load_saga("p-1") == (as_stored(store, saga), make_steps("p-1", 1))
    assert [s.saga_id for s in await store.list_sagas(status=SagaStatus.PARKED)] == ["p-1"]
    saga.status, saga.parked_from, saga.recovery_attempts = SagaStatus.RUNNING, None, 0  # unparked
    await store.save(saga, [])
    loaded = await store.load_saga("p-1")
    assert loaded is not None
    assert (loaded[0].status, loaded[0].parked_from, loaded[0].recovery_attempts) == (SagaStatus.RUNNING, None, 0)


async def test_export_of_unknown_id_raises_key_error(store: SagaStore) -> None:
    """export_saga of an id never stored raises KeyError naming it."""
    with pytest.raises(KeyError, match="nope"):
        await store.export_saga("nope")


async def test_ids_are_exact(store: SagaStore) -> None:
    """Ids differing only in case or trailing space are different sagas (no case-insensitive collation)."""
    for saga_id in ("abc", "ABC", "abc "):
        assert await store.create_saga(make_saga(saga_id), make_steps(saga_id, 1)) is None
    assert sorted(s.saga_id for s in await store.list_sagas()) == ["ABC", "abc", "abc "]


HOSTILE = [
    "x'); DROP TABLE steps; --",
    'quote " and \\ backslash',
    "%s %(name)s $1 ? :name {0}",
    "emoji 🧨 ünïcødé 中文",
    "line\nbreak\ttab",
]


async def test_hostile_strings_are_stored_verbatim(store: SagaStore) -> None:
    """SQL-looking ids, tool names and args are values, never SQL: stored and read back verbatim."""
    for n, text in enumerate(HOSTILE):
        saga_id = f"{text}-{n}"
        saga = make_saga(saga_id)
        saga.metadata = {text: text}
        steps = make_steps(saga_id, 2)
        for row in steps:
            row.step_id = f"{text}/{row.seq}"
            row.tool_name = text
            row.args = {text: [text]}
            row.result = text
            row.error = text
        await store.create_saga(saga, steps)
        assert await store.load_saga(saga_id) == (as_stored(store, saga), steps)
    assert len(await store.list_sagas()) == len(HOSTILE)


async def test_closed_store_refuses_calls(stores: Stores, kind: str) -> None:
    """A closed store raises StoreError saying it is closed; closing twice is fine."""
    store = await stores.open(kind)
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.load_saga("x")


async def test_many_concurrent_sagas_all_complete(store: SagaStore) -> None:
    """200 concurrent sagas, each created then saved step by step, all end with complete records."""

    async def run(n: int) -> None:
        saga_id = f"c-{n:03d}"
        saga, steps = make_saga(saga_id, full=False), make_steps(saga_id, 3, full=False)
        await store.create_saga(saga, steps)
        for row in steps:
            row.status = StepStatus.SUCCESS
            row.result = {"n": n}
            await store.save(None, [row])
        saga.status = SagaStatus.SUCCESS
        await store.save(saga, [])

    await asyncio.gather(*(run(n) for n in range(200)))
    summaries = await store.list_sagas(limit=1000)
    assert len(summaries) == 200
    assert all(s.status is SagaStatus.SUCCESS and s.step_count == 3 for s in summaries)
    result = await store.get_saga("c-123")
    assert result is not None
    assert [record.result for record in result.steps] == [{"n": 123}] * 3


async def test_two_new_rows_of_one_write_cannot_share_a_key(store: SagaStore) -> None:
    """Two rows new to the store taking one idempotency key in one write: StoreError, and nothing written."""
    saga, steps = make_saga("twin"), make_steps("twin", 3)
    steps[2].idempotency_key = steps[1].idempotency_key
    with pytest.raises(StoreError):
        await store.create_saga(saga, steps)
    assert await store.load_saga("twin") is None
    await store.create_saga(saga, steps[:1])
    kept = steps[0].copy()
    kept.attempts = 5  # keeps its own key: no clash with the two new rows, which clash with each other
    with pytest.raises(StoreError):
        await store.save(None, [kept, steps[1], steps[2]])
    assert await store.load_saga("twin") == (as_stored(store, saga), steps[:1])


async def test_an_idempotency_key_belongs_to_one_step(store: SagaStore) -> None:
    """A step taking another step's idempotency key: StoreError on create, save and import, and nothing written."""
    saga, steps = make_saga("key-a"), make_steps("key-a", 2)
    await store.create_saga(saga, steps)
    stolen = idempotency_key("key-a", "step-0")
    other, other_steps = make_saga("key-b"), make_steps("key-b", 2)
    other_steps[1].idempotency_key = stolen
    with pytest.raises(StoreError):
        await store.create_saga(other, other_steps)
    assert await store.load_saga("key-b") is None
    await store.create_saga(make_saga("key-c"), [])
    thief = make_steps("key-c", 1)[0]
    thief.idempotency_key = stolen
    with pytest.raises(StoreError):
        await store.save(make_saga("key-c", status=SagaStatus.SUCCESS), [thief])
    loaded = await store.load_saga("key-c")
    assert loaded is not None
    assert loaded == (as_stored(store, make_saga("key-c")), [])
    document = await store.export_saga("key-a")
    document["saga"]["saga_id"] = "key-d"
    for row in document["steps"]:
        row["saga_id"] = "key-d"
    with pytest.raises(StoreError):
        await store.import_saga(document)
    assert await store.load_saga("key-d") is None
    assert await store.load_saga("key-a") == (as_stored(store, saga), steps)
    steps[0].attempts = 9  # the step holding a key may of course be saved again
    await store.save(None, [steps[0]])
