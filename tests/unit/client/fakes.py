"""An in-memory network of storage nodes for client pipeline tests.

Each node is a MemoryShareStore; every call answers after a delay on an
injected task.Clock, so many transfers overlap without sockets or sleeps.
"""
import blake3
from twisted.internet import task
from twisted.python.failure import Failure
from zope.interface import implementer

from flud.protocol.errors import ErrorCode, RemoteError
from flud.protocol.messages import TO_END
from flud.client.node_health import NodeHealth
from flud.client.node_requests import NodeRequests
from flud.client.interfaces import INetwork
from flud.client.placement import rank
from flud.storage.errors import StorageError
from flud.storage.memory import MemoryShareStore

KIND_NAMES = {0: "share", 1: "archive"}


class FakeReactor(task.Clock):
    def callFromThread(self, fn, *args, **kwargs):
        fn(*args, **kwargs)


class FakeNode:
    def __init__(self, node_id: bytes, capacity: int = 1 << 34):
        self.node_id = node_id
        self.store = MemoryShareStore(capacity)
        self.roots = {}
        self.up = True
        self.corrupt = set()   # keys whose bytes this node flips on read
        self.lease_seconds = 365 * 86400.0
        self.quota = None      # bytes an owner may hold here (QUOTA past it), None: no limit

    def store_(self, owner, key, data, kind=0):
        if self.quota is not None and self.store.owner_bytes(owner) + len(data) > self.quota:
            raise RemoteError(ErrorCode.QUOTA, f"this node holds {self.store.owner_bytes(owner)} "
                                               f"bytes for you; credit {self.quota}")
        self.store.put(key, owner, bytes(data), KIND_NAMES[kind])

    def retrieve(self, owner, key, offset=0, length=TO_END, into=None):
        with self.store.open_reader(key, owner, offset, None if length == TO_END else length) as r:
            data = r.read(r.remaining)
        if key in self.corrupt and data:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        if into is not None and len(data) <= len(into):  # as the wire lands it
            into[:len(data)] = data
            return into[:len(data)]
        return data

    def verify(self, owner, key, nonce, offset, length):
        digest = self.store.verify(key, owner, nonce, offset, length)
        return bytes(32) if key in self.corrupt else digest

    def delete(self, owner, key):
        self.store.delete(key, owner)

    def root_put(self, owner, record):
        self.roots[owner] = record

    def root_get(self, owner):
        if owner not in self.roots:
            raise RemoteError(ErrorCode.NOT_FOUND, "no root record")
        return self.roots[owner]

    def stats(self, owner):
        """The part of a node's STATS the client reads (its lease renewal)."""
        return {"leases": {"lease_seconds": self.lease_seconds}}


@implementer(INetwork)
class FakeNetwork(NodeRequests):
    """An INetwork over FakeNodes (no TLS: count_sends counts nothing)."""

    def __init__(self, clock, nodes: int, client_id: bytes = b"c" * 32, delay: float = 0.01):
        self.clock = clock
        self.client_id = client_id
        self.delay = delay
        self.nodes = {bytes([i]) * 32: FakeNode(bytes([i]) * 32) for i in range(1, nodes + 1)}
        self.health = NodeHealth()
        self.failed = self.health.failed
        self.calls = {}

    def alive_ids(self):
        return [n for n in self.nodes if n not in self.failed]

    def place(self, object_id, count):
        full = self.health.quota
        return rank(object_id, [n for n in self.alive_ids() if n not in full])[:count]

    def call(self, node_id, method, *args, **kwargs):
        self.calls[method] = self.calls.get(method, 0) + 1
        node = self.nodes[node_id]
        name = "store_" if method == "store" else method

        def answer():
            if not node.up:
                raise ConnectionError(f"node {node_id.hex()[:8]} is down")
            try:
                return getattr(node, name)(self.client_id, *args, **kwargs)
            except StorageError as err:
                raise RemoteError(ErrorCode.NOT_FOUND if err.code == "not_found"
                                  else ErrorCode.INTERNAL, str(err)) from None

        return task.deferLater(self.clock, self.delay, answer)

    def open_store(self, node_id, size):
        self.calls["open_store"] = self.calls.get("open_store", 0) + 1
        node = self.nodes[node_id]
        if not node.up:
            return task.deferLater(self.clock, self.delay, _raise,
                                   ConnectionError(f"node {node_id.hex()[:8]} is down"))
        return task.deferLater(self.clock, self.delay, FakeStreamedStore, self, node, size)

    def cancel(self, node_id, d):
        d.cancel()

    def mark_failed(self, node_id, why=None):
        self.health.mark_failed(node_id, why)

    def blame(self, node_id, error):
        return self.health.blame(node_id, error)

    def count_sends(self, monitor, plan=None):
        return _NothingQueued()

    def close(self):
        pass


class _NothingQueued:
    """No connection queues anything here: nothing to count."""

    def close(self):
        pass


def _raise(err):
    raise err


class FakeStreamedStore:
    """A streamed STORE on a FakeNode: fed bytes are taken after a tick;
    finish() checks the size and the trailing key, then stores the share."""

    def __init__(self, network, node, size):
        self.network, self.node, self.size = network, node, size
        self.received = bytearray()
        self.cancelled = False

    def feed(self, data):
        def take():
            self._check_open()
            self.received += data
            if len(self.received) > self.size:
                raise RemoteError(ErrorCode.MALFORMED, "more than the declared size")
        return task.deferLater(self.network.clock, self.network.delay / 4, take)

    def finish(self, key):
        def commit():
            self._check_open()
            if len(self.received) != self.size or blake3.blake3(self.received).digest() != key:
                raise RemoteError(ErrorCode.HASH_MISMATCH, "stream does not match its key")
            self.node.store_(self.network.client_id, key, self.received)
        return task.deferLater(self.network.clock, self.network.delay, commit)

    def cancel(self):
        self.cancelled = True

    def _check_open(self):
        if self.cancelled:
            raise RemoteError(ErrorCode.CANCELLED, "cancelled")
        if not self.node.up:
            raise ConnectionError("the node went down mid-stream")


def run_until(clock, d, step=0.005, limit=200000):
    """Advance the fake clock until d fires; return its result (or raise)."""
    for _ in range(limit):
        if d.called:
            break
        clock.advance(step)
    assert d.called, "the operation did not finish in simulated time"
    out = []
    d.addBoth(out.append)
    if isinstance(out[0], Failure):
        out[0].raiseException()
    return out[0]


def down_once_storing(network, node_ids) -> None:
    """Take these nodes down when the job first stores anything: after it
    heard the root's holders (a writer needs a majority of them, so with
    the nodes down from the start it would stop there, ROOT_UNCONFIRMED)."""
    open_store, call = network.open_store, network.call

    def going_down():
        for node_id in node_ids:
            network.nodes[node_id].up = False

    def first_store(node_id, size):
        going_down()
        return open_store(node_id, size)

    def first_call(node_id, method, *args, **kwargs):
        if method == "store":
            going_down()
        return call(node_id, method, *args, **kwargs)
    network.open_store, network.call = first_store, first_call


def make_world(tmp_path, nodes: int):
    """(clock, client home, in-memory network of `nodes` nodes) for pipeline tests."""
    from flud.client.home import create_home
    clock = FakeReactor()
    home = create_home(str(tmp_path / "home"), join=("127.0.0.1", 1))
    network = FakeNetwork(clock, nodes=nodes)
    network.client_id = home.identity.node_id
    return clock, home, network


def snapshot_manifest(world, snapshot_id=None) -> dict:
    """A snapshot read back from the fake network (the key alone: root record,
    holder map, tree), as the version-1 manifest Restore also takes."""
    from flud.client.context import JobContext
    from flud.client.progress import Progress
    from tools.flat_snapshot import flatten
    from flud.client.repository.snapshot_lookup import find_snapshot
    from flud.coding import SegmentCoder
    from flud.memory import MemoryMonitor
    from flud.workers import CPUPool
    clock, home, network = world
    k, n = home.config["k"], home.config["n"]
    ctx = JobContext(clock, home, network, CPUPool(clock, inline=True),
                     MemoryMonitor(clock=clock.seconds, rss_reader=lambda: 0),
                     Progress("read", quiet=True), SegmentCoder(k, n), clock.seconds)
    found = run_until(clock, find_snapshot(ctx, snapshot_id))
    try:
        if found.manifest is not None:
            return found.manifest
        from flud.client.repository.share_challenges import IndexChallenges
        from flud.client.verify.share_set import ShareSet
        manifest = run_until(clock, flatten(found.repo, found.record, k, n))
        challenges = IndexChallenges(home.index, found.repo.cache)
        manifest["challenges"] = {key: challenges.get(key)
                                  for key, _ in ShareSet.of_manifest(manifest).locations()}
        return manifest
    finally:
        found.close()
