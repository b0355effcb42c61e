"""The relay's bounds and its door, without sockets (StringTransport)."""
import pytest
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from flud.node import relay as relay_module
from flud.node.relay import RelayService, Sniffer, Splice, splice_pair
from flud.protocol import messages
from flud.protocol.errors import ErrorCode, RemoteError
from flud.protocol.relayed import (PREAMBLE_SIZE, accept_preamble, connect_preamble,
                                   parse_preamble)


def test_preambles_round_trip_and_nothing_else_parses():
    target, token = b"\x07" * 32, b"\x09" * 16
    assert parse_preamble(connect_preamble(target)) == (b"C", target)
    assert parse_preamble(accept_preamble(token)) == (b"A", token)
    assert len(connect_preamble(target)) == len(accept_preamble(token)) == PREAMBLE_SIZE
    for junk in (b"\x16\x03\x01" + bytes(38), b"FLUDRLY1X" + bytes(32),
                 b"FLUDRLY1A" + token + b"\x01" * 16, b"FLUDRLY1C"):
        with pytest.raises(ValueError):
            parse_preamble(junk)


class FakeConn:
    def __init__(self, peer_id, host="198.18.200.1"):
        self.peer_id = peer_id
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", host, 50000))
        self.answers = []
        self.requests = []

    def respond(self, rid, message):
        self.answers.append(message)

    def request(self, op, message):
        self.requests.append((op, message))
        return defer.succeed(messages.Empty())


def node(i):
    return bytes([i]) * 32


def test_reservations_are_capped_per_address_and_refused_when_off():
    relay = RelayService(MemoryReactorClock())
    for i in range(relay_module.PER_ADDRESS_RESERVATIONS):
        relay.reserve(FakeConn(node(i)), i, None)
    with pytest.raises(RemoteError) as full:
        relay.reserve(FakeConn(node(99)), 99, None)
    assert full.value.code == ErrorCode.RELAY_FULL
    relay.reserve(FakeConn(node(98), host="198.18.200.3"), 98, None)   # another address
    again = FakeConn(node(0))
    relay.reserve(again, 5, None)                       # a renewal is not a new one
    assert again.answers == [messages.Reservation(relay_module.RESERVATION_SECONDS)]
    relay.connection_lost(again)
    assert node(0) not in relay.reservations
    private = RelayService(MemoryReactorClock(), reachable=lambda: False)
    with pytest.raises(RemoteError) as unreachable:
        private.reserve(FakeConn(node(1)), 1, None)
    assert unreachable.value.code == ErrorCode.RELAY_REFUSED
    off = RelayService(MemoryReactorClock(), enabled=False)
    with pytest.raises(RemoteError) as refused:
        off.reserve(FakeConn(node(1)), 1, None)
    assert refused.value.code == ErrorCode.RELAY_REFUSED


def test_reservations_expire():
    clock = MemoryReactorClock()
    relay = RelayService(clock)
    relay.reserve(FakeConn(node(1)), 1, None)
    clock.advance(relay_module.RESERVATION_SECONDS + 1)
    relay._expire(clock.seconds())
    assert relay.reservations == {}


class FakeInner:
    def __init__(self):
        self.ready = defer.Deferred()
        self.transport = None
        self.received = b""

    def makeConnection(self, transport):
        self.transport = transport

    def dataReceived(self, data):
        self.received += data


def sniffer_on(relay, clock):
    inner = FakeInner()
    sniffer = Sniffer(inner, relay, clock)
    transport = StringTransport()
    transport.protocol = sniffer
    sniffer.makeConnection(transport)
    return sniffer, inner, transport


def test_the_door_hands_a_tls_connection_to_the_node_untouched():
    clock = MemoryReactorClock()
    sniffer, inner, transport = sniffer_on(RelayService(clock), clock)
    sniffer.dataReceived(b"\x16\x03\x01hello")
    assert transport.protocol is inner and inner.received == b"\x16\x03\x01hello"
    assert not inner.ready.called


def test_a_connect_for_a_node_with_no_reservation_is_closed():
    clock = MemoryReactorClock()
    relay = RelayService(clock)
    sniffer, inner, transport = sniffer_on(relay, clock)
    sniffer.dataReceived(connect_preamble(node(5))[:10])
    assert not transport.disconnecting
    sniffer.dataReceived(connect_preamble(node(5))[10:] + b"\x16tls")
    assert transport.disconnecting and relay.counters["no_reservation"] == 1
    inner.ready.addErrback(lambda f: None)
    assert inner.ready.called            # the gate's place is given back


def test_a_silent_connection_is_closed_after_the_preamble_timeout():
    clock = MemoryReactorClock()
    sniffer, inner, transport = sniffer_on(RelayService(clock), clock)
    clock.advance(relay_module.PREAMBLE_TIMEOUT + 1)
    assert transport.disconnected or transport.disconnecting


def test_a_circuit_is_opened_for_a_reserved_node_and_spliced():
    clock = MemoryReactorClock()
    relay = RelayService(clock)
    target = FakeConn(node(7))
    relay.reserve(target, 1, None)
    dialler, _, dialler_transport = sniffer_on(relay, clock)
    dialler.dataReceived(connect_preamble(node(7)) + b"client hello")
    (op, circuit), = target.requests
    acceptor, _, acceptor_transport = sniffer_on(relay, clock)
    acceptor.dataReceived(accept_preamble(circuit.token))
    assert acceptor_transport.value() == b"client hello"   # sent ahead, now delivered
    dialler_transport.protocol.dataReceived(b"more")
    assert acceptor_transport.value() == b"client hellomore"
    acceptor_transport.protocol.dataReceived(b"server hello")
    assert dialler_transport.value() == b"server hello"
    assert relay.counters["circuits"] == 1 and relay.circuits == 1
    dialler_transport.protocol.connectionLost()
    assert acceptor_transport.disconnecting and relay.circuits == 0


def test_a_circuit_is_held_to_its_rate():
    clock = MemoryReactorClock()
    relay = RelayService(clock, rate_limit=1000)
    a, b = Splice(relay, relay_module.Reservation(node(1), None, "h", 0)), None
    b = Splice(relay, a.held)
    a.other, b.other = b, a
    a.transport, b.transport = StringTransport(), StringTransport()
    splice_pair(a, b)
    a.dataReceived(b"x" * 1500)
    assert a.transport.producerState == "paused"
    clock.advance(1.0)
    assert a.transport.producerState == "producing"


def test_a_full_reservation_makes_room_by_closing_its_idlest_circuit():
    clock = MemoryReactorClock()
    relay = RelayService(clock)
    target = FakeConn(node(7))
    relay.reserve(target, 1, None)
    ends = []
    for i in range(relay_module.PER_RESERVATION_CIRCUITS):
        dialler, _, dialler_transport = sniffer_on(relay, clock)
        dialler.dataReceived(connect_preamble(node(7)))
        acceptor, _, _ = sniffer_on(relay, clock)
        acceptor.dataReceived(accept_preamble(target.requests[-1][1].token))
        ends.append(dialler_transport)
        clock.advance(1)
    busy = ends[0].protocol
    clock.advance(relay_module.IDLE_EVICT)
    busy.dataReceived(b"still talking")            # the oldest, but not idle
    late, _, late_transport = sniffer_on(relay, clock)
    late.dataReceived(connect_preamble(node(7)))
    assert not late_transport.disconnecting         # room was made
    assert ends[1].disconnecting and not ends[0].disconnecting
    assert relay.counters["evicted"] == 1
    assert relay.circuits == relay_module.PER_RESERVATION_CIRCUITS   # 15 spliced + 1 waiting
