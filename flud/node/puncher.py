"""Hole punching on a node (docs/reachability.md, "Hole punching"): it
starts punches as any side does (flud/protocol/punch_initiator.py) and
answers PUNCH_CONNECT and PUNCH_SYNC (the responder), within the bounds of
flud/protocol/hole_punch.py. A node behind NAT knows its outside address
and its NAT's behaviour from its dial-back answers (flud/node/dial_back.py).
"""
import logging

from flud.protocol import hole_punch, messages
from flud.protocol.errors import ErrorCode, RemoteError
from flud.protocol.hole_punch import NAT_NAMES, check_announced, nat_behaviour
from flud.protocol.punch_initiator import PunchInitiator

log = logging.getLogger("flud.punch")


class Puncher(PunchInitiator):
    def __init__(self, reactor, local, handler, pool, membership, prober, listen_host: str,
                 enabled: bool = True):
        super().__init__(reactor, local, handler, pool, listen_host)
        self.membership = membership
        self.prober = prober            # dial_back.Prober: verdict, observed addresses, ports
        self.enabled = enabled and prober is not None

    # ---- what this node is ------------------------------------------------------

    def wants(self, conn) -> bool:
        return self.enabled

    def nat(self) -> int:
        if self.prober is None:
            return hole_punch.NAT_UNKNOWN
        return nat_behaviour(self.prober.port_observations)

    def own_addresses(self, relayed=None) -> list:
        """(host, listening port) as peers see this node: the confirmed
        addresses of a public node, the observed hosts of one behind NAT."""
        if self.prober is None:
            return []
        if self.prober.verdict == "public":
            hosts = [host for host, _ in self.prober.judge.confirmed()]
        else:
            hosts = sorted(self.prober.judge.observed)
        port = self.local.listen_port
        return [(h, port) for h in hosts][:messages.MAX_PUNCH_ADDRESSES]

    def own_hosts(self) -> set:
        """This node's own addresses and those peers saw it at: never a
        punch's target (a peer behind the same outside address cannot be
        punched to through it)."""
        if self.prober is None:
            return set()
        hosts = {a.host for a in self.prober.own_record.candidates}
        return hosts | set(self.prober.judge.observed)

    def third_parties(self, peer_id: bytes) -> set:
        """Direct addresses of every node this node knows but the peer."""
        return {a.host for node_id, peer in self.membership.peers.items() if node_id != peer_id
                for a in peer.record.tcp_addresses()}

    # ---- responder ---------------------------------------------------------------

    def serve_connect(self, conn, rid, message) -> None:
        if not self.enabled:
            raise RemoteError(ErrorCode.PUNCH_REFUSED, "this node does not punch holes")
        if not getattr(conn, "relayed", False):
            raise RemoteError(ErrorCode.PUNCH_REFUSED, "this connection is direct already")
        if conn.peer_id in self.active and self.local.identity.node_id < conn.peer_id:
            # both ends started a punch (each dialled the other through a
            # relay): the lower id's goes on, the other's stops here
            raise RemoteError(ErrorCode.PUNCH_REFUSED, "this node is punching to you already")
        now = self.reactor.seconds()
        self.gate.connect(conn.peer_id, now)
        try:
            targets = check_announced(message.addresses, conn.peer_hello.listen_port,
                                      self.own_hosts(), self.third_parties(conn.peer_id))
        except RemoteError:
            self.gate.counters["bad_address"] += 1
            raise
        own = self.own_addresses()
        if not own:
            raise RemoteError(ErrorCode.PUNCH_REFUSED, "this node knows no outside address yet")
        self.gate.agree(conn.peer_id, targets, now)
        conn.respond(rid, messages.PunchConnect(own, self.nat()))

    def serve_sync(self, conn, rid, message) -> None:
        if not self.enabled:
            raise RemoteError(ErrorCode.PUNCH_REFUSED, "this node does not punch holes")
        targets = self.gate.sync(conn.peer_id, self.reactor.seconds())   # holds a dial slot
        conn.respond(rid, messages.Empty())
        d = self.dial(targets, conn.peer_id, tls_client=False, port=self.local.listen_port)
        d.addCallback(self._responded, conn, message.attempt)

    def _responded(self, result, relayed, attempt) -> None:
        direct, reason = result
        now = self.reactor.seconds()
        if direct is not None:
            self.book.record(relayed.peer_id, "punched", now, "responder", attempt)
            self.upgrade(relayed, direct)
        else:
            self.book.record(relayed.peer_id, f"attempt {attempt} failed: {reason}", now,
                             "responder", attempt)

    def stats(self) -> dict:
        return dict(self.book.summary(), enabled=self.enabled, nat=NAT_NAMES[self.nat()],
                    addresses=[f"{h}:{p}" for h, p in self.own_addresses()],
                    gate=dict(self.gate.counters), relayed_released=self.released)


# Developer switch (docs/DESIGN.md): a node behind NAT dials every node it
# knows only through a relay, so that a lab measures how many such pairs a
# punch turns direct (gossip alone meets them only now and then).
DIAL_RELAYED_ENV = "FLUD_DIAL_RELAYED_PEERS"
DIAL_RELAYED_EVERY = 1.0
DIAL_RELAYED_MAX = 64


class RelayedPeerDialer:
    """Dials, once each, the peers known only by a relay hint whose id is
    above this node's (so each pair is dialled from one side only), at most
    DIAL_RELAYED_MAX of them, while this node is behind NAT."""

    def __init__(self, reactor, node_id: bytes, membership, pool, prober):
        self.reactor = reactor
        self.node_id = node_id
        self.membership = membership
        self.pool = pool
        self.prober = prober
        self.dialled = set()
        self._call = None

    def start(self) -> None:
        self._call = self.reactor.callLater(DIAL_RELAYED_EVERY, self._tick)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _tick(self) -> None:
        if self.prober is not None and self.prober.verdict == "private":
            for peer in list(self.membership.alive()):
                if len(self.dialled) >= DIAL_RELAYED_MAX:
                    break
                record = peer.record
                if (peer.node_id in self.dialled or peer.node_id <= self.node_id
                        or record.tcp_addresses() or not record.relay_ids()):
                    continue
                self.dialled.add(peer.node_id)
                d = self.pool.get(peer.node_id, peer.host, peer.port)
                d.addErrback(lambda f, p=peer: (self.dialled.discard(p.node_id),
                                                log.info("dialling %s through its relay failed: %s",
                                                         p.node_id.hex()[:12], f.value)))
        self._call = self.reactor.callLater(DIAL_RELAYED_EVERY, self._tick)
