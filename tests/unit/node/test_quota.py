"""The node's give-to-get glue (flud/node/quota.py) on a task.Clock, with
in-memory stores for this node and for an owner's linked node: STOREs
admitted or refused with QUOTA, links learned or refused with BAD_LINK,
claims placed, spot checked, counted, and dropped when their holder loses
them. Never a peer's word: only this node's own checks raise credit."""
import os
import random
import types

import pytest
from twisted.internet import defer, task

from flud.keys import Identity
from flud.node import quota as quota_module
from flud.node.ledger_store import LEDGER_FILENAME, SCHEMA_VERSION, LedgerStore
from flud.node.quota import QuotaKeeper, own_links_dir
from flud.protocol import messages
from flud.protocol.errors import ErrorCode, RemoteError
from flud.storage.memory import MemoryShareStore
from flud.trust.ledger import QuotaTerms
from flud.trust.link import sign_link

KIB = 1024
GRANT = 256 * KIB


class FakeConn:
    def __init__(self, peer_id, role=messages.ROLE_CLIENT):
        self.peer_id = peer_id
        self.peer_hello = types.SimpleNamespace(role=role)


class FakePeer:
    """PeerClient's store/verify against the holder's in-memory store."""
    stores = {}

    def __init__(self, conn):
        self.holder, self.asker = conn.peer_id, conn.asker

    def store(self, key, data):
        self.stores[self.holder].put(key, self.asker, bytes(data))
        return defer.succeed(None)

    def verify(self, key, nonce, offset, length):
        return defer.maybeDeferred(self.stores[self.holder].verify, key, self.asker, nonce,
                                   offset, length)

    def delete(self, key):
        return defer.maybeDeferred(self.stores[self.holder].delete, key, self.asker)


class FakePool:
    def __init__(self, asker):
        self.asker = asker

    def get(self, node_id, host, port):
        conn = FakeConn(node_id, messages.ROLE_NODE)
        conn.asker = self.asker
        return defer.succeed(conn)


def keeper(tmp_path, terms, store=None, clock=None, identity=None):
    identity = identity or Identity.generate()
    clock = clock or task.Clock()
    k = QuotaKeeper(terms, str(tmp_path), store or MemoryShareStore(1 << 30), identity, clock,
                    lambda f, *a: defer.maybeDeferred(f, *a), interval=1.0,
                    rng=random.Random(1), durable=False)
    k.membership = types.SimpleNamespace(peers={}, alive=lambda: [])
    k.pool = FakePool(identity.node_id)
    return k


def put(store, owner, size, seed=0):
    import blake3
    data = random.Random(seed).randbytes(size)
    store.put(blake3.blake3(data).digest(), owner, data)


def test_unlimited_admits_everything(tmp_path):
    k = keeper(tmp_path, QuotaTerms(grant=None))
    k.admit(FakeConn(b"\x01" * 32), 10 ** 12)


def test_a_store_past_the_grant_is_refused_with_the_numbers(tmp_path):
    store = MemoryShareStore(1 << 30)
    owner = b"\x01" * 32
    put(store, owner, 200 * KIB)
    k = keeper(tmp_path, QuotaTerms(grant=GRANT), store)
    k.admit(FakeConn(owner), 56 * KIB)              # exactly the grant ...
    k.admit(FakeConn(owner), 56 * KIB)              # ... until an upload opens with it
    k.admitted(owner, 56 * KIB)
    with pytest.raises(RemoteError) as err:
        k.admit(FakeConn(owner), 1)                  # uploads in flight count at once
    assert err.value.code == ErrorCode.QUOTA
    assert f"grant {GRANT}" in err.value.message and "given 0" in err.value.message
    assert k.stats()["refused"] == 1


def test_an_explicit_quota_overrides(tmp_path):
    friend = b"\x02" * 32
    k = keeper(tmp_path, QuotaTerms(grant=GRANT, owner_quotas={friend: 10 << 20}))
    k.admit(FakeConn(friend), 9 << 20)
    k.admitted(friend, 9 << 20)
    with pytest.raises(RemoteError):
        k.admit(FakeConn(friend), 2 << 20)


def test_a_node_known_to_membership_may_store_claims_within_its_allowance(tmp_path):
    node = b"\x03" * 32
    k = keeper(tmp_path, QuotaTerms(grant=GRANT, claim_allowance=1 << 20))
    with pytest.raises(RemoteError):                 # a stranger saying it is a node
        k.admit(FakeConn(node, messages.ROLE_NODE), GRANT + 1)
    k.membership.peers[node] = object()
    k.admit(FakeConn(node, messages.ROLE_NODE), 1 << 20)
    k.admitted(node, 1 << 20)
    with pytest.raises(RemoteError):
        k.admit(FakeConn(node, messages.ROLE_NODE), 1)


def test_links_forged_or_half_signed_are_refused_with_bad_link(tmp_path):
    k = keeper(tmp_path, QuotaTerms(grant=GRANT))
    owner, node = Identity.generate(), Identity.generate()
    raw = sign_link(owner, node, 7).encode()
    assert k.learn_link(raw) and not k.learn_link(raw)
    for bad in (raw[:-3] + b"\0\0\0", raw[:-65] + b"\0"):
        with pytest.raises(RemoteError) as err:
            k.learn_link(bad)
        assert err.value.code == ErrorCode.BAD_LINK
    assert k.db.linked_nodes(owner.node_id) == [node.node_id]
    assert k.stats()["links_refused"] == 2


def test_own_links_are_read_from_the_home_and_others_skipped(tmp_path):
    me = Identity.generate()
    k = keeper(tmp_path, QuotaTerms(grant=GRANT), identity=me)
    os.makedirs(own_links_dir(str(tmp_path)))
    for name, node in (("mine", me), ("theirs", Identity.generate())):
        with open(os.path.join(own_links_dir(str(tmp_path)), name + ".link"), "wb") as f:
            f.write(sign_link(Identity.generate(), node, 1).encode())
    assert k.load_own_links() == 1
    k.admit(FakeConn(mine_owner(tmp_path)), 10 ** 12)     # its own operator is never refused


def mine_owner(tmp_path):
    from flud.trust.link import read_link
    directory = own_links_dir(str(tmp_path))
    with open(os.path.join(directory, "mine.link"), "rb") as f:
        return read_link(f.read()).owner_id


def linked_world(tmp_path, holder_store):
    """This node holds 300 KiB for an owner whose linked node is `holder`."""
    store = MemoryShareStore(1 << 30)
    owner, holder = Identity.generate(), Identity.generate()
    put(store, owner.node_id, 300 * KIB)
    k = keeper(tmp_path, QuotaTerms(grant=GRANT), store)
    k.membership.peers[holder.node_id] = types.SimpleNamespace(host="h", port=1)
    k.learn_link(sign_link(owner, holder, 1).encode())
    FakePeer.stores = {holder.node_id: holder_store}
    return k, owner.node_id, holder.node_id


def test_claims_placed_and_checked_raise_credit(tmp_path, monkeypatch):
    monkeypatch.setattr(quota_module, "PeerClient", FakePeer)
    holder_store = MemoryShareStore(1 << 30)
    k, owner, holder = linked_world(tmp_path, holder_store)
    with pytest.raises(RemoteError):
        k.admit(FakeConn(owner), 300 * KIB)
    k.tick()                                          # one claim placed and checked
    given = k.stats()["given"][owner.hex()]
    assert given >= 300 * KIB and holder_store.owner_bytes(k.node_id) == given
    k._held.clear()
    k.admit(FakeConn(owner), 300 * KIB)               # credit now covers it


def test_a_lost_claim_stops_counting_and_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(quota_module, "PeerClient", FakePeer)
    holder_store = MemoryShareStore(1 << 30)
    k, owner, holder = linked_world(tmp_path, holder_store)
    k.tick()
    assert k.stats()["given"][owner.hex()] > 0
    for key in holder_store.keys(k.node_id):          # the holder throws the claim away
        holder_store.delete(key, k.node_id)
    clock = k.clock
    for round_ in range(quota_module.MAX_FAILURES):
        clock.advance(quota_module.CHECK_PERIODS + 1)
        k.check_claims()
        assert k.stats()["given"].get(owner.hex(), 0) == 0
    assert k.stats()["claims_dropped"] == 1 and k.stats()["claims"] == 0


def test_a_holder_that_answers_from_other_bytes_earns_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(quota_module, "PeerClient", FakePeer)

    class Liar(FakePeer):
        def verify(self, key, nonce, offset, length):   # says "I have it" with made-up bytes
            import blake3
            return defer.succeed(blake3.blake3(nonce + bytes(length)).digest())

    monkeypatch.setattr(quota_module, "PeerClient", Liar)
    k, owner, holder = linked_world(tmp_path, MemoryShareStore(1 << 30))
    k.tick()
    assert k.stats()["given"].get(owner.hex(), 0) == 0 and k.stats()["checks_failed"] == 1


def test_the_ledger_survives_a_reopen_and_refuses_a_newer_schema(tmp_path):
    path = os.path.join(tmp_path, LEDGER_FILENAME)
    db = LedgerStore(path, durable=False)
    db.add_link(b"o" * 32, b"n" * 32, b"raw", 1.0)
    db.close()
    db = LedgerStore(path, durable=False)
    assert db.version() == SCHEMA_VERSION and db.linked_nodes(b"o" * 32) == [b"n" * 32]
    db._db.execute("UPDATE schema_version SET version = 99")
    db.close()
    with pytest.raises(RuntimeError, match="newer"):
        LedgerStore(path, durable=False)


def test_a_holder_that_refuses_a_claim_is_not_offered_another_for_a_while(tmp_path, monkeypatch):
    class Full(FakePeer):
        tried = 0

        def store(self, key, data):
            Full.tried += 1
            return defer.fail(RemoteError(ErrorCode.NO_SPACE, "full"))

    monkeypatch.setattr(quota_module, "PeerClient", Full)
    k, owner, holder = linked_world(tmp_path, MemoryShareStore(1 << 30))
    for _ in range(3):
        k.tick()
        k.clock.advance(1)
    assert Full.tried == 1 and k.stats()["claims_failed_to_place"] == 1
    k.clock.advance(quota_module.CHECK_PERIODS)
    k.tick()
    assert Full.tried == 2 and k.stats()["given"] == {}


def test_claims_nobody_needs_are_released_on_the_holder(tmp_path, monkeypatch):
    monkeypatch.setattr(quota_module, "PeerClient", FakePeer)
    holder_store = MemoryShareStore(1 << 30)
    k, owner, holder = linked_world(tmp_path, holder_store)
    for _ in range(12):                               # the owner grows to ~20 MiB held here
        put(k.store, owner, 2 << 20, seed=len(k.store.keys(owner)) + 1)
        k._held.clear()
        k.tick()
    assert holder_store.owner_bytes(k.node_id) > 16 << 20
    for key in k.store.keys(owner):                   # ... then deletes everything
        k.store.delete(key, owner)
    k._held.clear()
    for _ in range(16):                               # one released a round
        k.tick()
    assert k.stats()["claims_released"] >= 2
    assert holder_store.owner_bytes(k.node_id) == k.stats()["claim_bytes"] == 0
