"""The relay: a reachable node lends its address to nodes behind NAT
(docs/reachability.md, "Relay"; the preamble is flud/protocol/relayed.py).

The relay side (RelayService):
- RESERVE over an authenticated connection reserves this relay for the
  asker while that connection lives, for RESERVATION_SECONDS (renewed by
  asking again): at most MAX_RESERVATIONS in all and PER_ADDRESS_RESERVATIONS
  from one observed address; RELAY_FULL past them, RELAY_REFUSED with
  --no-relay.
- A CONNECT preamble naming a reserved node opens a circuit: the target is
  sent RELAY_INCOMING with a fresh token over its reservation's connection,
  and connects back with an ACCEPT preamble naming it. The two TCP
  connections are then spliced: bytes copied both ways, each side's reading
  paused while the other's send queue is full (backpressure), each circuit
  held to RATE_LIMIT bytes per second per direction, at most MAX_CIRCUITS at
  once and PER_RESERVATION_CIRCUITS per target. The relay never parses what
  it copies: it is TLS between the two ends.

The reserved side (ReservationKeeper): a private node reserves on one
public peer, keeps the reservation renewed, publishes `relay:RELAY_ID` in
its record, and answers RELAY_INCOMING by connecting to the relay.
"""
import logging
import os

from twisted.internet import defer, protocol

from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.errors import ErrorCode, RemoteError
from flud.protocol.node_record import Address
from flud.protocol.relayed import FIRST_BYTE, PREAMBLE_SIZE, TOKEN_SIZE, accept_through, parse_preamble

log = logging.getLogger("flud.relay")

RESERVATION_SECONDS = 600
MAX_RESERVATIONS = 128
PER_ADDRESS_RESERVATIONS = 4
MAX_CIRCUITS = 64
PER_RESERVATION_CIRCUITS = 16
# A full relay closes a circuit that carried nothing this long to make room
# for a new one (gossip leaves many idle connections open for minutes).
IDLE_EVICT = 15.0
PENDING_TIMEOUT = 10.0         # a CONNECT waits this long for the target's ACCEPT
PENDING_BUFFER = 64 * 1024     # bytes a waiting CONNECT may send ahead
RATE_LIMIT = 4 * 1024 * 1024   # bytes per second per direction of a circuit
PREAMBLE_TIMEOUT = 10.0
# A reserved node renews this often: well inside the reservation, and
# inside the connection's idle timeout (120 s), which would end it.
RENEW_EVERY = 60.0


class Reservation:
    __slots__ = ("node_id", "conn", "host", "expires", "circuits", "splices")

    def __init__(self, node_id, conn, host, expires):
        self.node_id = node_id
        self.conn = conn
        self.host = host
        self.expires = expires
        self.circuits = 0
        self.splices = []      # one end of each spliced circuit


class RelayService:
    def __init__(self, reactor, enabled: bool = True, rate_limit: int = RATE_LIMIT,
                 reachable=lambda: True):
        """reachable(): may this node relay now (a node judged private
        cannot be reached by the nodes it would relay for)?"""
        self.reactor = reactor
        self.enabled = enabled
        self.reachable = reachable
        self.rate_limit = rate_limit
        self.reservations = {}     # node id -> Reservation
        self.pending = {}          # token -> (Sniffer of the dialler, Reservation, timer)
        self.circuits = 0
        self.counters = {"reserved": 0, "refused": 0, "full": 0, "circuits": 0,
                         "no_reservation": 0, "bytes": 0}

    # ---- reservations ----------------------------------------------------------

    def reserve(self, conn, rid, message) -> None:
        if not self.enabled:
            self.counters["refused"] += 1
            raise RemoteError(ErrorCode.RELAY_REFUSED, "this node relays for nobody")
        if not self.reachable():
            self.counters["refused"] += 1
            raise RemoteError(ErrorCode.RELAY_REFUSED, "this node is not reachable itself")
        now = self.reactor.seconds()
        self._expire(now)
        host = conn.transport.getPeer().host
        held = self.reservations.get(conn.peer_id)
        if held is None:
            same_address = sum(1 for r in self.reservations.values() if r.host == host)
            if len(self.reservations) >= MAX_RESERVATIONS or same_address >= PER_ADDRESS_RESERVATIONS:
                self.counters["full"] += 1
                raise RemoteError(ErrorCode.RELAY_FULL, "this relay holds all the reservations "
                                  "it will" + (" from your address" if same_address else ""))
            held = self.reservations[conn.peer_id] = Reservation(conn.peer_id, conn, host, 0)
            self.counters["reserved"] += 1
        held.conn = conn
        held.expires = now + RESERVATION_SECONDS
        conn.respond(rid, messages.Reservation(RESERVATION_SECONDS))

    def connection_lost(self, conn) -> None:
        """A reservation lives as long as its connection (the relay has no
        other way to tell its node that someone waits)."""
        held = self.reservations.get(conn.peer_id)
        if held is not None and held.conn is conn:
            del self.reservations[conn.peer_id]

    def connection_ready(self, conn) -> None:
        pass

    def _expire(self, now) -> None:
        for node_id in [n for n, r in self.reservations.items() if r.expires < now]:
            del self.reservations[node_id]

    # ---- circuits --------------------------------------------------------------

    def open_circuit(self, sniffer, target_id: bytes) -> None:
        """A CONNECT preamble arrived on sniffer's transport."""
        self._expire(self.reactor.seconds())
        held = self.reservations.get(target_id)
        if held is not None and (self.circuits >= MAX_CIRCUITS
                                 or held.circuits >= PER_RESERVATION_CIRCUITS):
            self._evict_idle(held if held.circuits >= PER_RESERVATION_CIRCUITS else None)
        if (held is None or self.circuits >= MAX_CIRCUITS
                or held.circuits >= PER_RESERVATION_CIRCUITS):
            self.counters["no_reservation" if held is None else "full"] += 1
            sniffer.transport.loseConnection()
            return
        token = os.urandom(TOKEN_SIZE)
        timer = self.reactor.callLater(PENDING_TIMEOUT, self._give_up, token)
        self.pending[token] = (sniffer, held, timer)
        held.circuits += 1
        self.circuits += 1
        sniffer.on_lost = lambda: self._give_up(token)
        d = held.conn.request(Op.RELAY_INCOMING, messages.Circuit(token))
        d.addErrback(lambda f: self._give_up(token))

    def accept_circuit(self, sniffer, token: bytes) -> None:
        entry = self.pending.pop(token, None)
        if entry is None:
            sniffer.transport.loseConnection()
            return
        dialler, held, timer = entry
        if timer.active():
            timer.cancel()
        self.counters["circuits"] += 1
        a, b = Splice(self, held), Splice(self, held)
        a.other, b.other = b, a
        a.take_over(dialler)
        b.take_over(sniffer)
        splice_pair(a, b)
        held.splices.append(a)

    def _give_up(self, token) -> None:
        entry = self.pending.pop(token, None)
        if entry is None:
            return
        dialler, held, timer = entry
        if timer.active():
            timer.cancel()
        self._circuit_closed(held)
        dialler.transport.loseConnection()

    def _evict_idle(self, held=None) -> bool:
        """Close the circuit (of held, or of any reservation) idle longest,
        if one carried nothing for IDLE_EVICT; True if one was closed."""
        now = self.reactor.seconds()
        ends = held.splices if held is not None else [
            a for r in self.reservations.values() for a in r.splices]
        idle = [a for a in ends if now - max(a.last_active, a.other.last_active) >= IDLE_EVICT]
        if not idle:
            return False
        oldest = min(idle, key=lambda a: max(a.last_active, a.other.last_active))
        self.counters["evicted"] = self.counters.get("evicted", 0) + 1
        oldest.close_circuit()
        return True

    def _circuit_closed(self, held) -> None:
        held.circuits = max(0, held.circuits - 1)
        self.circuits = max(0, self.circuits - 1)

    def stats(self) -> dict:
        return dict(self.counters, reservations=len(self.reservations),
                    open_circuits=self.circuits, enabled=self.enabled)


class Sniffer(protocol.Protocol):
    """The first protocol of every accepted connection: a relay preamble
    makes it a circuit's end, anything else goes to the node's Connection
    (built by the gate, as before) with the bytes read so far."""

    def __init__(self, inner, relay: RelayService, clock):
        self.inner = inner
        self.relay = relay
        self.clock = clock
        self.buffer = b""
        self.kind = None
        self.on_lost = None
        self._timer = None

    def connectionMade(self):
        self._timer = self.clock.callLater(PREAMBLE_TIMEOUT, self._too_slow)

    def _too_slow(self):
        self._timer = None
        if self.kind is None or self.kind == "waiting-preamble":
            self.transport.abortConnection()

    def _stop_timer(self):
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def dataReceived(self, data):
        if self.kind is None:
            if data[:1] != FIRST_BYTE or not self.relay.enabled:
                self._stop_timer()
                self.kind = "direct"
                self.transport.protocol = self.inner
                self.inner.makeConnection(self.transport)
                self.inner.dataReceived(data)
                return
            self.kind = "waiting-preamble"
            self._drop_inner()
        self.buffer += data
        if self.kind == "waiting-preamble":
            if len(self.buffer) < PREAMBLE_SIZE:
                return
            self._stop_timer()
            try:
                kind, value = parse_preamble(self.buffer[:PREAMBLE_SIZE])
            except ValueError:
                self.transport.abortConnection()
                return
            self.buffer = self.buffer[PREAMBLE_SIZE:]
            self.kind = "pending"
            if kind == b"C":
                self.relay.open_circuit(self, value)
            else:
                self.relay.accept_circuit(self, value)
        elif len(self.buffer) > PENDING_BUFFER:
            self.transport.abortConnection()

    def _drop_inner(self):
        """The gate counts the Connection it built as waiting for HELLO:
        it never will, so it is settled now."""
        if not self.inner.ready.called:
            self.inner.ready.errback(RemoteError(ErrorCode.PROTOCOL, "relayed, not a peer"))
            self.inner.ready.addErrback(lambda _: None)

    def connectionLost(self, reason=None):
        self._stop_timer()
        if self.kind is None:
            self._drop_inner()
        if self.on_lost is not None:
            self.on_lost()


class Splice(protocol.Protocol):
    """One end of a circuit: what it reads goes to the other end's transport,
    at most the relay's rate per second, paused while the other cannot take it."""

    def __init__(self, relay: RelayService, held: Reservation):
        self.relay = relay
        self.held = held
        self.other = None
        self.window_start = 0.0
        self.window_bytes = 0
        self._resume = None
        self.closed = False
        self.ahead = b""
        self.last_active = relay.reactor.seconds()

    def take_over(self, sniffer) -> None:
        """Become the protocol of sniffer's connection; what it read past
        the preamble is sent on once both ends are in place (splice_pair)."""
        sniffer.on_lost = None
        self.transport = sniffer.transport
        self.transport.protocol = self
        self.ahead = sniffer.buffer

    def dataReceived(self, data):
        other = self.other
        if other is None or other.closed:
            return
        other.transport.write(data)
        self.relay.counters["bytes"] += len(data)
        now = self.relay.reactor.seconds()
        self.last_active = now
        if now - self.window_start >= 1.0:
            self.window_start, self.window_bytes = now, 0
        self.window_bytes += len(data)
        if self.window_bytes >= self.relay.rate_limit and self._resume is None:
            self.transport.pauseProducing()
            self._resume = self.relay.reactor.callLater(
                max(0.0, self.window_start + 1.0 - now), self._go_on)

    def _go_on(self):
        self._resume = None
        if not self.closed:
            self.window_start, self.window_bytes = self.relay.reactor.seconds(), 0
            self.transport.resumeProducing()

    def connectionLost(self, reason=None):
        if self.closed:
            return
        self.closed = True
        if self._resume is not None and self._resume.active():
            self._resume.cancel()
        if not self.other.closed:   # the first end to go closes the circuit
            self._forget()
            self.other.transport.loseConnection()

    def close_circuit(self) -> None:
        """Close both ends now (an idle circuit evicted), counted at once."""
        for end in (self, self.other):
            end.closed = True
            if end._resume is not None and end._resume.active():
                end._resume.cancel()
        self._forget()
        self.transport.loseConnection()
        self.other.transport.loseConnection()

    def _forget(self) -> None:
        self.relay._circuit_closed(self.held)
        for end in (self, self.other):
            if end in self.held.splices:
                self.held.splices.remove(end)


def splice_pair(a: Splice, b: Splice) -> None:
    """Both ends in place: flush what each sent ahead, and let each side's
    send queue pause the other side's reading."""
    for one, two in ((a, b), (b, a)):
        two.transport.registerProducer(one.transport, True)
        if one.ahead:
            two.transport.write(one.ahead)
            one.ahead = b""


class RelayDoor(protocol.Factory):
    """Wraps the node's gate: each accepted connection starts as a Sniffer."""

    noisy = False

    def __init__(self, gate, relay: RelayService, clock):
        self.gate = gate
        self.relay = relay
        self.clock = clock

    def buildProtocol(self, addr):
        inner = self.gate.buildProtocol(addr)
        if inner is None:
            return None
        return Sniffer(inner, self.relay, self.clock)


class ReservationKeeper:
    """A private node's reservation on one relay, kept alive."""

    def __init__(self, reactor, local, handler, membership, connect, rng):
        self.reactor = reactor
        self.local = local
        self.handler = handler
        self.membership = membership
        self.connect = connect       # pool.get
        self.rng = rng
        self.relay = None            # (node id, host, port) of the relay held
        self.on_change = None
        self._call = None
        self.tried = set()

    def hints(self) -> list:
        return [Address("relay", relay_id=self.relay[0])] if self.relay else []

    def start(self) -> None:
        if self._call is None:
            self._call = self.reactor.callLater(0, self._tick)

    def stop(self) -> None:
        """No reservation needed any more (the node is reachable)."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        if self.relay is not None:
            self.relay = None
            self._changed()

    def _tick(self) -> None:
        d = self.keep()
        d.addErrback(lambda f: log.info("relay reservation failed: %s", f.value))
        d.addBoth(lambda _: self._schedule())

    def _schedule(self):
        if self._call is not None:
            delay = RENEW_EVERY if self.relay else 3.0
            self._call = self.reactor.callLater(delay, self._tick)

    @defer.inlineCallbacks
    def keep(self):
        candidates = [p for p in self.membership.alive() if p.record.first_tcp()]
        if self.relay is not None:
            chosen = [(self.relay[0], self.relay[1], self.relay[2])]
        else:
            self.rng.shuffle(candidates)
            fresh = [p for p in candidates if p.node_id not in self.tried] or candidates
            chosen = [(p.node_id, p.host, p.port) for p in fresh[:1]]
        for node_id, host, port in chosen:
            try:
                conn = yield self.connect(node_id, host, port)
                answer = yield conn.request(Op.RESERVE, messages.Empty())
            except Exception as err:   # noqa: BLE001 - any failure: try another relay
                log.info("relay %s refused or failed: %s", node_id.hex()[:12], err)
                self.tried.add(node_id)
                if self.relay is not None and self.relay[0] == node_id:
                    self.relay = None
                    self._changed()
                continue
            if self.relay is None or self.relay[0] != node_id:
                self.relay = (node_id, host, port)
                log.info("reserved on relay %s (%s:%d) for %d s", node_id.hex()[:12], host,
                         port, answer.seconds)
                self._changed()
            return self.relay
        return None

    def _changed(self):
        if self.on_change is not None:
            self.on_change()

    def connection_lost(self, conn) -> None:
        if self.relay is not None and conn.peer_id == self.relay[0]:
            # the reservation went with its connection: make a new one now
            if self._call is not None and self._call.active():
                self._call.reset(0.5)

    def connection_ready(self, conn) -> None:
        pass

    def incoming(self, conn, rid, message) -> None:
        """RELAY_INCOMING from the relay we hold: connect back with the token."""
        if self.relay is None or conn.peer_id != self.relay[0]:
            raise RemoteError(ErrorCode.RELAY_REFUSED, "no reservation of mine is with you")
        conn.respond(rid, messages.Empty())
        _, host, port = self.relay
        d = accept_through(self.reactor, self.local, self.handler, host, port, message.token)
        d.addErrback(lambda f: log.info("relayed connection failed: %s", f.value))
