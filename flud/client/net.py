"""A client's view of the network: its identity, a pool, typed peers."""
import json
import os

from flud.protocol import messages
from flud.protocol.client import ClientOnlyHandler, PeerClient
from flud.protocol.party import load_party
from flud.protocol.pool import ConnectionPool


class NodeAddress:
    __slots__ = ("node_id", "host", "port")

    def __init__(self, node_id: bytes, host: str, port: int):
        self.node_id = node_id
        self.host = host
        self.port = port

    def __repr__(self) -> str:
        return f"<node {self.node_id.hex()[:12]} {self.host}:{self.port}>"


def read_testnet(directory: str) -> list:
    """The nodes of a testnet directory, as NodeAddress."""
    path = os.path.join(directory, "testnet.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise SystemExit(f"no testnet at {directory}: run `flud testnet up --dir {directory}` first") from None
    return [NodeAddress(bytes.fromhex(n["node_id"]), n["host"], n["port"]) for n in data["nodes"]]


class ClientNet:
    def __init__(self, reactor, home: str):
        self.reactor = reactor
        self.local = load_party(home, messages.ROLE_CLIENT)
        self.handler = ClientOnlyHandler()
        self.pool = ConnectionPool(reactor, self.local, self.handler)
        self.handler.listeners = [self.pool]

    @property
    def client_id(self) -> bytes:
        return self.local.identity.node_id

    def peer(self, node: NodeAddress):
        """Deferred[PeerClient] for a node (its id is checked when known)."""
        d = self.pool.get(node.node_id, node.host, node.port)
        return d.addCallback(PeerClient)

    def close(self) -> None:
        self.pool.close_all()
