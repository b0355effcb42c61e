"""Connections through a relay (docs/reachability.md, "Relay").

A relayed connection is a plain TCP connection to the relay that opens with
a short preamble, before any TLS:

    CONNECT: "FLUDRLY1" "C" target node id (32)     the dialler, to the relay
    ACCEPT:  "FLUDRLY1" "A" circuit token (16) + 16 zero bytes
                                                     the target, to the relay

The relay reads the preamble, pairs a CONNECT with the target's ACCEPT and
from then on copies bytes both ways (flud/node/relay.py). Everything after
the preamble is flud's own TLS and HELLO, end to end between the dialler and
the target: the relay sees ciphertext, and cannot pass for the target (the
dialler expects the target's node id, proved by its key in HELLO).

A TLS record never starts with "F" (0x46): the relay's door tells a
preamble from a direct connection by its first byte.
"""
from twisted.internet import defer

from flud.protocol.connection import Connection, _DialFactory

MAGIC = b"FLUDRLY1"
CONNECT = b"C"
ACCEPT = b"A"
TOKEN_SIZE = 16
PREAMBLE_SIZE = len(MAGIC) + 1 + 32
FIRST_BYTE = MAGIC[:1]


def connect_preamble(target_id: bytes) -> bytes:
    if len(target_id) != 32:
        raise ValueError("a node id is 32 bytes")
    return MAGIC + CONNECT + target_id


def accept_preamble(token: bytes) -> bytes:
    if len(token) != TOKEN_SIZE:
        raise ValueError(f"a circuit token is {TOKEN_SIZE} bytes")
    return MAGIC + ACCEPT + token + bytes(32 - TOKEN_SIZE)


def parse_preamble(data: bytes):
    """(kind, value) of a whole preamble: (b"C", target id) or (b"A",
    token); ValueError if it is not one."""
    if len(data) < PREAMBLE_SIZE or data[:len(MAGIC)] != MAGIC:
        raise ValueError("not a relay preamble")
    kind, value = data[len(MAGIC):len(MAGIC) + 1], data[len(MAGIC) + 1:PREAMBLE_SIZE]
    if kind == CONNECT:
        return kind, value
    if kind == ACCEPT and value[TOKEN_SIZE:] == bytes(32 - TOKEN_SIZE):
        return kind, value[:TOKEN_SIZE]
    raise ValueError("not a relay preamble")


class PreambleConnection(Connection):
    """A Connection that writes a relay preamble before its TLS."""

    preamble = b""
    relayed = True      # a hole punch may replace it (flud/node/puncher.py)

    def connectionMade(self):
        self.transport.write(self.preamble)
        super().connectionMade()


class _RelayedDialFactory(_DialFactory):
    def __init__(self, local, handler, clock, expected_peer, preamble, tls_client=True):
        super().__init__(local, handler, clock, expected_peer)
        self.preamble = preamble
        self.tls_client = tls_client

    def buildProtocol(self, addr):
        conn = PreambleConnection(self.local, self.handler, self.clock,
                                  tls_client=self.tls_client, expected_peer=self.expected_peer)
        conn.preamble = self.preamble
        conn.ready.chainDeferred(self.result)
        return conn


def dial_through(reactor, local, handler, relay_host: str, relay_port: int, target_id: bytes,
                 timeout: float = 10.0) -> defer.Deferred:
    """A ready Connection to target_id through the relay at
    relay_host:relay_port (TLS and HELLO end to end, the target's id checked)."""
    factory = _RelayedDialFactory(local, handler, reactor, target_id, connect_preamble(target_id))
    reactor.connectTCP(relay_host, relay_port, factory, timeout=timeout)
    return factory.result


def accept_through(reactor, local, handler, relay_host: str, relay_port: int, token: bytes,
                   timeout: float = 10.0) -> defer.Deferred:
    """The target's side: connect to the relay, name the circuit, then be
    the TLS server of whoever dialled (the peer's id is learnt from HELLO)."""
    factory = _RelayedDialFactory(local, handler, reactor, None, accept_preamble(token),
                                  tls_client=False)
    reactor.connectTCP(relay_host, relay_port, factory, timeout=timeout)
    return factory.result
