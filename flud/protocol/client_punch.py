"""Hole punching from a client (docs/reachability.md, "Hole punching"): a
client behind NAT that reached a node through a relay punches to it like a
node would (flud/protocol/punch_initiator.py), so a backup or restore
between two homes behind NATs runs on a direct connection.

A client listens nowhere, so for each punch it holds an ephemeral port
(bound with SO_REUSEPORT, never listening: the punch's own socket binds it
too) and names it with its outside address, which it asks a node it
reaches directly (OBSERVED). Behind a port-preserving NAT the outside port
is that same port. The node checks what it is told as for any punch.
"""
import socket

from twisted.internet import defer

from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.hole_punch import NAT_UNKNOWN
from flud.protocol.punch_initiator import PunchInitiator

OBSERVED_TIMEOUT = 5.0


def hold_port(v6: bool) -> socket.socket:
    """A bound, unconnected socket that keeps an ephemeral port for a
    punch (SO_REUSEPORT: the punch's socket binds the same port)."""
    held = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    held.bind(("::" if v6 else "0.0.0.0", 0))
    return held


class ClientPuncher(PunchInitiator):
    def __init__(self, reactor, local, handler, pool, enabled: bool = True):
        super().__init__(reactor, local, handler, pool)
        self.enabled = enabled and hasattr(socket, "SO_REUSEPORT")
        self.held = {}         # peer id -> the socket holding its punch's port

    def wants(self, conn) -> bool:
        return self.enabled

    def third_parties(self, peer_id: bytes) -> set:
        """Nodes this client reaches directly: never a punch's target."""
        return {c.transport.getPeer().host for c in self.pool.connections()
                if c.peer_id != peer_id and not getattr(c, "relayed", False)}

    def nat(self) -> int:
        return NAT_UNKNOWN

    @defer.inlineCallbacks
    def own_addresses(self, relayed):
        """[(outside host, held port)]: the host as a directly reached node
        sees this client; [] when none is reached directly."""
        direct = [c for c in self.pool.connections() if not getattr(c, "relayed", False)]
        if not direct:
            return []
        answer = yield direct[0].request(Op.OBSERVED, messages.Empty()).addTimeout(
            OBSERVED_TIMEOUT, self.reactor)
        self.release_port(relayed.peer_id)
        held = self.held[relayed.peer_id] = hold_port(":" in answer.host)
        return [(answer.host, held.getsockname()[1])]

    def release_port(self, peer_id) -> None:
        held = self.held.pop(peer_id, None)
        if held is not None:
            held.close()

    def initiate(self, relayed):
        d = super().initiate(relayed)
        peer_id = relayed.peer_id
        d.addBoth(lambda result: (self.release_port(peer_id), result)[1])
        return d

    def own_hosts(self) -> set:
        return set()
