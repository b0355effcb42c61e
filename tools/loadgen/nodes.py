"""The testnet's nodes: where they are, and what their STATS say over a run."""
import os

from twisted.internet import defer

from flud.protocol.client import ClientNet, NodeAddress
from flud.testnet.query import read_testnet

STATS_TIMEOUT = 3.0

# What we would like every node's STATS to carry and it does not (yet).
WANTED = {
    "net.bytes_in": "bytes received on all connections (TLS included) since start, "
                    "closed connections too",
    "net.bytes_out": "bytes sent on all connections (TLS included) since start, "
                     "closed connections too",
}


class NoReachableNode(Exception):
    pass


def from_testnet(directory: str) -> list:
    if not os.path.exists(os.path.join(directory, "testnet.json")):
        raise NoReachableNode(f"no testnet at {directory} (no testnet.json): "
                              f"run `flud testnet up --dir {directory}` first")
    return read_testnet(directory)


def parse_addresses(text: str) -> list:
    """'127.0.0.1:4000,host:4001' -> [(host, port)]."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"cannot read {part!r} in --nodes: use HOST:PORT[,HOST:PORT...]")
        out.append((host or "127.0.0.1", int(port)))
    if not out:
        raise ValueError("--nodes lists no address")
    return out


class NodeProbe:
    """The parent's own client: asks nodes for STATS (and their IDs)."""

    def __init__(self, reactor, home: str):
        self.reactor = reactor
        self.net = ClientNet(reactor, home)

    @defer.inlineCallbacks
    def resolve(self, addresses: list):
        """[(host, port)] -> [NodeAddress] for the ones that answer."""
        results = yield defer.DeferredList(
            [self._bounded(self.net.pool.get(None, h, p)) for h, p in addresses],
            consumeErrors=True)
        return [NodeAddress(conn.peer_id, h, p)
                for (h, p), (ok, conn) in zip(addresses, results) if ok]

    def _bounded(self, d):
        return d.addTimeout(STATS_TIMEOUT * 3, self.reactor)

    def _stats(self, node):
        d = self.net.peer(node)
        d.addCallback(lambda peer: peer.stats().addTimeout(STATS_TIMEOUT, self.reactor))
        return d

    @defer.inlineCallbacks
    def sample(self, nodes: list):
        """-> [stats dict or None] in node order (None: no answer in time)."""
        results = yield defer.DeferredList([self._stats(n) for n in nodes], consumeErrors=True)
        return [value if ok else None for ok, value in results]

    def close(self) -> None:
        self.net.close()


def _get(stats, path: str):
    value = stats
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _delta(a, b, path):
    x, y = _get(a, path), _get(b, path)
    if x is None or y is None:
        return None
    return y - x


def node_rows(nodes: list, first: list, last: list, elapsed: float) -> list:
    """One row per node from STATS sampled at the start and end of the measured window."""
    rows = []
    for i, node in enumerate(nodes):
        a, b = first[i], last[i]
        row = {"index": i, "node_id": node.node_id.hex(), "host": node.host, "port": node.port,
               "alive_start": a is not None, "alive_end": b is not None}
        if a is not None and b is not None:
            cpu = _delta(a, b, "cpu_seconds")
            row.update({
                "cpu_percent": 100.0 * cpu / elapsed if cpu is not None and elapsed > 0 else None,
                "rss": _get(b, "memory.rss"),
                "rss_start": _get(a, "memory.rss"),
                "peak_rss": _get(b, "memory.peak_rss"),
                "payload_in": _delta(a, b, "server.bytes_stored_in"),
                "payload_out": _delta(a, b, "server.bytes_retrieved_out"),
                "bytes_in": _delta(a, b, "net.bytes_in"),
                "bytes_out": _delta(a, b, "net.bytes_out"),
                "requests": _delta(a, b, "server.requests"),
                "errors": _delta(a, b, "server.errors"),
                "connections": _get(b, "connections"),
                "stored_bytes": _get(b, "store.bytes_stored"),
            })
        elif b is not None or a is not None:
            s = b if b is not None else a
            row.update({"rss": _get(s, "memory.rss"), "connections": _get(s, "connections")})
        rows.append(row)
    return rows


def missing_fields(samples: list) -> list:
    """The WANTED fields no answering node reported."""
    answered = [s for s in samples if s is not None]
    return [f for f in WANTED if answered and all(_get(s, f) is None for s in answered)]


def cpu_between(a: list, b: list, dt: float):
    """Summed CPU % of the nodes that answered both samples, and their summed RSS."""
    if dt <= 0:
        return None, None
    cpu = rss = 0.0
    seen = False
    for x, y in zip(a, b):
        if x is None or y is None:
            continue
        seen = True
        cpu += (y.get("cpu_seconds", 0) - x.get("cpu_seconds", 0))
        rss += _get(y, "memory.rss") or 0
    if not seen:
        return None, None
    return 100.0 * cpu / dt, rss
