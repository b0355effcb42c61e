"""Twisted glue: TCP bytes <-> TLSEndpoint <-> Session, and nothing more.

A Connection is symmetric: either side may send requests once both HELLOs
are verified. It is the transport's push producer and turns Twisted's calls
into the sans-I/O pieces' terms: bytes in go through TLS to the Session,
whose events go to the handler (requests from the peer) or to the request
table (answers to ours, flud.protocol.requests); what goes out is the
Outbound's (flud.protocol.outbound: streams, pump, send window). It owns the
timers (handshake and idle timeouts) and the connection's lifecycle.

Inbound, a streamed answer that has a buffer waiting for it (a restore's
block) is decrypted straight into that buffer, record after record
(_divert, _place); everything else is parsed from plaintext chunks.
"""
import logging

from twisted.internet import defer, protocol
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from flud.protocol import messages
from flud.protocol.errors import (AuthenticationFailed, ConnectFailed, ConnectionLost,
                                  ErrorCode, FrameError, RemoteError,
                                  code_for_exception)
from flud.protocol.outbound import Outbound
from flud.protocol.party import LocalParty
from flud.protocol.requests import RequestTable
from flud.protocol.session import (ErrorReceived, HelloReceived,
                                   RequestCancelled, RequestData,
                                   RequestReceived, ResponseData,
                                   ResponseReceived, Session)
from flud.protocol.tls import TLSEndpoint, TLSFailed, hello_transcript

# The name this module's log lines have always carried (it was wire.py).
log = logging.getLogger("flud.wire")

HANDSHAKE_TIMEOUT = 10.0
IDLE_TIMEOUT = 120.0
# Bytes read from the socket at a time; also what the TLS incoming BIO grows
# to (it never shrinks), per connection. Twisted pauses a connection's
# producer once its transport holds more than this (the same attribute), so it
# also bounds the ciphertext queued per connection: READ_BUFFER + one piece
# (SEND_PIECE, NODE_SEND_PIECE on a node).
READ_BUFFER = 64 * 1024
# Where the rest of a diverted payload goes once its request is cancelled.
READ_SCRATCH = 16 * 1024


def transport_backlog(transport):
    """Bytes a Twisted FileDescriptor transport still has to write, or None
    where the transport does not keep them the usual way (test transports).

    Twisted has no public way to ask this. Its FileDescriptor keeps what it
    has not written in `dataBuffer` (from `offset` on) plus the writes not
    yet joined into it, whose length it keeps in the private `_tempDataLen`.
    The send queue's count is exact with it. Should a Twisted release drop
    or rename that attribute, this returns None and the connection counts
    what it wrote since the transport last drained instead (an upper bound,
    exact again at every drain)."""
    try:
        return len(transport.dataBuffer) - transport.offset + transport._tempDataLen
    except (AttributeError, TypeError):
        return None


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
        self._requests = RequestTable()
        self._out = Outbound(local, self.session, self._requests.mark_sent,
                             self._stream_failed, self._fail)
        self._timer = None
        self._last_activity = 0.0
        # A DATA payload decrypted straight into its request's buffer
        # (_divert): where the next bytes go, the request, bytes still to come.
        self._divert_view = None
        self._divert_item = None
        self._divert_left = 0
        self._scratch = None
        self.bytes_in = 0
        self._lost_reason = None  # what pending requests fail with (abort)
        self._throttled = False  # reading held back by the download limit

    # ---- Twisted protocol --------------------------------------------------

    def connectionMade(self):
        # Frames are already batched by the session: Nagle would only hold
        # back the tail of each message until the peer's delayed ACK.
        self.transport.setTcpNoDelay(True)
        self.transport.bufferSize = READ_BUFFER
        self.transport.registerProducer(self, True)
        context = self.local.client_context if self.tls_client else self.local.server_context
        self._tls = TLSEndpoint(context, server_side=not self.tls_client)
        self._out.attach(self.transport, self._tls, transport_backlog)
        self._last_activity = self.clock.seconds()
        self._timer = self.clock.callLater(HANDSHAKE_TIMEOUT, self._check_timeout)
        if self.tls_client:
            self._out.write_handshake(self._tls.start())

    def dataReceived(self, data):
        self.bytes_in += len(data)
        self._last_activity = self.clock.seconds()
        limit = getattr(self.local, "download_limit", None)
        if limit is not None and limit.charge(len(data), self._unthrottle) \
                and not self._throttled:
            self._throttled = True
            self.transport.pauseProducing()
        tls = self._tls
        try:
            tls.feed(data)
            handshake_bytes = tls.pending()
            if handshake_bytes:
                self._out.write_handshake(handshake_bytes)
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
        self._out.flush()

    def _divert(self) -> bool:
        """Take over the DATA payload arriving for a request whose answer has
        a buffer (a RETRIEVE into a block buffer), to decrypt it straight in:
        each TLS record then costs no bytes object, no copy and no parsing."""
        due = self.session.data_due()
        if due is None:
            return False
        rid, length, _ = due
        item = self._requests.get(rid)
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
        self._out.stop()
        self.session.close()
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        lost = self._lost_reason or ConnectionLost(f"connection to {self.describe()} was lost")
        for item in self._requests.fail_all():
            item.waiter.errback(lost)
        self._out.close(lost)  # after the requests failed: nothing holds a fed buffer now
        if not self.ready.called:
            self.ready.errback(lost)
            # Whoever waited has seen it; an accepted connection that hung up
            # before HELLO has nobody waiting, and that is not an error.
            self.ready.addErrback(lambda _: None)
        self.handler.connection_lost(self)

    # ---- push producer (the transport pauses us) ---------------------------

    def pauseProducing(self):
        self._out.pause()

    def resumeProducing(self):
        # The transport wrote out everything it held: the peer is reading.
        self._last_activity = self.clock.seconds()
        self._out.resume()

    def stopProducing(self):
        self._out.pause()

    def _unthrottle(self):
        """The download limit lets us read again."""
        self._throttled = False
        if not self.closed:
            self._last_activity = self.clock.seconds()
            self.transport.resumeProducing()

    @property
    def bytes_out(self) -> int:
        """Bytes written to the transport (TLS included)."""
        return self._out.bytes_out

    # ---- progress (flud.protocol.stall watches it) -------------------------

    @property
    def last_progress(self) -> float:
        """When the peer last showed it is alive: bytes arrived, or our
        transport drained what it held for the peer."""
        return self._last_activity

    def owes_us(self) -> bool:
        """The peer has something to do for us and nothing of it waits on us:
        answer a request that went out whole, or read what we hold for it."""
        if self.closed or self._throttled:
            return False
        return self._out.waiting() or self._requests.owed()

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
        answer = defer.Deferred()
        self._requests.open(rid, op, answer, sink, into, sent=end)
        if not end:
            self._out.add(rid, source, False)
        self._out.flush()
        self._out.pump()
        return answer

    def cancel(self, deferred: defer.Deferred) -> None:
        found = self._requests.cancel(deferred)
        if found is None:
            return
        rid, item = found
        if self._divert_item is item:  # its buffer is the caller's again
            self._divert_view = self._divert_item = None
        # A feeder still feeding learns it was cancelled, not that
        # the connection was lost (which would blame the node).
        cancelled = RemoteError(ErrorCode.CANCELLED, "cancelled")
        self._out.drop(rid, cancelled)
        self.session.cancel(rid)
        self._out.flush()
        item.waiter.errback(cancelled)

    # ---- answers we send (for the handler) ---------------------------------

    def respond(self, rid: int, message) -> None:
        if self.session.send_response(rid, message.encode()):
            self._out.flush()

    def respond_stream(self, rid: int, head_without_data, source, on_done=None) -> None:
        """Answer with a head message, then stream `source` as DATA frames."""
        if source.remaining == 0:
            self.respond(rid, head_without_data)
            source.close()
            return
        if not self.session.send_response(rid, head_without_data.encode(), end=False):
            source.close()
            return
        self._out.add(rid, source, True, on_done)
        self._out.flush()
        self._out.pump()

    def respond_error(self, rid: int, error: BaseException) -> None:
        code = code_for_exception(error)
        text = error.message if isinstance(error, RemoteError) else str(error)
        if code == ErrorCode.INTERNAL:
            log.error("request %d from %s failed", rid, self.describe(), exc_info=error)
            text = "the node failed to handle this request; see its log"
        self._out.drop(rid)
        if self.session.send_error(rid, code, text):
            self._out.flush()

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
            done = self._requests.on_head(event.request_id, event.op, event.message, event.end)
            if done is not None:
                self._out.drop(event.request_id)
                done.waiter.callback(done.finish())
        elif kind is ResponseData:
            done = self._requests.on_data(event.request_id, event.data, event.end)
            if done is not None:
                done.waiter.callback(done.finish())
        elif kind is ErrorReceived:
            item = self._requests.pop(event.request_id)
            # A feeder still feeding learns why (a full node: NO_SPACE), not
            # only that its request ended.
            self._out.drop(event.request_id, event.error)
            if item is not None:
                item.waiter.errback(event.error)
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
                self._out.drop(event.request_id)
                self.handler.request_cancelled(self, event.request_id)
        except Exception as err:  # a handler bug must not kill the connection
            self.respond_error(event.request_id, err)

    def _stream_failed(self, stream, err):
        """A source failed mid-stream: fail that one request, keep the connection."""
        if stream.is_response:
            self.respond_error(stream.rid, err)
            return
        item = self._requests.pop(stream.rid)
        self.session.cancel(stream.rid)
        self._out.flush()
        if item is not None:
            item.waiter.errback(err)

    def _check_timeout(self):
        self._timer = None
        if self.closed:
            return
        if self.peer_id is None:
            self._fail(AuthenticationFailed("the peer did not complete the handshake in time"))
            return
        idle = self.clock.seconds() - self._last_activity
        busy = self.session.open_inbound or self.session.open_outbound or self._out.busy()
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
        self._out.stop()
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
            self.result.errback(ConnectFailed(
                f"cannot connect to {connector.host}:{connector.port}: "
                f"{reason.getErrorMessage()}"))


def dial(reactor, local: LocalParty, handler, host: str, port: int,
         expected_peer: bytes = None, timeout: float = HANDSHAKE_TIMEOUT) -> defer.Deferred:
    """Connect, run TLS and HELLO; fires with a ready Connection.

    Fails with ConnectFailed if TCP never connects (refused, unreachable,
    or not within `timeout`); once connected, with what ended the
    connection before HELLO (ConnectionLost, AuthenticationFailed,
    TLSFailed, FrameError)."""
    factory = _DialFactory(local, handler, reactor, expected_peer)
    reactor.connectTCP(host, port, factory, timeout=timeout)
    return factory.result
