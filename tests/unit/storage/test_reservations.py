"""What one party may hold in promises: bytes reserved by unfinished uploads,
bounded per owner (a share of capacity) and per group (the node's
connections), for both stores."""

from __future__ import annotations

import os

import blake3
import pytest

from flud.storage.capacity import CapacityLedger, ReservationGroup, owner_reserve_limit
from flud.storage.disk import ShareStore
from flud.storage.errors import NoSpace, UploadLimit
from flud.storage.limits import (GIB, MAX_GROUP_RESERVED, MAX_GROUP_UPLOADS, MIB,
                            OWNER_RESERVED_DIVISOR)
from tests.contract.stores import make_store  # noqa: F401 (a fixture)

MALLORY = b"M" * 32
ALICE = b"A" * 32
BIG = 10 * GIB  # accounting only: nothing here writes that much


def key_of(data: bytes) -> bytes:
    return blake3.blake3(data).digest()


def incoming(store) -> list:
    if isinstance(store, ShareStore):
        return os.listdir(os.path.join(store.root, "incoming"))
    return []


# ---- the ledger ----------------------------------------------------------------------

def owner_reserved(ledger, owner: bytes) -> int:
    """Bytes the owner's open reservations hold on this ledger."""
    return ledger._by_owner.get(owner, 0)


def test_owner_bound_is_a_share_of_capacity_never_below_a_groups():
    assert owner_reserve_limit(BIG) == BIG // OWNER_RESERVED_DIVISOR
    assert owner_reserve_limit(BIG) <= 0.1 * BIG
    assert owner_reserve_limit(64 * MIB) == MAX_GROUP_RESERVED  # small node: the floor
    assert owner_reserve_limit(0) == MAX_GROUP_RESERVED


def test_an_owner_over_its_bound_is_refused_and_others_are_not():
    ledger = CapacityLedger(BIG)
    limit = ledger.owner_limit
    held = [ledger.reserve(limit // 2, MALLORY), ledger.reserve(limit // 2, MALLORY)]
    with pytest.raises(UploadLimit, match="one sender may hold at most"):
        ledger.reserve(1, MALLORY)
    other = ledger.reserve(limit, ALICE)
    assert owner_reserved(ledger, MALLORY) == limit
    held[0].release()
    assert owner_reserved(ledger, MALLORY) == limit - limit // 2
    ledger.reserve(limit // 2, MALLORY).settle(10)
    held[1].release()
    held[1].release()  # once only
    other.settle(limit)
    assert owner_reserved(ledger, MALLORY) == 0 and ledger._by_owner == {}
    assert ledger.snapshot() == (10 + limit, 0)


def test_empty_uploads_come_and_go_in_any_order():
    ledger = CapacityLedger(BIG)
    group = ReservationGroup()
    first, second = ledger.reserve(0, ALICE, group), ledger.reserve(0, ALICE, group)
    first.settle(0)
    second.release()
    assert ledger._by_owner == {} and (group.reserved, group.uploads) == (0, 0)


def test_a_full_node_is_no_space_before_any_bound():
    ledger = CapacityLedger(100 * MIB)
    ledger.reserve(90 * MIB, ALICE)
    with pytest.raises(NoSpace):
        ledger.reserve(20 * MIB, ALICE, ReservationGroup(max_uploads=0))


def test_a_group_bounds_bytes_and_uploads():
    ledger = CapacityLedger(BIG)
    group = ReservationGroup(max_bytes=10, max_uploads=3, name="this connection")
    first = ledger.reserve(6, ALICE, group)
    with pytest.raises(UploadLimit, match="this connection already has 1 unfinished"):
        ledger.reserve(5, ALICE, group)
    ledger.reserve(4, MALLORY, group)  # a group spans owners
    ledger.reserve(0, ALICE, group)
    with pytest.raises(UploadLimit, match="at most 3 uploads"):
        ledger.reserve(0, ALICE, group)
    assert (group.reserved, group.uploads) == (10, 3)
    first.settle(6)
    assert (group.reserved, group.uploads) == (4, 2)
    ledger.reserve(6, ALICE, group)
    assert ledger.snapshot() == (6, 10)


def test_default_group_bounds():
    group = ReservationGroup()
    assert (group.max_bytes, group.max_uploads) == (MAX_GROUP_RESERVED, MAX_GROUP_UPLOADS)


# ---- both stores -----------------------------------------------------------------------

def test_a_sender_declaring_uploads_and_sending_nothing_leaves_over_90_percent(make_store):
    store = make_store(BIG)
    held, refused = [], 0
    for _ in range(4):  # four connections' worth
        group = ReservationGroup()
        for _ in range(64):
            try:
                held.append(store.open_upload(None, MALLORY, 32 * MIB, "streamed share", group=group))
            except UploadLimit:
                refused += 1
    stats = store.stats()
    assert stats["reserved"] == owner_reserve_limit(BIG) == len(held) * 32 * MIB
    assert stats["free"] >= 0.9 * BIG and refused == 4 * 64 - len(held)
    data = os.urandom(3 * MIB)
    assert store.put(key_of(data), ALICE, data) == [key_of(data)]
    for upload in held:
        upload.abort()
    assert store.stats()["reserved"] == 0 and incoming(store) == []
    assert store.put(key_of(b"x" * 10), MALLORY, b"x" * 10)  # room again


def test_a_group_refusal_leaves_no_file_and_no_reservation(make_store):
    store = make_store(BIG)
    group = ReservationGroup(max_bytes=MIB, max_uploads=1)
    data = b"y" * 1000
    upload = store.open_upload(key_of(data), ALICE, len(data), group=group)
    with pytest.raises(UploadLimit):
        store.open_upload(key_of(b"z"), ALICE, 1, group=group)
    assert store.stats()["reserved"] == len(data) and len(incoming(store)) <= 1
    upload.write(data)
    upload.commit()
    assert (group.reserved, group.uploads) == (0, 0)
    assert store.stats()["reserved"] == 0 and incoming(store) == []
    store.open_upload(key_of(b"z"), ALICE, 1, group=group).abort()
