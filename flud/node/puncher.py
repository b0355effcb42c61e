"""Hole punching on the wire: the Twisted glue around flud/node/hole_punch.py
(docs/reachability.md, "Hole punching"; the sockets are flud/protocol/punched.py).

A node that dialled a peer through a relay starts a punch once that
connection is ready (the initiator); the peer answers PUNCH_CONNECT and
PUNCH_SYNC (the responder). When a punched connection proves the peer's
key, the pool hands it out instead of the relayed one, which is closed
once nothing runs on it (its relay circuit goes with it). Any direct
connection to a peer the pool reaches through a relay takes over the same
way.
"""
import logging

from twisted.internet import defer, task

from flud.node import hole_punch
from flud.node.hole_punch import (ANSWER_TIMEOUT, DIAL_TIMEOUT, NAT_NAMES, Punch, PunchBook,
                                  PunchGate, check_announced, may_punch, nat_behaviour)
from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.errors import ErrorCode, RemoteError
from flud.protocol.punched import dial_from_port

log = logging.getLogger("flud.punch")

START_AFTER = 0.2      # after a relayed connection is ready (its first request goes first)
RELEASE_CHECK = 2.0    # a replaced relayed connection is closed once idle; checked this often


class Puncher:
    def __init__(self, reactor, local, handler, pool, membership, prober, listen_host: str,
                 enabled: bool = True):
        self.reactor = reactor
        self.local = local
        self.handler = handler
        self.pool = pool
        self.membership = membership
        self.prober = prober            # dial_back.Prober: verdict, observed addresses, ports
        self.listen_host = listen_host
        self.enabled = enabled and prober is not None
        self.gate = PunchGate()
        self.book = PunchBook()
        self.active = {}                # peer id -> Punch (this node initiating)
        self.released = 0

    # ---- what this node is ------------------------------------------------------

    def nat(self) -> int:
        if self.prober is None:
            return hole_punch.NAT_UNKNOWN
        return nat_behaviour(self.prober.port_observations)

    def own_addresses(self) -> list:
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

    def _own_hosts(self) -> set:
        """This node's own addresses and those peers saw it at: never a
        punch's target (a peer behind the same outside address cannot be
        punched to through it)."""
        if self.prober is None:
            return set()
        hosts = {a.host for a in self.prober.own_record.candidates}
        return hosts | set(self.prober.judge.observed)

    def _third_parties(self, peer_id: bytes) -> set:
        """Direct addresses of every node this node knows but the peer."""
        return {a.host for node_id, peer in self.membership.peers.items() if node_id != peer_id
                for a in peer.record.tcp_addresses()}

    # ---- connection events (a handler listener) ------------------------------

    def connection_ready(self, conn) -> None:
        peer_id = conn.peer_id
        if getattr(conn, "relayed", False):
            if (self.enabled and conn.tls_client and peer_id not in self.active
                    and conn.peer_hello.role == messages.ROLE_NODE
                    and self.book.may_try(peer_id, self.reactor.seconds())):
                self.active[peer_id] = None   # claimed now: one punch per peer at a time
                self.reactor.callLater(START_AFTER, self._start, conn)
            return
        pooled = self.pool.connection(peer_id)
        if pooled is not None and pooled is not conn and getattr(pooled, "relayed", False):
            self._upgrade(pooled, conn)   # direct beats relayed, however it came

    def connection_lost(self, conn) -> None:
        pass

    # ---- initiator ---------------------------------------------------------------

    def _start(self, relayed) -> None:
        d = self.initiate(relayed)
        d.addErrback(lambda f: log.warning("punch to %s failed: %s", relayed.describe(), f.value))

    @defer.inlineCallbacks
    def initiate(self, relayed):
        """Punch to the peer of a relayed connection this node dialled.
        Fires with the punched Connection, or None (the reason is in the book)."""
        peer_id = relayed.peer_id
        punch = self.active[peer_id] = Punch(peer_id)
        self.book.counters["started"] += 1
        direct = None
        try:
            while not relayed.closed:
                own = self.own_addresses()
                if not own:
                    punch.give_up("this node knows no outside address of its own yet")
                    break
                punch.connect_sent(self.reactor.seconds())
                try:
                    answer = yield relayed.request(Op.PUNCH_CONNECT, messages.PunchConnect(
                        own, self.nat())).addTimeout(ANSWER_TIMEOUT, self.reactor)
                except RemoteError as err:
                    punch.give_up(f"the peer refused: {err}")
                    break
                delay = punch.answered(self.reactor.seconds(), answer.addresses)
                why = may_punch(self.nat(), answer.nat)
                if why is not None:
                    punch.give_up(why)
                    break
                try:
                    targets = check_announced(answer.addresses, relayed.peer_hello.listen_port,
                                              self._own_hosts(), self._third_parties(peer_id))
                except RemoteError as err:
                    punch.give_up(f"the peer's answer: {err.message}")
                    break
                sync = relayed.request(Op.PUNCH_SYNC, messages.PunchSync(punch.attempt))
                sync.addErrback(lambda f: None)   # its dial tells; the answer only acknowledges
                yield task.deferLater(self.reactor, delay, lambda: None)
                if not self.gate.begin():
                    reason = "too many punches at once"
                else:
                    direct, reason = yield self._dial(targets, peer_id, tls_client=True)
                if direct is not None:
                    punch.succeeded()
                    break
                if not punch.failed(reason):
                    break
            else:
                punch.give_up("the relayed connection closed")
        except Exception as err:   # noqa: BLE001 - a lost connection, a timeout: stay relayed
            punch.give_up(f"{type(err).__name__}: {err}")
        finally:
            self.active.pop(peer_id, None)
            self.book.record(peer_id, punch.outcome or "unknown", self.reactor.seconds(),
                             "initiator", punch.attempt, punch.rtt)
        if direct is not None:
            log.info("punched a direct connection to %s (rtt %.0f ms, attempt %d)",
                     direct.describe(), (punch.rtt or 0) * 1000, punch.attempt)
            self._upgrade(relayed, direct)
        else:
            log.info("no hole to %s, staying relayed: %s", relayed.describe(), punch.outcome)
        return direct

    @defer.inlineCallbacks
    def _dial(self, targets, peer_id, tls_client: bool):
        """Dial each target from the listening port until one proves the
        peer; (Connection or None, why not). Ends the gate slot it holds."""
        reason = "no address"
        try:
            for host, port in targets:
                try:
                    conn = yield dial_from_port(self.reactor, self.local, self.handler, host,
                                                port, self.local.listen_port, peer_id,
                                                tls_client, self.listen_host, DIAL_TIMEOUT)
                    return conn, None
                except Exception as err:   # noqa: BLE001 - the next address, or give up
                    reason = f"{host}:{port}: {err}"
        finally:
            self.gate.end()
        return None, reason

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
                                      self._own_hosts(), self._third_parties(conn.peer_id))
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
        d = self._dial(targets, conn.peer_id, tls_client=False)
        d.addCallback(self._responded, conn, message.attempt)

    def _responded(self, result, relayed, attempt) -> None:
        direct, reason = result
        now = self.reactor.seconds()
        if direct is not None:
            self.book.record(relayed.peer_id, "punched", now, "responder", attempt)
            self._upgrade(relayed, direct)
        else:
            self.book.record(relayed.peer_id, f"attempt {attempt} failed: {reason}", now,
                             "responder", attempt)

    # ---- the upgrade -----------------------------------------------------------

    def _upgrade(self, relayed, direct) -> None:
        """The direct connection serves the peer from now on; the relayed
        one is closed once nothing runs on it (freeing its relay circuit)."""
        if direct.closed:
            return
        self.pool.replace(direct)
        self._release(relayed)

    def _release(self, relayed) -> None:
        if relayed.closed:
            return
        session = relayed.session
        if session.open_inbound or session.open_outbound:
            self.reactor.callLater(RELEASE_CHECK, self._release, relayed)
            return
        self.released += 1
        relayed.close()

    def stats(self) -> dict:
        return dict(self.book.summary(), enabled=self.enabled, nat=NAT_NAMES[self.nat()],
                    addresses=[f"{h}:{p}" for h, p in self.own_addresses()],
                    gate=dict(self.gate.counters), relayed_released=self.released)


# Developer switch (docs/DESIGN.md): a node behind NAT dials every node it
# knows only through a relay, so that a lab measures how many such pairs a
# punch turns direct (gossip alone meets them only now and then).
DIAL_RELAYED_ENV = "FLUD_DIAL_RELAYED_PEERS"
DIAL_RELAYED_EVERY = 3.0
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
