"""connection.Connection: TLS + HELLO authentication + requests, two of them in memory."""

from __future__ import annotations

import pytest
from twisted.internet import task

from flud.keys import Identity
from flud.protocol import messages
from flud.protocol.client import ClientOnlyHandler, PeerClient
from flud.protocol.codec import DATA_CHUNK, FLAG_END, FrameType, Op
from flud.protocol.errors import (AuthenticationFailed, ConnectionLost, ErrorCode,
                                  RemoteError)
from flud.protocol.tls import hello_transcript
from flud.protocol.connection import HANDSHAKE_TIMEOUT, IDLE_TIMEOUT, Connection
from flud.protocol.outbound import BytesSource, FedSource
from tests.unit.protocol.helpers import (Outcome, RecordingHandler, RoomyQueue,
                                         TCPStringTransport, connect, encode_frame, key_of, make_party,
                                         send_raw)


@pytest.fixture
def node(tmp_path):
    return make_party(tmp_path, "node")


@pytest.fixture
def client_party(tmp_path):
    return make_party(tmp_path, "client", role=messages.ROLE_CLIENT)


@pytest.fixture
def handlers():
    return RecordingHandler(), RecordingHandler()


@pytest.fixture
def pair(node, client_party, handlers):
    server_handler, client_handler = handlers
    return connect(node, server_handler, client_party, client_handler)


# ---- HELLO authentication ------------------------------------------------------

def test_hello_authenticates_both_sides(pair, node, client_party, handlers):
    server_handler, client_handler = handlers
    assert pair.client_ready.result() is pair.client
    assert pair.server_ready.result() is pair.server
    assert pair.client.peer_id == node.identity.node_id
    assert pair.server.peer_id == client_party.identity.node_id
    assert pair.server.peer_hello.role == messages.ROLE_CLIENT
    assert pair.client.peer_hello.role == messages.ROLE_NODE
    assert (pair.client.peer_hello.listen_host, pair.client.peer_hello.listen_port) == ("127.0.0.1", 4000)
    assert pair.client.peer_hello.public_key == node.identity.public_der
    assert server_handler.ready == [pair.server] and client_handler.ready == [pair.client]
    assert pair.client.bytes_out > 0 and pair.server.bytes_in == pair.client.bytes_out


def test_expected_peer_that_matches(node, client_party, handlers):
    pair = connect(node, handlers[0], client_party, handlers[1],
                   expected_peer=node.identity.node_id)
    assert pair.client_ready.result() is pair.client


def test_expected_peer_mismatch_fails_ready_and_closes(node, client_party, handlers):
    server_handler, client_handler = handlers
    other = Identity.generate().node_id
    pair = connect(node, server_handler, client_party, client_handler, expected_peer=other)
    error = pair.client_ready.failure(AuthenticationFailed)
    assert other.hex()[:12] in str(error) and node.identity.node_id.hex()[:12] in str(error)
    assert pair.client.closed and pair.server.closed
    assert client_handler.ready == [] and client_handler.lost == [pair.client]
    assert server_handler.lost == [pair.server]
    assert Outcome(pair.client.request(Op.PING, messages.Empty())).failure(ConnectionLost)


class WrongBindingConnection(Connection):
    """Signs its HELLO over some other TLS session's channel binding."""

    def _send_hello(self):
        identity = self.local.identity
        signature = identity.sign(hello_transcript(self.tls_client, self.forged_binding()))
        self.session.send_hello(messages.Hello(
            messages.PROTOCOL_VERSION, self.local.role, 0, self.public_key(), signature, ""))
        self._hello_sent = True

    def forged_binding(self):
        return bytes(a ^ 1 for a in self._tls.channel_binding)

    def public_key(self):
        return self.local.identity.public_der


class ReflectedSideConnection(WrongBindingConnection):
    """Right session, but signed as if it were the TLS server (a reflected HELLO)."""

    def _send_hello(self):
        identity = self.local.identity
        signature = identity.sign(hello_transcript(not self.tls_client, self._tls.channel_binding))
        self.session.send_hello(messages.Hello(
            messages.PROTOCOL_VERSION, self.local.role, 0, identity.public_der, signature, ""))
        self._hello_sent = True


class ClaimsAnotherKeyConnection(WrongBindingConnection):
    """Claims someone else's public key, signs with its own."""
    victim = Identity.generate()

    def forged_binding(self):
        return self._tls.channel_binding

    def public_key(self):
        return self.victim.public_der


class GarbageKeyConnection(WrongBindingConnection):
    def forged_binding(self):
        return self._tls.channel_binding

    def public_key(self):
        return b"\x30\x03\x02\x01\x01"


@pytest.mark.parametrize("client_class", [WrongBindingConnection, ReflectedSideConnection,
                                          ClaimsAnotherKeyConnection, GarbageKeyConnection])
def test_a_hello_that_does_not_prove_its_key_is_rejected(node, client_party, handlers,
                                                        client_class):
    server_handler, client_handler = handlers
    pair = connect(node, server_handler, client_party, client_handler, client_class=client_class)
    pair.server_ready.failure(AuthenticationFailed)
    assert pair.server.peer_id is None and server_handler.ready == []
    assert pair.server.closed and pair.client.closed
    # TLS 1.2: the node finishes its handshake first, so its own HELLO went out
    # before the client's arrived; after that the unproven peer gets nothing.
    assert pair.client_ready.fired
    assert client_handler.lost == [pair.client] and server_handler.lost == [pair.server]
    assert server_handler.requests == []


def test_an_honest_hello_over_the_same_classes_is_accepted(node, client_party, handlers):
    # The forging classes above differ from Connection only in what they sign.
    class Honest(WrongBindingConnection):
        def forged_binding(self):
            return self._tls.channel_binding

    pair = connect(node, handlers[0], client_party, handlers[1], client_class=Honest)
    pair.server_ready.result()
    pair.client_ready.result()


def test_a_hello_with_the_wrong_version_closes(node, client_party, handlers):
    class Version2(Connection):
        def _send_hello(self):
            super()._send_hello()
            self.session._outbound[-1] = b"\x00\x02" + self.session._outbound[-1][2:]

    pair = connect(node, handlers[0], client_party, handlers[1], client_class=Version2)
    error = pair.server_ready.failure(RemoteError)
    assert error.code == ErrorCode.VERSION
    assert pair.server.closed and pair.client.closed


def test_a_malformed_hello_closes_without_escaping(node, client_party, handlers):
    class BadRole(Connection):
        def _send_hello(self):
            self.session.send_hello(messages.Hello(1, 9, 0, b"k", b"s", ""))
            self._hello_sent = True

    pair = connect(node, handlers[0], client_party, handlers[1], client_class=BadRole)
    assert pair.server_ready.failure(RemoteError).code == ErrorCode.MALFORMED
    assert pair.server.closed and pair.client.closed


def test_a_frame_before_hello_closes(node, client_party, handlers):
    class RequestFirst(Connection):
        def _send_hello(self):
            send_raw(self, encode_frame(FrameType.REQUEST, Op.PING, FLAG_END, 1))
            self._hello_sent = True

    pair = connect(node, handlers[0], client_party, handlers[1], client_class=RequestFirst)
    assert pair.server_ready.failure(RemoteError).code == ErrorCode.PROTOCOL
    assert handlers[0].requests == []


def test_garbage_instead_of_tls_closes(node, handlers):
    clock = task.Clock()
    conn = Connection(node, handlers[0], clock, tls_client=False)
    ready = Outcome(conn.ready)
    transport = TCPStringTransport()
    conn.makeConnection(transport)
    conn.dataReceived(b"SSH-2.0-OpenSSH_9.6\r\n" + b"\x00" * 100)
    ready.failure()
    assert transport.disconnecting and conn.closed
    assert transport.value() == b""


# ---- timeouts ------------------------------------------------------------------

def test_handshake_timeout_closes_a_silent_connection(node, handlers):
    clock = task.Clock()
    conn = Connection(node, handlers[0], clock, tls_client=False)
    ready = Outcome(conn.ready)
    transport = TCPStringTransport()
    conn.makeConnection(transport)
    clock.advance(HANDSHAKE_TIMEOUT - 0.1)
    assert not transport.disconnecting and not ready.fired
    clock.advance(0.1)
    assert transport.disconnecting
    ready.failure(AuthenticationFailed)
    conn.connectionLost(None)
    assert handlers[0].lost == [conn]
    assert clock.getDelayedCalls() == []


def test_handshake_timeout_closes_a_peer_that_never_sends_hello(node, client_party, handlers):
    class Mute(Connection):
        def _send_hello(self):
            self._hello_sent = True  # TLS completes, HELLO never comes

    clock = task.Clock()
    pair = connect(node, handlers[0], client_party, handlers[1], clock=clock, client_class=Mute)
    assert pair.client_ready.fired  # the node's HELLO was fine
    assert not pair.server_ready.fired and not pair.server.closed
    clock.advance(HANDSHAKE_TIMEOUT)
    pair.flush()
    pair.server_ready.failure(AuthenticationFailed)
    assert pair.server.closed and pair.client.closed
    assert handlers[0].ready == []


def test_an_authenticated_connection_outlives_the_handshake_timeout(pair):
    pair.clock.advance(HANDSHAKE_TIMEOUT * 2)
    pair.flush()
    assert not pair.client.closed and not pair.server.closed
    outcome = Outcome(pair.client.request(Op.PING, messages.Empty()))
    pair.flush()
    outcome.result()


def test_idle_timeout_closes_an_idle_connection(pair):
    pair.clock.advance(IDLE_TIMEOUT - 1)
    pair.flush()
    assert not pair.server.closed
    pair.clock.advance(1)
    pair.clock.advance(1)
    pair.flush()
    assert pair.server.closed and pair.client.closed


def test_idle_timeout_spares_a_connection_with_an_open_request(node, client_party, handlers):
    server_handler, client_handler = handlers
    server_handler.answer_ping = False
    pair = connect(node, server_handler, client_party, client_handler)
    outcome = Outcome(pair.client.request(Op.PING, messages.Empty()))
    pair.flush()
    for _ in range(5):
        pair.clock.advance(IDLE_TIMEOUT)
    pair.flush()
    assert not pair.client.closed and not pair.server.closed
    conn, rid = server_handler.requests[0][:2]
    conn.respond(rid, messages.Empty())
    pair.flush()
    outcome.result()
    pair.clock.advance(IDLE_TIMEOUT + 1)
    pair.clock.advance(IDLE_TIMEOUT + 1)
    pair.flush()
    assert pair.client.closed and pair.server.closed


# ---- requests both ways ----------------------------------------------------------

def test_requests_both_ways(node, client_party):
    server_handler = RecordingHandler()
    pair = connect(node, server_handler, client_party, ClientOnlyHandler())
    ping = Outcome(pair.client.request(Op.PING, messages.Empty()))
    back = Outcome(pair.server.request(Op.PING, messages.Empty()))
    peers = Outcome(pair.server.request(Op.PEERS, messages.PeerList([])))
    store = Outcome(PeerClient(pair.server).store(key_of(b"x"), b"x"))
    pair.flush()
    assert ping.result() == messages.Empty() and back.result() == messages.Empty()
    assert peers.result() == messages.PeerList([])
    assert store.failure(RemoteError).code == ErrorCode.UNKNOWN_OP


def test_cancel_a_request(pair, handlers):
    server_handler, _ = handlers
    server_handler.answer_ping = False
    d = pair.client.request(Op.PING, messages.Empty())
    outcome = Outcome(d)
    pair.flush()
    [(conn, rid, *_)] = server_handler.requests
    pair.client.cancel(d)
    assert outcome.failure(RemoteError).code == ErrorCode.CANCELLED
    pair.flush()
    assert server_handler.cancelled == [(pair.server, rid)]
    out_before = pair.server.bytes_out
    conn.respond(rid, messages.Empty())  # too late: nothing is sent for it
    assert pair.server.bytes_out == out_before
    assert not pair.client.closed and not pair.server.closed
    server_handler.answer_ping = True
    again = Outcome(PeerClient(pair.client).ping())
    pair.flush()
    again.result()


def test_cancel_while_a_response_streams_in(pair, handlers):
    server_handler, _ = handlers
    chunks = []
    d = pair.client.request(Op.RETRIEVE, messages.RetrieveRequest(key_of(b"k")), sink=chunks.append)
    outcome = Outcome(d)
    pair.flush()
    [(conn, rid, *_)] = server_handler.requests
    conn.pauseProducing()  # a slow network: the stream is queued, not sent
    data = b"z" * (3 * DATA_CHUNK)
    closed = []
    source = BytesSource(data)
    source.close = lambda: closed.append(True)
    conn.respond_stream(rid, messages.RetrieveResponse(len(data)), source)
    pair.flush()
    pair.client.cancel(d)
    pair.flush()
    conn.resumeProducing()
    pair.flush()
    assert outcome.failure(RemoteError).code == ErrorCode.CANCELLED
    assert chunks == [] and closed == [True]
    assert server_handler.cancelled == [(pair.server, rid)]
    assert not pair.client.closed


def test_connection_lost_fails_pending_requests(pair, handlers):
    handlers[0].answer_ping = False
    outcome = Outcome(pair.client.request(Op.PING, messages.Empty()))
    pair.flush()
    pair.server.close()
    pair.flush()
    outcome.failure(ConnectionLost)
    assert Outcome(pair.client.request(Op.PING, messages.Empty())).failure(ConnectionLost)
    assert handlers[1].lost == [pair.client] and handlers[0].lost == [pair.server]


def test_a_request_that_cannot_be_encoded_fails_its_deferred(pair):
    outcome = Outcome(PeerClient(pair.client).retrieve(b"short key"))
    assert outcome.failure(RemoteError).code == ErrorCode.BAD_KEY
    assert pair.client.session.open_outbound == 0


def test_a_request_with_an_impossible_field_fails_its_deferred(pair):
    outcome = Outcome(PeerClient(pair.client).retrieve(key_of(b"k"), 0, -1))
    outcome.failure()
    assert pair.client.session.open_outbound == 0


def test_a_malformed_response_fails_only_its_request(pair, handlers):
    server_handler, _ = handlers
    outcome = Outcome(PeerClient(pair.client).verify(key_of(b"k"), b"nonce"))
    pair.flush()
    conn, rid = server_handler.requests[-1][:2]
    conn.respond(rid, messages.Digest(b"not 32 bytes"))
    pair.flush()
    assert outcome.failure(RemoteError).code == ErrorCode.MALFORMED
    assert not pair.client.closed
    ping = Outcome(PeerClient(pair.client).ping())
    pair.flush()
    ping.result()


def test_a_handler_exception_answers_internal(pair, handlers):
    server_handler, _ = handlers

    def explode(conn, rid, op, message, end):
        raise ValueError("/etc/secret path in a stack")

    server_handler.request_received = explode
    outcome = Outcome(pair.client.request(Op.PING, messages.Empty()))
    pair.flush()
    error = outcome.failure(RemoteError)
    assert error.code == ErrorCode.INTERNAL and "secret" not in error.message
    assert not pair.server.closed


# ---- streaming and backpressure -------------------------------------------------------

def test_paused_transport_holds_the_upload_until_resumed(pair, handlers):
    server_handler, _ = handlers
    data = bytes(range(256)) * (3 * DATA_CHUNK // 256 + 7)
    pair.client.pauseProducing()
    source = BytesSource(data)
    head = bytes(source.read(DATA_CHUNK))
    outcome = Outcome(pair.client.request(
        Op.STORE, messages.StoreRequest(key_of(data), 0, len(data), head), source=source))
    pair.flush()
    # paused: nothing is encrypted, so nothing queues in the transport
    assert server_handler.requests == [] and server_handler.data == []
    bytes_out = pair.client.bytes_out
    pair.client.resumeProducing()
    pair.flush()
    assert pair.client.bytes_out > bytes_out + len(data)
    [(_, rid, op, message, end)] = server_handler.requests
    assert (op, end, message.data) == (Op.STORE, False, head)
    sizes = [len(d) for (_, r, d, _) in server_handler.data]
    assert sizes == [DATA_CHUNK, DATA_CHUNK, len(data) - 3 * DATA_CHUNK]
    assert [end for *_, end in server_handler.data] == [False, False, True]
    assert head + b"".join(d for (_, _, d, _) in server_handler.data) == data
    assert not outcome.fired
    server_handler.requests[0][0].respond(rid, messages.Empty())
    pair.flush()
    assert outcome.result() == messages.Empty()


def test_two_uploads_share_the_connection_round_robin(pair, handlers):
    server_handler, _ = handlers
    pair.client.pauseProducing()
    rids = []
    for fill in (b"a", b"b"):
        data = fill * (4 * DATA_CHUNK)
        source = BytesSource(data)
        head = bytes(source.read(DATA_CHUNK))
        pair.client.request(Op.STORE, messages.StoreRequest(key_of(data), 0, len(data), head),
                            source=source)
    pair.flush()
    assert server_handler.requests == []  # paused: held before TLS
    pair.client.resumeProducing()
    pair.flush()
    rids = [r[1] for r in server_handler.requests]
    order = [rid for (_, rid, _, _) in server_handler.data]
    assert order == [rids[0], rids[1]] * 3


class _PausingSource(BytesSource):
    """The transport 'fills up' as soon as the first chunk is read."""

    def __init__(self, data, conn):
        super().__init__(data)
        self.conn = conn

    def read(self, n):
        self.conn.pauseProducing()
        return super().read(n)


def test_an_early_error_stops_the_upload(pair, handlers):
    server_handler, _ = handlers
    data = b"q" * (4 * DATA_CHUNK)
    outcome = Outcome(pair.client.request(
        Op.STORE, messages.StoreRequest(key_of(data), 0, len(data)),
        source=_PausingSource(data, pair.client)))
    pair.flush()
    conn, rid = server_handler.requests[0][:2]
    conn.respond_error(rid, RemoteError(ErrorCode.NO_SPACE, "full"))
    pair.flush()
    pair.client.resumeProducing()
    pair.flush()
    assert outcome.failure(RemoteError).code == ErrorCode.NO_SPACE
    assert server_handler.data == []  # nothing more was sent
    assert not pair.server.closed


# ---- raw frames over a live connection -------------------------------------------

def test_a_bad_frame_closes_the_connection(pair, handlers):
    send_raw(pair.client, b"\x00\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x01")
    pair.flush()
    assert pair.server.closed and pair.client.closed
    assert handlers[0].lost == [pair.server]


def test_data_for_an_unknown_request_closes_the_connection(pair):
    send_raw(pair.client, encode_frame(FrameType.DATA, 0, FLAG_END, 77, b"x"))
    pair.flush()
    assert pair.server.closed


def test_a_corrupted_tls_record_closes_the_connection(pair):
    ciphertext = bytearray(b"".join(pair.client._tls.send(encode_frame(FrameType.REQUEST, Op.PING,
                                                              FLAG_END, 1))))
    ciphertext[-3] ^= 0xFF
    pair.client.transport.write(bytes(ciphertext))
    pair.flush()
    assert pair.server.closed and pair.client.closed



# ---- memory: what waits for the network ----------------------------------------------


def _pause_past_read_buffer(connection) -> list:
    """Have the connection's transport pause it once it holds more than
    READ_BUFFER (what abstract.FileDescriptor does with bufferSize); returns
    the sizes written from now on, in order (the test clears it as it plays
    the transport's drain)."""
    from flud.protocol.connection import READ_BUFFER

    connection.transport.written.clear()
    connection.transport.limit = READ_BUFFER
    return connection.transport.written


def test_ciphertext_queued_per_connection_stays_under_the_transport_limit(
        node, client_party, handlers):
    """A transport pauses its producer once it holds more than its bufferSize
    (READ_BUFFER): a 3 MiB STORE then never has more than that plus one TLS
    record of ciphertext waiting in it, and the send queue counts exactly
    what waits, until the transport says it drained (resumeProducing)."""
    from flud.memory import MemoryMonitor
    from flud.protocol.connection import READ_BUFFER
    from flud.protocol.tls import SEND_PIECE

    monitor = MemoryMonitor(rss_reader=lambda: 0)
    client_party.send_queue = monitor.transfer("network", "TLS send queues")
    server_handler, client_handler = handlers
    pair = connect(node, server_handler, client_party, client_handler)
    pair.client.resumeProducing()  # the HELLO went out
    assert monitor.buffered_bytes == 0
    written = _pause_past_read_buffer(pair.client)
    data = bytes(range(256)) * (3 * 1024 * 1024 // 256)
    Outcome(PeerClient(pair.client).store(key_of(data), data))
    record_overhead = 64
    turns = 0
    while sum(len(d) for (_, _, d, _) in server_handler.data) < len(data):
        assert sum(written) <= READ_BUFFER + SEND_PIECE + record_overhead
        assert client_party.send_queue.held("tls") == sum(written)
        assert monitor.buffered_bytes == sum(written)
        pair.flush()
        written.clear()
        pair.client.resumeProducing()  # the transport wrote everything out
        turns += 1
        assert turns < 1000
    assert b"".join(d for (_, _, d, _) in server_handler.data) == data
    assert turns >= len(data) // (READ_BUFFER + SEND_PIECE)
    pair.flush()
    written.clear()
    pair.client.resumeProducing()
    assert monitor.buffered_bytes == 0


def test_a_node_encrypts_64_kib_at_a_time_and_a_client_16(node, client_party, handlers):
    """Each piece costs a pass of Python: a node, which mostly sends large
    RETRIEVE answers, writes a quarter as many; a client, with ~50 connections
    that all carry STOREs, keeps its TLS buffers at 16 KiB."""
    from flud.protocol.tls import NODE_SEND_PIECE, SEND_PIECE

    server_handler, client_handler = handlers
    pair = connect(node, server_handler, client_party, client_handler)
    sizes = {}
    for side in (pair.client, pair.server):
        sizes[side] = []
        real = side._tls.encrypt
        side._tls.encrypt = (lambda real, out: lambda piece: (out.append(len(piece)),
                                                            real(piece))[1])(real, sizes[side])
    data = bytes(range(256)) * (1024 * 1024 // 256)
    Outcome(PeerClient(pair.client).store(key_of(data), data))
    pair.flush()
    assert b"".join(d for (_, _, d, _) in server_handler.data) == data
    assert max(sizes[pair.client]) == SEND_PIECE
    sizes[pair.server].clear()
    answer = Outcome(PeerClient(pair.client).retrieve(key_of(data)))
    pair.flush()
    _, rid, op, _, _ = server_handler.requests[-1]
    assert op == messages.Op.RETRIEVE
    pair.server.respond_stream(rid, messages.RetrieveResponse(len(data)), BytesSource(data))
    pair.flush()
    assert bytes(answer.result()) == data
    assert max(sizes[pair.server]) == NODE_SEND_PIECE == 4 * SEND_PIECE
    assert sum(sizes[pair.server]) >= len(data)


def test_a_lost_connection_releases_what_it_had_queued(node, client_party, handlers):
    from flud.memory import MemoryMonitor

    monitor = MemoryMonitor(rss_reader=lambda: 0)
    client_party.send_queue = monitor.transfer("network", "TLS send queues")
    server_handler, client_handler = handlers
    pair = connect(node, server_handler, client_party, client_handler)
    data = b"x" * (1024 * 1024)
    Outcome(PeerClient(pair.client).store(key_of(data), data))
    assert monitor.buffered_bytes > len(data)  # never drained: all of it queued
    pair.client.transport.loseConnection()
    pair.flush()
    assert pair.client.closed and monitor.buffered_bytes == 0


@pytest.mark.parametrize("room, limit", [(10 * 1024 * 1024, "window"), (0, "transport")])
def test_a_send_allowance_with_room_widens_the_window(node, client_party, handlers, room,
                                                      limit):
    """Past the transport's pause, a connection keeps writing up to
    SEND_WINDOW while its party's allowance has room: larger socket writes."""
    from flud.protocol.connection import READ_BUFFER
    from flud.protocol.outbound import SEND_WINDOW
    from flud.protocol.tls import SEND_PIECE

    client_party.send_queue = RoomyQueue(room)
    server_handler, client_handler = handlers
    pair = connect(node, server_handler, client_party, client_handler)
    pair.client.resumeProducing()
    written = _pause_past_read_buffer(pair.client)
    data = bytes(range(256)) * (2 * 1024 * 1024 // 256)
    Outcome(PeerClient(pair.client).store(key_of(data), data))
    per_turn = []
    while sum(len(d) for (_, _, d, _) in server_handler.data) < len(data):
        per_turn.append(sum(written))
        pair.flush()
        written.clear()
        pair.client.resumeProducing()
    bound = SEND_WINDOW if limit == "window" else READ_BUFFER
    assert max(per_turn) <= bound + SEND_PIECE + 64
    assert max(per_turn) > bound - SEND_PIECE  # and it does fill up to it
    assert client_party.send_queue.held == sum(written)
    # Twisted joins a turn's writes into one buffer: below the client's mmap
    # threshold it comes from the heap, not a fresh map faulted in each time.
    from flud.lean import MMAP_THRESHOLD
    assert max(per_turn) < MMAP_THRESHOLD


# ---- a request source fed over time (a share streamed across segments) ---------

def _fed_store(pair, size):
    source = FedSource(size)
    d = pair.client.request(Op.STORE, messages.StoreRequest(key_of(b"s"), 0, size), source=source)
    return source, d, Outcome(d)


def test_a_fed_stream_parks_until_fed_and_each_feed_fires_once_taken(pair, handlers):
    server_handler, _ = handlers
    source, _, outcome = _fed_store(pair, 3 * DATA_CHUNK + 10)
    pair.flush()
    assert server_handler.data == []  # nothing fed: no empty DATA frames either
    first = Outcome(source.feed(bytearray(b"a" * (2 * DATA_CHUNK))))
    pair.flush()
    assert first.fired
    second = Outcome(source.feed(memoryview(b"b" * (DATA_CHUNK + 10))))
    pair.flush()
    assert second.fired
    got = b"".join(data for _, _, data, _ in server_handler.data)
    assert got == b"a" * (2 * DATA_CHUNK) + b"b" * (DATA_CHUNK + 10)
    assert [end for *_, end in server_handler.data] == [False, False, False, True]
    assert not outcome.fired  # the answer is the node's to give


def test_a_fed_stream_refuses_more_than_it_declared(pair):
    source, _, _ = _fed_store(pair, 10)
    assert Outcome(source.feed(b"x" * 11)).failure(ValueError)


def test_a_fed_stream_the_node_refuses_fails_its_feeds_with_the_nodes_error(pair, handlers):
    """A full node answers NO_SPACE mid-stream: the feeder learns that, not
    only that its request ended."""
    from flud.storage.errors import NoSpace

    server_handler, _ = handlers
    source, _, outcome = _fed_store(pair, 4 * DATA_CHUNK)
    pair.flush()
    _, rid, *_ = server_handler.requests[-1]
    pair.server.pauseProducing()  # the node reads slowly: the feed waits
    pair.client.pauseProducing()
    waiting = Outcome(source.feed(b"c" * (3 * DATA_CHUNK)))
    pair.server.respond_error(rid, NoSpace("node full"))
    pair.server.resumeProducing()
    pair.flush()
    assert outcome.failure(RemoteError).code == ErrorCode.NO_SPACE
    failure = waiting.failure(RemoteError)
    assert failure.code == ErrorCode.NO_SPACE and "node full" in str(failure)
    assert Outcome(source.feed(b"d")).failure(RemoteError).code == ErrorCode.NO_SPACE


def test_cancelling_a_parked_stream_fails_what_was_not_taken(pair, handlers):
    server_handler, _ = handlers
    source, d, outcome = _fed_store(pair, 4 * DATA_CHUNK)
    pair.flush()
    pair.server.pauseProducing()  # the node reads slowly...
    pair.client.pauseProducing()  # ...so our transport holds on to what we write
    waiting = Outcome(source.feed(b"c" * (3 * DATA_CHUNK)))
    pair.client.cancel(d)
    assert waiting.failure(RemoteError).code == ErrorCode.CANCELLED
    assert outcome.failure(RemoteError).code == ErrorCode.CANCELLED
    late = Outcome(source.feed(b"d"))
    assert late.failure(RemoteError).code == ErrorCode.CANCELLED
    pair.client.resumeProducing()
    pair.server.resumeProducing()
    pair.flush()
    assert not pair.client.closed


def test_a_lost_connection_fails_a_parked_streams_feeds(pair):
    source, _, outcome = _fed_store(pair, 2 * DATA_CHUNK)
    pair.flush()
    pair.server.close()
    pair.flush()
    outcome.failure(ConnectionLost)
    assert Outcome(source.feed(b"e")).failure(ConnectionLost)


def test_a_feed_is_let_go_only_once_its_bytes_are_encrypted(pair, handlers):
    """A transport that pauses us mid-chunk leaves the rest of a fed chunk
    waiting to be encrypted (a view of the feeder's buffer): the feed fires
    only after that."""
    server_handler, _ = handlers
    source, _, _ = _fed_store(pair, DATA_CHUNK)
    pair.flush()
    conn = pair.client
    transport = conn.transport
    transport.written.clear()
    transport.limit = 0  # the transport is full after one record
    fed = Outcome(source.feed(bytearray(b"f" * DATA_CHUNK)))
    # taken, and one record of it encrypted: the rest still points into the buffer
    assert not fed.fired and len(transport.written) == 1
    transport.limit = None
    conn.resumeProducing()
    pair.flush()
    assert fed.fired
    assert b"".join(data for _, _, data, _ in server_handler.data) == b"f" * DATA_CHUNK


def _retrieve_into(pair, server_handler, offered):
    """A RETRIEVE whose answer the caller offers a buffer for."""
    deferred = pair.client.request(Op.RETRIEVE, messages.RetrieveRequest(key_of(b"k")),
                                   into=offered)
    answer = Outcome(deferred)
    pair.flush()
    _, rid, op, _, _ = server_handler.requests[-1]
    assert op == Op.RETRIEVE
    return deferred, answer, rid


def test_an_answer_with_a_buffer_is_decrypted_straight_into_it(pair, handlers):
    """No bytes object per TLS record and no copy: each record of a DATA
    payload is decrypted where it belongs (the frame headers still parse)."""
    server_handler, _ = handlers
    tls = pair.client._tls
    plaintext_reads, placed_reads = [], []
    real_read, real_read_into = tls.read, tls.read_into
    tls.read = lambda: (plaintext_reads.append(1), real_read())[1]
    tls.read_into = lambda view: placed_reads.append(real_read_into(view)) or placed_reads[-1]
    offered = memoryview(bytearray(b"x" * (3 * DATA_CHUNK)))
    data = bytes(range(256)) * (5 * DATA_CHUNK // 2 // 256)  # 2.5 DATA frames
    _, answer, rid = _retrieve_into(pair, server_handler, offered)
    pair.server.respond_stream(rid, messages.RetrieveResponse(len(data)), BytesSource(data))
    pair.flush()
    got = answer.result().data
    assert bytes(got) == data and got.obj is offered.obj
    assert bytes(offered[len(data):]) == b"x" * (len(offered) - len(data))
    # Nearly all of it went straight in: not what came in a frame head's record.
    assert sum(placed_reads) >= len(data) - 3 * 16 * 1024
    assert len(plaintext_reads) < 20  # the heads of the frames, and the empty reads


def test_a_request_cancelled_while_its_payload_arrives_leaves_the_buffer_alone(pair, handlers):
    server_handler, _ = handlers
    tls = pair.client._tls
    offered = memoryview(bytearray(b"x" * DATA_CHUNK))
    deferred, answer, rid = _retrieve_into(pair, server_handler, offered)
    real_read_into = tls.read_into
    landed = []

    def read_into(view):
        placed = real_read_into(view[:16 * 1024])  # as if records came one by one
        landed.append(placed)
        if len(landed) == 5:  # the caller gives up mid-payload (and reuses its buffer)
            pair.client.cancel(deferred)
        return placed

    tls.read_into = read_into
    data = b"d" * DATA_CHUNK
    pair.server.respond_stream(rid, messages.RetrieveResponse(len(data)), BytesSource(data))
    pair.flush()
    assert answer.failure(RemoteError).code == ErrorCode.CANCELLED
    before_cancel = sum(landed[:5])
    assert 0 < before_cancel < len(data)
    assert bytes(offered[:before_cancel]) == b"d" * before_cancel
    assert bytes(offered[before_cancel:]) == b"x" * (len(data) - before_cancel)
    assert not pair.client.closed  # the rest was read aside; the stream goes on
    server_handler.answer_ping = True
    ping = Outcome(PeerClient(pair.client).ping())
    pair.flush()
    ping.result()


def test_a_fed_buffer_is_not_let_go_while_a_paused_window_holds_it(node, client_party,
                                                                    handlers):
    """Paused by the transport but inside the send window, the pump reads a
    fed chunk and keeps it with its stream: the feeder may not reuse its
    buffer until that chunk is encrypted (it used to be told at once, and
    the node received the next segment's bytes under this one's key)."""
    client_party.send_queue = RoomyQueue(10 * 1024 * 1024)
    server_handler, client_handler = handlers
    pair = connect(node, server_handler, client_party, client_handler)
    source, _, _ = _fed_store(pair, DATA_CHUNK)
    pair.flush()
    pair.client.pauseProducing()  # paused, with the window's room left
    buffer = bytearray(b"a" * DATA_CHUNK)
    fed = Outcome(source.feed(buffer))
    if fed.fired:  # the feeder takes this as leave to fill its buffer again
        buffer[:] = b"b" * DATA_CHUNK
    pair.client.resumeProducing()
    pair.flush()
    assert fed.fired
    assert b"".join(data for _, _, data, _ in server_handler.data) == b"a" * DATA_CHUNK


class _ForgetfulHandler(RecordingHandler):
    def connection_lost(self, conn):
        pass  # keeps no reference to it


def test_a_lost_connection_is_freed_without_the_collector(node):
    """Nothing of a closed connection waits for a garbage-collector pass: its
    TLS state goes back at once (a node trims its heap right after a burst of
    connections, flud.node.gate)."""
    import gc
    import weakref

    clock = task.Clock()
    transport = TCPStringTransport()
    conn = Connection(node, _ForgetfulHandler(), clock, tls_client=False)
    conn.makeConnection(transport)
    clock.advance(HANDSHAKE_TIMEOUT)  # a silent peer: the connection aborts
    conn.connectionLost(None)
    transport.unregisterProducer()  # as Twisted's transport does when it closes
    gone = weakref.ref(conn)
    gc.disable()
    try:
        del conn
        assert gone() is None
    finally:
        gc.enable()
