"""NodeHandler over a real share store, driven through PeerClient and wire
Connections joined in memory (iosim): no sockets, no threads, no sleeps."""

from __future__ import annotations

import logging
import os
import struct

import blake3
import pytest
from twisted.internet import defer, task

from flud.aggregator.tarball import TarWriter
from flud.protocol import messages
from flud.protocol.client import ClientOnlyHandler, PeerClient
from flud.protocol.codec import DATA_CHUNK, FrameType, Op
from flud.protocol.errors import ConnectionLost, ErrorCode, RemoteError
from flud.protocol.messages import KIND_ARCHIVE, KIND_STREAMED_SHARE, NO_KEY, TO_END
from flud.protocol.outbound import BytesSource
from flud.node.request_handler import NodeHandler, FIRST_PIECE
from flud.storage.disk import ShareStore
from flud.storage.errors import NotFound
from flud.storage.memory import MemoryShareStore
from tests.unit.protocol.helpers import Outcome, connect, key_of, make_party, send_raw

MIB = 1024 * 1024
CAPACITY = 64 * MIB


def run_inline(fn, *args):
    return defer.maybeDeferred(fn, *args)


def pattern(size: int, seed: int = 0) -> bytes:
    block = bytes((i * 7 + seed) % 251 for i in range(4096))
    return (block * (size // len(block) + 1))[:size]


class RecordingNodeHandler(NodeHandler):
    """NodeHandler that also records the upload chunks it was handed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.chunks = []

    def request_data(self, conn, rid, data, end):
        self.chunks.append((rid, len(data), end))
        super().request_data(conn, rid, data, end)


class Raw:
    """A request body given as bytes (to send what PeerClient never would)."""

    def __init__(self, body: bytes):
        self.body = body

    def encode(self) -> bytes:
        return self.body


class Node:
    def __init__(self, tmp_path, store, run_blocking=run_inline, **kwargs):
        self.tmp_path = tmp_path
        self.party = make_party(tmp_path, "node")
        self.store = store
        self.handler = RecordingNodeHandler(store, run_blocking, **kwargs)
        self.clock = task.Clock()
        self._clients = 0

    def connect(self, identity=None):
        self._clients += 1
        party = make_party(self.tmp_path, f"client{self._clients}",
                           role=messages.ROLE_CLIENT, identity=identity)
        pair = connect(self.party, self.handler, party, ClientOnlyHandler(), clock=self.clock)
        pair.client_ready.result()
        pair.peer = PeerClient(pair.client)
        pair.identity = party.identity
        return pair


def call(pair, d) -> Outcome:
    outcome = Outcome(d)
    pair.flush()
    assert outcome.fired, "no answer"
    return outcome


def ok(pair, d):
    return call(pair, d).result()


def error_code(pair, d):
    return call(pair, d).failure(RemoteError).code


@pytest.fixture
def memory_store():
    return MemoryShareStore(CAPACITY)


@pytest.fixture
def disk_store(tmp_path):
    store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
    yield store
    store.close()


@pytest.fixture(params=["memory", "disk"])
def any_store(request, tmp_path):
    if request.param == "memory":
        yield MemoryShareStore(CAPACITY)
    else:
        store = ShareStore(tmp_path / "store", CAPACITY, fsync=False)
        yield store
        store.close()


@pytest.fixture
def node(tmp_path, memory_store):
    return Node(tmp_path, memory_store)


@pytest.fixture
def alice(node):
    return node.connect()


def nothing_held(store) -> None:
    stats = store.stats()
    assert (stats["shares"], stats["members"], stats["bytes_stored"], stats["reserved"]) == (0, 0, 0, 0)


def incoming_is_empty(store) -> None:
    if isinstance(store, ShareStore):
        assert os.listdir(os.path.join(store.root, "incoming")) == []


# ---- simple ops --------------------------------------------------------------

def test_ping_stats_peers(node, alice):
    assert ok(alice, alice.peer.ping()) == messages.Empty()
    stats = ok(alice, alice.peer.stats())
    assert stats["server"]["requests"] == 2
    assert ok(alice, alice.peer.peers([])) == []


def test_root_records_without_a_root_store(alice):
    assert error_code(alice, alice.peer.root_put(b"record")) == ErrorCode.UNKNOWN_OP
    assert error_code(alice, alice.peer.root_get()) == ErrorCode.NOT_FOUND


def test_root_records_are_per_owner(tmp_path, memory_store):
    class Roots:
        def __init__(self):
            self.records = {}

        def put(self, owner, record):
            self.records[owner] = record

        def get(self, owner):
            if owner not in self.records:
                raise NotFound.for_key()
            return self.records[owner]

    node = Node(tmp_path, memory_store, roots=Roots())
    alice, bob = node.connect(), node.connect()
    ok(alice, alice.peer.root_put(b"alice's pointer"))
    assert ok(alice, alice.peer.root_get()) == b"alice's pointer"
    assert error_code(bob, bob.peer.root_get()) == ErrorCode.NOT_FOUND
    assert error_code(alice, alice.peer.root_put(b"r" * (messages.MAX_ROOT_RECORD + 1))) == \
        ErrorCode.TOO_LARGE


# ---- STORE / RETRIEVE / VERIFY / DELETE ----------------------------------------------

def test_round_trip_small_share(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = b"a small share"
    key = key_of(data)
    assert ok(alice, alice.peer.store(key, data)) == messages.Empty()
    assert ok(alice, alice.peer.retrieve(key)) == data
    nonce = b"fresh nonce"
    assert ok(alice, alice.peer.verify(key, nonce)) == blake3.blake3(nonce + data).digest()
    assert ok(alice, alice.peer.verify(key, nonce, 2, 5)) == blake3.blake3(nonce + data[2:7]).digest()
    assert any_store.owners(key) == {alice.identity.node_id}
    assert ok(alice, alice.peer.delete(key)) == messages.Empty()
    assert error_code(alice, alice.peer.retrieve(key)) == ErrorCode.NOT_FOUND
    assert error_code(alice, alice.peer.delete(key)) == ErrorCode.NOT_FOUND
    nothing_held(any_store)


def test_empty_share(alice):
    key = key_of(b"")
    ok(alice, alice.peer.store(key, b""))
    assert ok(alice, alice.peer.retrieve(key)) == b""


def test_five_mib_share_streams_both_ways(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(5 * MIB + 123)
    key = key_of(data)
    ok(alice, alice.peer.store(key, data))
    # Uploaded as a request with no inline bytes, then DATA frames of 1 MiB
    # (views of the caller's buffer), the last one with END.
    assert [size for _, size, _ in node.handler.chunks] == [0] + [DATA_CHUNK] * 5 + [123]
    assert [end for *_, end in node.handler.chunks] == [False] * 6 + [True]
    assert any_store.size(key, alice.identity.node_id) == len(data)

    chunks = []
    assert ok(alice, alice.peer.retrieve(key, sink=chunks.append)) == len(data)
    # Streamed back: a small first piece (time to first byte), then 1 MiB pieces.
    assert [len(c) for c in chunks] == ([FIRST_PIECE] + [DATA_CHUNK] * 4
                                        + [len(data) - FIRST_PIECE - 4 * DATA_CHUNK])
    assert b"".join(bytes(c) for c in chunks) == data
    assert ok(alice, alice.peer.retrieve(key)) == data
    nonce = b"n" * messages.MAX_NONCE
    assert ok(alice, alice.peer.verify(key, nonce)) == blake3.blake3(nonce + data).digest()
    assert any_store.stats()["reserved"] == 0


@pytest.mark.parametrize("offset,length", [
    (0, TO_END), (1, 10), (DATA_CHUNK - 1, 2), (DATA_CHUNK + 5, 2 * DATA_CHUNK - 10),
    (3 * MIB - 1, TO_END), (3 * MIB, TO_END), (0, 3 * MIB), (17, 0),
])
def test_ranges(node, alice, offset, length):
    data = pattern(3 * MIB)
    key = key_of(data)
    ok(alice, alice.peer.store(key, data))
    end = None if length == TO_END else offset + length
    assert ok(alice, alice.peer.retrieve(key, offset, length)) == data[offset:end]
    nonce = b"nonce"
    assert ok(alice, alice.peer.verify(key, nonce, offset, length)) == \
        blake3.blake3(nonce + data[offset:end]).digest()


@pytest.mark.parametrize("offset,length", [
    (3 * MIB + 1, TO_END), (0, 3 * MIB + 1), (3 * MIB, 1), (TO_END, TO_END), (1, TO_END - 1),
])
def test_bad_ranges(node, alice, offset, length):
    data = pattern(3 * MIB)
    key = key_of(data)
    ok(alice, alice.peer.store(key, data))
    assert error_code(alice, alice.peer.retrieve(key, offset, length)) == ErrorCode.BAD_RANGE
    assert error_code(alice, alice.peer.verify(key, b"n", offset, length)) == ErrorCode.BAD_RANGE
    assert ok(alice, alice.peer.ping()) == messages.Empty()


def test_owner_isolation(node, alice):
    bob = node.connect()
    data = b"alice's share"
    key = key_of(data)
    ok(alice, alice.peer.store(key, data))
    unknown = key_of(b"nobody stored this")

    def not_found_message(pair, d):
        error = call(pair, d).failure(RemoteError)
        assert error.code == ErrorCode.NOT_FOUND
        return error.message

    for op in (lambda k: bob.peer.retrieve(k), lambda k: bob.peer.verify(k, b"n"),
               lambda k: bob.peer.delete(k), lambda k: bob.peer.retrieve(k, 1, 2)):
        assert not_found_message(bob, op(key)) == not_found_message(bob, op(unknown))
    assert ok(alice, alice.peer.retrieve(key)) == data  # bob's DELETE did nothing

    # Bob storing the same bytes makes him an owner too; alice's DELETE leaves his.
    ok(bob, bob.peer.store(key, data))
    ok(alice, alice.peer.delete(key))
    assert ok(bob, bob.peer.retrieve(key)) == data
    assert error_code(alice, alice.peer.retrieve(key)) == ErrorCode.NOT_FOUND


@pytest.mark.parametrize("size", [10, 3 * MIB])
def test_data_not_matching_its_key(any_store, tmp_path, size):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(size)
    wrong_key = key_of(data + b"!")
    assert error_code(alice, alice.peer.store(wrong_key, data)) == ErrorCode.HASH_MISMATCH
    assert error_code(alice, alice.peer.retrieve(wrong_key)) == ErrorCode.NOT_FOUND
    assert error_code(alice, alice.peer.retrieve(key_of(data))) == ErrorCode.NOT_FOUND
    nothing_held(any_store)
    incoming_is_empty(any_store)


def test_fewer_bytes_than_declared(node, alice):
    data = b"abc"
    store = messages.StoreRequest(key_of(data), messages.KIND_SHARE, 10, data)
    assert error_code(alice, alice.client.request(Op.STORE, store)) == ErrorCode.HASH_MISMATCH
    nothing_held(node.store)


def test_more_bytes_than_declared(node, alice):
    data = pattern(2 * MIB)
    source = BytesSource(data)
    head = bytes(source.read(DATA_CHUNK))
    store = messages.StoreRequest(key_of(data), messages.KIND_SHARE, DATA_CHUNK + 10, head)
    assert error_code(alice, alice.client.request(Op.STORE, store, source=source)) == \
        ErrorCode.TOO_LARGE
    nothing_held(node.store)
    assert ok(alice, alice.peer.ping()) == messages.Empty()


@pytest.mark.parametrize("kind,size", [(messages.KIND_SHARE, 2 ** 30 + 1),
                                       (KIND_ARCHIVE, 256 * MIB + 1),
                                       (messages.KIND_SHARE, 2 ** 64 - 1)])
def test_declared_size_over_the_limit(node, alice, kind, size):
    store = messages.StoreRequest(key_of(b"x"), kind, size, b"x")
    assert error_code(alice, alice.client.request(Op.STORE, store)) == ErrorCode.TOO_LARGE
    nothing_held(node.store)


# ---- keys that are not 32 bytes, path-like keys ----------------------------------------

def tree(root) -> set:
    found = set()
    for directory, _, files in os.walk(root):
        found |= {os.path.join(directory, f) for f in files}
    return found


@pytest.mark.parametrize("op,body", [
    (Op.RETRIEVE, b"k" * 31 + b"\x00" * 16),
    (Op.RETRIEVE, b"k" * 33 + b"\x00" * 16),
    (Op.VERIFY, b"k" * 31 + b"\x00" * 16 + b"\x01n"),
    (Op.DELETE, b"k" * 31),
    (Op.DELETE, b"k" * 33),
    (Op.DELETE, b"../x"),
    (Op.STORE, b"../x" + b"\x00" * 9),
    (Op.STORE, b"k" * 31 + b"\x00" * 9),
])
def test_keys_that_are_not_32_bytes_are_refused(tmp_path, disk_store, op, body):
    node = Node(tmp_path, disk_store)
    alice = node.connect()
    before = tree(tmp_path.parent)
    code = error_code(alice, alice.client.request(op, Raw(body)))
    assert code in (ErrorCode.MALFORMED, ErrorCode.BAD_KEY)
    assert tree(tmp_path.parent) == before
    assert ok(alice, alice.peer.ping()) == messages.Empty()


def test_a_path_like_32_byte_key_never_becomes_a_path(tmp_path, disk_store):
    node = Node(tmp_path, disk_store)
    alice = node.connect()
    before = tree(tmp_path.parent)
    for raw_key in (b"../../../../../../tmp/flud-evil".ljust(32, b"/"),
                    b"/" * 32, b"..".ljust(32, b"\x00")):
        assert len(raw_key) == 32
        assert error_code(alice, alice.peer.store(raw_key, b"data")) == ErrorCode.HASH_MISMATCH
        assert error_code(alice, alice.peer.retrieve(raw_key)) == ErrorCode.NOT_FOUND
        assert error_code(alice, alice.peer.delete(raw_key)) == ErrorCode.NOT_FOUND
    assert tree(tmp_path.parent) == before
    assert not os.path.exists("/tmp/flud-evil")
    incoming_is_empty(disk_store)


def test_a_client_refuses_to_send_a_short_key(alice):
    outcome = Outcome(alice.peer.store(b"k" * 31, b"data"))
    assert outcome.failure(RemoteError).code == ErrorCode.BAD_KEY


# ---- interrupted uploads ---------------------------------------------------------------

class PauseAfterFirstRead(BytesSource):
    """Sends one DATA frame, then the connection's transport 'fills up'
    (a paused connection encrypts nothing more: the chunk read after the
    first DATA frame waits with its stream)."""

    def __init__(self, data, conn):
        super().__init__(data)
        self.conn = conn
        self.reads = 0

    def read(self, n):
        piece = super().read(n)
        self.reads += 1
        if self.reads > 2:  # the inline head, then the first DATA frame
            self.conn.pauseProducing()
        return piece


def start_upload(pair, data):
    """A STORE with its inline part and one DATA frame sent, the rest held back."""
    source = PauseAfterFirstRead(data, pair.client)
    head = bytes(source.read(DATA_CHUNK))
    return _start_held(pair, messages.StoreRequest(key_of(data), 0, len(data), head), source)


def _start_held(pair, request, source):
    """Send a STORE whose source pauses the client after its first DATA frame."""
    pair.client.resumeProducing()
    d = pair.client.request(Op.STORE, request, source=source)
    outcome = Outcome(d)
    pair.flush()
    return d, outcome


def disconnect_leaves_nothing(pair, outcome, store) -> None:
    """The client drops the connection mid-upload: its request fails and the
    node keeps neither bytes nor reservation."""
    pair.client.transport.loseConnection()
    pair.flush()
    outcome.failure(ConnectionLost)
    nothing_held(store)
    incoming_is_empty(store)


def test_peer_disconnecting_mid_store_leaves_nothing(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(4 * MIB)
    _, outcome = start_upload(alice, data)
    assert [size for _, size, _ in node.handler.chunks] == [DATA_CHUNK, DATA_CHUNK]
    assert any_store.stats()["reserved"] == len(data)  # the upload is under way
    disconnect_leaves_nothing(alice, outcome, any_store)
    bob = node.connect(identity=alice.identity)  # same owner, new connection
    assert error_code(bob, bob.peer.retrieve(key_of(data))) == ErrorCode.NOT_FOUND
    ok(bob, bob.peer.store(key_of(data), data))  # and the space is there again
    assert ok(bob, bob.peer.retrieve(key_of(data))) == data


def test_cancel_mid_store_leaves_nothing_and_the_connection_works(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(4 * MIB)
    d, outcome = start_upload(alice, data)
    assert any_store.stats()["reserved"] == len(data)
    alice.client.cancel(d)
    alice.flush()
    alice.client.resumeProducing()
    alice.flush()
    assert outcome.failure(RemoteError).code == ErrorCode.CANCELLED
    assert len(node.handler.chunks) == 2  # nothing more was sent after the cancel
    nothing_held(any_store)
    incoming_is_empty(any_store)
    small = b"after the cancel"
    ok(alice, alice.peer.store(key_of(small), small))
    assert ok(alice, alice.peer.retrieve(key_of(small))) == small


def test_a_commit_in_progress_survives_a_lost_connection(tmp_path, memory_store):
    held = []

    def run_later(fn, *args):
        d = defer.Deferred()
        held.append((d, fn, args))
        return d

    node = Node(tmp_path, memory_store, run_blocking=run_later)
    alice = node.connect()
    data = b"committed while the peer left"
    outcome = Outcome(alice.peer.store(key_of(data), data))
    alice.flush()
    assert len(held) == 1 and not outcome.fired
    alice.client.transport.loseConnection()
    alice.flush()
    outcome.failure(ConnectionLost)
    d, fn, args = held.pop()
    d.callback(fn(*args))  # the worker finishes after the connection is gone
    assert memory_store.owners(key_of(data)) == {alice.identity.node_id}
    assert memory_store.stats()["reserved"] == 0


# ---- capacity ---------------------------------------------------------------------------

def test_full_store_then_a_smaller_store_works(tmp_path):
    store = MemoryShareStore(1000)
    node = Node(tmp_path, store)
    alice = node.connect()
    first, too_big, smaller = pattern(700, 1), pattern(400, 2), pattern(300, 3)
    ok(alice, alice.peer.store(key_of(first), first))
    assert error_code(alice, alice.peer.store(key_of(too_big), too_big)) == ErrorCode.NO_SPACE
    assert store.stats()["reserved"] == 0
    ok(alice, alice.peer.store(key_of(smaller), smaller))
    assert ok(alice, alice.peer.retrieve(key_of(smaller))) == smaller
    assert store.stats()["free"] == 0


def test_no_space_for_a_streamed_upload_drops_its_data(tmp_path):
    store = MemoryShareStore(3 * MIB)
    node = Node(tmp_path, store)
    alice = node.connect()
    big = pattern(4 * MIB)
    assert error_code(alice, alice.peer.store(key_of(big), big)) == ErrorCode.NO_SPACE
    assert [size for _, size, _ in node.handler.chunks] == []  # refused at its head
    assert not alice.server.closed
    fits = pattern(2 * MIB, 5)
    ok(alice, alice.peer.store(key_of(fits), fits))
    assert ok(alice, alice.peer.retrieve(key_of(fits))) == fits


# ---- one bad connection does not hurt the others ---------------------------------------------

def test_a_malformed_frame_closes_only_that_connection(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    mallory, alice = node.connect(), node.connect()
    mallory_data, alice_data = pattern(3 * MIB, 1), pattern(3 * MIB, 2)
    _, mallory_upload = start_upload(mallory, mallory_data)
    _, alice_upload = start_upload(alice, alice_data)
    assert any_store.stats()["reserved"] == 6 * MIB

    send_raw(mallory.client, b"\x00\x00\x00\x00\x01\x01\x01\x07\x00\x00\x00\x09")  # reserved bits
    mallory.flush()
    assert mallory.server.closed and mallory.client.closed
    mallory_upload.failure(ConnectionLost)
    assert any_store.stats()["reserved"] == 3 * MIB  # only mallory's upload was dropped

    assert not alice.server.closed
    alice.client.resumeProducing()
    alice.flush()
    assert alice_upload.result() == messages.Empty()
    assert ok(alice, alice.peer.retrieve(key_of(alice_data))) == alice_data
    assert any_store.owners(key_of(mallory_data)) == set()
    assert any_store.stats()["reserved"] == 0


def test_an_oversized_frame_closes_only_that_connection(node):
    mallory, alice = node.connect(), node.connect()
    send_raw(mallory.client, struct.pack(">IBBBBI", 0xFFFFFFFF, FrameType.DATA, 0, 0, 0, 1))
    mallory.flush()
    assert mallory.server.closed
    assert ok(alice, alice.peer.ping()) == messages.Empty()


# ---- handler failures -------------------------------------------------------------------------

class FaultyStore:
    """Delegates to a MemoryShareStore; the listed methods raise a bug."""

    def __init__(self, inner, broken):
        self.inner = inner
        self.broken = broken

    def __getattr__(self, name):
        if name in self.broken:
            def fail(*args, **kwargs):
                raise RuntimeError("Traceback: secret detail at /srv/flud/store/internal.py:42")
            return fail
        return getattr(self.inner, name)


@pytest.mark.parametrize("broken,op", [
    ("open_reader", lambda p, k, d: p.retrieve(k)),
    ("verify", lambda p, k, d: p.verify(k, b"n", 0, 3)),   # inline path
    ("verify", lambda p, k, d: p.verify(k, b"n")),         # worker path
    ("delete", lambda p, k, d: p.delete(k)),
    ("open_upload", lambda p, k, d: p.store(k, d)),
])
def test_an_exception_in_an_op_is_internal_without_details(tmp_path, memory_store, caplog,
                                                           broken, op):
    data = b"some data"
    key = key_of(data)
    faulty = FaultyStore(memory_store, {broken})
    node = Node(tmp_path, faulty)
    alice = node.connect()
    memory_store.put(key, alice.identity.node_id, data)
    with caplog.at_level(logging.ERROR, logger="flud.wire"):
        error = call(alice, op(alice.peer, key, data)).failure(RemoteError)
    assert error.code == ErrorCode.INTERNAL
    for leak in ("secret", "Traceback", "RuntimeError", "/srv", ".py"):
        assert leak not in error.message
    assert "secret detail" in caplog.text  # the node's log has it
    assert node.handler.counters["errors"] == 1
    assert ok(alice, alice.peer.ping()) == messages.Empty()


def test_an_exception_while_receiving_upload_data_is_internal(tmp_path, memory_store):
    class BrokenUpload:
        def __init__(self, upload):
            self.upload = upload
            self.aborted = False

        def write(self, chunk):
            if self.upload.received:
                raise OSError("disk controller on fire")
            self.upload.write(chunk)

        def abort(self):
            self.aborted = True
            self.upload.abort()

        def commit(self):
            return self.upload.commit()

    uploads = []

    class Store(FaultyStore):
        def open_upload(self, *args, **kwargs):
            uploads.append(BrokenUpload(self.inner.open_upload(*args, **kwargs)))
            return uploads[-1]

    node = Node(tmp_path, Store(memory_store, set()))
    alice = node.connect()
    data = pattern(3 * MIB)
    error = call(alice, alice.peer.store(key_of(data), data)).failure(RemoteError)
    assert error.code == ErrorCode.INTERNAL and "fire" not in error.message
    assert uploads[0].aborted
    nothing_held(memory_store)
    assert ok(alice, alice.peer.ping()) == messages.Empty()


def test_a_closed_store_answers_unavailable(node, alice):
    node.store.close()
    assert error_code(alice, alice.peer.retrieve(key_of(b"x"))) == ErrorCode.UNAVAILABLE
    assert ok(alice, alice.peer.ping()) == messages.Empty()


# ---- BUSY over the whole stack ------------------------------------------------------------------

def test_busy_after_max_inflight_requests(tmp_path, memory_store):
    from flud.protocol.session import MAX_INFLIGHT
    held = []

    def run_later(fn, *args):
        d = defer.Deferred()
        held.append((d, fn, args))
        return d

    node = Node(tmp_path, memory_store, run_blocking=run_later)
    alice = node.connect()
    key = key_of(b"none")
    outcomes = [Outcome(alice.peer.delete(key)) for _ in range(MAX_INFLIGHT + 1)]
    alice.flush()
    assert len(held) == MAX_INFLIGHT
    assert [o.fired for o in outcomes] == [False] * MAX_INFLIGHT + [True]
    assert outcomes[-1].failure(RemoteError).code == ErrorCode.BUSY
    for d, fn, args in held:
        defer.maybeDeferred(fn, *args).chainDeferred(d)
    alice.flush()
    assert {o.failure(RemoteError).code for o in outcomes[:-1]} == {ErrorCode.NOT_FOUND}
    assert ok(alice, alice.peer.ping()) == messages.Empty()


# ---- archives --------------------------------------------------------------------------------------

def make_archive(datas):
    writer = TarWriter()
    for data in datas:
        writer.add(key_of(data).hex(), data)
    return writer.seal()


@pytest.mark.parametrize("member_sizes", [[10, 600, 5000], [3, 2 * MIB + 17, 1]])
def test_archive_store_then_members_by_key(any_store, tmp_path, member_sizes):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    members = [pattern(size, seed) for seed, size in enumerate(member_sizes)]
    tar = make_archive(members)
    ok(alice, alice.peer.store(key_of(tar), tar, kind=KIND_ARCHIVE))
    assert any_store.stats()["members"] == len(members)
    nonce = b"challenge"
    for data in members:
        key = key_of(data)
        assert ok(alice, alice.peer.retrieve(key)) == data
        for offset, length in ((0, TO_END), (1, max(len(data) - 2, 0)), (len(data) // 2, 1),
                               (len(data), TO_END)):
            end = None if length == TO_END else offset + length
            assert ok(alice, alice.peer.retrieve(key, offset, length)) == data[offset:end]
            assert ok(alice, alice.peer.verify(key, nonce, offset, length)) == \
                blake3.blake3(nonce + data[offset:end]).digest()
        assert error_code(alice, alice.peer.retrieve(key, len(data) + 1)) == ErrorCode.BAD_RANGE
    bob = node.connect()
    assert error_code(bob, bob.peer.retrieve(key_of(members[0]))) == ErrorCode.NOT_FOUND
    ok(alice, alice.peer.delete(key_of(members[0])))
    assert error_code(alice, alice.peer.retrieve(key_of(members[0]))) == ErrorCode.NOT_FOUND
    assert ok(alice, alice.peer.retrieve(key_of(members[1]))) == members[1]
    assert any_store.stats()["reserved"] == 0


@pytest.mark.parametrize("size", [1000, 3 * MIB])
def test_archive_with_a_misnamed_member_is_bad_archive(any_store, tmp_path, size):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    good, bad = pattern(size, 1), pattern(700, 2)
    writer = TarWriter()
    writer.add(key_of(good).hex(), good)
    writer.add(key_of(b"something else").hex(), bad)
    writer.add(key_of(good + b"x").hex(), good + b"x")
    tar = writer.seal()
    code = error_code(alice, alice.peer.store(key_of(tar), tar, kind=KIND_ARCHIVE))
    assert code == ErrorCode.BAD_ARCHIVE
    for data in (good, bad, good + b"x"):
        assert error_code(alice, alice.peer.retrieve(key_of(data))) == ErrorCode.NOT_FOUND
    nothing_held(any_store)
    incoming_is_empty(any_store)
    assert ok(alice, alice.peer.ping()) == messages.Empty()


def test_archive_that_is_not_a_tar(alice, node):
    junk = b"not a tar at all" * 100
    assert error_code(alice, alice.peer.store(key_of(junk), junk, kind=KIND_ARCHIVE)) == \
        ErrorCode.BAD_ARCHIVE
    nothing_held(node.store)


def test_archive_with_the_wrong_tar_key(alice, node):
    tar = make_archive([b"member"])
    assert error_code(alice, alice.peer.store(key_of(tar + b"x"), tar, kind=KIND_ARCHIVE)) == \
        ErrorCode.HASH_MISMATCH
    assert error_code(alice, alice.peer.retrieve(key_of(b"member"))) == ErrorCode.NOT_FOUND
    nothing_held(node.store)


# ---- a stream that fails half-way ---------------------------------------------------------

class ShortReader:
    """A reader whose share ends early (a file cut short on disk)."""

    def __init__(self, reader, give):
        self.reader = reader
        self.remaining = reader.remaining
        self.give = give
        self.closed = False

    def read(self, n):
        if self.give <= 0:
            return b""
        chunk = self.reader.read(min(n, self.give))
        self.give -= len(chunk)
        return chunk

    def close(self):
        self.closed = True
        self.reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.mark.parametrize("paused", [False, True], ids=["flowing", "after-resume"])
def test_a_share_that_ends_early_fails_its_retrieve_only(tmp_path, memory_store, paused):
    readers = []

    class Store(FaultyStore):
        def open_reader(self, *args):
            readers.append(ShortReader(self.inner.open_reader(*args), give=DATA_CHUNK + 10))
            return readers[-1]

    node = Node(tmp_path, Store(memory_store, set()))
    alice = node.connect()
    data = pattern(3 * MIB)
    memory_store.put(key_of(data), alice.identity.node_id, data)
    if paused:
        alice.server.pauseProducing()  # the reader is drained from resumeProducing
    chunks = []
    outcome = Outcome(alice.peer.retrieve(key_of(data), sink=chunks.append))
    alice.flush()
    if paused:
        assert not outcome.fired
        alice.server.resumeProducing()
        alice.flush()
    assert outcome.failure(RemoteError).code == ErrorCode.INTERNAL
    assert b"".join(bytes(c) for c in chunks) == data[:DATA_CHUNK + 10]
    assert readers[0].closed
    assert not alice.server.closed
    assert ok(alice, alice.peer.ping()) == messages.Empty()


def test_an_upload_source_that_fails_cancels_only_that_store(node, alice):
    class FailingSource(BytesSource):
        def read(self, n):
            if self.remaining <= DATA_CHUNK:
                raise OSError("the local file vanished")
            return super().read(n)

    data = pattern(3 * MIB)
    source = FailingSource(data)
    head = bytes(source.read(DATA_CHUNK))
    request = messages.StoreRequest(key_of(data), 0, len(data), head)
    outcome = call(alice, alice.client.request(Op.STORE, request, source=source))
    assert isinstance(outcome.failure(OSError), OSError)
    assert len(node.handler.chunks) == 2  # the head and one DATA frame, then a CANCEL
    nothing_held(node.store)
    assert not alice.client.closed
    assert ok(alice, alice.peer.ping()) == messages.Empty()


def test_a_streamed_retrieve_lands_in_one_writable_buffer(any_store, tmp_path):
    """The answer's size is in its head, so the bytes are copied into one
    buffer as they arrive (no join at the end), and the caller may decrypt
    them in place (a restore does)."""
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(3 * MIB + 7)
    key = key_of(data)
    ok(alice, alice.peer.store(key, data))
    got = ok(alice, alice.peer.retrieve(key))
    assert isinstance(got, bytearray) and got == data
    part = ok(alice, alice.peer.retrieve(key, 5, 1000))  # small: inline, as before
    assert bytes(part) == data[5:1005]


def test_a_commit_runs_inline_only_while_nothing_else_is_in_progress(tmp_path, memory_store):
    """With inline commits on, an upload that is the node's only work is
    committed on the spot; while a commit is in a worker or another upload is
    open, commits go to the worker, so nothing waits on an fsync."""
    held = []

    def run_later(fn, *args):
        d = defer.Deferred()
        held.append((d, fn, args))
        return d

    def release_all():
        while held:
            d, fn, args = held.pop(0)
            defer.maybeDeferred(fn, *args).chainDeferred(d)
            alice.flush()

    node = Node(tmp_path, memory_store, run_blocking=run_later)
    alice = node.connect()
    first = b"committed in a worker"
    first_outcome = Outcome(alice.peer.store(key_of(first), first))
    alice.flush()
    assert len(held) == 1  # inline commits off: the worker

    node.handler.inline_commits = True
    second = b"a commit is in a worker: this one goes there too"
    second_outcome = Outcome(alice.peer.store(key_of(second), second))
    alice.flush()
    assert len(held) == 2 and not second_outcome.fired
    release_all()
    assert first_outcome.fired and second_outcome.fired and node.handler._commits_in_workers == 0

    lone = b"the node's only work"
    ok(alice, alice.peer.store(key_of(lone), lone))
    assert held == []  # committed inline

    node.handler._uploads[("another connection", 1)] = (None, None)  # an upload streaming in
    third = b"another upload is open"
    third_outcome = Outcome(alice.peer.store(key_of(third), third))
    alice.flush()
    assert len(held) == 1 and not third_outcome.fired
    del node.handler._uploads[("another connection", 1)]
    release_all()
    assert third_outcome.fired
    for data in (first, second, lone, third):
        assert memory_store.owners(key_of(data)) == {alice.identity.node_id}


# ---- streamed shares: the key follows the data --------------------------------------------

def streamed_request(data, trailer=None, inline=0, key=NO_KEY):
    """A kind-2 STORE: `inline` bytes in the request, the rest (the share,
    then its key) in DATA frames."""
    blob = data + (key_of(data) if trailer is None else trailer)
    request = messages.StoreRequest(key, KIND_STREAMED_SHARE, len(data), blob[:inline])
    return request, BytesSource(blob[inline:])


def store_streamed(pair, data, **kwargs):
    request, source = streamed_request(data, **kwargs)
    return pair.client.request(Op.STORE, request, source=source)


def test_streamed_share_in_data_frames_then_ranges_and_verify(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(3 * MIB + 990)
    key = key_of(data)
    assert ok(alice, store_streamed(alice, data, inline=1000)) == messages.Empty()
    # Its key straddles the last two DATA frames: 10 bytes in one, 22 in the next.
    assert [size for _, size, _ in node.handler.chunks] == [1000] + [DATA_CHUNK] * 3 + [22]
    assert any_store.size(key, alice.identity.node_id) == len(data)
    assert ok(alice, alice.peer.retrieve(key)) == data
    start = DATA_CHUNK - 3
    assert ok(alice, alice.peer.retrieve(key, start, 2 * MIB)) == data[start:start + 2 * MIB]
    nonce = b"nonce"
    assert ok(alice, alice.peer.verify(key, nonce, 5, 70_000)) == \
        blake3.blake3(nonce + data[5:70_005]).digest()
    assert any_store.stats()["reserved"] == 0
    incoming_is_empty(any_store)
    ok(alice, alice.peer.delete(key))
    nothing_held(any_store)


def test_streamed_share_all_inline(alice, node):
    data = b"a small streamed share"
    assert ok(alice, store_streamed(alice, data, inline=len(data) + 32)) == messages.Empty()
    assert ok(alice, alice.peer.retrieve(key_of(data))) == data


def test_streamed_share_with_a_key_field_is_malformed(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(2 * MIB)
    code = error_code(alice, store_streamed(alice, data, inline=100, key=key_of(data)))
    assert code == ErrorCode.MALFORMED
    assert node.handler.chunks == []  # refused at its head; its DATA frames are dropped
    nothing_held(any_store)
    incoming_is_empty(any_store)
    assert ok(alice, alice.peer.ping()) == messages.Empty()


@pytest.mark.parametrize("size", [10, 3 * MIB])
def test_streamed_share_not_matching_its_key(any_store, tmp_path, size):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(size)
    wrong = key_of(data + b"!")
    assert error_code(alice, store_streamed(alice, data, trailer=wrong)) == ErrorCode.HASH_MISMATCH
    for key in (wrong, key_of(data)):
        assert error_code(alice, alice.peer.retrieve(key)) == ErrorCode.NOT_FOUND
    nothing_held(any_store)
    incoming_is_empty(any_store)


@pytest.mark.parametrize("trailer,code", [
    (lambda key: key[:31], ErrorCode.HASH_MISMATCH),
    (lambda key: b"", ErrorCode.HASH_MISMATCH),
    (lambda key: key + b"x", ErrorCode.TOO_LARGE),
], ids=["short key", "no key", "byte after the key"])
def test_streamed_share_of_the_wrong_length(node, alice, trailer, code):
    data = pattern(2 * MIB)
    assert error_code(alice, store_streamed(alice, data, trailer=trailer(key_of(data)))) == code
    nothing_held(node.store)
    assert ok(alice, alice.peer.ping()) == messages.Empty()


def test_streamed_share_inline_bytes_past_its_key_are_malformed(node, alice):
    request = messages.StoreRequest(NO_KEY, KIND_STREAMED_SHARE, 3, b"abc" + key_of(b"abc") + b"x")
    assert error_code(alice, alice.client.request(Op.STORE, request)) == ErrorCode.MALFORMED
    nothing_held(node.store)


def test_streamed_share_declared_over_the_limit(node, alice):
    request = messages.StoreRequest(NO_KEY, KIND_STREAMED_SHARE, 2 ** 30 + 1, b"x")
    assert error_code(alice, alice.client.request(Op.STORE, request)) == ErrorCode.TOO_LARGE
    nothing_held(node.store)


def test_streamed_share_of_a_key_held_adds_an_owner_and_no_copy(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    alice, bob = node.connect(), node.connect()
    data = pattern(3 * MIB, 4)
    key = key_of(data)
    ok(bob, bob.peer.store(key, data))
    ok(alice, store_streamed(alice, data))
    ok(alice, store_streamed(alice, data))
    assert any_store.owners(key) == {alice.identity.node_id, bob.identity.node_id}
    stats = any_store.stats()
    assert (stats["shares"], stats["bytes_stored"], stats["reserved"]) == (1, len(data), 0)
    ok(bob, bob.peer.delete(key))
    assert ok(alice, alice.peer.retrieve(key)) == data


def test_no_space_for_a_streamed_share_is_its_size(tmp_path):
    store = MemoryShareStore(MIB)
    node = Node(tmp_path, store)
    alice = node.connect()
    assert error_code(alice, store_streamed(alice, pattern(MIB + 1))) == ErrorCode.NO_SPACE
    fits = pattern(MIB, 3)
    ok(alice, store_streamed(alice, fits))  # its key takes no space
    assert store.stats()["free"] == 0


def start_streamed_upload(pair, data):
    """A kind-2 STORE with one DATA frame sent, the rest held back."""
    request, _ = streamed_request(data)
    source = PauseAfterFirstRead(data + key_of(data), pair.client)
    source.read(0)  # the request carries no inline bytes
    return _start_held(pair, request, source)


def test_cancel_mid_streamed_share_leaves_nothing(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(4 * MIB)
    d, outcome = start_streamed_upload(alice, data)
    assert [size for _, size, _ in node.handler.chunks] == [0, DATA_CHUNK]
    assert any_store.stats()["reserved"] == len(data)
    alice.client.cancel(d)
    alice.flush()
    alice.client.resumeProducing()
    alice.flush()
    assert outcome.failure(RemoteError).code == ErrorCode.CANCELLED
    nothing_held(any_store)
    incoming_is_empty(any_store)
    assert error_code(alice, alice.peer.retrieve(key_of(data))) == ErrorCode.NOT_FOUND
    ok(alice, store_streamed(alice, data))  # the space is there again
    assert ok(alice, alice.peer.retrieve(key_of(data))) == data


def test_peer_disconnecting_mid_streamed_share_leaves_nothing(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(4 * MIB)
    _, outcome = start_streamed_upload(alice, data)
    disconnect_leaves_nothing(alice, outcome, any_store)


def test_streamed_share_commits_inline_and_closes_its_transfer(tmp_path, memory_store):
    from flud.memory import MemoryMonitor

    def never(fn, *args):
        raise AssertionError("the lone commit went to a worker")

    monitor = MemoryMonitor(rss_reader=lambda: 0)
    node = Node(tmp_path, memory_store, run_blocking=never, inline_commits=True, monitor=monitor)
    alice = node.connect()
    data = pattern(3 * MIB)
    _, outcome = start_streamed_upload(alice, data)
    assert [(t["kind"], t["name"]) for t in monitor.snapshot()["transfers"]] == [("store", "streamed")]
    for _ in range(4):  # the source pauses the connection after each DATA frame
        alice.client.resumeProducing()
        alice.flush()
    assert outcome.result() == messages.Empty()
    assert monitor.active_transfers == 0
    assert memory_store.owners(key_of(data)) == {alice.identity.node_id}


# ---- hostile senders: promises held, uploads that stall ----------------------------------

from flud.node.request_handler import UPLOAD_ABANDON_TIMEOUT, UPLOAD_STALL_TIMEOUT  # noqa: E402
from flud.protocol.outbound import FedSource  # noqa: E402
from flud.storage.capacity import owner_reserve_limit  # noqa: E402
from flud.storage.limits import MAX_GROUP_RESERVED, MAX_GROUP_UPLOADS  # noqa: E402

GIB = 1024 * MIB
BIG_NODE = 10 * GIB  # a node's default capacity; a memory store takes none until bytes come


def open_silent(pair, size):
    """A streamed STORE that declares `size` and sends nothing (yet): its
    source is fed by the test, if ever."""
    source = FedSource(size + messages.KEY_SIZE)
    request = messages.StoreRequest(NO_KEY, KIND_STREAMED_SHARE, size)
    outcome = Outcome(pair.client.request(Op.STORE, request, source=source))
    return outcome, source


def codes(outcomes):
    return [o.value.value.code if o.fired else None for o in outcomes]


def test_one_connection_holds_at_most_its_bound(tmp_path):
    store = MemoryShareStore(BIG_NODE)
    node = Node(tmp_path, store)
    mallory = node.connect()
    # 64 silent 32 MiB STOREs: 2 GiB declared on one connection (with 256
    # requests open, one connection could once promise 8 GiB away).
    outcomes = [open_silent(mallory, 32 * MIB)[0] for _ in range(64)]
    mallory.flush()
    held = MAX_GROUP_RESERVED // (32 * MIB)
    assert codes(outcomes) == [None] * held + [ErrorCode.UPLOAD_LIMIT] * (64 - held)
    assert "this connection" in outcomes[-1].value.value.message
    assert store.stats()["reserved"] == MAX_GROUP_RESERVED
    # Another sender stores as ever.
    alice = node.connect()
    data = pattern(3 * MIB)
    ok(alice, alice.peer.store(key_of(data), data))


def test_one_connection_holds_at_most_its_count_of_uploads(tmp_path):
    store = MemoryShareStore(BIG_NODE)
    node = Node(tmp_path, store)
    mallory = node.connect()
    outcomes = [open_silent(mallory, 1)[0] for _ in range(MAX_GROUP_UPLOADS + 3)]
    mallory.flush()
    assert codes(outcomes) == [None] * MAX_GROUP_UPLOADS + [ErrorCode.UPLOAD_LIMIT] * 3


def test_one_sender_holds_at_most_its_share_of_capacity_over_all_its_connections(tmp_path):
    store = MemoryShareStore(BIG_NODE)
    node = Node(tmp_path, store)
    first = node.connect()
    connections = [first] + [node.connect(identity=first.identity) for _ in range(5)]
    outcomes = []
    for pair in connections:
        outcomes += [open_silent(pair, 32 * MIB)[0] for _ in range(20)]
        pair.flush()
    limit = owner_reserve_limit(BIG_NODE)
    assert limit == BIG_NODE // 32
    assert store.stats()["reserved"] == limit
    assert codes(outcomes).count(None) == limit // (32 * MIB)
    refused = [o.value.value for o in outcomes if o.fired]
    assert {e.code for e in refused} == {ErrorCode.UPLOAD_LIMIT}
    assert any("one sender" in e.message for e in refused)
    # What the node still offers everyone else: over 90% of it (31/32).
    assert store.stats()["free"] >= 0.9 * BIG_NODE
    alice = node.connect()
    data = pattern(5 * MIB, 1)
    ok(alice, store_streamed(alice, data))
    assert ok(alice, alice.peer.retrieve(key_of(data))) == data


def test_an_honest_clients_most_at_once_fits(tmp_path):
    """Six extent streams (three files, each sending one extent while the
    last one commits) at k = 1, its 32 MiB of tars in 16 STOREs and a
    manifest segment's share, open at once on one node of the smallest
    capacity the bounds are meant for."""
    store = MemoryShareStore(2 * GIB)
    node = Node(tmp_path, store)
    client = node.connect()
    sizes = [32 * MIB] * 6 + [2 * MIB] * 16 + [MIB // 2]
    outcomes = [open_silent(client, size)[0] for size in sizes]
    client.flush()
    assert codes(outcomes) == [None] * len(sizes)


def test_a_silent_upload_is_dropped_and_its_space_given_back(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    mallory = node.connect()
    outcome, _ = open_silent(mallory, 16 * MIB)
    mallory.flush()
    assert any_store.stats()["reserved"] == 16 * MIB
    node.clock.advance(UPLOAD_STALL_TIMEOUT - 1)
    mallory.flush()
    assert not outcome.fired
    node.clock.advance(1)
    mallory.flush()
    error = outcome.failure(RemoteError)
    assert error.code == ErrorCode.STALLED and "received nothing" in error.message
    nothing_held(any_store)
    incoming_is_empty(any_store)
    assert node.handler.counters["stalled"] == 1
    assert node.clock.getDelayedCalls() == [] or all(
        c.func.__name__ != "_check_stall" for c in node.clock.getDelayedCalls())
    assert ok(mallory, mallory.peer.ping()) == messages.Empty()  # the connection serves on


def test_a_slow_upload_that_keeps_sending_is_kept(any_store, tmp_path):
    node = Node(tmp_path, any_store)
    alice = node.connect()
    data = pattern(4 * MIB, 2)
    outcome, source = open_silent(alice, len(data))
    alice.flush()
    for start in range(0, len(data), MIB):  # a MiB a minute
        node.clock.advance(UPLOAD_STALL_TIMEOUT - 30)
        source.feed(data[start:start + MIB])
        alice.flush()
    node.clock.advance(UPLOAD_STALL_TIMEOUT - 30)
    source.feed(key_of(data))
    alice.flush()
    assert outcome.result() == messages.Empty()
    assert ok(alice, alice.peer.retrieve(key_of(data))) == data
    assert [c for c in node.clock.getDelayedCalls() if c.func.__name__ == "_check_stall"] == []


def test_an_upload_waiting_its_turn_on_a_busy_connection_is_kept_until_abandoned(tmp_path,
                                                                                 memory_store):
    """A frame reaches the node whole: on a slow link an upload's next frame
    may be minutes away while its connection receives its siblings'. The
    connection receiving keeps it; only UPLOAD_ABANDON_TIMEOUT of its own
    silence drops it."""
    node = Node(tmp_path, memory_store)
    alice = node.connect()
    waiting, _ = open_silent(alice, MIB)
    busy, source = open_silent(alice, 32 * MIB)
    alice.flush()
    elapsed = 0.0
    while elapsed < UPLOAD_ABANDON_TIMEOUT - 20:
        node.clock.advance(20)
        elapsed += 20
        source.feed(b"x" * 1000)
        alice.flush()
        assert not waiting.fired, f"dropped after {elapsed} s"
    node.clock.advance(20)
    source.feed(b"x" * 1000)
    alice.flush()
    assert waiting.failure(RemoteError).code == ErrorCode.STALLED
    assert not busy.fired
    assert memory_store.stats()["reserved"] == 32 * MIB


def test_an_upload_whose_connection_falls_silent_is_dropped(tmp_path, memory_store):
    node = Node(tmp_path, memory_store)
    alice = node.connect()
    outcome, source = open_silent(alice, 8 * MIB)
    alice.flush()
    node.clock.advance(10)
    source.feed(b"x" * 1000)
    alice.flush()
    node.clock.advance(30)
    assert ok(alice, alice.peer.ping()) == messages.Empty()  # traffic, not for the upload
    node.clock.advance(UPLOAD_STALL_TIMEOUT - 30)
    alice.flush()
    assert not outcome.fired  # the connection spoke 60 s ago
    node.clock.advance(UPLOAD_STALL_TIMEOUT)
    alice.flush()
    assert outcome.failure(RemoteError).code == ErrorCode.STALLED
    nothing_held(memory_store)


def test_a_dropped_uploads_late_data_is_ignored(tmp_path, memory_store):
    node = Node(tmp_path, memory_store)
    alice = node.connect()
    data = pattern(2 * MIB, 5)
    outcome, source = open_silent(alice, len(data))
    alice.flush()
    node.clock.advance(UPLOAD_STALL_TIMEOUT)
    alice.flush()
    assert outcome.failure(RemoteError).code == ErrorCode.STALLED
    # The sender wakes up: its client knows the request failed and sends
    # nothing more, and DATA already on its way is dropped quietly.
    late = Outcome(source.feed(data))
    alice.flush()
    late.failure(RemoteError)
    assert not alice.client.closed and not alice.server.closed
    nothing_held(memory_store)
    ok(alice, store_streamed(alice, data))  # sent again, it lands


# ---- the door: connections before HELLO ---------------------------------------------------

from flud.node.gate import TRIM_AFTER_BURST, TRIM_DELAY, GatedConnectionFactory  # noqa: E402
from flud.protocol.connection import HANDSHAKE_TIMEOUT  # noqa: E402
from tests.unit.protocol.helpers import TCPStringTransport  # noqa: E402


class Door:
    """A node's listening factory with a clock and a counted trim."""

    def __init__(self, tmp_path, limit):
        self.clock = task.Clock()
        self.party = make_party(tmp_path, "door-node")
        self.handler = NodeHandler(MemoryShareStore(CAPACITY), run_inline)
        self.trims = []
        self.factory = GatedConnectionFactory(self.party, self.handler, self.clock, limit=limit,
                                              trim=lambda: self.trims.append(self.clock.seconds()))

    def silent(self):
        """An accepted TCP connection that never sends a byte (None: refused)."""
        conn = self.factory.buildProtocol(None)
        if conn is not None:
            conn.makeConnection(TCPStringTransport())
        return conn

    def honest(self, tmp_path):
        """A real client over iosim, through the factory: TLS, then HELLO."""
        party = make_party(tmp_path, "door-client", role=messages.ROLE_CLIENT)
        return connect(self.party, self.handler, party, ClientOnlyHandler(), clock=self.clock,
                       server_class=lambda *args, **kwargs: self.factory.buildProtocol(None))


def test_connections_past_the_bound_before_hello_are_closed_at_once(tmp_path):
    door = Door(tmp_path, limit=3)
    waiting = [door.silent() for _ in range(3)]
    assert all(waiting) and door.factory.unauthenticated == 3
    assert door.silent() is None and door.factory.refused == 1  # Twisted closes the socket
    # The handshake timeout closes the silent ones; their places come back.
    door.clock.advance(HANDSHAKE_TIMEOUT)
    for conn in waiting:
        assert conn.transport.disconnecting and conn.ready.called
        conn.connectionLost(None)
    assert door.factory.unauthenticated == 0
    assert door.silent() is not None


def test_a_connection_that_says_hello_frees_its_place(tmp_path):
    door = Door(tmp_path, limit=2)
    first = door.silent()
    pair = door.honest(tmp_path)
    assert pair.server_ready.result() is pair.server
    assert door.factory.unauthenticated == 1
    assert door.silent() is not None and door.silent() is None
    peer = PeerClient(pair.client)
    assert call(pair, peer.ping()).result() == messages.Empty()
    first.connectionLost(None)
    assert door.factory.unauthenticated == 1


def test_the_heap_is_trimmed_once_a_burst_has_gone(tmp_path):
    door = Door(tmp_path, limit=TRIM_AFTER_BURST + 8)
    first_wave = [door.silent() for _ in range(TRIM_AFTER_BURST)]
    door.clock.advance(HANDSHAKE_TIMEOUT / 2)
    second_wave = [door.silent() for _ in range(10)]
    assert second_wave.count(None) == 2
    door.clock.advance(HANDSHAKE_TIMEOUT / 2)  # the first wave times out
    for conn in first_wave:
        conn.connectionLost(None)
    door.clock.advance(TRIM_DELAY)
    assert door.trims == []  # not while some of the burst are still there
    door.clock.advance(HANDSHAKE_TIMEOUT / 2)  # and now the second
    for conn in filter(None, second_wave):
        conn.connectionLost(None)
    door.clock.advance(TRIM_DELAY)
    assert len(door.trims) == 1
    door.clock.advance(10 * TRIM_DELAY)
    assert len(door.trims) == 1


def test_honest_connections_coming_and_going_do_not_trim(tmp_path):
    door = Door(tmp_path, limit=128)
    for _ in range(TRIM_AFTER_BURST + 1):
        pair = door.honest(tmp_path)
        pair.server_ready.result()
        pair.client.transport.loseConnection()
        pair.flush()
        door.clock.advance(TRIM_DELAY)
    assert door.trims == [] and door.factory.refused == 0


def test_observed_says_where_the_asker_is_seen_and_punches_need_a_puncher(alice):
    from twisted.internet.address import IPv6Address
    alice.server.transport.getPeer = lambda: IPv6Address("TCP", "::ffff:198.18.200.1", 40123)
    answer = ok(alice, alice.client.request(Op.OBSERVED, messages.Empty()))
    assert (answer.host, answer.port) == ("198.18.200.1", 40123)    # one spelling
    connect = messages.PunchConnect([("198.18.200.1", 7400)], 1)
    assert error_code(alice, alice.client.request(Op.PUNCH_CONNECT, connect)) == \
        ErrorCode.PUNCH_REFUSED
    assert error_code(alice, alice.client.request(Op.PUNCH_SYNC, messages.PunchSync(1))) == \
        ErrorCode.PUNCH_REFUSED
