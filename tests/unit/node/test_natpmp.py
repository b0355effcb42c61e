"""NAT-PMP (RFC 6886): the codec and the retry schedule (flud/node/natpmp.py)
byte for byte, and the Twisted glue (flud/node/natpmp_client.py) on a fake
UDP reactor. Against miniupnpd's NAT-PMP for real:
tests/integration/test_netlab_portmap.py."""
import struct

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from flud.node import natpmp
from flud.node.natpmp_client import NatPmpClient


def address_response(epoch=7, address="198.18.200.1", result=0, op=128, version=0):
    return struct.pack("!BBHI", version, op, result, epoch) + bytes(
        int(x) for x in address.split("."))


def mapping_response(internal=7400, external=7400, lifetime=3600, epoch=7, result=0, op=130):
    return struct.pack("!BBHIHHI", 0, op, result, epoch, internal, external, lifetime)


# ---- the codec -------------------------------------------------------------------

def test_requests_are_the_rfc_bytes():
    assert natpmp.external_address_request() == b"\x00\x00"
    assert natpmp.mapping_request(7400, 7401, 3600) == bytes(
        [0, 2, 0, 0, 0x1C, 0xE8, 0x1C, 0xE9, 0, 0, 0x0E, 0x10])
    assert natpmp.mapping_request(53, 53, 60, natpmp.OP_MAP_UDP)[:2] == b"\x00\x01"
    # a deletion: lifetime 0, external port 0 (RFC 6886 3.4)
    assert natpmp.delete_request(7400) == bytes([0, 2, 0, 0, 0x1C, 0xE8, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("args", [(0, 1, 60), (70000, 1, 60), (1, -1, 60), (1, 1, -5),
                                  (1, 1, 2 ** 32)])
def test_a_request_out_of_range_is_refused_before_it_is_sent(args):
    with pytest.raises(ValueError):
        natpmp.mapping_request(*args)
    with pytest.raises(ValueError):
        natpmp.mapping_request(1, 1, 1, op=0)


def test_answers_parse_into_records():
    assert natpmp.parse_response(address_response(), 0) == natpmp.ExternalAddress(
        7, "198.18.200.1")
    assert natpmp.parse_response(mapping_response(external=7411, lifetime=1800), 2) == \
        natpmp.Mapping(7, 2, 7400, 7411, 1800)


def test_what_is_not_the_answer_is_ignored():
    assert natpmp.parse_response(b"", 0) is None
    assert natpmp.parse_response(b"\x00\x80\x00", 0) is None                 # short
    assert natpmp.parse_response(address_response()[:10], 0) is None       # truncated
    assert natpmp.parse_response(address_response(version=2), 0) is None   # PCP
    assert natpmp.parse_response(address_response(op=0), 0) is None        # a request
    assert natpmp.parse_response(mapping_response(op=129), 2) is None      # UDP's answer
    assert natpmp.parse_response(mapping_response()[:15], 2) is None


def test_an_error_code_is_a_typed_refusal_that_says_what():
    with pytest.raises(natpmp.NatPmpRefused) as caught:
        natpmp.parse_response(mapping_response(result=2), 2)
    assert caught.value.result == 2 and "refused" in str(caught.value)
    assert caught.value.code == "NATPMP_REFUSED"
    with pytest.raises(natpmp.NatPmpRefused, match="result code 99"):
        natpmp.parse_response(address_response(result=99), 0)


def test_a_gateway_whose_epoch_went_back_restarted():
    assert not natpmp.gateway_restarted(1000, 50.0, 1000 + 100, 150.0)
    assert not natpmp.gateway_restarted(1000, 50.0, 1000 + 86, 150.0)    # 7/8 and 2 s slack
    assert natpmp.gateway_restarted(1000, 50.0, 1000 + 80, 150.0)
    assert natpmp.gateway_restarted(1000, 50.0, 3, 150.0)


def test_the_default_gateway_comes_from_the_route_table():
    table = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
             "eth0\t000213C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
             "eth0\t00000000\t010213C6\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
    assert natpmp.default_gateway(table) == "198.19.2.1"
    assert natpmp.default_gateway(table.splitlines()[0] + "\n" + table.splitlines()[1]) is None
    assert natpmp.default_gateway("") is None
    assert natpmp.default_gateway("header\neth0 zz 01 0003 0 0 0 00000000\n") is None


# ---- the retry schedule ----------------------------------------------------------

def test_the_exchange_waits_250_ms_doubling_for_nine_attempts():
    exchange = natpmp.Exchange(natpmp.external_address_request())
    deadlines = [exchange.start(0.0)]
    while True:
        try:
            deadlines.append(exchange.timed_out(deadlines[-1]))
        except natpmp.NoNatPmpGateway as err:
            assert "after 9 attempts (127.75 s)" in str(err)
            break
    assert exchange.sent == 9
    assert [round(b - a, 3) for a, b in zip([0.0] + deadlines, deadlines)] == [
        0.25, 0.5, 1, 2, 4, 8, 16, 32, 64]


def test_the_exchange_keeps_waiting_past_strays_and_ends_on_its_answer():
    exchange = natpmp.Exchange(natpmp.mapping_request(7400, 7400, 60))
    exchange.start(0.0)
    assert exchange.received(address_response()) is None
    assert exchange.received(b"junk") is None
    assert exchange.received(mapping_response(lifetime=60)).lifetime == 60


# ---- the glue, on a fake UDP reactor ------------------------------------------------

class FakeUdpPort:
    def __init__(self, protocol):
        self.protocol, self.sent, self.connected, self.open = protocol, [], None, True

    def connect(self, host, port):
        self.connected = (host, port)

    def write(self, data):
        self.sent.append(data)

    def stopListening(self):
        self.open = False


class UdpReactor(Clock):
    def __init__(self):
        super().__init__()
        self.ports = []

    def listenUDP(self, port, protocol, interface=""):
        made = FakeUdpPort(protocol)
        protocol.transport = made
        self.ports.append(made)
        return made


def outcome(d):
    box = []
    d.addBoth(box.append)
    return box


def test_the_client_asks_the_gateway_on_a_connected_socket_and_closes_it():
    reactor = UdpReactor()
    client = NatPmpClient(reactor, "198.19.2.1")
    got = outcome(client.external_address())
    port = reactor.ports[0]
    assert port.connected == ("198.19.2.1", 5351) and port.sent == [b"\x00\x00"]
    reactor.advance(0.25)
    reactor.advance(0.5)
    assert len(port.sent) == 3                        # resent at 250 ms, 750 ms
    port.protocol.datagramReceived(address_response(), ("198.19.2.1", 5351))
    assert got == [natpmp.ExternalAddress(7, "198.18.200.1")]
    assert not port.open and not reactor.getDelayedCalls()


def test_requests_go_one_at_a_time():
    reactor = UdpReactor()
    client = NatPmpClient(reactor, "198.19.2.1")
    first = outcome(client.external_address())
    second = outcome(client.map_tcp(7400, 7400, 3600))
    assert len(reactor.ports) == 1
    reactor.ports[0].protocol.datagramReceived(address_response(), None)
    assert first and len(reactor.ports) == 2
    reactor.ports[1].protocol.datagramReceived(mapping_response(), None)
    assert second[0].external_port == 7400


def test_no_answer_gives_up_on_the_rfc_schedule():
    reactor = UdpReactor()
    got = outcome(NatPmpClient(reactor, "198.19.2.1").map_tcp(7400, 7400, 3600))
    reactor.pump([0.25 * 2 ** i for i in range(9)])
    assert len(reactor.ports[0].sent) == 9 and got
    assert got[0].check(natpmp.NoNatPmpGateway) and not reactor.ports[0].open


def test_a_closed_port_ends_the_wait_at_once_and_a_refusal_is_an_error():
    reactor = UdpReactor()
    client = NatPmpClient(reactor, "198.19.2.1")
    got = outcome(client.external_address())
    reactor.ports[0].protocol.connectionRefused()
    assert got[0].check(natpmp.NoNatPmpGateway) and "port unreachable" in str(got[0].value)
    got = outcome(client.map_tcp(7400, 7400, 3600))
    reactor.ports[1].protocol.datagramReceived(mapping_response(result=4), None)
    assert got[0].check(natpmp.NatPmpRefused) and "out of resources" in str(got[0].value)
    assert not reactor.getDelayedCalls()


def test_a_deletion_tries_three_times_only_and_close_cancels():
    reactor = UdpReactor()
    client = NatPmpClient(reactor, "198.19.2.1")
    got = outcome(client.delete_tcp(7400))
    reactor.pump([0.25, 0.5, 1.0])
    assert len(reactor.ports[0].sent) == 3 and got[0].check(natpmp.NoNatPmpGateway)
    pending = outcome(client.external_address())
    client.close()
    assert pending[0].check(defer.CancelledError) and not reactor.getDelayedCalls()


class RefusingUdpPort(FakeUdpPort):
    """As Twisted's connected UDP port: the kernel reports a pending ICMP
    "port unreachable" on the next send, and write() calls the protocol's
    connectionRefused() from inside itself; writing after stopListening
    fails (the socket is gone)."""

    def write(self, data):
        assert self.open, "written after the port was closed"
        super().write(data)
        if len(self.sent) == 2:
            self.protocol.connectionRefused()


def test_a_refusal_reported_by_a_resend_leaves_no_timer_writing_to_the_closed_port():
    reactor = UdpReactor()
    reactor.listenUDP = lambda port, protocol, interface="": reactor.ports.append(
        RefusingUdpPort(protocol)) or reactor.ports[-1]
    got = outcome(NatPmpClient(reactor, "198.19.2.1").external_address())
    reactor.advance(0.25)                                  # the resend: refused inside write()
    assert got[0].check(natpmp.NoNatPmpGateway)
    assert not reactor.getDelayedCalls()                   # nothing left to resend
    reactor.pump([0.5, 1.0, 2.0])
    assert len(reactor.ports[0].sent) == 2
