"""The client's DHT use (flud/client/node_finder.py) over a fake network of
signed records: a node that moved is found at its new address by its id;
colluding hostile nodes answering only with their own made-up ids, even as
the nearest seeds, cannot hide it; random walks sample the answering nodes."""
import random

from twisted.internet import defer, task

from flud.client.node_finder import NodeFinder
from flud.keys import Identity
from flud.protocol.node_record import Address, sign_record

NOW = 1_800_000_000
RNG = random.Random(5)
HONEST = [Identity.generate() for _ in range(40)]
HOSTILE = [Identity.generate() for _ in range(12)]


def rec(identity, port, sequence=1):
    return sign_record(identity, sequence, NOW + 3600, [Address.tcp("127.0.0.1", port)])


class FakeDHT:
    """Each honest node answers with the 20 honest records nearest the
    target (a node's current record); hostile ones with hostile records
    only; a node is reachable only at its current port."""

    def __init__(self):
        self.current = {i.node_id: rec(i, 5000 + n) for n, i in enumerate(HONEST)}
        self.fakes = {i.node_id: rec(i, 7000 + n) for n, i in enumerate(HOSTILE)}
        self.asked = []

    def find_node(self, node_id, host, port, target):
        self.asked.append(node_id)
        number = int.from_bytes(target, "big")
        if node_id in self.fakes:
            pool = list(self.fakes.values())
        elif node_id in self.current and self.current[node_id].first_tcp()[1] == port:
            pool = list(self.current.values())
        else:
            return defer.fail(ConnectionRefusedError("nobody listens there"))
        pool.sort(key=lambda r: int.from_bytes(r.node_id, "big") ^ number)
        return defer.succeed(pool[:20])


def finder(dht):
    clock = task.Clock()
    clock.advance(NOW)
    return NodeFinder(clock, dht.find_node, rng=random.Random(2))


def run(d):
    result = []
    d.addBoth(result.append)
    assert result, "the lookup did not finish"
    return result[0]


def test_a_moved_node_is_found_by_id_at_its_new_address():
    dht = FakeDHT()
    f = finder(dht)
    f.learn(dht.current.values())                 # what the client knew
    moved = HONEST[7]
    dht.current[moved.node_id] = rec(moved, 6007, sequence=2)
    found = run(f.find(moved.node_id))
    assert found is not None and found.first_tcp() == ("127.0.0.1", 6007)


def test_hostile_seeds_nearest_the_target_cannot_hide_it():
    dht = FakeDHT()
    f = finder(dht)
    target = HONEST[3].node_id
    # the client's only seeds: the hostile ids, and a few honest ones far off
    f.learn(dht.fakes.values())
    number = int.from_bytes(target, "big")
    far = sorted(dht.current.values(), key=lambda r: -(int.from_bytes(r.node_id, "big") ^ number))
    f.learn(far[:3])
    found = run(f.find(target))
    assert found is not None and found.node_id == target


def test_random_walks_sample_the_nodes_that_answer():
    dht = FakeDHT()
    f = finder(dht)
    f.learn(list(dht.current.values())[:3])
    answered = run(f.walk(4))
    assert len(answered) >= 20
    assert answered <= {i.node_id for i in HONEST}
