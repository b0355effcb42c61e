"""The Kademlia routing table and lookup (flud/overlay), and the overlay
simulation at a size a test can afford: every live target found, none
misdirected by a colluding hostile tenth with an eclipse attempt."""
import random

from flud.overlay.lookup import Lookup
from flud.overlay.routing import K, Contact, RoutingTable
from flud.overlay.simulation import run_simulation

R = random.Random(7)


def ids(n):
    return [R.randbytes(32) for _ in range(n)]


def distance(a: bytes, b: bytes) -> int:
    return int.from_bytes(a, "big") ^ int.from_bytes(b, "big")


def bucket_of(table, other: bytes) -> int:
    """The bucket the table files `other` in: 0 for the farthest half of
    the id space, ID_BITS - 1 for the nearest."""
    return table._index(int.from_bytes(other, "big"))


def test_buckets_are_by_shared_prefix():
    me = RoutingTable(bytes(32))
    assert bucket_of(me, b"\x80" + bytes(31)) == 0
    assert bucket_of(me, b"\x01" + bytes(31)) == 7
    assert bucket_of(me, bytes(31) + b"\x01") == 255
    table = RoutingTable(R.randbytes(32))
    for index in (0, 3, 200):
        assert bucket_of(table, table.random_id_in_bucket(index, R)) == index


def test_a_full_bucket_keeps_its_live_old_contacts():
    table = RoutingTable(bytes(32), k=2, diversity=False)
    far = [b"\x80" + bytes([i]) + bytes(30) for i in range(4)]
    assert table.offer(Contact(far[0]), 1).outcome == "added"
    assert table.offer(Contact(far[1]), 2).outcome == "added"
    full = table.offer(Contact(far[2]), 3)
    assert full.outcome == "full" and full.ping.node_id == far[0]
    table.ping_result(far[0], answered=True, now=4)
    assert {c.node_id for c in table.contacts()} == {far[0], far[1]}
    full = table.offer(Contact(far[3]), 5)
    assert full.ping.node_id == far[1]            # the least recently seen now
    table.ping_result(far[1], answered=False)
    assert {c.node_id for c in table.contacts()} == {far[0], far[3]}


def test_one_subnet_cannot_fill_a_bucket_or_the_table():
    table = RoutingTable(bytes(32))
    outcomes = [table.offer(Contact(b"\x80" + R.randbytes(31), "198.18.7"), 0).outcome
                for _ in range(5)]
    assert outcomes == ["added", "added", "refused", "refused", "refused"]
    added = sum(table.offer(Contact(bytes([1 << (i % 7)]) + R.randbytes(31), "198.18.9"),
                            0).outcome == "added" for i in range(40))
    assert added == 10
    loopback = RoutingTable(bytes(32), diversity=False)
    assert all(loopback.offer(Contact(b"\x80" + R.randbytes(31), "127.0.0"), 0).outcome == "added"
               for _ in range(5))


def test_closest_is_sorted_by_xor_distance():
    table = RoutingTable(bytes(32), diversity=False)
    for node_id in ids(200):
        table.offer(Contact(node_id), 0)
    target = R.randbytes(32)
    got = table.closest(target, K)
    everyone = sorted((c.node_id for c in table.contacts()), key=lambda n: distance(n, target))
    assert [c.node_id for c in got] == everyone[:K]


def test_a_lookup_over_perfect_tables_finds_every_target_and_stays_bounded():
    population = ids(300)
    tables = {}
    for node_id in population:
        table = RoutingTable(node_id, diversity=False)
        for other in population:
            table.offer(Contact(other), 0)
        tables[node_id] = table
    for _ in range(30):
        source, target = R.sample(population, 2)
        run = Lookup(target, tables[source].closest(target), stop_at_target=True)
        while not run.done:
            for contact in run.next_queries():
                run.answered(contact.node_id, tables[contact.node_id].closest(target))
        assert run.found is not None and len(run.asked) <= 64


def test_a_lookup_fed_ever_closer_made_up_ids_stops():
    # a hostile answerer grinds ids ever nearer the target, each a new lure
    target = bytes(32)
    run = Lookup(target, [Contact(b"\xff" + R.randbytes(31)) for _ in range(3)])
    nearer = [256]

    def lures():
        out = []
        nearer[0] = max(nearer[0] - 1, 8)
        for _ in range(K):
            out.append(Contact((R.getrandbits(nearer[0]) | 1 << (nearer[0] - 1)).to_bytes(32, "big")))
        return out
    rounds = 0
    while not run.done and rounds < 1000:
        for contact in run.next_queries():
            run.answered(contact.node_id, lures())
        rounds += 1
    assert run.done and len(run.asked) == 64


def test_failed_nodes_are_skipped():
    target = bytes(32)
    near, far = b"\x00\x01" + bytes(30), b"\x80" + bytes(31)
    run = Lookup(target, [Contact(near), Contact(far)], k=2, alpha=1)
    assert [c.node_id for c in run.next_queries()] == [near]
    run.failed(near)
    assert [c.node_id for c in run.next_queries()] == [far]
    run.answered(far, [])
    assert run.done and [c.node_id for c in run.result()] == [far]


def test_a_small_population_with_churn_and_a_hostile_tenth_misdirects_nothing():
    figures = run_simulation(nodes=200, hostile=0.1, churn_per_day=0.2, hours=1,
                             lookups_per_hour=60, seed=3)
    assert figures["lookups"] == 60
    assert figures["misdirected"] == 0 and figures["found"] == 60
    assert figures["eclipse_found"] == figures["eclipse_lookups"]
