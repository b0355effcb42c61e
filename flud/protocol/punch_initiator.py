"""The side that starts a hole punch, on the wire (docs/reachability.md,
"Hole punching"; the exchange is flud/protocol/hole_punch.py, the sockets
flud/protocol/punched.py). Shared by nodes (flud/node/puncher.py, which
also answers punches) and clients (flud/protocol/client_punch.py).

A connection this side dialled through a relay, once ready, starts a punch
to its peer. When a punched connection proves the peer's key, the pool
hands it out instead of the relayed one, which is closed once nothing runs
on it for a while (its relay circuit goes with it). Any direct connection to a peer
the pool reaches through a relay takes over the same way.

Subclasses say who this side is: wants(conn), own_addresses(relayed)
((host, port) as peers see it, the port it punches from; may be a
Deferred), nat(), own_hosts() and third_parties(peer_id).
"""
import logging

from twisted.internet import defer, task

from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.errors import RemoteError
from flud.protocol.hole_punch import (ANSWER_TIMEOUT, DIAL_TIMEOUT, Punch, PunchBook, PunchGate,
                                      check_announced, may_punch)
from flud.protocol.punched import dial_from_port

log = logging.getLogger("flud.punch")

START_AFTER = 0.2      # after a relayed connection is ready (its first request goes first)
RELEASE_CHECK = 2.0    # a replaced relayed connection is closed once idle; checked this often
# ... idle this long: a caller that took it from the pool before the upgrade
# may still be about to send on it (closing at once lost a backup's tar)
RELEASE_IDLE = 5.0


class PunchInitiator:
    def __init__(self, reactor, local, handler, pool, listen_host: str = ""):
        self.reactor = reactor
        self.local = local
        self.handler = handler
        self.pool = pool
        self.listen_host = listen_host
        self.gate = PunchGate()
        self.book = PunchBook()
        self.active = {}                # peer id -> Punch (this side initiating)
        self.released = 0

    # ---- who this side is (subclasses) ------------------------------------------

    def wants(self, conn) -> bool:
        return False

    def own_addresses(self, relayed):
        return []

    def nat(self) -> int:
        return 0

    def own_hosts(self) -> set:
        return set()

    def third_parties(self, peer_id: bytes) -> set:
        return set()

    # ---- connection events (a handler listener) ------------------------------

    def connection_ready(self, conn) -> None:
        peer_id = conn.peer_id
        if getattr(conn, "relayed", False):
            if (conn.tls_client and peer_id not in self.active and self.wants(conn)
                    and conn.peer_hello.role == messages.ROLE_NODE
                    and self.book.may_try(peer_id, self.reactor.seconds())):
                self.active[peer_id] = None   # claimed now: one punch per peer at a time
                self.reactor.callLater(START_AFTER, self._start, conn)
            return
        pooled = self.pool.connection(peer_id)
        if pooled is not None and pooled is not conn and getattr(pooled, "relayed", False):
            self.upgrade(pooled, conn)   # direct beats relayed, however it came

    def connection_lost(self, conn) -> None:
        pass

    # ---- the punch -----------------------------------------------------------------

    def _start(self, relayed) -> None:
        d = self.initiate(relayed)
        d.addErrback(lambda f: log.warning("punch to %s failed: %s", relayed.describe(), f.value))

    @defer.inlineCallbacks
    def initiate(self, relayed):
        """Punch to the peer of a relayed connection this side dialled.
        Fires with the punched Connection, or None (the reason is in the book)."""
        peer_id = relayed.peer_id
        punch = self.active[peer_id] = Punch(peer_id)
        self.book.counters["started"] += 1
        direct = None
        try:
            while not relayed.closed:
                own = yield defer.maybeDeferred(self.own_addresses, relayed)
                if not own:
                    punch.give_up("this side knows no outside address of its own yet")
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
                                              self.own_hosts(), self.third_parties(peer_id))
                except RemoteError as err:
                    punch.give_up(f"the peer's answer: {err.message}")
                    break
                sync = relayed.request(Op.PUNCH_SYNC, messages.PunchSync(punch.attempt))
                sync.addErrback(lambda f: None)   # its dial tells; the answer only acknowledges
                yield task.deferLater(self.reactor, delay, lambda: None)
                if not self.gate.begin():
                    direct, reason = None, "too many punches at once"
                else:
                    direct, reason = yield self.dial(targets, peer_id, tls_client=True,
                                                     port=own[0][1])
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
            self.upgrade(relayed, direct)
        else:
            log.info("no hole to %s, staying relayed: %s", relayed.describe(), punch.outcome)
        return direct

    @defer.inlineCallbacks
    def dial(self, targets, peer_id, tls_client: bool, port: int):
        """Dial each target from `port` until one proves the peer;
        (Connection or None, why not). Ends the gate slot it holds."""
        reason = "no address"
        try:
            for host, target_port in targets:
                try:
                    conn = yield dial_from_port(self.reactor, self.local, self.handler, host,
                                                target_port, port, peer_id, tls_client,
                                                self.listen_host, DIAL_TIMEOUT)
                    return conn, None
                except Exception as err:   # noqa: BLE001 - the next address, or give up
                    reason = f"{host}:{target_port}: {err}"
        finally:
            self.gate.end()
        return None, reason

    # ---- the upgrade -----------------------------------------------------------

    def upgrade(self, relayed, direct) -> None:
        """The direct connection serves the peer from now on; the relayed
        one, if this side dialled it, is closed once nothing ran on it for
        RELEASE_IDLE (freeing its relay circuit; the other side leaves it
        to this one, or to the idle timeout)."""
        if direct.closed:
            return
        self.pool.replace(direct)
        if relayed.tls_client:
            self.reactor.callLater(RELEASE_CHECK, self._release, relayed)

    def _release(self, relayed) -> None:
        if relayed.closed:
            return
        session = relayed.session
        idle = self.reactor.seconds() - relayed.last_progress
        if session.open_inbound or session.open_outbound or idle < RELEASE_IDLE:
            self.reactor.callLater(RELEASE_CHECK, self._release, relayed)
            return
        self.released += 1
        relayed.close()
