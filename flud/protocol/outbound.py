"""What a connection sends: frames, encrypted a TLS record at a time, and
request and answer bytes streamed from sources within a send window.

Outbound DATA (a STORE upload, a RETRIEVE answer) streams from sources
through one round-robin pump, run while the transport takes more: a slow
reader pauses us instead of growing a buffer. A stream's next chunk is read
only once everything before it is encrypted: one chunk read ahead per
connection, not per stream.

Frames wait as plaintext (views of the caller's buffers, which its memory
budget already counts) and are encrypted one TLS record at a time, only while
the transport is not paused: the ciphertext a connection has queued in its
transport stays under the transport's buffer size plus one record, instead of
a whole share or tar per connection (which glibc's heap then kept). A party
with a send-queue allowance widens that window (SEND_WINDOW), and what the
transport holds is counted on the party's send queue.

A FedSource's buffer is handed back to its feeder only once no frame waiting
to be encrypted and no chunk held by a stream still points into it
(Outbound._settle_fed).

Outbound is driven by its connection (flud.protocol.connection): it is given
the Session, the TLSEndpoint and the transport once the connection is made,
and it calls back for what a failed stream or a failed record means.
"""
import collections

from twisted.internet import defer

from flud.protocol import messages
from flud.protocol.codec import DATA_CHUNK
from flud.protocol.errors import ConnectionLost
from flud.protocol.tls import NODE_SEND_PIECE, SEND_PIECE, TLSFailed

# A connection whose party counts its send queues against an allowance
# (LocalParty.send_queue with room()) may queue up to this much while the
# allowance lasts: fewer, larger socket writes (each costs the sender and the
# receiver a fixed price on top of the copy). Twisted joins what is queued
# into one buffer before it writes: with one record more, that buffer stays
# below the client's mmap threshold (flud.lean), so it comes from the heap;
# at 256 KiB each join was a fresh map (~150 page faults per MB backed up,
# client CPU 4.2 -> 3.75 ms/MB at 96 KiB).
SEND_WINDOW = 96 * 1024


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


class Stream:
    """One request's or answer's bytes still to send, from its source."""

    __slots__ = ("rid", "source", "is_response", "on_done", "held")

    def __init__(self, rid, source, is_response, on_done):
        self.rid = rid
        self.source = source
        self.is_response = is_response
        self.on_done = on_done
        self.held = None  # a chunk read while the transport paused us


def close_source(source, reason=None) -> None:
    """Close a request's source; a FedSource fails its waiting feeds with reason."""
    if reason is not None and type(source) is FedSource:
        source.close(reason)
    else:
        source.close()


class Outbound:
    """A connection's sending side: the frames waiting to be encrypted, the
    streams and the pump, the send window, and the count of what the
    transport holds."""

    def __init__(self, local, session, on_request_sent, on_stream_failed, on_tls_failed):
        """on_request_sent(rid): a request's streamed bytes all went out;
        on_stream_failed(stream, error): a source failed mid-stream;
        on_tls_failed(error): a record could not be encrypted."""
        self.local = local
        self.session = session
        self._on_request_sent = on_request_sent
        self._on_stream_failed = on_stream_failed
        self._on_tls_failed = on_tls_failed
        self.transport = None
        self.tls = None
        self._backlog = None
        self.closed = False
        self.paused = False
        self.streams = collections.deque()
        self._parked = {}  # rid -> stream whose FedSource has nothing yet
        self._unsettled = []  # FedSources whose taken bytes may still be in plain
        self.plain = collections.deque()  # frames waiting to be encrypted
        self._plain_bytes = 0
        self._queued = 0  # ciphertext counted as queued in the transport...
        self._counted_on = None  # ...on this memory transfer
        self._since_drain = 0  # ciphertext written since the transport last drained
        self._send_piece = (NODE_SEND_PIECE if getattr(local, "role", None) == messages.ROLE_NODE
                            else SEND_PIECE)  # plaintext per TLS write (tls.py)
        self.bytes_out = 0
        # held back by the party's upload limit (flud.protocol.ratelimit)
        self.throttled = False

    def attach(self, transport, tls, backlog) -> None:
        """The connection is made: write to `transport` through `tls`;
        backlog(transport) says how much the transport still holds (or
        None when it cannot tell)."""
        self.transport = transport
        self.tls = tls
        self._backlog = backlog

    # ---- what the connection asks -------------------------------------------

    def add(self, rid: int, source, is_response: bool, on_done=None) -> None:
        """Stream `source` as the DATA of request (or answer) `rid`; it goes
        out at the next pump()."""
        self.streams.append(Stream(rid, source, is_response, on_done))

    def drop(self, rid: int, reason=None) -> None:
        """Stop streaming `rid`; a feeder still feeding learns `reason`."""
        parked = self._parked.pop(rid, None)
        if parked is not None:
            close_source(parked.source, reason)
            return
        for stream in self.streams:
            if stream.rid == rid:
                self.streams.remove(stream)
                close_source(stream.source, reason)
                return

    def waiting(self) -> bool:
        """The transport paused us with bytes still to send: the peer must read."""
        return self.paused and bool(self.plain or self.streams)

    def busy(self) -> bool:
        """Some stream is still to be sent (or waits to be fed)."""
        return bool(self.streams or self._parked)

    def write_handshake(self, data) -> None:
        """Handshake bytes: straight to the transport (no frames wait yet)."""
        if data:
            self.bytes_out += len(data)
            self.transport.write(data)

    def pause(self) -> None:
        """The transport holds more than it wants: stop (the window aside)."""
        self.paused = True

    def resume(self) -> None:
        """The transport wrote out everything it held."""
        self.paused = False
        self._since_drain = 0
        self._count_queued(0)
        self.send_plain()
        self.pump()

    def stop(self) -> None:
        """The connection is closing: send nothing more."""
        self.closed = True

    def close(self, lost: BaseException) -> None:
        """The connection is gone: every stream's feeder learns `lost`.

        The callbacks are the connection's methods, and the connection holds
        this Outbound: dropping them ends that cycle, so a closed connection
        and its TLS state are freed at once, not at the collector's next
        full pass (a node trims its heap a second after a burst of
        connections has gone, flud.node.gate)."""
        self.closed = True
        self._on_request_sent = self._on_stream_failed = self._on_tls_failed = None
        for stream in list(self.streams) + list(self._parked.values()):
            close_source(stream.source, lost)  # a feeder learns why
        self.streams.clear()
        self._parked.clear()
        self.plain.clear()
        self._plain_bytes = 0
        self._settle_fed()  # nothing holds their buffers now; the requests failed
        self._count_queued(0)

    # ---- the pump ----------------------------------------------------------

    def pump(self) -> None:
        """Send DATA round-robin across streams until the transport pauses us.

        A stream's next chunk is read only once everything before it is
        encrypted: one chunk read ahead per connection, not per stream."""
        session = self.session
        fed = []
        while self.streams and not self.closed and not self.plain and self.may_send():
            stream = self.streams.popleft()
            chunk, stream.held = stream.held, None
            if chunk is None:
                try:
                    chunk = stream.source.read(DATA_CHUNK)
                except Exception as err:  # e.g. a share cut short on disk
                    stream.source.close()
                    self._on_stream_failed(stream, err)
                    continue
                if chunk is None:  # a FedSource with nothing yet: park it
                    self._park(stream)
                    continue
                if type(stream.source) is FedSource:
                    fed.append(stream.source)
                if not self.may_send():
                    # Reading paused us: keep the chunk with its stream, so a
                    # cancel before the resume drops it unsent. A fed source
                    # is not settled while its stream holds one (_settle_fed).
                    stream.held = chunk
                    self.streams.appendleft(stream)
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
                    self._on_request_sent(stream.rid)
            else:
                self.streams.append(stream)
            self.flush()
        self._unsettled.extend(fed)
        self._settle_fed()

    def _settle_fed(self):
        """A fed buffer is let go ("taken") only once its bytes are encrypted:
        no frame waiting to be encrypted (plain) and no chunk held by a
        stream still holds a view of it. Every path through the pump ends
        here, so the feeder never refills a buffer a view still points into."""
        if self.plain or not self._unsettled:
            return
        holding = {id(s.source) for s in self.streams if s.held is not None}
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
            self.streams.append(stream)
            self.pump()

    # ---- frames to ciphertext --------------------------------------------------

    def flush(self) -> None:
        """Take the session's new frames and send what the window allows."""
        if self.closed or self.tls is None or not self.tls.handshake_done:
            return
        frames = self.session.take_outbound()
        if frames:
            self.plain.extend(frames)
            self._plain_bytes += sum(map(len, frames))
        self.send_plain()

    def send_plain(self) -> None:
        """Encrypt and write waiting frames, a TLS record at a time, until the
        transport pauses us (it holds more than its bufferSize)."""
        plain = self.plain
        if not plain or self.closed or self.tls is None:
            return
        encrypt = self.tls.encrypt
        send_piece = self._send_piece
        wrote = 0
        try:
            while plain and self.may_send():
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
                limit = getattr(self.local, "upload_limit", None)
                if limit is not None and limit.charge(len(ciphertext), self._unthrottle):
                    self.throttled = True
        except TLSFailed as err:
            self._on_tls_failed(err)
            return
        if wrote and getattr(self.local, "send_queue", None) is not None:
            backlog = self._backlog(self.transport)
            self._count_queued(self._queued + wrote if backlog is None else backlog)
        if not plain:
            self._settle_fed()

    def _unthrottle(self) -> None:
        """The upload limit lets us send again."""
        self.throttled = False
        if not self.closed:
            self.send_plain()
            self.pump()

    def may_send(self) -> bool:
        """Not held back by the upload limit, and not paused by the
        transport, or paused but still inside a wider window the party's
        send-queue allowance has room for."""
        if self.throttled:
            return False
        if not self.paused:
            return True
        if self._since_drain >= SEND_WINDOW:
            return False
        queue = getattr(self.local, "send_queue", None)
        room = getattr(queue, "room", None)
        return room is not None and not queue.closed and room() >= SEND_WINDOW

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
