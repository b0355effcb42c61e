"""The node's DHT part (flud/node/discovery.py): FIND_NODE answers bounded
and rate limited (a flood is refused RATE_LIMITED at once), only records
verified reachable enter the routing table, one subnet cannot fill it,
buckets are refreshed on the injected clock, the table survives a restart;
and the lookups' disjoint paths (flud/overlay/lookup.py)."""
import random

import pytest
from twisted.internet import defer, task

from flud.keys import Identity
from flud.node.discovery import (PER_PEER_BURST, REFRESH_INTERVAL, REFRESH_TICK, Discovery,
                                 FindNodeQuota)
from flud.overlay.lookup import DisjointLookup, Lookup
from flud.overlay.routing import Contact, subnet_of
from flud.protocol import messages, peer_file
from flud.protocol.codec import Op
from flud.protocol.errors import ErrorCode, RemoteError
from flud.protocol.node_record import Address, sign_record

NOW = 1_800_000_000
KEYS = [Identity.generate() for _ in range(30)]


def record(identity, host="127.0.0.1", port=5000, sequence=1):
    return sign_record(identity, sequence, NOW + 3600, [Address.tcp(host, port)])


class FakeConn:
    def __init__(self, peer_id, answers=None):
        self.peer_id = peer_id
        self.tls_client = False
        self.answers = answers or {}
        self.asked = []

    def request(self, op, message):
        self.asked.append((op, message))
        if op == Op.PING:
            return defer.succeed(messages.Empty())
        return defer.succeed(messages.FoundNodes(self.answers.get(op, [])))

    def close(self):
        pass


def discovery(tmp_path=None, reachable=(), answers=None):
    clock = task.Clock()
    clock.advance(NOW)
    me = KEYS[0]
    reachable = set(reachable)
    probed = []

    def probe(node_id, host, port):
        probed.append(node_id)
        if node_id in reachable:
            return defer.succeed(FakeConn(node_id))
        return defer.fail(ConnectionRefusedError("nobody there"))

    def connect(node_id, host, port):
        return defer.succeed(FakeConn(node_id, answers))

    own = record(me, port=4000)
    d = Discovery(me.node_id, lambda: own, clock, random.Random(1), probe, connect,
                  home=str(tmp_path) if tmp_path else None)
    d.probed_ids = probed
    return d, clock


def test_only_nodes_that_answer_at_their_address_enter_the_table():
    good, bad = KEYS[1], KEYS[2]
    d, _ = discovery(reachable={good.node_id})
    d.consider([record(good, port=5001), record(bad, port=5002)])
    assert {c.node_id for c in d.table.contacts()} == {good.node_id}
    assert d.counters["probes_failed"] == 1
    # a record whose signature does not check is never even probed
    forged = record(KEYS[3])
    raw = bytearray(forged.encode())
    raw[-1] ^= 1
    from flud.protocol.node_record import decode_record
    d.consider([decode_record(bytes(raw))])
    assert KEYS[3].node_id not in d.probed_ids
    assert d.checker.refused == {"RECORD_BAD_SIGNATURE": 1}


def test_a_node_found_unreachable_is_probed_again_at_a_new_address_only():
    """A home node probed while it was unreachable, that then mapped a port
    (a record at its router's address), is probed there at once; the same
    address again waits PROBE_AGAIN_AFTER (a flood costs nothing more)."""
    home = KEYS[4]
    d, _ = discovery()
    d.consider([record(home, host="198.19.1.2", port=7400, sequence=1)])
    d.consider([record(home, host="198.19.1.2", port=7400, sequence=2)])
    assert d.probed_ids == [home.node_id]                   # not again at that address
    d.probe = lambda node_id, host, port: (d.probed_ids.append(node_id), defer.succeed(
        FakeConn(node_id)))[1]
    d.consider([record(home, host="198.18.200.1", port=7400, sequence=3)])
    assert d.probed_ids == [home.node_id] * 2
    assert [c.node_id for c in d.table.contacts()] == [home.node_id]


def test_find_node_answers_at_most_k_and_a_flood_is_refused():
    d, clock = discovery(reachable={k.node_id for k in KEYS[1:]})
    d.consider([record(k, port=5000 + i) for i, k in enumerate(KEYS[1:])])
    asker = FakeConn(b"a" * 32)
    answer = d.answer(asker, messages.FindNode(KEYS[5].node_id))
    assert 0 < len(answer.records) <= messages.MAX_FOUND
    assert answer.records[0].node_id == KEYS[5].node_id      # the nearest first
    served = 1
    with pytest.raises(RemoteError) as refused:
        for _ in range(1000):
            d.answer(asker, messages.FindNode(KEYS[5].node_id))
            served += 1
    assert refused.value.code == ErrorCode.RATE_LIMITED
    assert served == PER_PEER_BURST
    # another asker is still served; the flooder is again after a while
    d.answer(FakeConn(b"b" * 32), messages.FindNode(KEYS[5].node_id))
    clock.advance(1.0)
    d.answer(asker, messages.FindNode(KEYS[5].node_id))


def test_the_quota_is_bounded_in_askers_and_in_total():
    quota = FindNodeQuota(per_peer=(10, 10), everyone=(100, 50), tracked=64)
    allowed = sum(quota.allow(i.to_bytes(4, "big"), NOW) for i in range(1000))
    assert allowed == 50                       # all askers together
    assert len(quota._askers) == 64            # memory bounded whatever the ids


def test_an_askers_own_record_is_probed_before_it_enters():
    newcomer = KEYS[7]
    d, _ = discovery(reachable=set())
    d.answer(FakeConn(newcomer.node_id), messages.FindNode(KEYS[1].node_id, record(newcomer)))
    assert newcomer.node_id in d.probed_ids and len(d.table) == 0
    # someone else's record handed over by an asker is not taken
    d.answer(FakeConn(b"x" * 32), messages.FindNode(KEYS[1].node_id, record(KEYS[8])))
    assert KEYS[8].node_id not in d.probed_ids


def test_one_global_subnet_cannot_fill_the_table():
    assert subnet_of("127.0.0.1") == "" and subnet_of("198.18.3.4") == ""
    assert subnet_of("8.8.8.8") == "8.8.8.0/24"
    assert subnet_of("2001:4860::1") == "2001:4860::/48"
    d, _ = discovery(reachable={k.node_id for k in KEYS})
    d.consider([record(k, host="8.8.8.8", port=5000 + i) for i, k in enumerate(KEYS[1:])])
    assert len(d.table) <= 10
    assert len(d.probed_ids) <= 10         # the others were not even probed


def test_buckets_are_refreshed_on_the_clock_and_the_table_is_saved(tmp_path):
    d, clock = discovery(tmp_path, reachable={k.node_id for k in KEYS})
    d.consider([record(k, port=5000 + i) for i, k in enumerate(KEYS[1:6])])
    d.start()
    before = d.counters["lookups"]
    clock.advance(REFRESH_INTERVAL + 2 * REFRESH_TICK)
    assert d.counters["lookups"] > before
    d.stop()
    saved = peer_file.load(str(tmp_path / "peers.v1"))
    assert {r.node_id for r in saved} == {k.node_id for k in KEYS[1:6]}
    again, _ = discovery(tmp_path, reachable={k.node_id for k in KEYS})
    again.start()
    assert len(again.table) == 5                # probed again, no bootstrap needed
    again.stop()


def test_a_damaged_peers_file_gives_what_parsed(tmp_path):
    path = str(tmp_path / "peers.v1")
    peer_file.save(path, [record(k) for k in KEYS[1:4]])
    with open(path, "r+b") as f:
        f.truncate(len(f.read()) - 10)     # a torn last record
    assert len(peer_file.load(path)) == 2
    (tmp_path / "other").write_bytes(b"not ours")
    assert peer_file.load(str(tmp_path / "other")) == []


def _ids(n, rng):
    return [rng.randbytes(32) for _ in range(n)]


def test_disjoint_paths_reach_a_target_hostile_nodes_steer_away():
    rng = random.Random(3)
    honest, hostile = _ids(60, rng), _ids(30, rng)
    target = honest[0]
    bad = set(hostile)

    def answer(asked, tgt):
        number = int.from_bytes(tgt, "big")
        pool = hostile if asked in bad else honest
        return [Contact(n) for n in sorted(pool, key=lambda n: int.from_bytes(n, "big") ^ number)[:20]]

    def run(lookup):
        while not lookup.done:
            batch = lookup.next_queries()
            if not batch:
                break
            for contact in batch:
                lookup.answered(contact.node_id, answer(contact.node_id, target))
        return lookup

    # seeds nearest the target are hostile: a single path follows them only
    seeds = [Contact(n) for n in hostile[:12]] + [Contact(n) for n in honest[40:44]]
    single = run(Lookup(target, seeds, stop_at_target=True))
    both = run(DisjointLookup(target, seeds, paths=3, stop_at_target=True))
    assert both.found is not None
    assert len(set().union(*(p.asked for p in both.paths))) == sum(len(p.asked) for p in both.paths)
    assert single.found is None or both.hops <= single.hops


def test_a_contact_that_cannot_be_dialled_in_a_lookup_leaves_the_table():
    from flud.protocol.errors import ConnectFailed
    d, _ = discovery(reachable={k.node_id for k in KEYS[1:4]})
    d.consider([record(k, port=5000 + i) for i, k in enumerate(KEYS[1:4])])
    assert len(d.table) == 3
    gone = KEYS[2].node_id
    d.connect = lambda node_id, host, port: (
        defer.fail(ConnectFailed("refused")) if node_id == gone
        else defer.succeed(FakeConn(node_id)))
    d.lookup(KEYS[9].node_id)
    assert d.table.get(gone) is None and len(d.table) == 2


def test_a_node_known_only_through_a_relay_is_not_a_table_candidate():
    """Gossip hands the DHT every record it takes, relay-only ones too (a
    node behind NAT): those cannot enter a table of directly reachable
    nodes and are passed over. (They raised TypeError inside PEERS, which
    then answered INTERNAL: gossip with any node holding such a record
    failed, and a 54-node lab took 30 s to converge instead of 6.)"""
    d, _ = discovery(reachable={KEYS[4].node_id})
    natted = sign_record(KEYS[5], 1, NOW + 3600, [Address("relay", relay_id=KEYS[4].node_id)])
    assert d.consider([natted, record(KEYS[4], port=5004)], checked=True) == 1
    assert KEYS[5].node_id not in d.probed_ids
