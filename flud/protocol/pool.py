"""One authenticated connection per peer, reused for every request.

Either side's connection serves both directions, so a peer that dialled us is
reached over the connection it opened. Dials to the same peer are shared.
"""
import logging

from twisted.internet import defer
from twisted.python.failure import Failure

from flud.protocol.connection import dial
from flud.protocol.errors import ConnectFailed

RELAY_HOST = "relay:"   # a host of this form: reach the node through that relay

log = logging.getLogger("flud.pool")

MAX_CONNECTIONS = 512


class ConnectionPool:
    def __init__(self, reactor, local, handler):
        self.reactor = reactor
        self.local = local
        self.handler = handler
        self._by_peer = {}   # node id -> Connection
        self._dialing = {}   # node id -> [waiting Deferreds]
        # relay id -> (host, port) of that relay, or None: how a node known
        # only by a `relay:` hint is reached (host "relay:ID", see get)
        self.resolve_relay = None

    def __len__(self) -> int:
        return len(self._by_peer)

    def add(self, conn) -> None:
        if conn.peer_id is not None and not conn.closed:
            self._by_peer.setdefault(conn.peer_id, conn)

    def replace(self, conn) -> None:
        """conn serves its peer from now on, in place of the connection held
        (a punched, direct one taking over from a relayed one)."""
        if conn.peer_id is not None and not conn.closed:
            self._by_peer[conn.peer_id] = conn

    def discard(self, conn) -> None:
        if self._by_peer.get(conn.peer_id) is conn:
            del self._by_peer[conn.peer_id]

    def connections(self) -> list:
        """Every open connection, to watch (flud.protocol.stall)."""
        return [conn for conn in self._by_peer.values() if not conn.closed]

    def connection(self, node_id):
        """The open connection to a peer, if there is one."""
        conn = self._by_peer.get(node_id)
        return conn if conn is not None and not conn.closed else None

    connection_ready = add
    connection_lost = discard

    def get(self, node_id, host: str, port: int) -> defer.Deferred:
        """A ready connection to the peer (node_id None: whoever answers)."""
        conn = self._by_peer.get(node_id) if node_id is not None else None
        if conn is not None and not conn.closed:
            return defer.succeed(conn)
        if node_id is not None and node_id in self._dialing:
            waiter = defer.Deferred()
            self._dialing[node_id].append(waiter)
            return waiter
        if len(self._by_peer) >= MAX_CONNECTIONS:
            self._close_one_idle()
        if node_id is not None:
            self._dialing[node_id] = []
        if host.startswith(RELAY_HOST):
            d = self._dial_relayed(node_id, host)
        else:
            d = dial(self.reactor, self.local, self.handler, host, port, expected_peer=node_id)
        d.addBoth(self._dialled, node_id)
        return d

    def _dial_relayed(self, node_id, host) -> defer.Deferred:
        """node_id through the relay named by host ("relay:RELAY_ID_HEX")."""
        from flud.protocol.relayed import dial_through
        try:
            relay_id = bytes.fromhex(host[len(RELAY_HOST):])
        except ValueError:
            relay_id = b""
        where = self.resolve_relay(relay_id) if self.resolve_relay and node_id else None
        if where is None:
            return defer.fail(ConnectFailed(f"no address known for relay {host[6:18]}"))
        return dial_through(self.reactor, self.local, self.handler, where[0], where[1], node_id)

    def _dialled(self, result, node_id):
        waiters = self._dialing.pop(node_id, []) if node_id is not None else []
        if not isinstance(result, Failure):
            self.add(result)
            result = self._by_peer.get(result.peer_id, result)
        for waiter in waiters:
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(result)
        return result

    def _close_one_idle(self) -> None:
        for conn in list(self._by_peer.values()):
            if not conn.session.open_inbound and not conn.session.open_outbound:
                self.discard(conn)
                conn.close()
                return

    def close_all(self) -> None:
        for conn in list(self._by_peer.values()):
            conn.close()
        self._by_peer.clear()
