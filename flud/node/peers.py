"""Membership: who the nodes are, how to reach them, which are alive.

Push-pull gossip: every round a node sends its whole view to one random peer
and merges the answer. A joiner needs one address; after that no node is
special. A peer that fails DEAD_AFTER contacts in a row is marked dead; a dead
peer is still tried now and then and comes back the moment it answers or
connects to us.
"""
import logging
from dataclasses import dataclass

from twisted.internet import defer

from flud.protocol import messages
from flud.protocol.codec import Op

log = logging.getLogger("flud.peers")

MAX_PEERS = messages.MAX_PEERS_LIST
DEAD_AFTER = 2
FAST_GOSSIP_INTERVAL = 0.3   # while the view is still changing
SLOW_GOSSIP_INTERVAL = 5.0   # once it has been stable for a while
STABLE_ROUNDS = 10
DEAD_RETRY_ROUNDS = 8        # every Nth round targets a dead peer, if any


@dataclass
class Peer:
    node_id: bytes
    host: str
    port: int
    alive: bool = True
    failures: int = 0
    last_seen: float = 0.0

    def info(self) -> messages.PeerInfo:
        return messages.PeerInfo(self.node_id, self.host, self.port, self.alive, True)


class Membership:
    def __init__(self, self_info: messages.PeerInfo, clock, rng, connect=None):
        """`connect(peer) -> Deferred[Connection]` comes from the node's pool."""
        self.self_info = self_info
        self.clock = clock
        self.rng = rng
        self.connect = connect
        self.peers = {}
        self._stable_rounds = 0
        self._round = 0
        self._call = None
        self.on_change = None

    # ---- the view ----------------------------------------------------------

    def snapshot(self) -> list:
        infos = [self.self_info]
        infos.extend(p.info() for p in self.peers.values())
        return infos[:MAX_PEERS]

    def alive(self) -> list:
        return [p for p in self.peers.values() if p.alive]

    def merge(self, infos, source=None) -> int:
        """Learn peers from a list; returns how many were new."""
        new = 0
        for info in infos:
            if not info.is_node or info.node_id == self.self_info.node_id:
                continue
            if not info.port or len(self.peers) >= MAX_PEERS:
                continue
            peer = self.peers.get(info.node_id)
            if peer is None:
                self.peers[info.node_id] = Peer(info.node_id, info.host, info.port,
                                                alive=info.alive)
                new += 1
            elif (peer.host, peer.port) != (info.host, info.port) and not peer.alive:
                peer.host, peer.port = info.host, info.port  # it moved
        if new:
            self._changed()
        return new

    def connection_ready(self, conn) -> None:
        """A peer proved who it is: a node that listens becomes known and alive."""
        hello = conn.peer_hello
        if hello.role != messages.ROLE_NODE or not hello.listen_port:
            return
        host = hello.listen_host or conn.transport.getPeer().host
        peer = self.peers.get(conn.peer_id)
        if peer is None:
            if len(self.peers) >= MAX_PEERS:
                return
            self.peers[conn.peer_id] = Peer(conn.peer_id, host, hello.listen_port)
            self._changed()
        else:
            peer.host, peer.port = host, hello.listen_port
            self.mark_alive(conn.peer_id)

    def connection_lost(self, conn) -> None:
        pass  # a closed connection is not a dead peer: idle ones close too

    def mark_alive(self, node_id: bytes) -> None:
        peer = self.peers.get(node_id)
        if peer is None:
            return
        peer.failures = 0
        peer.last_seen = self.clock.seconds()
        if not peer.alive:
            peer.alive = True
            log.info("peer %s is alive again", node_id.hex()[:12])
            self._changed()

    def mark_failed(self, node_id: bytes) -> None:
        peer = self.peers.get(node_id)
        if peer is None:
            return
        peer.failures += 1
        if peer.alive and peer.failures >= DEAD_AFTER:
            peer.alive = False
            log.info("peer %s is not answering: marked dead", node_id.hex()[:12])
            self._changed()

    def _changed(self) -> None:
        self._stable_rounds = 0
        if self.on_change is not None:
            self.on_change()

    # ---- gossip ------------------------------------------------------------

    def join(self, host: str, port: int) -> defer.Deferred:
        """Exchange views with one known address (we may not know its id)."""
        d = self.connect(None, host, port)
        d.addCallback(self._exchange)
        return d

    def start(self) -> None:
        self._schedule(0.0)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def gossip_once(self) -> defer.Deferred:
        self._round += 1
        target = self._pick_target()
        if target is None:
            return defer.succeed(None)
        d = self.connect(target.node_id, target.host, target.port)
        d.addCallback(self._exchange)
        d.addCallbacks(lambda _: self.mark_alive(target.node_id),
                       lambda f: self.mark_failed(target.node_id))
        return d

    def _exchange(self, conn):
        d = conn.request(Op.PEERS, messages.PeerList(self.snapshot()))
        d.addCallback(lambda answer: self.merge(answer.peers))
        return d

    def _pick_target(self):
        if not self.peers:
            return None
        dead = [p for p in self.peers.values() if not p.alive]
        if dead and self._round % DEAD_RETRY_ROUNDS == 0:
            return self.rng.choice(dead)
        alive = self.alive()
        return self.rng.choice(alive) if alive else None

    def _interval(self) -> float:
        base = FAST_GOSSIP_INTERVAL if self._stable_rounds < STABLE_ROUNDS else SLOW_GOSSIP_INTERVAL
        return base * self.rng.uniform(0.5, 1.5)

    def _schedule(self, delay: float) -> None:
        self._call = self.clock.callLater(delay, self._tick)

    def _tick(self) -> None:
        self._stable_rounds += 1
        d = self.gossip_once()
        d.addErrback(lambda f: log.debug("gossip round failed: %s", f.value))
        d.addBoth(lambda _: self._schedule(self._interval()) if self._call is not None else None)
