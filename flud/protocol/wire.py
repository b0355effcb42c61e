"""Twisted glue: TCP bytes <-> TLSEndpoint <-> Session, and nothing more.

A Connection is symmetric: either side may send requests once both HELLOs
are verified. Outbound DATA (a STORE upload, a RETRIEVE answer) streams from
sources through one round-robin pump that is the transport's push producer,
so a slow reader pauses us instead of growing a buffer.

Frames wait as plaintext (views of the caller's buffers, which its memory
budget already counts) and are encrypted one TLS record at a time, only while
the transport is not paused: the ciphertext a connection has queued in its
transport stays under the transport's buffer size plus one record, instead of
a whole share or tar per connection (which glibc's heap then kept).

Inbound, a streamed answer that has a buffer waiting for it (a restore's
block) is decrypted straight into that buffer, record after record
(_divert, _place); everything else is parsed from plaintext chunks.
"""
import collections
import logging

from twisted.internet import defer, protocol
from zope.interface import implementer
from twisted.internet.interfaces import IPushProducer

from flud.protocol import messages
from flud.protocol.codec import DATA_CHUNK, Op, Pieces, Placed, pieces_of
from flud.protocol.errors import (AuthenticationFailed, ConnectionLost,
                                  ErrorCode, FrameError, RemoteError,
                                  code_for_exception)
from flud.protocol.party import LocalParty
from flud.protocol.session import (ErrorReceived, HelloReceived,
                                   RequestCancelled, RequestData,
                                   RequestReceived, ResponseData,
                                   ResponseReceived, Session)
from flud.protocol.tls import (NODE_SEND_PIECE, SEND_PIECE, TLSEndpoint, TLSFailed,
                               hello_transcript)

log = logging.getLogger("flud.wire")

HANDSHAKE_TIMEOUT = 10.0
IDLE_TIMEOUT = 120.0
# Bytes read from the socket at a time; also what the TLS incoming BIO grows
# to (it never shrinks), per connection. Twisted pauses a connection's
# producer once its transport holds more than this (the same attribute), so it
# also bounds the ciphertext queued per connection: READ_BUFFER + one piece
# (SEND_PIECE, NODE_SEND_PIECE on a node).
READ_BUFFER = 64 * 1024
# A connection whose party counts its send queues against an allowance
# (LocalParty.send_queue with room()) may queue up to this much while the
# allowance lasts: fewer, larger socket writes (each costs the sender and the
# receiver a fixed price on top of the copy). Twisted joins what is queued
# into one buffer before it writes: with one record more, that buffer stays
# below the client's mmap threshold (flud.lean), so it comes from the heap;
# at 256 KiB each join was a fresh map (~150 page faults per MB backed up,
# client CPU 4.2 -> 3.75 ms/MB at 96 KiB).
SEND_WINDOW = 96 * 1024
# Where the rest of a diverted payload goes once its request is cancelled.
READ_SCRATCH = 16 * 1024
# A streamed answer up to this size is received into one buffer made when its
# head arrives (its size is in the head); larger ones are joined at the end.
PREALLOCATE_LIMIT = 256 * 1024 * 1024
# Answers from this size get a mapped, prefaulted buffer (_answer_buffer).
POPULATE_MIN = 4 * 1024 * 1024


def _transport_backlog(transport):
    """Bytes a Twisted FileDescriptor transport still has to write, or None
    where the transport does not keep them the usual way (test transports)."""
    try:
        return len(transport.dataBuffer) - transport.offset + transport._tempDataLen
    except (AttributeError, TypeError):
        return None


class BytesSource:
    """Serves a bytes object in DATA_CHUNK slices without copying it."""

    def __init__(self, data, chunk: int = DATA_CHUNK):
        self._view = memoryview(data)
        self._pos = 0
        self._chunk = chunk

    @property
    def remaining(self) -> int:
        return len(self._view) - self._pos

    def read(self, n: int):
        piece = self._view[self._pos:self._pos + n]
        self._pos += len(piece)
        return piece

    def close(self) -> None:
        self._view.release()


class FedSource:
    """Request bytes handed over as they are made: a share streamed across a
    file's segments. The total is declared up front; feed() queues a buffer
    (kept as a view, not copied) and its Deferred fires once the pump has
    taken every byte of it, so the feeder may move on. The pump parks a
    stream whose source has nothing yet, and feed() wakes it."""

    def __init__(self, total: int):
        self._unfed = total   # bytes still to be fed
        self._untaken = total  # bytes still to be taken by the pump
        self._queue = collections.deque()  # [view, Deferred]
        self._taken = []       # Deferreds to fire once the pump has unwound
        self._closed = None
        self.wake = None       # set by a connection that parked this source

    @property
    def remaining(self) -> int:
        return self._untaken

    def feed(self, data) -> defer.Deferred:
        if self._closed is not None:
            return defer.fail(self._closed)
        view = memoryview(data).cast("B")
        if len(view) > self._unfed:
            return defer.fail(ValueError(f"fed {len(view)} bytes with {self._unfed} to go"))
        self._unfed -= len(view)
        done = defer.Deferred()
        if not len(view):
            done.callback(None)
            return done
        self._queue.append([view, done])
        wake, self.wake = self.wake, None
        if wake is not None:
            wake()
        return done

    def read(self, n: int):
        """Up to n bytes of what was fed, or None when nothing waits."""
        if not self._queue:
            return None
        item = self._queue[0]
        piece, rest = item[0][:n], item[0][n:]
        self._untaken -= len(piece)
        if len(rest):
            item[0] = rest
        else:
            self._queue.popleft()
            self._taken.append(item[1])
        return piece

    def settle(self) -> None:
        """Fires the feeds the pump has taken whole (called after it unwound:
        a feeder's callback may feed again or cancel)."""
        taken, self._taken = self._taken, []
        for done in taken:
            done.callback(None)

    def close(self, reason: BaseException = None) -> None:
        if self._closed is not None:
            return
        self._closed = reason or ConnectionLost("the request ended before all was fed")
        self.wake = None
        # What the pump took is settled by the pump; what it never took fails.
        queue, self._queue = self._queue, collections.deque()
        for _, done in queue:
            done.errback(self._closed)


class _Stream:
    __slots__ = ("rid", "source", "is_response", "on_done", "held")

    def __init__(self, rid, source, is_response, on_done):
        self.rid = rid
        self.source = source
        self.is_response = is_response
        self.on_done = on_done
        self.held = None  # a chunk read while the transport paused us


def _close_source(source, reason=None) -> None:
    """Close a request's source; a FedSource fails its waiting feeds with reason."""
    if reason is not None and type(source) is FedSource:
        source.close(reason)
    else:
        source.close()


def _answer_buffer(total: int):
    """A writable buffer for an answer of `total` bytes. Large ones are mapped
    with their pages populated in one go: a bytearray zeroes its fresh pages
    one fault at a time (measured here: 47 ms for 64 MiB, against 24 ms)."""
    import mmap  # here: a node never needs it
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if total < POPULATE_MIN or not populate:
        return bytearray(total)
    return memoryview(mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate))


class _Pending:
    __slots__ = ("deferred", "op", "sink", "into", "head", "parts", "buffer", "filled", "sent")

    def __init__(self, op, sink, into=None):
        self.deferred = defer.Deferred()
        self.sent = False  # the request went out whole: the answer is the peer's to give
        self.op = op
        self.sink = sink
        self.into = into  # a writable buffer the caller offers for the answer
        self.head = None
        self.parts = []  # streamed bytes, when the caller gave no sink
        self.buffer = None  # or the whole answer, filled as DATA arrives
        self.filled = 0

    def expect(self, total: int) -> None:
        """The answer's size is known: copy each piece into place as it comes
        (while the network is busy) instead of joining them all at the end."""
        if 0 < total <= PREALLOCATE_LIMIT and self.sink is None:
            into, self.into = self.into, None
            self.buffer = (into[:total] if into is not None and total <= len(into)
                           else _answer_buffer(total))

    def add(self, data) -> None:
        if self.buffer is None:
            self.parts.append(data)
            return
        end = self.filled + len(data)
        if end > len(self.buffer):  # a peer sent more than it announced
            self.buffer = bytearray(self.buffer[:self.filled])
        self.buffer[self.filled:end] = data
        self.filled = end

    def finish(self):
        if self.buffer is not None:
            self.head.data = (self.buffer if self.filled == len(self.buffer)
                              else bytes(memoryview(self.buffer)[:self.filled]))
        elif self.parts:
            self.head.data = b"".join(self.parts)
        self.deferred.callback(self.head)


@implementer(IPushProducer)
class Connection(protocol.Protocol):
    def __init__(self, local: LocalParty, handler, clock, tls_client: bool,
                 expected_peer: bytes = None):
        self.local = local
        self.handler = handler
        self.clock = clock
        self.tls_client = tls_client
        self.expected_peer = expected_peer
        self.session = Session(tls_client)
        self.peer_id = None
        self.peer_hello = None
        self.ready = defer.Deferred()
        self.closed = False
        self._tls = None
        self._hello_sent = False
        self._pending = {}
        self._streams = collections.deque()
        self._parked = {}  # rid -> stream whose FedSource has nothing yet
        self._unsettled = []  # FedSources whose taken bytes may still be in _plain
        self._paused = False
        self._plain = collections.deque()  # frames waiting to be encrypted
        self._plain_bytes = 0
        self._queued = 0  # ciphertext counted as queued in the transport...
        self._counted_on = None  # ...on this memory transfer
        self._since_drain = 0  # ciphertext written since the transport last drained
        self._send_piece = (NODE_SEND_PIECE if getattr(local, "role", None) == messages.ROLE_NODE
                            else SEND_PIECE)  # plaintext per TLS write (tls.py)
        self._timer = None
        self._last_activity = 0.0
        # A DATA payload decrypted straight into its request's buffer
        # (_divert): where the next bytes go, the request, bytes still to come.
        self._divert_view = None
        self._divert_item = None
        self._divert_left = 0
        self._scratch = None
        self.bytes_in = 0
        self.bytes_out = 0
        self._lost_reason = None  # what pending requests fail with (abort)
        self._reading_paused = False

    # ---- Twisted protocol --------------------------------------------------

    def connectionMade(self):
        # Frames are already batched by the session: Nagle would only hold
        # back the tail of each message until the peer's delayed ACK.
        self.transport.setTcpNoDelay(True)
        self.transport.bufferSize = READ_BUFFER
        self.transport.registerProducer(self, True)
        context = self.local.client_context if self.tls_client else self.local.server_context
        self._tls = TLSEndpoint(context, server_side=not self.tls_client)
        self._last_activity = self.clock.seconds()
        self._timer = self.clock.callLater(HANDSHAKE_TIMEOUT, self._check_timeout)
        if self.tls_client:
            self._write(self._tls.start())

    def dataReceived(self, data):
        self.bytes_in += len(data)
        self._last_activity = self.clock.seconds()
        tls = self._tls
        try:
            tls.feed(data)
            handshake_bytes = tls.pending()
            if handshake_bytes:
                self._write(handshake_bytes)
            if tls.handshake_done and not self._hello_sent:
                self._send_hello()
            while not self.closed:
                if self._divert_left or self._divert():
                    if not self._place(tls):
                        break
                    continue
                chunk = tls.read()
                if not chunk:
                    break
                for event in self.session.receive(chunk):
                    self._dispatch(event)
                    if self.closed:
                        return
        except (TLSFailed, FrameError, AuthenticationFailed) as err:
            self._fail(err)
            return
        self._flush()

    def _divert(self) -> bool:
        """Take over the DATA payload arriving for a request whose answer has
        a buffer (a RETRIEVE into a block buffer), to decrypt it straight in:
        each TLS record then costs no bytes object, no copy and no parsing."""
        due = self.session.data_due()
        if due is None:
            return False
        rid, length, _ = due
        item = self._pending.get(rid)
        if item is None or item.buffer is None or item.filled + length > len(item.buffer):
            return False
        end = item.filled + length
        for part in self.session.divert():
            item.add(part)
        self._divert_view = memoryview(item.buffer)[item.filled:end]
        self._divert_item = item
        self._divert_left = end - item.filled
        return True

    def _place(self, tls) -> bool:
        """Decrypt what is ready of a diverted payload into place; False when
        no whole record is here yet."""
        view = self._divert_view
        if view is None:  # its request was cancelled: read the rest aside
            if self._scratch is None:
                self._scratch = bytearray(READ_SCRATCH)
            view = memoryview(self._scratch)[:min(self._divert_left, READ_SCRATCH)]
        placed = tls.read_into(view)
        if not placed:
            return False
        self._divert_left -= placed
        if self._divert_view is not None:
            self._divert_view = view[placed:]
            self._divert_item.filled += placed
        if not self._divert_left:
            self._divert_view = self._divert_item = None
        for event in self.session.placed(placed):
            self._dispatch(event)
            if self.closed:
                return False
        return True

    def connectionLost(self, reason=None):
        self.closed = True
        self.session.close()
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        pending, self._pending = self._pending, {}
        lost = self._lost_reason or ConnectionLost(f"connection to {self.describe()} was lost")
        for item in pending.values():
            item.deferred.errback(lost)
        for stream in list(self._streams) + list(self._parked.values()):
            _close_source(stream.source, lost)  # a feeder learns why
        self._streams.clear()
        self._parked.clear()
        self._plain.clear()
        self._plain_bytes = 0
        self._settle_fed()  # nothing holds their buffers now; the requests failed above
        self._count_queued(0)
        if not self.ready.called:
            self.ready.errback(lost)
            # Whoever waited has seen it; an accepted connection that hung up
            # before HELLO has nobody waiting, and that is not an error.
            self.ready.addErrback(lambda _: None)
        self.handler.connection_lost(self)

    # ---- push producer (the transport pauses us) ---------------------------

    def pauseProducing(self):
        self._paused = True

    def resumeProducing(self):
        # The transport wrote out everything it held: the peer is reading.
        self._last_activity = self.clock.seconds()
        self._paused = False
        self._since_drain = 0
        self._count_queued(0)
        self._send_plain()
        self._pump()

    def stopProducing(self):
        self._paused = True

    def pause_reading(self):
        self._reading_paused = True
        self.transport.pauseProducing()

    def resume_reading(self):
        self._reading_paused = False
        self._last_activity = self.clock.seconds()
        self.transport.resumeProducing()

    # ---- progress (flud.protocol.stall watches it) -------------------------

    @property
    def last_progress(self) -> float:
        """When the peer last showed it is alive: bytes arrived, or our
        transport drained what it held for the peer."""
        return self._last_activity

    def owes_us(self) -> bool:
        """The peer has something to do for us and nothing of it waits on us:
        answer a request that went out whole, or read what we hold for it."""
        if self.closed or self._reading_paused:
            return False
        if self._paused and (self._plain or self._streams):
            return True
        return any(item.sent for item in self._pending.values())

    def abort(self, error: BaseException) -> None:
        """Drop the connection now; its requests fail with `error`."""
        if self.closed or self.transport is None:
            return
        self._lost_reason = error
        self._fail(error)

    # ---- requests we send --------------------------------------------------

    def request(self, op: int, message, sink=None, source=None,
                total: int = 0, into=None) -> defer.Deferred:
        """Send a request; the Deferred fires with the response message.

        `sink(chunk)` receives streamed response bytes (RETRIEVE); `source`
        supplies request bytes after the first ones (STORE); `into`, a
        writable memoryview, receives a streamed answer that fits in it (the
        answer's data is then a view of it).
        """
        if self.closed:
            return defer.fail(ConnectionLost(f"connection to {self.describe()} is closed"))
        try:
            body = message.encode()
        except Exception as err:  # e.g. a key that is not 32 bytes
            return defer.fail(err)
        end = source is None or source.remaining == 0
        rid = self.session.send_request(op, body, end=end)
        pending = _Pending(op, sink, into)
        pending.sent = end
        self._pending[rid] = pending
        if not end:
            self._streams.append(_Stream(rid, source, False, None))
        self._flush()
        self._pump()
        return pending.deferred

    def cancel(self, deferred: defer.Deferred) -> None:
        for rid, item in list(self._pending.items()):
            if item.deferred is deferred:
                del self._pending[rid]
                if self._divert_item is item:  # its buffer is the caller's again
                    self._divert_view = self._divert_item = None
                # A feeder still feeding learns it was cancelled, not that
                # the connection was lost (which would blame the node).
                cancelled = RemoteError(ErrorCode.CANCELLED, "cancelled")
                self._drop_stream(rid, cancelled)
                self.session.cancel(rid)
                self._flush()
                item.deferred.errback(cancelled)
                return

    # ---- answers we send (for the handler) ---------------------------------

    def respond(self, rid: int, message) -> None:
        if self.session.send_response(rid, message.encode()):
            self._flush()

    def respond_stream(self, rid: int, head_without_data, source, on_done=None) -> None:
        """Answer with a head message, then stream `source` as DATA frames."""
        if source.remaining == 0:
            self.respond(rid, head_without_data)
            source.close()
            return
        if not self.session.send_response(rid, head_without_data.encode(), end=False):
            source.close()
            return
        self._streams.append(_Stream(rid, source, True, on_done))
        self._flush()
        self._pump()

    def respond_error(self, rid: int, error: BaseException) -> None:
        code = code_for_exception(error)
        text = error.message if isinstance(error, RemoteError) else str(error)
        if code == ErrorCode.INTERNAL:
            log.error("request %d from %s failed", rid, self.describe(), exc_info=error)
            text = "the node failed to handle this request; see its log"
        self._drop_stream(rid)
        if self.session.send_error(rid, code, text):
            self._flush()

    def describe(self) -> str:
        who = self.peer_id.hex()[:12] if self.peer_id else "unauthenticated peer"
        try:
            addr = self.transport.getPeer()
            return f"{who} at {addr.host}:{addr.port}"
        except Exception:
            return who

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.transport.loseConnection()

    # ---- internals ---------------------------------------------------------

    def _send_hello(self):
        identity = self.local.identity
        signature = identity.sign(hello_transcript(self.tls_client, self._tls.channel_binding))
        self.session.send_hello(messages.Hello(
            messages.PROTOCOL_VERSION, self.local.role, self.local.listen_port,
            identity.public_der, signature, self.local.listen_host))
        self._hello_sent = True

    def _on_hello(self, hello):
        transcript = hello_transcript(not self.tls_client, self._tls.channel_binding)
        identity_type = type(self.local.identity)
        if not identity_type.verify(hello.public_key, transcript, hello.signature):
            raise AuthenticationFailed("the peer's HELLO signature does not match its key")
        peer_id = identity_type.node_id_of(hello.public_key)
        if self.expected_peer is not None and peer_id != self.expected_peer:
            raise AuthenticationFailed(
                f"expected node {self.expected_peer.hex()[:12]}, "
                f"but the peer proved to be {peer_id.hex()[:12]}")
        self.peer_id = peer_id
        self.peer_hello = hello
        self.handler.connection_ready(self)
        self.ready.callback(self)

    def _dispatch(self, event):
        kind = type(event)
        if kind is RequestReceived or kind is RequestData or kind is RequestCancelled:
            self._dispatch_to_handler(event)
        elif kind is ResponseReceived:
            self._on_response(event)
        elif kind is ResponseData:
            self._on_response_data(event)
        elif kind is ErrorReceived:
            item = self._pending.pop(event.request_id, None)
            # A feeder still feeding learns why (a full node: NO_SPACE), not
            # only that its request ended.
            self._drop_stream(event.request_id, event.error)
            if item is not None:
                item.deferred.errback(event.error)
        elif kind is HelloReceived:
            self._on_hello(event.hello)

    def _dispatch_to_handler(self, event):
        try:
            if type(event) is RequestReceived:
                self.handler.request_received(self, event.request_id, event.op,
                                              event.message, event.end)
            elif type(event) is RequestData:
                self.handler.request_data(self, event.request_id, event.data, event.end)
            else:
                self._drop_stream(event.request_id)
                self.handler.request_cancelled(self, event.request_id)
        except Exception as err:  # a handler bug must not kill the connection
            self.respond_error(event.request_id, err)

    def _on_response(self, event):
        item = self._pending.get(event.request_id)
        if item is None:
            return
        item.head = event.message
        if event.op == Op.RETRIEVE and not event.end:
            item.expect(event.message.total)
        if event.op == Op.RETRIEVE and event.message.data:
            self._deliver(item, event.message.data)
            event.message.data = b""
        if event.end:
            del self._pending[event.request_id]
            self._drop_stream(event.request_id)
            item.finish()

    def _on_response_data(self, event):
        item = self._pending.get(event.request_id)
        if item is None:
            return
        self._deliver(item, event.data)
        if event.end:
            del self._pending[event.request_id]
            item.finish()

    @staticmethod
    def _deliver(item, data):
        if type(data) is Placed:  # already in item.buffer (_place)
            return
        if item.sink is not None:  # one call per DATA frame, as the frame was sent
            item.sink(data if type(data) is not Pieces else bytes(data))
            return
        for piece in pieces_of(data):  # straight into the preallocated answer
            item.add(piece)

    def _drop_stream(self, rid, reason=None):
        parked = self._parked.pop(rid, None)
        if parked is not None:
            _close_source(parked.source, reason)
            return
        for stream in self._streams:
            if stream.rid == rid:
                self._streams.remove(stream)
                _close_source(stream.source, reason)
                return

    def _pump(self):
        """Send DATA round-robin across streams until the transport pauses us.

        A stream's next chunk is read only once everything before it is
        encrypted: one chunk read ahead per connection, not per stream."""
        session = self.session
        fed = []
        while self._streams and not self.closed and not self._plain and self._may_send():
            stream = self._streams.popleft()
            chunk, stream.held = stream.held, None
            if chunk is None:
                try:
                    chunk = stream.source.read(DATA_CHUNK)
                except Exception as err:  # e.g. a share cut short on disk
                    stream.source.close()
                    self._stream_failed(stream, err)
                    continue
                if chunk is None:  # a FedSource with nothing yet: park it
                    self._park(stream)
                    continue
                if type(stream.source) is FedSource:
                    fed.append(stream.source)
                if not self._may_send():
                    # Reading paused us: keep the chunk with its stream, so a
                    # cancel before the resume drops it unsent. A fed source
                    # is not settled while its stream holds one (_settle_fed).
                    stream.held = chunk
                    self._streams.appendleft(stream)
                    break
            end = stream.source.remaining == 0
            if stream.is_response:
                session.send_response_data(stream.rid, chunk, end)
            else:
                session.send_request_data(stream.rid, chunk, end)
            if end:
                stream.source.close()
                if stream.on_done is not None:
                    stream.on_done()
                if not stream.is_response:
                    item = self._pending.get(stream.rid)
                    if item is not None:
                        item.sent = True
            else:
                self._streams.append(stream)
            self._flush()
        self._unsettled.extend(fed)
        self._settle_fed()

    def _settle_fed(self):
        """A fed buffer is let go ("taken") only once its bytes are encrypted:
        no frame waiting to be encrypted (_plain) and no chunk held by a
        stream still holds a view of it. Every path through the pump ends
        here, so the feeder never refills a buffer a view still points into."""
        if self._plain or not self._unsettled:
            return
        holding = {id(s.source) for s in self._streams if s.held is not None}
        fed, self._unsettled = self._unsettled, []
        for source in fed:
            if id(source) in holding:
                self._unsettled.append(source)
            else:
                source.settle()

    def _park(self, stream):
        self._parked[stream.rid] = stream
        stream.source.wake = lambda: self._unpark(stream)

    def _unpark(self, stream):
        if self._parked.pop(stream.rid, None) is stream and not self.closed:
            self._streams.append(stream)
            self._pump()

    def _stream_failed(self, stream, err):
        """A source failed mid-stream: fail that one request, keep the connection."""
        if stream.is_response:
            self.respond_error(stream.rid, err)
            return
        item = self._pending.pop(stream.rid, None)
        self.session.cancel(stream.rid)
        self._flush()
        if item is not None:
            item.deferred.errback(err)

    def _flush(self):
        if self.closed or self._tls is None or not self._tls.handshake_done:
            return
        frames = self.session.take_outbound()
        if frames:
            self._plain.extend(frames)
            self._plain_bytes += sum(map(len, frames))
        self._send_plain()

    def _send_plain(self):
        """Encrypt and write waiting frames, a TLS record at a time, until the
        transport pauses us (it holds more than its bufferSize)."""
        plain = self._plain
        if not plain or self.closed or self._tls is None:
            return
        encrypt = self._tls.encrypt
        send_piece = self._send_piece
        wrote = 0
        try:
            while plain and self._may_send():
                chunk = plain[0]
                if len(chunk) <= send_piece:
                    plain.popleft()
                    piece = chunk
                else:
                    view = chunk if type(chunk) is memoryview else memoryview(chunk)
                    piece, plain[0] = view[:send_piece], view[send_piece:]
                self._plain_bytes -= len(piece)
                ciphertext = encrypt(piece)
                wrote += len(ciphertext)
                self.bytes_out += len(ciphertext)
                self._since_drain += len(ciphertext)
                self.transport.write(ciphertext)  # may pause us at once
        except TLSFailed as err:
            self._fail(err)
            return
        if wrote and getattr(self.local, "send_queue", None) is not None:
            backlog = _transport_backlog(self.transport)
            self._count_queued(self._queued + wrote if backlog is None else backlog)
        if not plain:
            self._settle_fed()

    def _may_send(self) -> bool:
        """Not paused by the transport, or paused but still inside a wider
        window the party's send-queue allowance has room for."""
        if not self._paused:
            return True
        if self._since_drain >= SEND_WINDOW:
            return False
        queue = getattr(self.local, "send_queue", None)
        room = getattr(queue, "room", None)
        return room is not None and not queue.closed and room() >= SEND_WINDOW

    def _write(self, data):
        """Handshake bytes: straight to the transport (no frames wait yet)."""
        if data:
            self.bytes_out += len(data)
            self.transport.write(data)

    def _count_queued(self, nbytes):
        """Tell the memory monitor how much ciphertext the transport holds
        (on the party's send_queue, which may come and go with a run)."""
        memory = getattr(self.local, "send_queue", None)
        if memory is not None and memory.closed:
            memory = None
        if memory is not self._counted_on:
            old = self._counted_on
            if old is not None and not old.closed and self._queued:
                old.release(self._queued, "tls")
            self._counted_on, self._queued = memory, 0
        if memory is None or nbytes == self._queued:
            return
        if nbytes > self._queued:
            memory.hold(nbytes - self._queued, "tls")
        else:
            memory.release(self._queued - nbytes, "tls")
        self._queued = nbytes

    def _check_timeout(self):
        self._timer = None
        if self.closed:
            return
        if self.peer_id is None:
            self._fail(AuthenticationFailed("the peer did not complete the handshake in time"))
            return
        idle = self.clock.seconds() - self._last_activity
        busy = (self.session.open_inbound or self.session.open_outbound or self._streams
                or self._parked)
        if idle >= IDLE_TIMEOUT and not busy:
            log.debug("closing idle connection to %s", self.describe())
            self.transport.loseConnection()
            return
        self._timer = self.clock.callLater(max(1.0, IDLE_TIMEOUT - idle), self._check_timeout)

    def _fail(self, err):
        log.warning("closing connection to %s: %s", self.describe(), err)
        if not self.ready.called:
            self.ready.errback(err)
            self.ready.addErrback(lambda _: None)
        self.closed = True
        self.transport.abortConnection()


class ConnectionFactory(protocol.Factory):
    """Builds server-side connections for a listening port."""

    noisy = False

    def __init__(self, local: LocalParty, handler, clock):
        self.local = local
        self.handler = handler
        self.clock = clock

    def buildProtocol(self, addr):
        return Connection(self.local, self.handler, self.clock, tls_client=False)


class _DialFactory(protocol.ClientFactory):
    noisy = False

    def __init__(self, local, handler, clock, expected_peer):
        self.local = local
        self.handler = handler
        self.clock = clock
        self.expected_peer = expected_peer
        self.result = defer.Deferred()

    def buildProtocol(self, addr):
        conn = Connection(self.local, self.handler, self.clock, tls_client=True,
                          expected_peer=self.expected_peer)
        conn.ready.chainDeferred(self.result)
        return conn

    def clientConnectionFailed(self, connector, reason):
        if not self.result.called:
            self.result.errback(ConnectionLost(
                f"cannot connect to {connector.host}:{connector.port}: "
                f"{reason.getErrorMessage()}"))


def dial(reactor, local: LocalParty, handler, host: str, port: int,
         expected_peer: bytes = None, timeout: float = HANDSHAKE_TIMEOUT) -> defer.Deferred:
    """Connect, run TLS and HELLO; fires with a ready Connection."""
    factory = _DialFactory(local, handler, reactor, expected_peer)
    reactor.connectTCP(host, port, factory, timeout=timeout)
    return factory.result
