"""A small world for repair tests: objects coded and stored on FakeNodes,
their recorded challenges, and a job to check them (no sockets, no sleeps)."""
import random

import blake3
from twisted.internet import defer

from flud.client.records import ShareHolder
from flud.client.repair.object_health import RepairPolicy, StoredObject
from flud.client.repair.check_job import CheckJob, Probe
from flud.client.repair.check_state import CheckState
from flud.coding import SegmentCoder
from tests.unit.client.fakes import FakeNetwork, FakeReactor, run_until

DAY = 86400.0


class StallingNetwork(FakeNetwork):
    """A FakeNetwork where the nodes in `stalled` never answer."""

    def __init__(self, clock, nodes):
        super().__init__(clock, nodes=nodes)
        self.stalled = set()
        self.stores = []          # (node, kind) of every STORE

    def call(self, node_id, method, *args, **kwargs):
        if method == "store":
            self.stores.append((node_id.hex(), args[2] if len(args) > 2 else 0))
        if node_id in self.stalled:
            return defer.Deferred()
        return super().call(node_id, method, *args, **kwargs)


class World:
    def __init__(self, nodes=12, seed=1, k=4, n=8):
        self.rng = random.Random(seed)
        self.clock = FakeReactor()
        self.clock.advance(1_000_000)
        self.network = StallingNetwork(self.clock, nodes)
        self.node_ids = list(self.network.nodes)
        self.k, self.n = k, n
        self.coder = SegmentCoder(k, n)
        self.shares = {}          # key hex -> bytes
        self.probes = {}          # key hex -> Probe
        self.state = CheckState()
        self.saved = []

    def add(self, kind="bundle", size=20_000, first_node=0):
        _, shares = self.coder.encode(self.rng.randbytes(size))
        holders = []
        for index, share in enumerate(shares):
            data = bytes(share)
            key = blake3.blake3(data).hexdigest()
            node = self.node_ids[(first_node + index) % len(self.node_ids)]
            self.network.nodes[node].store_(self.network.client_id, bytes.fromhex(key), data)
            nonce = self.rng.randbytes(16)
            self.probes[key] = Probe(nonce, 0, len(data), blake3.blake3(nonce + data).digest()[:16])
            self.shares[key] = data
            holders.append(ShareHolder(index, key, node.hex()))
        oid = blake3.blake3(b"".join(bytes(s) for s in shares)).hexdigest()
        return StoredObject(oid, kind, self.k, self.n, tuple(holders), len(shares[0]))

    def node(self, hex_id):
        return self.network.nodes[bytes.fromhex(hex_id)]

    def job(self, policy=RepairPolicy(m=8), **kwargs):
        def save(state):
            self.saved.append(state.to_wire())
        return CheckJob(self.clock, self.network, self.state, lambda s: self.probes.get(s.key),
                        lambda fn, *a: defer.maybeDeferred(fn, *a), policy=policy,
                        rng=random.Random(3), on_progress=save, **kwargs)

    def check(self, objects, repair=False, subset=None, **kwargs):
        return run_until(self.clock, self.job(**kwargs).run(objects, repair, subset), step=0.05)

    def holds(self, node_hex, key_hex) -> bool:
        try:
            data = self.node(node_hex).retrieve(self.network.client_id, bytes.fromhex(key_hex))
        except Exception:
            return False
        return bytes(data) == self.shares[key_hex]
