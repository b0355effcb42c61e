"""Twisted glue: TCP bytes <-> TLSEndpoint <-> Session, and nothing more.

A Connection is symmetric: either side may send requests once both HELLOs
are verified. Outbound DATA (a STORE upload, a RETRIEVE answer) streams from
sources through one round-robin pump that is the transport's push producer,
so a slow reader pauses us instead of growing a buffer.
"""
import collections
import logging

from twisted.internet import defer, protocol
from zope.interface import implementer
from twisted.internet.interfaces import IPushProducer

from flud.protocol import messages
from flud.protocol.codec import DATA_CHUNK, Op
from flud.protocol.errors import (AuthenticationFailed, ConnectionLost,
                                  ErrorCode, FrameError, RemoteError,
                                  code_for_exception)
from flud.protocol.session import (ErrorReceived, HelloReceived,
                                   RequestCancelled, RequestData,
                                   RequestReceived, ResponseData,
                                   ResponseReceived, Session)
from flud.protocol.tls import TLSEndpoint, TLSFailed, hello_transcript

log = logging.getLogger("flud.wire")

HANDSHAKE_TIMEOUT = 10.0
IDLE_TIMEOUT = 120.0
# Bytes read from the socket at a time; also what the TLS incoming BIO grows
# to (it never shrinks), per connection.
READ_BUFFER = 64 * 1024


class LocalParty:
    """Who we are on the wire: identity, role, where we listen, TLS contexts."""

    def __init__(self, identity, role, server_context, client_context,
                 listen_host="", listen_port=0):
        self.identity = identity
        self.role = role
        self.server_context = server_context
        self.client_context = client_context
        self.listen_host = listen_host
        self.listen_port = listen_port


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


class _Stream:
    __slots__ = ("rid", "source", "is_response", "on_done")

    def __init__(self, rid, source, is_response, on_done):
        self.rid = rid
        self.source = source
        self.is_response = is_response
        self.on_done = on_done


class _Pending:
    __slots__ = ("deferred", "op", "sink", "head", "parts")

    def __init__(self, op, sink):
        self.deferred = defer.Deferred()
        self.op = op
        self.sink = sink
        self.head = None
        self.parts = []  # streamed bytes, when the caller gave no sink

    def finish(self):
        if self.parts:
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
        self._paused = False
        self._timer = None
        self._last_activity = 0.0
        self.bytes_in = 0
        self.bytes_out = 0

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
            client_hello = self._tls.start()
            self.bytes_out += len(client_hello)
            self.transport.write(client_hello)

    def dataReceived(self, data):
        self.bytes_in += len(data)
        self._last_activity = self.clock.seconds()
        try:
            plaintext = self._tls.receive(data)
            handshake_bytes = self._tls.pending()
            if handshake_bytes:
                self.bytes_out += len(handshake_bytes)
                self.transport.write(handshake_bytes)
            if self._tls.handshake_done and not self._hello_sent:
                self._send_hello()
            for chunk in plaintext:
                for event in self.session.receive(chunk):
                    self._dispatch(event)
                    if self.closed:
                        return
        except (TLSFailed, FrameError, AuthenticationFailed) as err:
            self._fail(err)
            return
        self._flush()

    def connectionLost(self, reason=None):
        self.closed = True
        self.session.close()
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        pending, self._pending = self._pending, {}
        lost = ConnectionLost(f"connection to {self.describe()} was lost")
        for item in pending.values():
            item.deferred.errback(lost)
        for stream in self._streams:
            stream.source.close()
        self._streams.clear()
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
        self._paused = False
        self._pump()

    def stopProducing(self):
        self._paused = True

    def pause_reading(self):
        self.transport.pauseProducing()

    def resume_reading(self):
        self.transport.resumeProducing()

    # ---- requests we send --------------------------------------------------

    def request(self, op: int, message, sink=None, source=None,
                total: int = 0) -> defer.Deferred:
        """Send a request; the Deferred fires with the response message.

        `sink(chunk)` receives streamed response bytes (RETRIEVE); `source`
        supplies request bytes after the first ones (STORE).
        """
        if self.closed:
            return defer.fail(ConnectionLost(f"connection to {self.describe()} is closed"))
        try:
            body = message.encode()
        except Exception as err:  # e.g. a key that is not 32 bytes
            return defer.fail(err)
        end = source is None or source.remaining == 0
        rid = self.session.send_request(op, body, end=end)
        pending = _Pending(op, sink)
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
                self._drop_stream(rid)
                self.session.cancel(rid)
                self._flush()
                item.deferred.errback(RemoteError(ErrorCode.CANCELLED, "cancelled"))
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
            self._drop_stream(event.request_id)
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
        if item.sink is not None:
            item.sink(data)
        else:
            item.parts.append(data)

    def _drop_stream(self, rid):
        for stream in self._streams:
            if stream.rid == rid:
                self._streams.remove(stream)
                stream.source.close()
                return

    def _pump(self):
        """Send DATA round-robin across streams until the transport pauses us."""
        session = self.session
        while self._streams and not self._paused and not self.closed:
            stream = self._streams.popleft()
            try:
                chunk = stream.source.read(DATA_CHUNK)
            except Exception as err:  # e.g. a share cut short on disk
                stream.source.close()
                self._stream_failed(stream, err)
                continue
            end = stream.source.remaining == 0
            if stream.is_response:
                session.send_response_data(stream.rid, chunk, end)
            else:
                session.send_request_data(stream.rid, chunk, end)
            if end:
                stream.source.close()
                if stream.on_done is not None:
                    stream.on_done()
            else:
                self._streams.append(stream)
            self._flush()

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
        if self.closed or not self._tls.handshake_done:
            return
        for chunk in self.session.take_outbound():
            pieces = self._tls.send(chunk)
            self.bytes_out += sum(map(len, pieces))
            self.transport.writeSequence(pieces)

    def _check_timeout(self):
        self._timer = None
        if self.closed:
            return
        if self.peer_id is None:
            self._fail(AuthenticationFailed("the peer did not complete the handshake in time"))
            return
        idle = self.clock.seconds() - self._last_activity
        busy = self.session.open_inbound or self.session.open_outbound or self._streams
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
