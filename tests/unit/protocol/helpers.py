"""Shared bits of the protocol unit tests: identities, TLS contexts, Deferreds,
and two connection.Connection objects joined in memory (twisted.test.iosim)."""

from __future__ import annotations

import blake3
from twisted.internet import defer, task
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.test import iosim

from flud.keys import Identity, self_signed_cert_pem
from flud.protocol import messages
from flud.protocol.codec import frame_header
from flud.protocol.tls import make_context
from flud.protocol.party import LocalParty
from flud.protocol.connection import Connection


def encode_frame(frame_type: int, op: int, flags: int, request_id: int,
                 payload: bytes = b"") -> bytes:
    """One frame's bytes on the wire: its header, then its payload."""
    return frame_header(frame_type, op, flags, request_id, len(payload)) + payload


def key_of(data: bytes) -> bytes:
    return blake3.blake3(data).digest()


def write_cert(tmp_path, identity: Identity, name: str) -> tuple[str, str]:
    cert = tmp_path / f"{name}.crt"
    key = tmp_path / f"{name}.key"
    cert.write_bytes(self_signed_cert_pem(identity))
    key.write_bytes(identity.private_pem())
    return str(cert), str(key)


def make_party(tmp_path, name: str, role: int = messages.ROLE_NODE,
               identity: Identity | None = None) -> LocalParty:
    identity = identity or Identity.generate()
    cert, key = write_cert(tmp_path, identity, name)
    return LocalParty(identity, role,
                      server_context=make_context(cert, key, server_side=True),
                      client_context=make_context(cert, key, server_side=False),
                      listen_host="127.0.0.1" if role == messages.ROLE_NODE else "",
                      listen_port=4000 if role == messages.ROLE_NODE else 0)


# ---- Deferreds ----------------------------------------------------------------

_PENDING = object()


class RoomyQueue:
    """A send queue (flud.client.network.SendQueue) with a fixed room: what
    a connection may queue past its transport's pause, and what it holds."""

    def __init__(self, room=0):
        self.closed = False
        self.held = 0
        self._room = room

    def room(self):
        return self._room

    def hold(self, nbytes, what):
        self.held += nbytes

    def release(self, nbytes, what):
        self.held -= nbytes


class Outcome:
    """Watches a Deferred (attach before the events that fire it)."""

    def __init__(self, d: defer.Deferred):
        self.value = _PENDING
        d.addBoth(self._set)

    def _set(self, value):
        self.value = value
        return None  # the outcome is consumed here: no "unhandled error" noise

    @property
    def fired(self) -> bool:
        return self.value is not _PENDING

    def result(self):
        assert self.fired, "the Deferred has not fired"
        if isinstance(self.value, Failure):
            raise AssertionError(f"expected a result, got {self.value.getTraceback()}")
        return self.value

    def failure(self, *types) -> BaseException:
        assert self.fired, "the Deferred has not fired"
        assert isinstance(self.value, Failure), f"expected a failure, got {self.value!r}"
        if types:
            assert self.value.check(*types), f"expected {types}, got {self.value.value!r}"
        return self.value.value


# ---- handlers -------------------------------------------------------------------

class RecordingHandler:
    """A handler that records every call; answers PING itself."""

    def __init__(self, answer_ping: bool = True):
        self.ready = []
        self.lost = []
        self.requests = []
        self.data = []
        self.cancelled = []
        self.answer_ping = answer_ping

    def connection_ready(self, conn):
        self.ready.append(conn)

    def connection_lost(self, conn):
        self.lost.append(conn)

    def request_received(self, conn, rid, op, message, end):
        self.requests.append((conn, rid, op, message, end))
        if self.answer_ping and op == messages.Op.PING:
            conn.respond(rid, messages.Empty())

    def request_data(self, conn, rid, data, end):
        self.data.append((conn, rid, bytes(data), end))

    def request_cancelled(self, conn, rid):
        self.cancelled.append((conn, rid))


# ---- two connections in memory ----------------------------------------------------

class Pair:
    def __init__(self, client: Connection, server: Connection, pump: iosim.IOPump,
                 clock: task.Clock):
        self.client = client
        self.server = server
        self.pump = pump
        self.clock = clock
        self.client_ready = Outcome(client.ready)
        self.server_ready = Outcome(server.ready)

    def flush(self):
        self.pump.flush()


class BoundedTransport(iosim.FakeTransport):
    """An in-memory transport that pauses its streaming producer once it holds
    more than `limit` bytes (None: never), as Twisted's FileDescriptor does
    past its bufferSize. `written` lists the sizes written since the test
    last cleared it; the test plays the drain (the producer's resumeProducing)."""

    def __init__(self, protocol, isServer):
        super().__init__(protocol, isServer)
        self.limit = None
        self.written = []

    def write(self, data):
        super().write(data)
        self.written.append(len(data))
        if self.limit is not None and sum(self.written) > self.limit:
            self.producer.pauseProducing()


def connect(server_party: LocalParty, server_handler, client_party: LocalParty,
            client_handler, clock: task.Clock | None = None,
            expected_peer: bytes | None = None, greet: bool = True,
            client_class=Connection, server_class=Connection) -> Pair:
    """A TLS client Connection and a TLS server Connection, joined by an IOPump
    (the client's transport is a BoundedTransport, unbounded until told)."""
    clock = clock if clock is not None else task.Clock()
    server = server_class(server_party, server_handler, clock, tls_client=False)
    client = client_class(client_party, client_handler, clock, tls_client=True,
                          expected_peer=expected_peer)
    server_io = iosim.FakeTransport(server, isServer=True)
    client_io = BoundedTransport(client, isServer=False)
    server.makeConnection(server_io)
    client.makeConnection(client_io)
    pump = iosim.IOPump(client, server, client_io, server_io, debug=False, clock=clock)
    pair = Pair(client, server, pump, clock)  # watches `ready` before a byte moves
    if greet:
        pump.flush()
    return pair


def send_raw(conn: Connection, plaintext: bytes) -> None:
    """Write bytes through conn's TLS layer, bypassing its Session (crafted frames)."""
    conn.transport.write(b"".join(conn._tls.send(plaintext)))


class TCPStringTransport(StringTransport):
    """StringTransport with the ITCPTransport options a Connection sets."""

    no_delay = False

    def setTcpNoDelay(self, enabled):
        self.no_delay = enabled

    def getTcpNoDelay(self):
        return self.no_delay
