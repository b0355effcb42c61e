"""NAT-PMP (RFC 6886), sans I/O: the messages a client sends a home router
to learn its external address and map a TCP port, and the retry schedule
it keeps while it waits (flud/node/natpmp_client.py does the sending).

Why our own: the one NAT-PMP library on PyPI (`NAT-PMP`, 1.3.2 of 2021)
waits on blocking sockets, retries on a schedule other than the RFC's and
needs `netifaces`, which is archived; miniupnpc does UPnP-IGD only.

Every message is version 0, then an opcode; a response has the request's
opcode + 128, a result code, and the gateway's seconds since its epoch
(its last start: a value that goes back means it lost its mappings).

    external address request   0 | 0
    ... response               0 | 128 | result(2) | epoch(4) | address(4)
    mapping request            0 | 1 udp, 2 tcp | 0(2) | internal port(2)
                               | suggested external port(2) | lifetime(4)
    ... response               0 | 128+op | result(2) | epoch(4) | internal port(2)
                               | external port(2) | lifetime granted(4)

A deletion is a mapping request with lifetime 0 and external port 0.
"""
import ipaddress
import struct
from dataclasses import dataclass

from flud.errors import FludError

PORT = 5351
VERSION = 0
OP_EXTERNAL_ADDRESS = 0
OP_MAP_UDP = 1
OP_MAP_TCP = 2
RESPONSE_BIT = 128
# RFC 6886 3.1: wait 250 ms for the first answer, double the wait at each
# resend, give up after the 9th (about 128 s in all)
FIRST_WAIT = 0.25
ATTEMPTS = 9

RESULTS = {
    0: "success",
    1: "unsupported version",
    2: "not authorized or refused (NAT-PMP turned off on the gateway?)",
    3: "network failure (the gateway has no external address)",
    4: "out of resources (the gateway cannot make more mappings)",
    5: "unsupported opcode",
}

_HEADER = struct.Struct("!BBHI")              # version, op, result, epoch
_ADDRESS_RESPONSE = struct.Struct("!BBHI4s")
_MAPPING_REQUEST = struct.Struct("!BBHHHI")
_MAPPING_RESPONSE = struct.Struct("!BBHIHHI")


class NatPmpError(FludError):
    """The gateway answered NAT-PMP with an error, or not at all."""

    code = "NATPMP_FAILED"


class NatPmpRefused(NatPmpError):
    """The gateway answered with a result code other than success."""

    code = "NATPMP_REFUSED"

    def __init__(self, result: int):
        self.result = result
        super().__init__(f"the gateway refused: {RESULTS.get(result, f'result code {result}')}")


class NoNatPmpGateway(NatPmpError):
    """No answer after every resend (or the gateway's port is closed)."""

    code = "NATPMP_NO_GATEWAY"


@dataclass(frozen=True)
class ExternalAddress:
    epoch: int
    address: str


@dataclass(frozen=True)
class Mapping:
    epoch: int
    op: int
    internal_port: int
    external_port: int
    lifetime: int       # seconds granted; 0 for a deletion


def external_address_request() -> bytes:
    return bytes((VERSION, OP_EXTERNAL_ADDRESS))


def mapping_request(internal_port: int, external_port: int, lifetime: int,
                    op: int = OP_MAP_TCP) -> bytes:
    """Ask for internal_port to be reachable at external_port (a suggestion)
    for lifetime seconds; lifetime 0 deletes the mapping."""
    if op not in (OP_MAP_UDP, OP_MAP_TCP):
        raise ValueError(f"opcode {op}: a mapping is 1 (UDP) or 2 (TCP)")
    for name, port in (("internal", internal_port), ("external", external_port)):
        if not 0 <= port <= 0xFFFF:
            raise ValueError(f"{name} port {port}: from 0 to 65535")
    if internal_port == 0:
        raise ValueError("internal port 0: a mapping names the port it forwards to")
    if not 0 <= lifetime <= 0xFFFFFFFF:
        raise ValueError(f"lifetime {lifetime}: from 0 to 2**32 - 1 seconds")
    return _MAPPING_REQUEST.pack(VERSION, op, 0, internal_port, external_port, lifetime)


def delete_request(internal_port: int, op: int = OP_MAP_TCP) -> bytes:
    return mapping_request(internal_port, 0, 0, op)


def parse_response(data: bytes, request_op: int):
    """The answer to a request of request_op in data: ExternalAddress or
    Mapping; None where data is not that answer (too short, another
    version or opcode: to be ignored, RFC 6886 3.5). NatPmpRefused where
    the gateway answered with an error code."""
    if len(data) < _HEADER.size:
        return None
    version, op, result, epoch = _HEADER.unpack_from(data)
    if version != VERSION or op != RESPONSE_BIT + request_op:
        return None
    if result != 0:
        raise NatPmpRefused(result)
    if request_op == OP_EXTERNAL_ADDRESS:
        if len(data) < _ADDRESS_RESPONSE.size:
            return None
        packed = _ADDRESS_RESPONSE.unpack_from(data)[4]
        return ExternalAddress(epoch, str(ipaddress.IPv4Address(packed)))
    if len(data) < _MAPPING_RESPONSE.size:
        return None
    _, _, _, _, internal, external, lifetime = _MAPPING_RESPONSE.unpack_from(data)
    return Mapping(epoch, request_op, internal, external, lifetime)


def gateway_restarted(previous_epoch: int, previous_at: float, epoch: int, now: float) -> bool:
    """RFC 6886 3.6: the gateway's epoch should have advanced by about the
    time that passed here; one that is more than 2 s behind 7/8 of that
    restarted (and forgot every mapping: make them again)."""
    return epoch < previous_epoch + (now - previous_at) * 7 / 8 - 2


class Exchange:
    """One request until its answer, sans I/O: what to send and until when
    to wait. The caller sends `datagram` at start() and after each
    timed_out() that returns a deadline, and passes each datagram that
    comes from the gateway to received()."""

    def __init__(self, request: bytes, first_wait: float = FIRST_WAIT,
                 attempts: int = ATTEMPTS):
        if len(request) < 2:
            raise ValueError("a NAT-PMP request has at least a version and an opcode")
        if attempts < 1:
            raise ValueError("at least one attempt")
        self.datagram = request
        self.op = request[1]
        self.first_wait = first_wait
        self.attempts = attempts
        self.sent = 0
        self.result = None

    def start(self, now: float) -> float:
        """The first send; returns when to give it up."""
        return self._send(now)

    def timed_out(self, now: float) -> float:
        """No answer by the deadline: returns the next one (send again), or
        raises NoNatPmpGateway after the last attempt."""
        if self.sent >= self.attempts:
            waited = self.first_wait * (2 ** self.attempts - 1)
            raise NoNatPmpGateway(f"no NAT-PMP answer from the gateway after {self.sent} "
                                  f"attempts ({waited:g} s)")
        return self._send(now)

    def received(self, data: bytes):
        """A datagram from the gateway: the answer (and this exchange is
        done), or None to keep waiting. NatPmpRefused on an error code."""
        answer = parse_response(data, self.op)
        if answer is not None:
            self.result = answer
        return answer

    def _send(self, now: float) -> float:
        wait = self.first_wait * 2 ** self.sent
        self.sent += 1
        return now + wait


def default_gateway(route_table: str):
    """The IPv4 default gateway in /proc/net/route's text, or None."""
    for line in route_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        destination, gateway, flags, mask = fields[1], fields[2], fields[3], fields[7]
        try:
            if int(destination, 16) or int(mask, 16) or not int(flags, 16) & 0x2:
                continue          # not a default route, or no gateway (RTF_GATEWAY)
            value = int(gateway, 16)
        except ValueError:
            continue
        # the kernel prints the address's four bytes as one native integer
        return str(ipaddress.IPv4Address(struct.pack("=I", value)))
    return None
