"""The node compacts an owner's archive once its burst of DELETEs is over
(flud/node/compaction.py), on a task.Clock: no sockets, no sleeps."""
import random

import pytest
from twisted.internet import defer, task

from flud.node.compaction import MAX_WAIT, QUIET, CompactionScheduler
from flud.protocol.messages import KIND_ARCHIVE
from flud.storage.limits import COMPACT_MIN_BYTES
from flud.storage.memory import MemoryShareStore
from flud.storage.tarscan import member_span
from tests.unit.node.test_request_handler import Node, ok
from tests.unit.storage.helpers import ALICE, BOB, key_of, make_tar, put_tar, read_all

MEMBER = COMPACT_MIN_BYTES // 8


def run_inline(fn, *args):
    return defer.maybeDeferred(fn, *args)


@pytest.fixture
def store():
    return MemoryShareStore(256 * COMPACT_MIN_BYTES)


def members(n, seed):
    rng = random.Random(seed)
    return [rng.randbytes(MEMBER) for _ in range(n)]


def test_a_burst_of_deletes_is_compacted_once_when_it_is_over(store, monkeypatch):
    datas = members(20, 1)
    put_tar(store, ALICE, datas)
    clock = task.Clock()
    scheduler = CompactionScheduler(store, clock, run_inline)
    compactions = []
    compact = store.compact
    monkeypatch.setattr(store, "compact", lambda owner: compactions.append(owner) or compact(owner))
    for data in datas[:15]:  # 75%: past the threshold three times over
        store.delete(key_of(data), ALICE, compact=False)
        scheduler.deleted(ALICE)
        clock.advance(QUIET / 2)
    assert compactions == [] and store.stats()["garbage_bytes"] == 15 * member_span(MEMBER)
    clock.advance(QUIET)
    assert compactions == [ALICE] and store.stats()["garbage_bytes"] == 0
    assert scheduler.stats()["reclaimed_bytes"] == 15 * member_span(MEMBER)
    assert all(read_all(store, key_of(d), ALICE) == d for d in datas[15:])
    assert not clock.getDelayedCalls()


def test_deletes_that_never_stop_are_compacted_every_max_wait(store):
    datas = members(int(MAX_WAIT / (QUIET / 2)) + 20, 2)
    put_tar(store, ALICE, datas)
    clock = task.Clock()
    scheduler = CompactionScheduler(store, clock, run_inline)
    for i, data in enumerate(datas):
        store.delete(key_of(data), ALICE, compact=False)
        scheduler.deleted(ALICE)
        clock.advance(QUIET / 2)
        if scheduler.counters["compactions"]:
            break
    assert scheduler.counters["compactions"] == 1
    assert clock.seconds() == pytest.approx(MAX_WAIT, abs=QUIET)


def test_deletes_below_the_threshold_compact_nothing(store):
    datas = members(20, 3)
    put_tar(store, ALICE, datas)
    clock = task.Clock()
    scheduler = CompactionScheduler(store, clock, run_inline)
    store.delete(key_of(datas[0]), ALICE, compact=False)
    scheduler.deleted(ALICE)
    clock.advance(QUIET)
    assert scheduler.counters["compactions"] == 0 and store.stats()["garbage_bytes"] > 0


def test_start_compacts_what_is_already_due(store):
    for owner, seed in ((ALICE, 4), (BOB, 5)):
        datas = members(10, seed)
        put_tar(store, owner, datas)
        for data in datas[:5 if owner == ALICE else 1]:
            store.delete(key_of(data), owner, compact=False)
    scheduler = CompactionScheduler(store, task.Clock(), run_inline)
    scheduler.start()
    assert scheduler.counters["compactions"] == 1  # ALICE's; BOB's 10% stays
    assert store.compactions_due() == []


def test_a_delete_over_the_wire_leaves_compaction_to_the_scheduler(tmp_path, store):
    node = Node(tmp_path, store)
    scheduler = CompactionScheduler(store, node.clock, run_inline)
    node.handler.on_delete = scheduler.deleted
    alice = node.connect()
    datas = members(10, 6)
    tar = make_tar(datas)
    ok(alice, alice.peer.store(key_of(tar), tar, kind=KIND_ARCHIVE))
    for data in datas[:5]:
        ok(alice, alice.peer.delete(key_of(data)))
    assert store.stats()["garbage_bytes"] == 5 * member_span(MEMBER)  # not compacted inline
    node.clock.advance(QUIET)
    assert store.stats()["garbage_bytes"] == 0
    for data in datas[5:]:
        assert ok(alice, alice.peer.retrieve(key_of(data))) == data
