"""A peer as seen by a caller: typed calls that return Deferreds."""
from twisted.internet import defer

from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.errors import ErrorCode, RemoteError
from flud.protocol.wire import BytesSource


class ClientOnlyHandler:
    """What a client answers when a node asks it something: nothing to give."""

    def __init__(self):
        self.listeners = []

    def connection_ready(self, conn):
        for listener in self.listeners:
            listener.connection_ready(conn)

    def connection_lost(self, conn):
        for listener in self.listeners:
            listener.connection_lost(conn)

    def request_received(self, conn, rid, op, message, end):
        if op == Op.PING:
            conn.respond(rid, messages.Empty())
        elif op == Op.PEERS:
            conn.respond(rid, messages.PeerList([]))
        else:
            conn.respond_error(rid, RemoteError(ErrorCode.UNKNOWN_OP,
                                                "a client serves no storage requests"))

    def request_data(self, conn, rid, data, end):
        pass

    def request_cancelled(self, conn, rid):
        pass


# Below this a STORE is one frame (the copy into the request body is cheap).
INLINE_STORE = 64 * 1024


class PeerClient:
    """Typed operations over one ready Connection."""

    def __init__(self, conn):
        self.conn = conn

    @property
    def node_id(self) -> bytes:
        return self.conn.peer_id

    def ping(self) -> defer.Deferred:
        return self.conn.request(Op.PING, messages.Empty())

    def peers(self, known=()) -> defer.Deferred:
        d = self.conn.request(Op.PEERS, messages.PeerList(list(known)))
        return d.addCallback(lambda answer: answer.peers)

    def stats(self) -> defer.Deferred:
        return self.conn.request(Op.STATS, messages.Empty()).addCallback(lambda s: s.values)

    def store(self, key: bytes, data, kind: int = messages.KIND_SHARE) -> defer.Deferred:
        """STORE bytes: small ones inline in the request (one frame), larger
        ones all in DATA frames that are views of `data`: no copy of a share
        or a tar is made on the way to TLS."""
        size = len(data)
        if size <= INLINE_STORE:
            return self.conn.request(
                Op.STORE, messages.StoreRequest(key, kind, size, bytes(data)))
        return self.conn.request(Op.STORE, messages.StoreRequest(key, kind, size),
                                 source=BytesSource(data))

    def retrieve(self, key: bytes, offset: int = 0, length: int = messages.TO_END,
                 sink=None) -> defer.Deferred:
        """Fires with the bytes (or with the total, when a sink took them)."""
        d = self.conn.request(Op.RETRIEVE, messages.RetrieveRequest(key, offset, length),
                              sink=sink)
        if sink is None:
            return d.addCallback(lambda response: response.data)
        return d.addCallback(lambda response: response.total)

    def verify(self, key: bytes, nonce: bytes, offset: int = 0,
               length: int = messages.TO_END) -> defer.Deferred:
        d = self.conn.request(Op.VERIFY, messages.VerifyRequest(key, nonce, offset, length))
        return d.addCallback(lambda answer: answer.digest)

    def delete(self, key: bytes) -> defer.Deferred:
        return self.conn.request(Op.DELETE, messages.KeyOnly(key))

    def root_put(self, record: bytes) -> defer.Deferred:
        return self.conn.request(Op.ROOT_PUT, messages.Record(record))

    def root_get(self) -> defer.Deferred:
        return self.conn.request(Op.ROOT_GET, messages.Empty()).addCallback(lambda r: r.record)
