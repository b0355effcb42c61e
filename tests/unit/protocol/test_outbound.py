"""outbound.Outbound: the pump, the send window and fed-buffer settling,
driven with plain objects: a real Session, a TLS stand-in that "encrypts"
by copying, and a transport that pauses its producer as Twisted's does."""
import pytest

from flud.protocol import messages
from flud.protocol.codec import DATA_CHUNK, FrameParser, FrameType, Op
from flud.protocol.errors import ConnectionLost, ErrorCode, RemoteError, TLSFailed
from flud.protocol.outbound import SEND_WINDOW, BytesSource, FedSource, Outbound
from flud.protocol.session import Session
from flud.protocol.tls import NODE_SEND_PIECE, SEND_PIECE
from tests.unit.protocol.helpers import Outcome, RoomyQueue


class CopyingTLS:
    """Encryption as a copy: what was "encrypted" no longer points into the
    caller's buffer, as real ciphertext would not."""

    handshake_done = True

    def __init__(self):
        self.pieces = []
        self.fail = False

    def encrypt(self, piece) -> bytes:
        if self.fail:
            raise TLSFailed("TLS write error: test")
        self.pieces.append(len(piece))
        return bytes(piece)


class PausingTransport:
    """Keeps what is written; pauses the outbound once it holds more than
    `limit` bytes (None: never), as abstract.FileDescriptor does."""

    def __init__(self):
        self.out = None
        self.limit = None
        self.held = 0
        self.data = bytearray()

    def write(self, data) -> None:
        self.data += data
        self.held += len(data)
        if self.limit is not None and self.held > self.limit:
            self.out.pause()

    def drain(self) -> None:
        self.held = 0
        self.out.resume()


class Party:
    def __init__(self, role=messages.ROLE_CLIENT, send_queue=None):
        self.role = role
        self.send_queue = send_queue


class Rig:
    """An Outbound attached to a session, a TLS stand-in and a transport."""

    def __init__(self, party=None, backlog=lambda transport: None):
        self.session = Session(tls_client=True)
        self.sent, self.failed, self.tls_failed = [], [], []
        self.out = Outbound(party or Party(), self.session, self.sent.append,
                            lambda stream, err: self.failed.append((stream.rid, err)),
                            self._tls_failed)
        self.tls = CopyingTLS()
        self.transport = PausingTransport()
        self.transport.out = self.out
        self.out.attach(self.transport, self.tls, backlog)

    def _tls_failed(self, error):
        self.tls_failed.append(error)
        self.out.stop()  # as the connection does: it closes

    def request(self, source, op=Op.STORE) -> int:
        """Open a streamed request of ours and let the pump send its source."""
        rid = self.session.send_request(op, b"", end=False)
        self.out.add(rid, source, False)
        self.out.flush()
        self.out.pump()
        return rid

    def frames(self) -> list:
        """What reached the transport, as (type, rid, payload bytes, end)."""
        parsed = FrameParser().feed(bytes(self.transport.data))
        return [(f.type, f.request_id, bytes(f.payload), f.end) for f in parsed]

    def data_of(self, rid) -> bytes:
        return b"".join(p for t, r, p, _ in self.frames() if t == FrameType.DATA and r == rid)


def test_two_streams_share_the_pump_round_robin_and_each_is_reported_sent():
    rig = Rig()
    rig.out.pause()  # both wait for the transport
    a = rig.request(BytesSource(b"a" * (3 * DATA_CHUNK)))
    b = rig.request(BytesSource(b"b" * (2 * DATA_CHUNK + 5)))
    assert rig.transport.data == b""  # paused: nothing encrypted, nothing queued
    rig.transport.drain()
    order = [r for t, r, _, _ in rig.frames() if t == FrameType.DATA]
    assert order == [a, b, a, b, a, b]
    assert rig.data_of(a) == b"a" * (3 * DATA_CHUNK)
    assert rig.data_of(b) == b"b" * (2 * DATA_CHUNK + 5)
    assert rig.sent == [a, b] and not rig.out.busy()


def test_a_paused_transport_holds_at_most_one_record_past_its_limit():
    rig = Rig()
    rig.transport.limit = 64 * 1024
    rid = rig.request(BytesSource(bytes(range(256)) * (DATA_CHUNK // 256)))
    turns = 0
    while rig.out.busy() or rig.out.plain:
        assert rig.transport.held <= 64 * 1024 + SEND_PIECE + 64  # + a frame header
        assert rig.out.waiting()  # paused with bytes to send: the peer must read
        rig.transport.drain()
        turns += 1
    assert turns >= DATA_CHUNK // (64 * 1024 + SEND_PIECE)
    assert rig.data_of(rid) == bytes(range(256)) * (DATA_CHUNK // 256)
    assert max(rig.tls.pieces) == SEND_PIECE


def test_a_node_encrypts_larger_pieces():
    rig = Rig(Party(role=messages.ROLE_NODE))
    rig.request(BytesSource(b"n" * DATA_CHUNK))
    assert max(rig.tls.pieces) == NODE_SEND_PIECE


@pytest.mark.parametrize("room, bound", [(10 * 1024 * 1024, SEND_WINDOW), (0, 0)])
def test_past_the_pause_the_window_follows_the_send_queues_room(room, bound):
    rig = Rig(Party(send_queue=RoomyQueue(room)))
    rig.out.pause()  # the transport is full from the start
    rig.request(BytesSource(b"w" * DATA_CHUNK))
    written = len(rig.transport.data)
    assert bound <= written <= bound + SEND_PIECE + 64


def test_what_the_transport_holds_is_counted_on_the_send_queue():
    queue = RoomyQueue()
    backlog = [None]
    rig = Rig(Party(send_queue=queue), backlog=lambda transport: backlog[0])
    rig.out.pause()
    rig.request(BytesSource(b"q" * 100))
    assert queue.held == 0  # nothing written yet
    rig.out.resume()
    assert queue.held == len(rig.transport.data)  # no backlog known: what was written
    backlog[0] = 10  # the transport says it still holds 10 bytes
    rig.request(BytesSource(b"r" * 100))
    assert queue.held == 10
    rig.transport.drain()
    assert queue.held == 0
    rig.request(BytesSource(b"s" * 100))
    rig.out.close(ConnectionLost("gone"))
    assert queue.held == 0


def test_a_feed_is_let_go_only_once_its_bytes_are_encrypted():
    rig = Rig()
    source = FedSource(DATA_CHUNK)
    rig.request(source)
    rig.transport.limit = 0  # full after one record
    buffer = bytearray(b"f" * DATA_CHUNK)
    fed = Outcome(source.feed(buffer))
    assert not fed.fired and rig.out.plain  # taken, most of it not yet encrypted
    rig.transport.limit = None
    rig.transport.drain()
    assert fed.fired and not rig.out.plain


def test_a_chunk_held_while_paused_keeps_its_feed_from_being_let_go():
    """If reading a chunk leaves us paused, the pump keeps the chunk with its
    stream (a cancel then drops it unsent): its feed is not let go until
    the chunk is encrypted."""
    rig = Rig()
    source = FedSource(DATA_CHUNK)  # exactly a FedSource: the pump knows it by type

    def read_and_fill_the_transport(n, read=source.read):
        piece = read(n)
        if piece is not None:
            rig.out.pause()
        return piece

    source.read = read_and_fill_the_transport
    rid = rig.request(source)
    buffer = bytearray(b"a" * DATA_CHUNK)
    fed = Outcome(source.feed(buffer))
    assert rig.data_of(rid) == b""  # read, held, not sent
    if fed.fired:  # the feeder takes this as leave to fill its buffer again
        buffer[:] = b"b" * DATA_CHUNK
    rig.transport.drain()
    assert fed.fired
    assert rig.data_of(rid) == b"a" * DATA_CHUNK


def test_a_fed_stream_parks_until_fed():
    rig = Rig()
    source = FedSource(2 * DATA_CHUNK)
    rid = rig.request(source)
    assert rig.out.busy() and rig.data_of(rid) == b""  # parked: no empty DATA frames
    first = Outcome(source.feed(b"1" * DATA_CHUNK))
    assert first.fired and rig.data_of(rid) == b"1" * DATA_CHUNK
    assert rig.sent == []
    Outcome(source.feed(b"2" * DATA_CHUNK)).result()
    assert rig.data_of(rid) == b"1" * DATA_CHUNK + b"2" * DATA_CHUNK
    assert rig.sent == [rid] and not rig.out.busy()


def test_dropping_a_stream_tells_its_feeder_why():
    rig = Rig()
    source = FedSource(2 * DATA_CHUNK)
    rid = rig.request(source)
    rig.out.pause()
    waiting = Outcome(source.feed(b"c" * DATA_CHUNK))
    cancelled = RemoteError(ErrorCode.CANCELLED, "cancelled")
    rig.out.drop(rid, cancelled)
    assert waiting.failure(RemoteError) is cancelled
    assert not rig.out.busy()
    rig.out.resume()
    assert rig.data_of(rid) == b""


def test_a_closed_outbound_fails_every_feeder_and_sends_nothing_more():
    rig = Rig()
    parked, streaming = FedSource(DATA_CHUNK), FedSource(2 * DATA_CHUNK)
    rig.request(parked)
    rig.request(streaming)
    rig.out.pause()
    waiting = Outcome(streaming.feed(b"x" * DATA_CHUNK))
    lost = ConnectionLost("connection to x was lost")
    rig.out.close(lost)
    assert waiting.failure(ConnectionLost) is lost
    assert Outcome(parked.feed(b"y")).failure(ConnectionLost) is lost
    before = bytes(rig.transport.data)
    rig.out.resume()
    rig.out.flush()
    assert rig.transport.data == before and rig.out.closed


class BrokenSource(BytesSource):
    def read(self, n):
        raise OSError("a share cut short on disk")


def test_a_source_that_fails_fails_its_stream_and_the_others_go_on():
    rig = Rig()
    rig.out.pause()
    bad = rig.request(BrokenSource(b"z" * DATA_CHUNK))
    good = rig.request(BytesSource(b"g" * 10))
    rig.out.resume()
    assert [rid for rid, _ in rig.failed] == [bad]
    assert isinstance(rig.failed[0][1], OSError)
    assert rig.data_of(good) == b"g" * 10


def test_a_record_that_cannot_be_encrypted_is_reported():
    rig = Rig()
    rig.tls.fail = True
    rig.request(BytesSource(b"t" * 10))
    [error] = rig.tls_failed
    assert isinstance(error, TLSFailed)
