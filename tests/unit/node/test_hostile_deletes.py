"""Wrong and hostile DELETEs over the wire against a disk store: a share
owned by someone else, a member of another owner's archive, a key nobody
stored, a key deleted twice. Each is NOT_FOUND (one code for all: a
non-owner must not learn that a key exists) and changes nothing: the index's
counts, the bytes in the files, and the owner's RETRIEVE and VERIFY."""
import hashlib
import os
import random

import blake3
import pytest

from flud.protocol.errors import ErrorCode
from flud.protocol.messages import KIND_ARCHIVE
from flud.storage.disk import ShareStore
from tests.unit.node.test_request_handler import Node, error_code, ok
from tests.unit.storage.helpers import key_of, make_tar


@pytest.fixture
def store(tmp_path):
    s = ShareStore(tmp_path / "store", 64 * 1024 * 1024, fsync=False)
    yield s
    s.close()


def disk_state(store) -> dict:
    """Every file of the store by its digest (the index excepted), and its counts."""
    files = {}
    for directory in (store._layout.shares, store._layout.archives):
        for parent, _, names in os.walk(directory):
            for name in names:
                with open(os.path.join(parent, name), "rb") as f:
                    files[os.path.join(parent, name)] = hashlib.sha256(f.read()).hexdigest()
    return {"files": files, "stats": store.stats()}


def test_wrong_deletes_are_not_found_and_change_nothing(tmp_path, store):
    node = Node(tmp_path, store)
    alice, bob = node.connect(), node.connect()
    rng = random.Random(5)
    share = rng.randbytes(200_000)
    members = [rng.randbytes(n) for n in (3000, 70_000, 500)]
    ok(alice, alice.peer.store(key_of(share), share))
    tar = make_tar(members)
    ok(alice, alice.peer.store(key_of(tar), tar, kind=KIND_ARCHIVE))
    bobs = rng.randbytes(1000)
    ok(bob, bob.peer.store(key_of(bobs), bobs))
    before = disk_state(store)

    for target in [share, *members]:  # alice's, not bob's
        assert error_code(bob, bob.peer.delete(key_of(target))) == ErrorCode.NOT_FOUND
    for pair in (alice, bob):  # nobody's
        assert error_code(pair, pair.peer.delete(key_of(b"never stored"))) == ErrorCode.NOT_FOUND
    assert error_code(alice, alice.peer.delete(key_of(bobs))) == ErrorCode.NOT_FOUND  # bob's

    assert disk_state(store) == before
    for data in [share, *members]:
        assert ok(alice, alice.peer.retrieve(key_of(data))) == data
        assert ok(alice, alice.peer.verify(key_of(data), b"nonce", 0, len(data))) == \
            blake3.blake3(b"nonce" + data).digest()
    assert ok(bob, bob.peer.retrieve(key_of(bobs))) == bobs


def test_a_member_deleted_twice_is_garbage_once(tmp_path, store):
    node = Node(tmp_path, store)
    alice = node.connect()
    members = [random.Random(i).randbytes(2000) for i in range(3)]
    tar = make_tar(members)
    ok(alice, alice.peer.store(key_of(tar), tar, kind=KIND_ARCHIVE))
    ok(alice, alice.peer.delete(key_of(members[0])))
    after_one = disk_state(store)
    assert error_code(alice, alice.peer.delete(key_of(members[0]))) == ErrorCode.NOT_FOUND
    assert disk_state(store) == after_one
    for data in members[1:]:
        assert ok(alice, alice.peer.retrieve(key_of(data))) == data


def test_a_delete_of_the_same_bytes_by_another_owner_leaves_the_first(tmp_path, store):
    """bob holds the very bytes of alice's archive member as his own share:
    his DELETE drops his holding and nothing of alice's."""
    node = Node(tmp_path, store)
    alice, bob = node.connect(), node.connect()
    members = [random.Random(10 + i).randbytes(4000) for i in range(2)]
    tar = make_tar(members)
    ok(alice, alice.peer.store(key_of(tar), tar, kind=KIND_ARCHIVE))
    ok(bob, bob.peer.store(key_of(members[0]), members[0]))
    archive = store._layout.archive_path(alice.identity.node_id)
    with open(archive, "rb") as f:
        archive_bytes = f.read()
    ok(bob, bob.peer.delete(key_of(members[0])))
    assert error_code(bob, bob.peer.retrieve(key_of(members[0]))) == ErrorCode.NOT_FOUND
    assert ok(alice, alice.peer.retrieve(key_of(members[0]))) == members[0]
    assert store.stats()["garbage_bytes"] == 0
    with open(archive, "rb") as f:
        assert f.read() == archive_bytes
