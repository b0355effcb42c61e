"""A peer as seen by a caller: typed calls that return Deferreds, and the
caller's end of the network (ClientNet) that hands them out."""
from twisted.internet import defer
from twisted.python.failure import Failure

from flud.protocol import messages
from flud.protocol.client_punch import ClientPuncher
from flud.protocol.codec import Op
from flud.protocol.errors import ErrorCode, RemoteError
from flud.protocol.outbound import BytesSource, FedSource
from flud.protocol.party import load_party
from flud.protocol.pool import ConnectionPool


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
        elif op == Op.FIND_NODE:
            conn.respond(rid, messages.FoundNodes([]))  # a client routes nobody
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

    def open_store(self, size: int) -> "StreamedStore":
        """A STORE whose bytes are fed as they are made (KIND_STREAMED_SHARE):
        a share of `size` bytes, then its key, known only at the end."""
        source = FedSource(size + messages.KEY_SIZE)
        answer = self.conn.request(
            Op.STORE, messages.StoreRequest(bytes(messages.KEY_SIZE),
                                            messages.KIND_STREAMED_SHARE, size),
            source=source)
        return StreamedStore(self.conn, source, answer)

    def retrieve(self, key: bytes, offset: int = 0, length: int = messages.TO_END,
                 sink=None, into=None) -> defer.Deferred:
        """Fires with the bytes (or with the total, when a sink took them);
        an answer that fits in `into` (a writable memoryview) lands there."""
        d = self.conn.request(Op.RETRIEVE, messages.RetrieveRequest(key, offset, length),
                              sink=sink, into=into)
        if sink is None:
            return d.addCallback(lambda response: response.data)
        return d.addCallback(lambda response: response.total)

    def verify(self, key: bytes, nonce: bytes, offset: int = 0,
               length: int = messages.TO_END) -> defer.Deferred:
        d = self.conn.request(Op.VERIFY, messages.VerifyRequest(key, nonce, offset, length))
        return d.addCallback(lambda answer: answer.digest)

    def delete(self, key: bytes) -> defer.Deferred:
        return self.conn.request(Op.DELETE, messages.KeyOnly(key))

    def find_node(self, target: bytes, own_record=None) -> defer.Deferred:
        """Fires with the (unchecked) records the node holds nearest target."""
        d = self.conn.request(Op.FIND_NODE, messages.FindNode(target, own_record))
        return d.addCallback(lambda answer: answer.records)

    def root_put(self, record: bytes) -> defer.Deferred:
        return self.conn.request(Op.ROOT_PUT, messages.Record(record))

    def root_get(self) -> defer.Deferred:
        return self.conn.request(Op.ROOT_GET, messages.Empty()).addCallback(lambda r: r.record)


class StreamedStore:
    """One open streamed STORE: feed() the share piece by piece, then
    finish() with its key; that fires when the node has committed it."""

    def __init__(self, conn, source, answer):
        self.conn = conn
        self._source = source
        self._answer = answer
        self._outcome = None   # the answer, once it came
        self._waiter = None
        answer.addBoth(self._answered)

    def feed(self, data) -> defer.Deferred:
        """Fires once the connection has taken all of `data` (it is in TLS
        records on their way, the caller's buffer no longer needed)."""
        return self._source.feed(data)

    def finish(self, key: bytes) -> defer.Deferred:
        self._source.feed(bytes(key)).addErrback(lambda _: None)  # the answer says it
        self._waiter = defer.Deferred()
        if self._outcome is not None:
            self._answered(self._outcome)
        return self._waiter

    def cancel(self) -> None:
        if self._outcome is None:
            self.conn.cancel(self._answer)

    def _answered(self, outcome):
        # Kept here: an answer nobody waits for yet (an early refusal, a
        # cancel) is reported by finish(), not logged as unhandled.
        self._outcome = outcome
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            if isinstance(outcome, Failure):
                waiter.errback(outcome)
            else:
                waiter.callback(outcome)
        return None


class NodeAddress:
    __slots__ = ("node_id", "host", "port")

    def __init__(self, node_id: bytes, host: str, port: int):
        self.node_id = node_id
        self.host = host
        self.port = port

    def __repr__(self) -> str:
        return f"<node {self.node_id.hex()[:12]} {self.host}:{self.port}>"


class ClientNet:
    """A caller's end of the network: who we are (the party, in the client
    role), one pool of connections, and typed peers over it."""

    def __init__(self, reactor, home: str):
        self.reactor = reactor
        self.local = load_party(home, messages.ROLE_CLIENT)
        self.handler = ClientOnlyHandler()
        self.pool = ConnectionPool(reactor, self.local, self.handler)
        # a node reached through a relay is punched to when the NATs allow
        self.puncher = ClientPuncher(reactor, self.local, self.handler, self.pool)
        self.handler.listeners = [self.pool, self.puncher]

    @property
    def client_id(self) -> bytes:
        return self.local.identity.node_id

    def peer(self, node: NodeAddress):
        """Deferred[PeerClient] for a node (its id is checked when known)."""
        d = self.pool.get(node.node_id, node.host, node.port)
        return d.addCallback(PeerClient)

    def close(self) -> None:
        self.pool.close_all()
