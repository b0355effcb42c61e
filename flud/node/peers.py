"""Membership: who the nodes are, how to reach them, which are alive.

Push-pull gossip of signed node records (flud.protocol.node_record): every
round a node sends the records it holds to one random peer and merges the
answer. A record is taken only when its signature checks, it has not
expired and its sequence is higher than the one held; so nobody can invent
an entry for an id whose key they lack, a node that moves is found at its new
address by its next record, and a node that is gone for good drops out of
every view when its record expires. Liveness is this node's own judgement: a
peer that fails DEAD_AFTER contacts in a row is marked dead; a dead peer is
still tried now and then and comes back the moment it answers or connects.
The view is bounded (MAX_PEERS): when it is full, expired records go first,
then the peer dead the longest; a full view of live peers takes no more.
"""
import logging
from dataclasses import dataclass

from twisted.internet import defer

from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.node_record import NodeRecord, RecordRefused, check_record, newer

log = logging.getLogger("flud.peers")

MAX_PEERS = messages.MAX_PEERS_LIST
DEAD_AFTER = 2
FAST_GOSSIP_INTERVAL = 0.3   # while the view is still changing
SLOW_GOSSIP_INTERVAL = 5.0   # once it has been stable for a while
STABLE_ROUNDS = 10
DEAD_RETRY_ROUNDS = 8        # every Nth round targets a dead peer, if any
# Node to node, a gossip round carries a random sample of this many records,
# not the whole view: finding nodes is the DHT's job (flud/node/discovery.py);
# whole views sent back and forth were what a 200-node testnet spent its
# CPU on (57 s to converge on two cores). A client's PEERS still gets the view.
GOSSIP_SAMPLE = 32


@dataclass
class Peer:
    node_id: bytes
    record: NodeRecord
    alive: bool = True
    failures: int = 0
    last_seen: float = 0.0
    dead_since: float = 0.0

    @property
    def host(self) -> str:
        address = self.record.dial_address()
        return address[0] if address else ""

    @property
    def port(self) -> int:
        address = self.record.dial_address()
        return address[1] if address else 0

    def entry(self) -> messages.PeerEntry:
        return messages.PeerEntry(self.record, self.alive)


class Membership:
    def __init__(self, own_record, clock, rng, connect=None, node_id: bytes = b""):
        """`own_record() -> NodeRecord`: this node's current signed record
        (re-signed by its keeper before it expires); `connect(peer_id, host,
        port) -> Deferred[Connection]` comes from the node's pool."""
        self.own_record = own_record
        self.node_id = node_id or own_record().node_id
        self.clock = clock
        self.rng = rng
        self.connect = connect
        self.peers = {}
        self.refused = {}            # RecordRefused code -> count, for STATS
        self._stable_rounds = 0
        self._round = 0
        self._call = None
        self.on_change = None
        self.on_records = None       # told of the records taken (the DHT probes them)

    # ---- the view ----------------------------------------------------------

    def snapshot(self, limit: int = MAX_PEERS) -> list:
        """What PEERS sends: this node's record, then live peers', then the
        others', at most `limit` in all (a random sample when more are held)."""
        now = self.clock.seconds()
        held = [p for p in self.peers.values() if p.record.expires > now]
        if len(held) >= limit:
            held = self.rng.sample(held, limit - 1)
        held.sort(key=lambda p: not p.alive)
        entries = [messages.PeerEntry(self.own_record(), True)]
        entries.extend(p.entry() for p in held)
        return entries[:limit]

    def alive(self) -> list:
        return [p for p in self.peers.values() if p.alive]

    def relay_address(self, relay_id: bytes):
        """(host, port) of a relay this node knows directly, or None (the
        pool's resolve_relay)."""
        peer = self.peers.get(relay_id)
        return peer.record.first_tcp() if peer is not None else None

    def merge(self, entries, source=None) -> int:
        """Learn records from a PEERS list; returns how many peers were new.
        `source`: the connection they came on (its peer's own record must
        name an address that peer could have been seen at)."""
        new = changed = 0
        taken = []
        now = self.clock.seconds()
        for entry in entries:
            record = entry.record
            node_id = record.node_id
            if node_id == self.node_id:
                continue
            peer = self.peers.get(node_id)
            if peer is not None and not newer(record, peer.record):
                continue            # held already: no signature to check again
            try:
                check_record(record, now)
                if source is not None and node_id == getattr(source, "peer_id", None):
                    self._check_observed(record, source)
                if not record.tcp_addresses() and not record.relay_ids():
                    raise RecordRefused("RECORD_NO_ADDRESS", "record has no address")
            except RecordRefused as refusal:
                self.refused[refusal.code] = self.refused.get(refusal.code, 0) + 1
                log.info("record of %s refused: %s", node_id.hex()[:12], refusal)
                continue
            taken.append(record)
            if peer is not None:
                peer.record = record        # it moved, or re-signed
                changed += 1
            elif self._make_room(now):
                self.peers[node_id] = Peer(node_id, record, alive=entry.alive,
                                           dead_since=0.0 if entry.alive else now)
                new += 1
            else:
                self.refused["RECORD_VIEW_FULL"] = self.refused.get("RECORD_VIEW_FULL", 0) + 1
        if new or changed:
            self._changed()
        if taken and self.on_records is not None:
            self.on_records(taken)
        return new

    def _check_observed(self, record, source) -> None:
        """A node handing over its own record must list the address we see
        it at, or a relay: else it could aim every node at a third party."""
        if any(a.scheme == "relay" for a in record.addresses):
            return
        from flud.node.reachability import plain_host
        try:
            seen = plain_host(source.transport.getPeer().host)
        except AttributeError:
            return
        if seen not in {plain_host(a.host) for a in record.tcp_addresses()}:
            raise RecordRefused("RECORD_ADDRESS_UNOBSERVED",
                                f"record lists no address this node sees it at ({seen})")

    def _make_room(self, now) -> bool:
        if len(self.peers) < MAX_PEERS:
            return True
        self.expire(now)
        if len(self.peers) < MAX_PEERS:
            return True
        dead = [p for p in self.peers.values() if not p.alive]
        if not dead:
            return False
        gone = min(dead, key=lambda p: p.dead_since)
        del self.peers[gone.node_id]
        return True

    def expire(self, now=None) -> int:
        """Drop peers whose records expired; returns how many."""
        now = self.clock.seconds() if now is None else now
        stale = [nid for nid, p in self.peers.items() if p.record.expires + 300 < now]
        for node_id in stale:
            del self.peers[node_id]
        if stale:
            log.info("%d peer record(s) expired", len(stale))
            self._changed()
        return len(stale)

    def connection_ready(self, conn) -> None:
        """A known node proved who it is: it is alive."""
        hello = conn.peer_hello
        if hello.role != messages.ROLE_NODE:
            return
        if conn.peer_id in self.peers:
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
            peer.dead_since = self.clock.seconds()
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
        d = conn.request(Op.PEERS, messages.PeerList(self.snapshot(GOSSIP_SAMPLE)))
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
        # Fast rounds only while the view is small and changing: in a large
        # network a round a third of a second each, a handshake each, is
        # what the DHT (flud/node/discovery.py) makes unneeded.
        fast = self._stable_rounds < STABLE_ROUNDS and len(self.peers) < GOSSIP_SAMPLE
        base = FAST_GOSSIP_INTERVAL if fast else SLOW_GOSSIP_INTERVAL
        return base * self.rng.uniform(0.5, 1.5)

    def _schedule(self, delay: float) -> None:
        self._call = self.clock.callLater(delay, self._tick)

    def _tick(self) -> None:
        self._stable_rounds += 1
        self.expire()
        d = self.gossip_once()
        d.addErrback(lambda f: log.debug("gossip round failed: %s", f.value))
        d.addBoth(lambda _: self._schedule(self._interval()) if self._call is not None else None)
