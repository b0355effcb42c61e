"""A client learns the nodes from signed records, asked of several
bootstrap nodes: one hostile bootstrap can add ids it made up (they are
cheap) but cannot hide the honest nodes, nor put in a record it cannot sign."""
from types import SimpleNamespace

from twisted.internet import defer

from flud.client.home import create_home
from flud.client.network import BOOTSTRAP_FANOUT, Network
from flud.keys import Identity
from flud.protocol import messages
from flud.protocol.node_record import Address, decode_record, sign_record
from tests.unit.client.fakes import FakeReactor

NOW = 1_800_000_000
HONEST = [Identity.generate() for _ in range(6)]
FAKES = [Identity.generate() for _ in range(3)]


def entry(identity, port, sequence=1, alive=True):
    rec = sign_record(identity, sequence, NOW + 3600, [Address.tcp("127.0.0.1", port)])
    return messages.PeerEntry(rec, alive)


class FakeBootstrap:
    def __init__(self, identity, entries, up=True):
        self.node_id = identity.node_id
        self.entries = entries
        self.up = up

    def peers(self, known=()):
        return defer.succeed(list(self.entries))


def network_over(tmp_path, bootstraps):
    reactor = FakeReactor()
    reactor.advance(NOW)
    home = create_home(str(tmp_path / "home"), join=("127.0.0.1", 1))
    by_port = {port: node for port, node in bootstraps}
    network = Network(reactor, home.path, [("127.0.0.1", port) for port, _ in bootstraps])

    def peer(address):
        node = by_port[address.port]
        if not node.up:
            return defer.fail(ConnectionRefusedError("down"))
        return defer.succeed(node)
    network.net = SimpleNamespace(peer=peer, close=lambda: None,
                                  client_id=b"c" * 32, pool=network.net.pool)
    return network


def discovered(network):
    result = []
    network.discover().addBoth(result.append)
    assert result and not isinstance(result[0], Exception), result
    return set(network.nodes)


def test_a_hostile_bootstrap_cannot_hide_the_honest_nodes(tmp_path):
    honest_view = [entry(i, 5000 + n) for n, i in enumerate(HONEST)]
    forged = entry(HONEST[5], 6666, sequence=99)        # re-signed by the wrong key:
    forged = messages.PeerEntry(decode_record(
        forged.record.encode()[:-2] + bytes([forged.record.encode()[-2] ^ 1])
        + forged.record.encode()[-1:]), True)
    hostile = FakeBootstrap(FAKES[0], [entry(f, 7000 + n) for n, f in enumerate(FAKES)] + [forged])
    honest = FakeBootstrap(HONEST[0], honest_view)
    network = network_over(tmp_path, [(4000, hostile), (4001, honest)])
    nodes = discovered(network)
    assert {i.node_id for i in HONEST} <= nodes
    assert network.nodes[HONEST[5].node_id].port == 5005     # the forged move is dropped
    assert network.records_refused == 1


def test_the_highest_sequence_wins_across_bootstraps(tmp_path):
    old = FakeBootstrap(HONEST[0], [entry(HONEST[1], 5001, sequence=1)])
    new = FakeBootstrap(HONEST[2], [entry(HONEST[1], 5999, sequence=2)])
    network = network_over(tmp_path, [(4000, old), (4001, new)])
    discovered(network)
    assert network.nodes[HONEST[1].node_id].port == 5999


def test_bootstraps_are_asked_a_few_at_a_time_until_enough_answer(tmp_path):
    asked = []
    nodes = []
    for n in range(10):
        node = FakeBootstrap(HONEST[n % 6], [entry(HONEST[n % 6], 5000 + n)], up=n >= 2)
        nodes.append((4000 + n, node))
    network = network_over(tmp_path, nodes)
    real_peer = network.net.peer
    network.net.peer = lambda address: asked.append(address.port) or real_peer(address)
    discovered(network)
    # two down in the first window: a second window, and no more once enough answered
    # (the random walks that follow dial the records' addresses, 5000 up)
    assert [port for port in asked if port < 5000] == [4000 + n for n in range(2 * BOOTSTRAP_FANOUT)]


class FakeNodeAt(FakeBootstrap):
    """A node answering FIND_NODE from a shared list of current records."""

    def __init__(self, identity, entries, current):
        super().__init__(identity, entries)
        self.current = current

    def find_node(self, target, own_record=None):
        return defer.succeed(list(self.current.values()))


def test_a_holder_refusing_at_its_old_address_is_looked_up_and_dialled_where_it_moved(tmp_path):
    from flud.protocol.errors import ConnectFailed
    current = {i.node_id: entry(i, 5000 + n).record for n, i in enumerate(HONEST)}
    nodes = {5000 + n: FakeNodeAt(i, [], current) for n, i in enumerate(HONEST)}
    boot = FakeNodeAt(HONEST[0], [entry(i, 5000 + n) for n, i in enumerate(HONEST)], current)
    network = network_over(tmp_path, [(4000, boot)])
    discovered(network)
    moved = HONEST[4]
    del nodes[5004]                                      # nobody at the old port now
    current[moved.node_id] = entry(moved, 5999, sequence=2).record
    nodes[5999] = FakeNodeAt(moved, [], current)

    def peer(address):
        node = nodes.get(address.port) or (boot if address.port == 4000 else None)
        if node is None:
            return defer.fail(ConnectFailed(f"refused at {address.port}"))
        return defer.succeed(node)
    network.net.peer = peer
    got = []
    network.peer(moved.node_id).addBoth(got.append)
    assert got and got[0] is nodes[5999], got
    assert network.nodes[moved.node_id].port == 5999
    assert network.relocated[moved.node_id] == (("127.0.0.1", 5004), ("127.0.0.1", 5999))


def test_a_stalled_bootstrap_holds_the_start_for_the_stall_deadline_and_fails_for_the_run(
        tmp_path):
    """A stopped bootstrap node accepts TCP from its kernel's backlog and
    never completes TLS. Its window waited CONNECT_TIMEOUT (10 s) for it, and
    the random walks dialled it again (test_faults' stalled-before restore:
    14 s when the stopped holder was node 1 or 2 of the testnet)."""
    from flud.client.network import CONNECT_TIMEOUT, WALK_SECONDS
    current = {i.node_id: entry(i, 4000 + n).record for n, i in enumerate(HONEST)}
    view = [entry(i, 4000 + n) for n, i in enumerate(HONEST)]
    nodes = {4000 + n: FakeNodeAt(i, view, current) for n, i in enumerate(HONEST)}
    network = network_over(tmp_path, [(4000 + n, nodes[4000 + n]) for n in range(3)])
    stopped = HONEST[1]
    dials = []

    def peer(address):
        dials.append(address.port)
        if address.port == 4001:
            return defer.Deferred()                      # TCP accepted, TLS never
        return defer.succeed(nodes[address.port])
    network.net.peer = peer
    reactor = network.reactor
    started = reactor.seconds()
    done = []
    network.discover().addBoth(done.append)
    while not done and reactor.seconds() - started < 60:
        reactor.advance(0.1)
    assert done and not isinstance(done[0], Exception), done
    assert reactor.seconds() - started <= network.watch.deadline() + WALK_SECONDS + 0.5
    assert reactor.seconds() - started < CONNECT_TIMEOUT
    assert stopped.node_id in network.failed
    assert dials.count(4001) == 1                        # the walks do not wait on it again
    assert {i.node_id for i in HONEST} - {stopped.node_id} <= set(network.alive_ids())
