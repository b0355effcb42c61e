"""DIAL_BACK on the wire: serving others' requests and asking our own
(Twisted glue around flud/node/reachability.py; docs/reachability.md).

Serving: the asker is dialled at the address its connection comes from and
nowhere else, and must prove its key there (TLS + HELLO expecting its node
id): a node cannot be used to knock on a third party's door, and a
listener that is not the asker cannot make it look reachable.

Asking: every round this node dials up to ASK_PER_ROUND live peers afresh
(a pooled connection could have been opened by the peer, and would tell
nothing of how we are seen), per address family it has a candidate for,
asks each to dial it back on its listening port, and gives the answers to
the Judge. Once the verdict is known the record lists only confirmed
addresses (a private node lists none: it is reached through a relay, or
not at all).
"""
import logging
from collections import deque

from twisted.internet import defer

from flud.node.reachability import (PER_ADDRESS_INTERVAL, PRIVATE, PUBLIC, UNKNOWN,
                                    DialBackLimiter, Judge, plain_host)
from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.connection import dial
from flud.protocol.errors import ErrorCode, RemoteError
from flud.protocol.node_record import Address

log = logging.getLogger("flud.reachability")

DIAL_TIMEOUT = 5.0
ASK_PER_ROUND = 4
FIRST_ROUND_AFTER = 1.5
RETRY_AFTER = 2.0          # no verdict yet: ask again soon (doubling)
REPROBE_INTERVAL = 600.0   # a verdict stands this long before it is checked again
ASK_TIMEOUT = 20.0


class DialBackServer:
    def __init__(self, reactor, local, handler, limiter=None):
        self.reactor = reactor
        self.local = local
        self.handler = handler
        self.limiter = limiter or DialBackLimiter()
        self.counters = {"served": 0, "reached": 0, "third_party": 0, "rate_limited": 0}

    def serve(self, conn, rid, request) -> defer.Deferred:
        seen = conn.transport.getPeer()
        observed = plain_host(seen.host)
        if request.host and plain_host(request.host) != observed:
            self.counters["third_party"] += 1
            raise RemoteError(ErrorCode.DIAL_THIRD_PARTY,
                              f"asked to dial {request.host}, but you are seen at {observed}: "
                              f"a node dials back only the address it observed")
        if not self.limiter.allow(observed, conn.peer_id, self.reactor.seconds()):
            self.counters["rate_limited"] += 1
            raise RemoteError(ErrorCode.RATE_LIMITED,
                              f"too many dial-backs asked from {observed}; try later")
        self.counters["served"] += 1
        d = dial(self.reactor, self.local, self.handler, observed, request.port,
                 expected_peer=conn.peer_id, timeout=DIAL_TIMEOUT)

        def answered(result):
            self.limiter.done()
            reached = not isinstance(result, Exception) and hasattr(result, "close")
            if reached:
                self.counters["reached"] += 1
                result.close()
            status = messages.DIAL_OK if reached else messages.DIAL_FAILED
            conn.respond(rid, messages.DialBackResponse(status, observed, seen.port))

        d.addCallbacks(answered, lambda f: answered(f.value))
        return d


class Prober:
    """Asks peers to dial this node back; keeps the verdict and the record's
    addresses in step with it."""

    def __init__(self, reactor, local, handler, membership, own_record, listen_port: int,
                 rng, extra_hints=lambda: ()):
        self.reactor = reactor
        self.local = local
        self.handler = handler
        self.membership = membership
        self.own_record = own_record
        self.listen_port = listen_port
        self.rng = rng
        self.extra_hints = extra_hints    # relay: hints a private node adds
        self.on_verdict = None            # told each verdict a round reaches
        self.judge = Judge()
        self.verdict = UNKNOWN
        self.published = None
        self.rounds = 0
        self._retry = RETRY_AFTER
        self._call = None
        self._soon = False        # a new candidate waits for a round
        self._last_round = None   # when the last round began
        self.port_observations = deque(maxlen=16)   # (local port, observed port)

    def start(self) -> None:
        self._schedule(FIRST_ROUND_AFTER)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _schedule(self, delay: float) -> None:
        self._call = self.reactor.callLater(delay, self._tick)

    def probe_soon(self) -> None:
        """A new candidate (a mapped port): ask again soon, not in 10
        minutes: once the peers asked last time take a new request (each
        serves an asker once per PER_ADDRESS_INTERVAL), or after the round
        in flight."""
        self._soon = True
        if self._call is not None and self._call.active():
            self._call.reset(self._soon_delay())

    def _soon_delay(self) -> float:
        if self._last_round is None:
            return 0.0
        return max(0.0, self._last_round + PER_ADDRESS_INTERVAL + 1.0 - self.reactor.seconds())

    def _tick(self) -> None:
        d = self.probe_once()
        d.addErrback(lambda f: log.info("reachability round failed: %s", f.value))
        d.addBoth(lambda _: self._call is not None and self._schedule(self._next_delay()))

    def _next_delay(self) -> float:
        if self._soon:
            return self._soon_delay()
        # a re-check that no peer answered (all busy) says nothing: soon again
        if self.verdict != UNKNOWN and self.judge.verdict() != UNKNOWN:
            self._retry = RETRY_AFTER
            return REPROBE_INTERVAL
        delay, self._retry = self._retry, min(self._retry * 2, REPROBE_INTERVAL)
        return delay

    def _askers(self) -> list:
        """[(peer id, host, port)]: live peers, one per address, for each
        family this node has a candidate address in."""
        families = {":" in a.host for a in self.own_candidates()}
        peers = list(self.membership.alive())
        self.rng.shuffle(peers)
        chosen, hosts = [], set()
        for v6 in sorted(families):
            count = 0
            for peer in peers:
                for address in peer.record.tcp_addresses():
                    if (":" in address.host) == v6 and address.host not in hosts:
                        chosen.append((peer.node_id, address.host, address.port))
                        hosts.add(address.host)
                        count += 1
                        break
                if count >= ASK_PER_ROUND:
                    break
        return chosen

    def own_candidates(self) -> list:
        return list(self.own_record.candidates)

    @defer.inlineCallbacks
    def probe_once(self):
        """One round: ask, judge, publish. Fires with the verdict."""
        self.rounds += 1
        self._soon, self._last_round = False, self.reactor.seconds()
        if self.verdict != UNKNOWN:
            self.judge = Judge()     # a re-check starts from a clean slate
        askers = self._askers()
        yield defer.DeferredList([self._ask(*asker) for asker in askers], consumeErrors=True)
        verdict = self.judge.verdict()
        if verdict != UNKNOWN or self.verdict == UNKNOWN:
            if verdict != self.verdict:
                log.info("reachability: %s (%s)", verdict, self.judge.summary())
            self.verdict = verdict
            self._publish()
            if self.on_verdict is not None and verdict != UNKNOWN:
                self.on_verdict(verdict)
        return self.verdict

    def _ask(self, peer_id, host, port) -> defer.Deferred:
        d = dial(self.reactor, self.local, self.handler, host, port, expected_peer=peer_id,
                 timeout=DIAL_TIMEOUT)

        local_port = []

        def ask(conn):
            local_port.append(conn.transport.getHost().port)
            request = conn.request(Op.DIAL_BACK, messages.DialBackRequest(self.listen_port))
            request.addTimeout(ASK_TIMEOUT, self.reactor)
            request.addBoth(lambda result: (conn.close(), result)[1])
            return request

        def answered(response):
            self.judge.record(host, response.observed_host, self.listen_port, response.reached)
            # how our NAT maps ports (flud/node/hole_punch.py: may a punch work?)
            self.port_observations.append((local_port[0], response.observed_port))

        d.addCallback(ask)
        d.addCallback(answered)
        return d

    def republish(self) -> None:
        """The extra hints changed (a relay reserved or lost)."""
        self._publish()

    def _publish(self) -> None:
        if self.verdict == UNKNOWN:
            return
        if self.verdict == PUBLIC:
            addresses = [Address.tcp(h, p) for h, p in self.judge.confirmed()]
        else:
            addresses = []
        addresses += list(self.extra_hints())
        if addresses != self.published:
            self.published = addresses
            self.own_record.move(addresses)

    def summary(self) -> dict:
        summary = self.judge.summary()
        summary["verdict"] = self.verdict
        summary["rounds"] = self.rounds
        summary["published"] = [a.text() for a in self.published or []]
        return summary


__all__ = ["DialBackServer", "Prober", "PUBLIC", "PRIVATE", "UNKNOWN"]
