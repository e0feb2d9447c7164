"""Leases (DESIGN.md invariant 5), pinned on every store: claim_saga, renew_leases and claim_expired.

Leases are judged on the database's clock (PostgreSQL, MySQL/MariaDB) or the machine's (SQLite, memory). A lease
is asked for as an expiry and the asker's now: memory and SQLite store the expiry as given, the others their own
time plus its length. So times here are the machine's (which the test databases share), far apart, and a stored
lease is checked to end where it was asked to: exactly on memory and SQLite, within SLACK on the others.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime, timedelta

import pytest

from saga_runtime._engine import journal
from saga_runtime._exceptions import LeaseLostError
from saga_runtime._records import SagaRow, SagaStatus, StepRow, StepStatus, now
from saga_runtime._storage import SagaStore, sagas

from .conftest import SLACK, Stores, local_clock, make_saga, make_steps
from .test_group_commit import Batches

NOW = now()
PAST = NOW - timedelta(minutes=1)
FUTURE = NOW + timedelta(hours=1)
LATER = NOW + timedelta(hours=2)
TERMINAL = (SagaStatus.SUCCESS, SagaStatus.COMPENSATED, SagaStatus.COMPENSATION_FAILED)


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take each test's times from the clock when it starts (a long run leaves the import's behind)."""
    start = now()
    for name, offset in (("NOW", 0), ("PAST", -60), ("FUTURE", 3600), ("LATER", 7200)):
        monkeypatch.setattr(sys.modules[__name__], name, start + timedelta(seconds=offset))


async def put(
    store: SagaStore,
    saga_id: str,
    *,
    owner: str | None,
    lease: datetime | None,
    status: SagaStatus = SagaStatus.RUNNING,
    order: int = 0,
    steps: int = 2,
) -> SagaRow:
    """Store a saga with the given owner, lease and status (created `order` ms after NOW); return its row."""
    saga = make_saga(saga_id, created_at=NOW + timedelta(milliseconds=order), status=status, full=False)
    saga.owner, saga.lease_expires_at = owner, lease
    assert await store.create_saga(saga.copy(), make_steps(saga_id, steps, full=False)) is None
    return saga


async def lease_of(store: SagaStore, saga_id: str) -> tuple[str | None, datetime | None]:
    """Return the stored (owner, lease_expires_at) of a saga."""
    loaded = await store.load_saga(saga_id)
    assert loaded is not None
    return loaded[0].owner, loaded[0].lease_expires_at


def ends_as_asked(store: SagaStore, lease: datetime | None, asked: datetime) -> bool:
    """Tell whether a stored lease ends at `asked` (asked for at NOW): as given, or that long after now."""
    if lease is None:
        return False
    if local_clock(store):
        return lease == asked
    return abs(lease - (now() + (asked - NOW))) < SLACK


async def assert_lease(store: SagaStore, saga_id: str, owner: str, asked: datetime) -> None:
    """Check that `owner` holds a saga, its lease ending where it was asked to (at NOW)."""
    stored_owner, lease = await lease_of(store, saga_id)
    assert stored_owner == owner
    assert ends_as_asked(store, lease, asked), (lease, asked)


# -- claim_saga ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "lease"),
    [(None, None), (None, FUTURE), ("other", None), ("other", PAST), ("me", FUTURE), ("me", PAST)],
    ids=["unowned", "unowned-with-lease", "owned-without-lease", "expired", "own", "own-expired"],
)
@pytest.mark.parametrize("status", [SagaStatus.RUNNING, SagaStatus.COMPENSATING])
async def test_claim_takes_a_free_live_saga(
    store: SagaStore, owner: str | None, lease: datetime | None, status: SagaStatus
) -> None:
    """claim_saga takes a live saga that is unowned, already its own, or whose lease expired, and sets the lease."""
    await put(store, "s", owner=owner, lease=lease, status=status)
    assert await store.claim_saga("s", "me", LATER, NOW) is True
    await assert_lease(store, "s", "me", LATER)


async def test_claim_of_a_saga_held_by_another_is_refused(store: SagaStore) -> None:
    """claim_saga of a saga whose other owner's lease runs on (or ends exactly now) returns False, writes nothing."""
    await put(store, "held", owner="other", lease=FUTURE)
    await put(store, "edge", owner="other", lease=NOW)  # expired means *before* now (the writers' clock)
    for saga_id in ("held", "edge") if local_clock(store) else ("held",):
        before = await store.load_saga(saga_id)
        assert await store.claim_saga(saga_id, "me", LATER, NOW) is False
        assert await store.load_saga(saga_id) == before


@pytest.mark.parametrize("status", TERMINAL)
async def test_claim_of_a_finished_saga_is_refused(store: SagaStore, status: SagaStatus) -> None:
    """A finished saga is never claimed, even unowned or with an expired lease."""
    await put(store, "done", owner=None, lease=None, status=status)
    await put(store, "done-expired", owner="other", lease=PAST, status=status, order=1)
    for saga_id in ("done", "done-expired"):
        before = await store.load_saga(saga_id)
        assert await store.claim_saga(saga_id, "me", LATER, NOW) is False
        assert await store.load_saga(saga_id) == before


async def test_claim_of_a_missing_saga_is_refused(store: SagaStore) -> None:
    """claim_saga of an id never stored returns False and creates nothing."""
    assert await store.claim_saga("nope", "me", LATER, NOW) is False
    assert await store.load_saga("nope") is None


async def test_reclaiming_with_the_same_lease_still_owns(store: SagaStore) -> None:
    """Claiming one's own saga again with the very same lease (no value changes) returns True (MySQL rowcount)."""
    await put(store, "s", owner=None, lease=None)
    assert await store.claim_saga("s", "me", LATER, NOW) is True
    assert await store.claim_saga("s", "me", LATER, NOW) is True
    assert await store.claim_saga("s", "other", LATER, NOW) is False
    await assert_lease(store, "s", "me", LATER)


async def test_concurrent_claims_of_one_saga_have_one_winner(stores: Stores, kind: str) -> None:
    """Owners racing to claim the same expired sagas through separate store objects: exactly one wins each."""
    first = await stores.open(kind, wipe=True)
    # The memory store is private to its object: there, the racers share it.
    second = first if kind == "memory" else await stores.open(kind)
    ids = [f"race-{n}" for n in range(15)]
    for n, saga_id in enumerate(ids):
        await put(first, saga_id, owner="dead", lease=PAST, order=n)
    owners = [f"owner-{k}" for k in range(4)]
    results = await asyncio.gather(
        *(
            (first if k % 2 else second).claim_saga(saga_id, owner, LATER, NOW)
            for saga_id in ids
            for k, owner in enumerate(owners)
        )
    )
    wins = [results[i : i + len(owners)] for i in range(0, len(results), len(owners))]
    for saga_id, won in zip(ids, wins, strict=True):
        assert sum(won) == 1, saga_id
        winner = owners[won.index(True)]
        await assert_lease(first, saga_id, winner, LATER)


async def test_claim_of_a_parked_saga_is_refused(store: SagaStore) -> None:
    """A PARKED saga is not live: claim_saga never takes it, unowned, expired, or already one's own."""
    await put(store, "parked", owner=None, lease=None, status=SagaStatus.PARKED)
    await put(store, "parked-mine", owner="me", lease=FUTURE, status=SagaStatus.PARKED, order=1)
    for saga_id in ("parked", "parked-mine"):
        before = await store.load_saga(saga_id)
        assert await store.claim_saga(saga_id, "me", LATER, NOW) is False
        assert await store.load_saga(saga_id) == before


async def test_claim_saga_does_not_count_recovery_attempts(store: SagaStore) -> None:
    """Only recovery's claim_expired counts an attempt; claim_saga (a run resuming its own saga) does not."""
    await put(store, "s", owner="dead", lease=PAST)
    assert await store.claim_saga("s", "me", LATER, NOW) is True
    loaded = await store.load_saga("s")
    assert loaded is not None
    assert loaded[0].recovery_attempts == 0


# -- renew_leases ----------------------------------------------------------------------------------------------


async def test_renew_extends_only_the_leases_held(store: SagaStore) -> None:
    """renew_leases extends the owner's live sagas and returns exactly them; others' and finished ones untouched."""
    await put(store, "mine-1", owner="me", lease=FUTURE)
    await put(store, "mine-2", owner="me", lease=PAST, status=SagaStatus.COMPENSATING, order=1)
    await put(store, "theirs", owner="other", lease=FUTURE, order=2)
    await put(store, "unowned", owner=None, lease=None, order=3)
    await put(store, "mine-done", owner="me", lease=FUTURE, status=SagaStatus.SUCCESS, order=4)
    untouched = {saga_id: await store.load_saga(saga_id) for saga_id in ("theirs", "unowned", "mine-done")}
    asked = ["mine-1", "mine-2", "theirs", "unowned", "mine-done", "missing", "mine-1"]
    assert await store.renew_leases("me", asked, LATER, NOW) == {"mine-1", "mine-2"}
    await assert_lease(store, "mine-1", "me", LATER)
    await assert_lease(store, "mine-2", "me", LATER)
    for saga_id, before in untouched.items():
        assert await store.load_saga(saga_id) == before
    # The same lease again changes no value and still reports both held (MySQL counts changed rows only).
    assert await store.renew_leases("me", ["mine-1", "mine-2"], LATER, NOW) == {"mine-1", "mine-2"}
    assert await store.renew_leases("me", [], LATER, NOW) == set()


async def test_renew_of_a_parked_saga_is_refused(store: SagaStore) -> None:
    """Fencing after parking: the owner of a saga that was PARKED no longer holds it, and its lease is untouched."""
    await put(store, "parked", owner="me", lease=FUTURE, status=SagaStatus.PARKED)
    before = await store.load_saga("parked")
    assert await store.renew_leases("me", ["parked"], LATER, NOW) == set()
    assert await store.load_saga("parked") == before


async def test_renew_after_a_takeover_returns_nothing(store: SagaStore) -> None:
    """Fencing: once another owner took an expired saga over, the old owner's renewal neither holds nor changes it."""
    await put(store, "s", owner="old", lease=PAST)
    assert [saga.saga_id for saga, _ in await store.claim_expired("new", FUTURE, NOW)] == ["s"]
    assert await store.renew_leases("old", ["s"], LATER, NOW) == set()
    await assert_lease(store, "s", "new", FUTURE)


async def test_renew_of_many_ids_returns_all_held(store: SagaStore) -> None:
    """renew_leases of more ids than one SQL statement takes (chunked) returns every one held."""
    held = [f"m-{n:04d}" for n in range(520)]
    for n, saga_id in enumerate(held):
        await put(store, saga_id, owner="me", lease=FUTURE, order=n, steps=0)
    assert await store.renew_leases("me", [*held, "x", "y"], LATER, NOW) == set(held)
    await assert_lease(store, held[-1], "me", LATER)


# -- an owner's write leaving the lease as it is (save(..., lease=False)) ---------------------------------------


async def advanced(store: SagaStore, saga_id: str, steps: int = 0) -> tuple[SagaRow, list[StepRow]]:
    """Return a progress write of a stored saga: new metadata, its first `steps` steps finished, a lease to LATER."""
    loaded = await store.load_saga(saga_id)
    assert loaded is not None
    saga, rows = loaded
    saga.metadata, saga.lease_expires_at, saga.updated_at = {"progress": saga_id}, LATER, NOW
    for row in rows[:steps]:
        row.status, row.result, row.hash = StepStatus.SUCCESS, {"done": row.step_id}, None
    return saga, rows[:steps]


async def progress(store: SagaStore, saga_id: str, *, lease: bool, owner: str = "me", steps: int = 0) -> None:
    """Save `advanced`'s progress write of a saga as `owner`, leaving the stored lease if `lease` is False."""
    saga, rows = await advanced(store, saga_id, steps)
    await store.save(saga, rows, owner=owner, lease=lease)


@pytest.mark.parametrize("steps", [0, 2], ids=["saga row", "with steps"])
async def test_a_write_without_lease_leaves_the_stored_lease_as_it_is(store: SagaStore, steps: int) -> None:
    """An owner's save with lease=False writes the row and its steps but not its lease; the default moves it."""
    await put(store, "s", owner="me", lease=FUTURE)
    _, before = await lease_of(store, "s")
    await progress(store, "s", lease=False, steps=steps)
    loaded = await store.load_saga("s")
    assert loaded is not None
    assert loaded[0].metadata == {"progress": "s"}
    assert [row.status for row in loaded[1][:steps]] == [StepStatus.SUCCESS] * steps
    assert await lease_of(store, "s") == ("me", before)
    await progress(store, "s", lease=True, steps=steps)
    await assert_lease(store, "s", "me", LATER)


async def test_a_stale_owners_write_without_lease_is_refused(store: SagaStore) -> None:
    """lease=False keeps the owner condition: another owner's such write is refused and changes nothing."""
    await put(store, "s", owner="me", lease=FUTURE)
    before = await store.load_saga("s")
    with pytest.raises(LeaseLostError):
        await progress(store, "s", lease=False, owner="other", steps=1)
    assert await store.load_saga("s") == before


async def test_writes_with_and_without_lease_share_a_batch(store: SagaStore) -> None:
    """In one batch, the writes leaving the lease keep it and the others move it, each saga as its write asked."""
    ids = [f"b-{n}" for n in range(7)]
    for n, saga_id in enumerate(ids):
        await put(store, saga_id, owner="me", lease=FUTURE, order=n)
    leases = {saga_id: (await lease_of(store, saga_id))[1] for saga_id in ids}
    writes = [await advanced(store, saga_id, n % 3) for n, saga_id in enumerate(ids)]
    batches = Batches(store, holds=1)
    first = asyncio.ensure_future(store.save(*writes[0], owner="me", lease=False))
    await batches.held(0)  # the store is busy: the writes below gather into one batch
    pending = asyncio.gather(*(store.save(*write, owner="me", lease=n % 2 == 0) for n, write in enumerate(writes[1:])))
    await asyncio.sleep(0.05)
    batches.release(0)
    await first
    await asyncio.wait_for(pending, 20)
    assert await lease_of(store, ids[0]) == ("me", leases[ids[0]])
    for n, saga_id in enumerate(ids[1:]):
        if n % 2 == 0:
            await assert_lease(store, saga_id, "me", LATER)
        else:
            assert await lease_of(store, saga_id) == ("me", leases[saga_id])
    if batches.sql:
        assert sorted(batches.seen[1]) == ids[1:]


# -- claim_expired ---------------------------------------------------------------------------------------------


async def test_claim_expired_takes_expired_live_sagas_only(store: SagaStore) -> None:
    """claim_expired takes live sagas with expired or no lease, oldest first, returned as they were; no others."""
    await put(store, "c-expired-late", owner="dead", lease=PAST, order=5)
    await put(store, "a-unowned", owner=None, lease=None, order=1)
    await put(store, "b-compensating", owner="dead", lease=PAST, status=SagaStatus.COMPENSATING, order=3)
    await put(store, "held", owner="alive", lease=FUTURE, order=2)
    if local_clock(store):  # a lease ending exactly now, on the writers' clock, is not expired
        await put(store, "edge", owner="alive", lease=NOW, order=4)
    for n, status in enumerate(TERMINAL):
        await put(store, f"done-{n}", owner="dead", lease=PAST, status=status, order=6 + n)
    untouched = {row.saga_id: await store.load_saga(row.saga_id) for row in await store.list_sagas()}

    claimed = await store.claim_expired("me", LATER, NOW)
    assert [saga.saga_id for saga, _ in claimed] == ["a-unowned", "b-compensating", "c-expired-late"]
    for saga, steps in claimed:
        assert (saga, steps) == untouched[saga.saga_id]  # as it was: whom it was taken from
        stored_owner, lease = await lease_of(store, saga.saga_id)
        assert stored_owner == "me"
        assert ends_as_asked(store, lease, LATER)
        assert len(steps) == 2
        del untouched[saga.saga_id]
    for saga_id, before in untouched.items():
        assert await store.load_saga(saga_id) == before
    assert await store.claim_expired("other", LATER, NOW) == []  # now held until LATER


async def test_claim_expired_never_takes_a_parked_saga(store: SagaStore) -> None:
    """PARKED sagas wait for an operator: claim_expired passes them over, whatever their lease."""
    await put(store, "parked-none", owner=None, lease=None, status=SagaStatus.PARKED)
    await put(store, "parked-expired", owner="dead", lease=PAST, status=SagaStatus.PARKED, order=1)
    await put(store, "live", owner="dead", lease=PAST, order=2)
    before = {saga_id: await store.load_saga(saga_id) for saga_id in ("parked-none", "parked-expired")}
    assert [saga.saga_id for saga, _ in await store.claim_expired("me", LATER, NOW)] == ["live"]
    for saga_id, row in before.items():
        assert await store.load_saga(saga_id) == row


async def test_claim_expired_counts_no_recovery_attempt(store: SagaStore) -> None:
    """claim_expired leaves recovery_attempts as stored: only a worker starting to drive a saga counts one."""
    saga = make_saga("r", created_at=NOW, full=False)
    saga.owner, saga.lease_expires_at, saga.recovery_attempts = "dead", PAST, 2
    await store.create_saga(saga, make_steps("r", 1, full=False))
    await put(store, "fresh", owner=None, lease=None, order=1)
    first = await store.claim_expired("me", PAST, NOW)  # a lease over at once: its claimer died
    assert [(row.saga_id, row.recovery_attempts, row.owner) for row, _ in first] == [
        ("r", 2, "dead"),
        ("fresh", 0, None),
    ]
    for row, _ in first:
        assert (await lease_of(store, row.saga_id))[0] == "me"
    # Nobody renews: the lease ran out, so the next recovery claims them again, still uncounted.
    again = await store.claim_expired("other", LATER, NOW)
    assert [(row.saga_id, row.recovery_attempts, row.owner) for row, _ in again] == [("r", 2, "me"), ("fresh", 0, "me")]
    for row, _ in again:
        stored_owner, lease = await lease_of(store, row.saga_id)
        assert stored_owner == "other"
        assert ends_as_asked(store, lease, LATER)
    loaded = await store.load_saga("r")
    assert loaded is not None
    assert loaded[0].recovery_attempts == 2


async def test_claim_expired_respects_the_limit(store: SagaStore) -> None:
    """claim_expired takes at most `limit` sagas, the oldest first; the next call takes the next ones."""
    for n in range(7):
        await put(store, f"e-{n}", owner="dead", lease=PAST, order=n)
    assert await store.claim_expired("me", LATER, NOW, limit=0) == []
    first = await store.claim_expired("me", LATER, NOW, limit=3)
    assert [saga.saga_id for saga, _ in first] == ["e-0", "e-1", "e-2"]
    second = await store.claim_expired("me", LATER, NOW, limit=3)
    assert [saga.saga_id for saga, _ in second] == ["e-3", "e-4", "e-5"]
    third = await store.claim_expired("me", LATER, NOW, limit=3)
    assert [saga.saga_id for saga, _ in third] == ["e-6"]
    assert await store.claim_expired("me", LATER, NOW, limit=3) == []
    await assert_lease(store, "e-3", "me", LATER)


async def test_claim_expired_under_contention_is_disjoint_and_complete(stores: Stores, kind: str) -> None:
    """Four claimers over two store objects racing on 50 expired sagas: disjoint takes whose union is all 50."""
    first = await stores.open(kind, wipe=True)
    second = first if kind == "memory" else await stores.open(kind)
    ids = {f"x-{n:02d}" for n in range(50)}
    for n, saga_id in enumerate(sorted(ids)):
        await put(first, saga_id, owner="dead", lease=PAST, order=n, steps=1)
    await put(first, "alive", owner="alive", lease=FUTURE, order=99)
    await put(first, "done", owner="dead", lease=PAST, status=SagaStatus.SUCCESS, order=98)
    taken: dict[str, list[str]] = {}

    async def claimer(store: SagaStore, owner: str) -> None:
        taken[owner] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        # An empty answer may only mean the others hold the rest right now: stop once everything is taken.
        while sum(len(got) for got in taken.values()) < len(ids):
            assert loop.time() < deadline, "the claimers stalled"
            claimed = await store.claim_expired(owner, LATER, NOW, limit=4)
            assert len(claimed) <= 4
            taken[owner].extend(saga.saga_id for saga, _ in claimed)
            if not claimed:
                await asyncio.sleep(0.001)

    owners = ["w0", "w1", "w2", "w3"]
    await asyncio.gather(*(claimer(first if k % 2 else second, owner) for k, owner in enumerate(owners)))
    everything = [saga_id for owner in owners for saga_id in taken[owner]]
    assert len(everything) == len(set(everything)), "a saga was claimed twice"
    assert set(everything) == ids
    for owner in owners:
        for saga_id in taken[owner]:
            await assert_lease(second, saga_id, owner, LATER)
    await assert_lease(first, "alive", "alive", FUTURE)
    await assert_lease(first, "done", "dead", PAST)
    for saga_id in ids:  # a claim counts no recovery attempt
        loaded = await first.load_saga(saga_id)
        assert loaded is not None
        assert loaded[0].recovery_attempts == 0, saga_id


# -- reopening (retry_compensation's claim): the journal's intent, one conditional write ------------------------


async def stored_row(store: SagaStore, saga_id: str) -> SagaRow:
    """Return a stored saga's row (or, for an id not stored, a row of that id)."""
    loaded = await store.load_saga(saga_id)
    return loaded[0] if loaded is not None else make_saga(saga_id, created_at=NOW, full=False)


async def test_reopen_compensation_gives_a_failed_compensation_to_one_caller(store: SagaStore) -> None:
    """Reopening makes a COMPENSATION_FAILED saga COMPENSATING under its caller, once: a second gets False."""
    await put(store, "s", owner="gone", lease=None, status=SagaStatus.COMPENSATION_FAILED)
    row = await stored_row(store, "s")
    results = await asyncio.gather(*(journal.claim(store, row, who, LATER, NOW, "reopen") for who in ("me", "you")))
    assert sorted(results) == [False, True]
    winner = "me" if results[0] else "you"
    loaded = await store.load_saga("s")
    assert loaded is not None
    assert loaded[0].status is SagaStatus.COMPENSATING
    assert (loaded[0].owner, loaded[0].finished_at) == (winner, None)
    assert ends_as_asked(store, loaded[0].lease_expires_at, LATER)


@pytest.mark.parametrize(
    "status", [SagaStatus.RUNNING, SagaStatus.COMPENSATING, SagaStatus.SUCCESS, SagaStatus.COMPENSATED]
)
async def test_reopen_compensation_refuses_any_other_status(store: SagaStore, status: SagaStatus) -> None:
    """Reopening (a stale read saying COMPENSATION_FAILED) changes nothing of a saga in another status, nor of a
    missing one."""
    await put(store, "s", owner="other", lease=FUTURE, status=status)
    for saga_id in ("s", "missing"):
        stale = await stored_row(store, saga_id)
        stale.status = SagaStatus.COMPENSATION_FAILED
        assert await journal.claim(store, stale, "me", LATER, NOW, "reopen") is False
    assert await store.load_saga("missing") is None
    await assert_lease(store, "s", "other", FUTURE)


# -- unpark: the journal's intent, one conditional write ----------------------------------------------------------


async def parked(store: SagaStore, saga_id: str, parked_from: SagaStatus | None) -> None:
    """Store a PARKED saga, left by its owner, with recovery attempts and an error."""
    saga = await put(store, saga_id, owner=None, lease=None, status=SagaStatus.PARKED)
    saga.parked_from, saga.recovery_attempts, saga.error = parked_from, 6, "parked: recovery failed 5 times"
    await store.save(saga.copy(), [])


@pytest.mark.parametrize("parked_from", [SagaStatus.RUNNING, SagaStatus.COMPENSATING, None])
async def test_unpark_makes_a_parked_saga_live_again_for_one_caller(
    store: SagaStore, parked_from: SagaStatus | None
) -> None:
    """Unparking restores the status a saga was parked from, unowned and uncounted, once: a second gets False."""
    await parked(store, "s", parked_from)
    row = await stored_row(store, "s")
    results = await asyncio.gather(
        journal.unpark(store, row, compensate=False, at=NOW), journal.unpark(store, row, compensate=False, at=LATER)
    )
    assert sorted(results) == [False, True]
    loaded = await store.load_saga("s")
    assert loaded is not None
    saga = loaded[0]
    assert saga.status is (parked_from or SagaStatus.RUNNING)
    assert (saga.parked_from, saga.recovery_attempts, saga.error) == (None, 0, None)
    assert (saga.owner, saga.lease_expires_at) == (None, None)
    assert saga.updated_at == (NOW if results[0] else LATER)


async def test_a_late_unpark_leaves_a_saga_a_recovery_took_over_alone(store: SagaStore) -> None:
    """An unpark acting on a stale read (the saga unparked and claimed since) changes nothing of the claimer's."""
    await parked(store, "s", SagaStatus.RUNNING)
    stale = await stored_row(store, "s")
    assert await journal.unpark(store, stale, compensate=False, at=NOW) is True
    [(claimed, _)] = await store.claim_expired("worker", FUTURE, NOW)
    claimed.status, claimed.owner, claimed.lease_expires_at = SagaStatus.COMPENSATING, "worker", FUTURE
    await store.save(claimed.copy(), [], owner="worker")
    assert await journal.unpark(store, stale, compensate=False, at=LATER) is False
    loaded = await store.load_saga("s")
    assert loaded is not None
    assert (loaded[0].status, loaded[0].owner) == (SagaStatus.COMPENSATING, "worker")
    assert ends_as_asked(store, loaded[0].lease_expires_at, FUTURE)


@pytest.mark.parametrize(
    "status", [SagaStatus.RUNNING, SagaStatus.COMPENSATING, SagaStatus.SUCCESS, SagaStatus.COMPENSATION_FAILED]
)
async def test_unpark_refuses_any_other_status(store: SagaStore, status: SagaStatus) -> None:
    """Unparking (a stale read saying PARKED) changes nothing of a saga in another status, nor of a missing one."""
    await put(store, "s", owner="other", lease=FUTURE, status=status)
    for saga_id in ("s", "missing"):
        stale = await stored_row(store, saga_id)
        stale.status, stale.parked_from = SagaStatus.PARKED, SagaStatus.RUNNING
        assert await journal.unpark(store, stale, compensate=False, at=NOW) is False
    assert await store.load_saga("missing") is None
    await assert_lease(store, "s", "other", FUTURE)


# -- change_saga: the store's conditional write of a status change ------------------------------------------------


async def test_change_saga_writes_only_over_the_expected_status_and_owner(store: SagaStore) -> None:
    """change_saga writes the row (sealed) only where the stored saga is in the expected status (and owner)."""
    await put(store, "s", owner="me", lease=FUTURE, steps=0)
    before = await stored_row(store, "s")
    moved = before.copy()
    moved.status, moved.owner, moved.lease_expires_at, moved.updated_at = SagaStatus.QUEUED, None, None, LATER
    assert await store.change_saga(moved.copy(), status=SagaStatus.COMPENSATING) is False
    assert await store.change_saga(moved.copy(), status=SagaStatus.RUNNING, owner="you") is False
    assert (await stored_row(store, "s")).status is SagaStatus.RUNNING
    assert await store.change_saga(moved.copy(), status=SagaStatus.RUNNING, owner="me") is True
    stored = await stored_row(store, "s")
    assert (stored.status, stored.owner, stored.updated_at) == (SagaStatus.QUEUED, None, LATER)
    assert stored.seal is not None
    assert stored.seal != before.seal
    assert await sagas.verify_saga(store, "s")
    assert await store.change_saga(moved.copy(), status=SagaStatus.RUNNING) is False  # moved on already


async def test_requeue_gives_a_started_saga_back_to_its_owner_only(store: SagaStore) -> None:
    """A worker gives a saga it runs back QUEUED, unowned; a stale owner's give-back changes nothing."""
    await put(store, "s", owner="me", lease=FUTURE)
    row = await stored_row(store, "s")
    assert await journal.requeue(store, row, "you", NOW) is False
    assert await journal.requeue(store, row, "me", NOW) is True
    stored = await stored_row(store, "s")
    assert (stored.status, stored.owner, stored.lease_expires_at) == (SagaStatus.QUEUED, None, None)


async def test_cancel_queued_ends_a_queued_saga_once(store: SagaStore) -> None:
    """A QUEUED saga's cancel ends it COMPENSATED with its entry in the history, once; a started one is left."""
    await put(store, "q", owner=None, lease=None, status=SagaStatus.QUEUED)
    await put(store, "r", owner="me", lease=FUTURE)
    entry = {"kind": "cancel", "outcome": "cancelled"}
    queued, running = await stored_row(store, "q"), await stored_row(store, "r")
    assert await journal.cancel_queued(store, queued, "cancelled", NOW, entry) is True
    assert await journal.cancel_queued(store, queued, "cancelled", LATER, entry) is False
    stored = await stored_row(store, "q")
    assert (stored.status, stored.error, stored.history[-1]) == (SagaStatus.COMPENSATED, "cancelled", entry)
    running.status = SagaStatus.QUEUED  # a stale read
    assert await journal.cancel_queued(store, running, "cancelled", NOW, entry) is False
    assert (await stored_row(store, "r")).status is SagaStatus.RUNNING
