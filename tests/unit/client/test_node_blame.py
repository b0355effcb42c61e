"""A node is failed for what it did, not for what the client cancelled
(issue 16, item 2): one bad stream of an extent must not take its healthy
siblings down with it."""
from types import SimpleNamespace

from twisted.internet import defer, task
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from flud.client.repository.extents import ExtentFailed, ExtentUpload
from flud.client.node_health import NodeHealth
from flud.client.home import create_home
from flud.protocol.client import NodeAddress
from flud.client.network import Network
from flud.protocol.errors import ConnectFailed, ConnectionLost, ErrorCode, RemoteError
from tests.unit.client.fakes import FakeNetwork
from tests.unit.protocol.helpers import Outcome


class _HeldStream:
    """A streamed STORE whose feeds wait until the test settles them; a
    cancel fails what waits the way the wire does (FedSource.close)."""

    def __init__(self, cancel_error):
        self.waiting = []
        self.cancel_error = cancel_error
        self.cancelled = False

    def feed(self, data):
        d = defer.Deferred()
        self.waiting.append(d)
        return d

    def finish(self, key):
        return self.feed(key)

    def cancel(self):
        self.cancelled = True
        waiting, self.waiting = self.waiting, []
        for d in waiting:
            d.errback(self.cancel_error)


def _upload(network, nodes, cancel_error):
    streams = {node: _HeldStream(cancel_error) for node in nodes}
    network.open_store = lambda node, size: defer.succeed(streams[node])
    upload = ExtentUpload(network, nodes, 100, network.clock)
    Outcome(upload.open()).result()
    return upload, [streams[n] for n in nodes]


def test_a_failed_stream_blames_its_node_and_no_other(monkeypatch):
    clock = task.Clock()
    network = FakeNetwork(clock, nodes=4)
    nodes = sorted(network.nodes)
    # the wire used to fail a cancelled stream's waiting feeds with ConnectionLost
    for cancel_error in (ConnectionLost("the request ended"),
                         RemoteError(ErrorCode.CANCELLED, "cancelled")):
        network.failed.clear()
        upload, streams = _upload(network, nodes, cancel_error)
        shares = [b"x"] * 4
        primaries = Outcome(upload.feed(shares, [0, 1]))
        parity = Outcome(upload.feed(shares, [2, 3]))  # a second wait on the same extent
        streams[0].waiting.pop().errback(ConnectionLost("node 0 went away"))
        assert primaries.failure(ExtentFailed)
        assert parity.failure(ExtentFailed)  # cancelled with its extent
        assert all(s.cancelled for s in streams)
        assert network.failed == {nodes[0]}


def test_one_hash_mismatch_does_not_fail_a_node_and_a_second_does():
    health = NodeHealth()
    node = b"n" * 32
    mismatch = RemoteError(ErrorCode.HASH_MISMATCH, "uploaded data does not match its key")
    assert not health.blame(node, mismatch)
    assert node not in health.failed
    assert health.blame(node, mismatch)
    assert node in health.failed


def test_the_nodes_a_run_failed_are_in_its_summary():
    """--json says which nodes a run stopped using and how many uploads were
    refused as not matching their key (the benchmarks read it, not the log)."""
    health = NodeHealth()
    mismatch = RemoteError(ErrorCode.HASH_MISMATCH, "uploaded data does not match its key")
    health.blame(b"a" * 32, mismatch)
    health.blame(b"b" * 32, mismatch)
    health.blame(b"b" * 32, mismatch)
    health.mark_failed(b"c" * 32, "did not answer")
    assert health.summary() == {"failed_nodes": [(b"b" * 32).hex(), (b"c" * 32).hex()],
                                "hash_mismatches": 3}


def test_a_cancel_is_never_held_against_a_node():
    health = NodeHealth()
    node = b"n" * 32
    for _ in range(3):
        assert not health.blame(node, RemoteError(ErrorCode.CANCELLED, "cancelled"))
    assert health.failed == set()
    assert health.blame(node, ConnectionLost("connection lost"))
    assert health.failed == {node}


def test_a_dial_that_never_connects_fails_its_node_as_a_lost_connection_does(tmp_path):
    """A refused dial is a ConnectFailed, not a ConnectionLost, and fails its
    node for the rest of the run all the same."""
    home = create_home(str(tmp_path / "home"), join=("127.0.0.1", 1))
    reactor = MemoryReactorClock()
    network = Network(reactor, home.path, [])
    node = b"n" * 32
    network.nodes[node] = NodeAddress(node, "127.0.0.1", 9)
    peer = Outcome(network.peer(node))
    host, port, factory, *_ = reactor.tcpClients[-1]
    factory.clientConnectionFailed(SimpleNamespace(host=host, port=port),
                                   Failure(ConnectionRefusedError()))
    error = peer.failure(ConnectFailed)
    assert not isinstance(error, ConnectionLost)
    assert str(error).startswith("cannot connect to 127.0.0.1:9: ")
    assert network.failed == {node}
    assert NodeHealth().blame(node, error)
    network.close()
