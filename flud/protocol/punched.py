"""Sockets for a TCP hole punch (docs/reachability.md, "Hole punching";
the exchange is flud/node/hole_punch.py).

A punch dials from the node's own listening port: behind a port-preserving
NAT the SYN then leaves from the outside port peers observed, and opens the
NAT for the peer's SYN coming the other way. Linux lets a connecting socket
bind a port a listener holds only when both carry SO_REUSEPORT. The
listener is bound first without it (so a second node started on the same
port still fails with "address in use"), then marked (share_listening_port);
each punch's socket is marked before its bind (Twisted's makeBinding).

Both sides dial at once: the SYNs cross and TCP's simultaneous open makes
one connection, on which both connect() calls succeed. Which side is the
TLS client is agreed beforehand (the initiator), and each expects the
other's node id in HELLO.
"""
import socket

from twisted.internet.tcp import makeBinding

from flud.protocol.connection import Connection, _DialFactory


def share_listening_port(listening_port) -> bool:
    """Mark a bound, listening Twisted port SO_REUSEPORT so punches can
    dial from it; False where the platform has no SO_REUSEPORT."""
    option = getattr(socket, "SO_REUSEPORT", None)
    if option is None:
        return False
    try:
        listening_port.socket.setsockopt(socket.SOL_SOCKET, option, 1)
    except (OSError, AttributeError):
        return False
    return True


def bind_host_for(target_host: str, listen_host: str) -> str:
    """The local address a punch to target_host binds: the node's own
    listening address if it listens on one, else the wildcard of the
    target's family."""
    v6 = ":" in target_host
    if listen_host in ("", "::", "0.0.0.0"):
        return "::" if v6 else "0.0.0.0"
    return listen_host


class _PunchFactory(_DialFactory):
    def __init__(self, local, handler, clock, expected_peer, tls_client):
        super().__init__(local, handler, clock, expected_peer)
        self.tls_client = tls_client

    def buildProtocol(self, addr):
        conn = Connection(self.local, self.handler, self.clock, tls_client=self.tls_client,
                          expected_peer=self.expected_peer)
        conn.punched = True
        conn.ready.chainDeferred(self.result)
        return conn


def dial_from_port(reactor, local, handler, host: str, port: int, local_port: int,
                   expected_peer: bytes, tls_client: bool, listen_host: str = "",
                   timeout: float = 5.0):
    """Connect to host:port from local_port (shared with the listener),
    then TLS (as client or server, as agreed) and HELLO expecting
    expected_peer. Fires with a ready Connection (its `punched` set), or
    fails with ConnectFailed / what ended it before HELLO."""
    factory = _PunchFactory(local, handler, reactor, expected_peer, tls_client)
    binding = makeBinding(bind_host_for(host, listen_host), local_port,
                          reuseAddress=True, reusePort=True)
    reactor.connectTCP(host, port, factory, timeout=timeout, bindAddress=binding)
    return factory.result
