"""The client's view of the storage nodes: discovery, placement, liveness."""
import logging

from twisted.internet import defer

from flud.client.net import ClientNet, NodeAddress
from flud.client.placement import rank

log = logging.getLogger("flud.client")

CONNECT_TIMEOUT = 10.0


class NotEnoughNodes(Exception):
    pass


class Network:
    def __init__(self, reactor, home: str, bootstrap):
        """bootstrap: [(host, port)] of nodes to ask for the member list."""
        self.reactor = reactor
        self.net = ClientNet(reactor, home)
        self.bootstrap = list(bootstrap)
        self.nodes = {}       # node id -> NodeAddress
        self.failed = set()   # node ids that failed during this run

    @property
    def client_id(self) -> bytes:
        return self.net.client_id

    @defer.inlineCallbacks
    def discover(self):
        """Ask the first reachable bootstrap node for the member list."""
        errors = []
        for host, port in self.bootstrap:
            try:
                peer = yield self.net.peer(NodeAddress(None, host, port)).addTimeout(
                    CONNECT_TIMEOUT, self.reactor)
                peers = yield peer.peers()
            except Exception as err:
                errors.append(f"{host}:{port}: {err}")
                continue
            self.nodes[peer.node_id] = NodeAddress(peer.node_id, host, port)
            for info in peers:
                if info.is_node and info.alive and info.port:
                    self.nodes[info.node_id] = NodeAddress(info.node_id, info.host, info.port)
            return len(self.nodes)
        raise NotEnoughNodes("no node answered; tried " + "; ".join(errors) +
                             ". Is the testnet up (`flud testnet status --dir DIR`)?")

    def alive_ids(self) -> list:
        return [nid for nid in self.nodes if nid not in self.failed]

    def place(self, object_id: bytes, count: int) -> list:
        return rank(object_id, self.alive_ids())[:count]

    def address(self, node_id: bytes) -> NodeAddress:
        return self.nodes[node_id]

    def peer(self, node_id: bytes):
        node = self.nodes.get(node_id)
        if node is None:
            return defer.fail(KeyError(f"node {node_id.hex()[:12]} is unknown"))
        return self.net.peer(node).addTimeout(CONNECT_TIMEOUT, self.reactor)

    def call(self, node_id: bytes, method: str, *args, **kwargs):
        """peer(node).method(*args); a connection failure marks the node failed."""
        d = self.peer(node_id)
        d.addCallback(lambda p: getattr(p, method)(*args, **kwargs))
        return d

    def cancel(self, node_id: bytes, d) -> None:
        """Abandon a request made with call() (its Deferred fails CANCELLED)."""
        conn = self.net.pool.connection(node_id)
        if conn is not None:
            conn.cancel(d)

    def count_sends(self, monitor):
        """Count the ciphertext every connection has queued in its transport
        on one memory transfer ("network", held: it is a copy of buffers the
        budget already admitted, bounded per connection by the wire). Returns
        the transfer; close it when the run is over."""
        queue = monitor.transfer("network", "TLS send queues")
        self.net.local.send_queue = queue
        return queue

    def mark_failed(self, node_id: bytes) -> None:
        if node_id not in self.failed:
            log.warning("node %s failed; using others", node_id.hex()[:12])
        self.failed.add(node_id)

    def close(self) -> None:
        self.net.close()
