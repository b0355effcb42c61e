"""Leases and the trash of the disk store (storage/leases.py): who is trashed,
what a trashed owner's data looks like, what a purge frees, and crashes."""

from __future__ import annotations

import os
import random

import pytest

from flud.storage import leases as leases_module
from flud.storage.disk import ShareStore
from flud.storage.errors import NotFound
from flud.storage.leases import LeaseTerms
from tests.unit.storage.helpers import ALICE, BOB, CAPACITY, SimulatedCrash, crash, key_of, put_tar, read_all

DAY = 86400.0
TERMS = LeaseTerms(lease=90 * DAY, trash=7 * DAY)
T0 = 1_700_000_000.0


def data(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.fixture
def store(tmp_path):
    s = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    yield s
    s.close()


def fill(store):
    """ALICE and BOB share one share; each has one of its own and an archive."""
    shared, alone_a, alone_b = data(5000, 1), data(6000, 2), data(7000, 3)
    members_a, members_b = [data(3000, 10), data(4000, 11)], [data(2000, 20)]
    for owner, blobs in ((ALICE, [shared, alone_a]), (BOB, [shared, alone_b])):
        for blob in blobs:
            store.put(key_of(blob), owner, blob)
    put_tar(store, ALICE, members_a)
    put_tar(store, BOB, members_b)
    return {"shared": shared, ALICE: [alone_a, *members_a], BOB: [alone_b, *members_b]}


def served(store, owner, blobs) -> bool:
    return all(read_all(store, key_of(b), owner) == b for b in blobs)


def test_every_owner_that_stores_has_a_lease_dated_by_the_next_sweep(store):
    fill(store)
    assert store.leases.lease(ALICE) == (None, None)
    store.leases.sweep(T0, TERMS)
    assert store.leases.lease(ALICE) == (T0, None) and store.leases.lease(BOB) == (T0, None)


def test_a_party_that_holds_nothing_gets_no_lease(store):
    store.leases.renew(ALICE, T0)
    assert store.leases.lease(ALICE) is None and store.stats()["leases"] == 0
    store.put(key_of(b"x"), ALICE, b"x")
    store.leases.renew(ALICE, T0 + 5)
    assert store.leases.lease(ALICE) == (T0 + 5, None) and store.stats()["leases"] == 1


def test_an_owner_not_seen_for_the_lease_goes_to_the_trash_and_nobody_else(store):
    blobs = fill(store)
    store.leases.sweep(T0, TERMS)
    store.leases.renew(BOB, T0 + 60 * DAY)
    before = store.stats()
    report = store.leases.sweep(T0 + 90 * DAY + 1, TERMS)
    assert report.trashed == [ALICE] and report.purged == []
    assert store.leases.is_trashed(ALICE) and not store.leases.is_trashed(BOB)
    for blob in [blobs["shared"], *blobs[ALICE]]:
        with pytest.raises(NotFound):
            store.open_reader(key_of(blob), ALICE)
        with pytest.raises(NotFound):
            store.verify(key_of(blob), ALICE, b"n", 0, 10)
        with pytest.raises(NotFound):
            store.delete(key_of(blob), ALICE)
    assert served(store, BOB, [blobs["shared"], *blobs[BOB]])
    stats = store.stats()
    assert stats["bytes_stored"] == before["bytes_stored"]  # the trash still takes its space
    assert stats["trashed_owners"] == 1
    assert stats["trashed_bytes"] == sum(len(b) for b in [blobs["shared"], *blobs[ALICE]])


def test_an_owner_seen_again_is_out_of_the_trash_with_everything(store):
    blobs = fill(store)
    store.leases.sweep(T0, TERMS)
    store.leases.renew(BOB, T0 + 90 * DAY)
    assert store.leases.sweep(T0 + 91 * DAY, TERMS).trashed == [ALICE]
    assert store.leases.renew(ALICE, T0 + 95 * DAY) is True
    assert store.leases.renew(ALICE, T0 + 95 * DAY) is False
    assert served(store, ALICE, [blobs["shared"], *blobs[ALICE]])
    report = store.leases.sweep(T0 + 150 * DAY, TERMS)
    assert report.purged == [] and report.trashed == []
    assert served(store, ALICE, blobs[ALICE])


def test_the_trash_is_remembered_across_a_restart(tmp_path):
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    blobs = fill(store)
    store.leases.sweep(T0, TERMS)
    store.leases.renew(BOB, T0 + 91 * DAY)
    store.leases.sweep(T0 + 91 * DAY, TERMS)
    store.close()
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    try:
        assert store.leases.is_trashed(ALICE)
        with pytest.raises(NotFound):
            store.size(key_of(blobs[ALICE][0]), ALICE)
        assert served(store, BOB, blobs[BOB])
    finally:
        store.close()


def test_a_purge_deletes_the_owners_data_and_frees_its_space(store):
    blobs = fill(store)
    store.leases.sweep(T0, TERMS)
    for day in (30, 60, 90, 97):
        store.leases.renew(BOB, T0 + day * DAY)
    store.leases.sweep(T0 + 91 * DAY, TERMS)
    used = store.stats()["bytes_stored"]
    archive = store._layout.archive_path(ALICE)
    archive_length = os.path.getsize(archive)
    report = store.leases.sweep(T0 + 98 * DAY + 1, TERMS)
    assert report.purged == [ALICE]
    assert report.freed == len(blobs[ALICE][0]) + archive_length  # the shared share stays for BOB
    stats = store.stats()
    assert stats["bytes_stored"] == used - report.freed
    assert stats["trashed_owners"] == 0 and stats["archives"] == 1
    assert store.keys(ALICE) == [] and store.leases.lease(ALICE) is None
    assert not os.path.exists(archive)
    assert not os.path.exists(store._layout.share_path(key_of(blobs[ALICE][0])))
    assert served(store, BOB, [blobs["shared"], *blobs[BOB]])
    assert not store.leases.is_trashed(ALICE)
    # ALICE may start again from nothing.
    put_tar(store, ALICE, [blobs[ALICE][1]])
    assert served(store, ALICE, [blobs[ALICE][1]])


def test_a_purge_in_small_batches_deletes_everything(store, monkeypatch):
    monkeypatch.setattr(leases_module, "PURGE_BATCH", 1)
    blobs = [data(1000 + i, 100 + i) for i in range(5)]
    for blob in blobs[:2]:
        store.put(key_of(blob), ALICE, blob)
    put_tar(store, ALICE, blobs[2:])
    store.leases.sweep(T0, TERMS)
    store.leases.sweep(T0 + 91 * DAY, TERMS)
    report = store.leases.sweep(T0 + 99 * DAY, TERMS)
    assert report.purged == [ALICE]
    stats = store.stats()
    assert stats["bytes_stored"] == 0 and stats["shares"] == stats["members"] == stats["archives"] == 0


def test_an_owner_back_in_the_middle_of_a_purge_keeps_what_is_left(store, monkeypatch):
    monkeypatch.setattr(leases_module, "PURGE_BATCH", 1)
    members = [data(3000 + i, 200 + i) for i in range(4)]
    put_tar(store, ALICE, members)
    store.leases.sweep(T0, TERMS)
    store.leases.sweep(T0 + 91 * DAY, TERMS)
    original = store._index.remove_members
    calls = []

    def remove_then_owner_returns(*args):
        original(*args)
        calls.append(1)
        if len(calls) == 2:
            store._index.renew_lease(ALICE, T0 + 99 * DAY)  # as renew() would, lock already held
            store._trashed.discard(ALICE)

    monkeypatch.setattr(store._index, "remove_members", remove_then_owner_returns)
    report = store.leases.sweep(T0 + 99 * DAY, TERMS)
    assert report.purged == []
    left = store.keys(ALICE)
    assert len(left) == 2
    assert all(read_all(store, key, ALICE) for key in left)
    assert store.stats()["garbage_bytes"] > 0  # what went is garbage, for compaction to reclaim


def test_a_crash_after_a_purge_commits_leaves_no_file_behind(tmp_path, monkeypatch):
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    put_tar(store, ALICE, [data(3000, 1)])
    store.leases.sweep(T0, TERMS)
    store.leases.sweep(T0 + 91 * DAY, TERMS)

    def die(owner):
        raise SimulatedCrash

    monkeypatch.setattr(store._files, "remove", die)
    with pytest.raises(SimulatedCrash):
        store.leases.sweep(T0 + 99 * DAY, TERMS)
    crash(store)
    archive = store._layout.archive_path(ALICE)
    assert os.path.exists(archive)
    monkeypatch.undo()
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    try:
        assert not os.path.exists(archive)
        assert store.stats()["bytes_stored"] == 0 and store.keys(ALICE) == []
    finally:
        store.close()


def test_time_the_node_did_not_run_is_not_held_against_a_lease(store):
    fill(store)
    store.leases.sweep(T0, TERMS)
    store.leases.renew(ALICE, T0 + 10 * DAY)
    store.leases.sweep(T0 + 10 * DAY, TERMS)
    # The node stops, and starts again 200 days later.
    credit = store.leases.credit_downtime(T0 + 210 * DAY, allowance=3600)
    assert credit == pytest.approx(200 * DAY - 3600)
    assert store.leases.sweep(T0 + 210 * DAY, TERMS).trashed == []
    assert store.leases.lease(ALICE)[0] == pytest.approx(T0 + 210 * DAY - 3600)
    # A restart soon after its last sweep credits nothing.
    assert store.leases.credit_downtime(T0 + 210 * DAY + 60, allowance=3600) == 0


def test_a_store_made_before_leases_gives_its_owners_a_lease_at_open(tmp_path):
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    fill(store)
    db = store._index._db
    db.execute("DROP TABLE leases")
    db.execute("DROP TABLE lease_clock")
    db.execute("UPDATE schema_version SET version = 1")
    store.close()
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    try:
        assert store.leases.lease(ALICE) == (None, None) and store.leases.lease(BOB) == (None, None)
        store.leases.sweep(T0, TERMS)
        assert store.leases.lease(ALICE) == (T0, None)
    finally:
        store.close()
