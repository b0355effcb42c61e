"""DHT commands the integration tests run as subprocesses (one reactor each).

    dht_tool.py locate HOME HOST:PORT NODE_ID      a client that knows one node's
        address and another's id only: asks HOST:PORT FIND_NODE, then looks the
        id up; prints {"found": "host:port" | null, "lookups": n}
    dht_tool.py discover HOME HOST:PORT...         Network.discover() through those
        bootstrap addresses, then a lookup of each known id; prints the ids known,
        the ids that answered, and the ids a lookup found
    dht_tool.py hostile HOME PORTFILE FAKES        a hostile bootstrap: a node that
        answers PEERS and FIND_NODE with FAKES records it signed itself (ids it
        made up, addresses where nobody listens); writes its port to PORTFILE
        and serves until killed
"""
import json
import os
import sys

from twisted.internet import defer

from flud.client.network import Network
from flud.cli.runner import run_reactor
from flud.keys import Identity
from flud.protocol import messages
from flud.protocol.codec import Op
from flud.protocol.node_record import Address, sign_record


def out(value) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def address(text):
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def cmd_locate(home, addr, node_id_hex):
    target = bytes.fromhex(node_id_hex)

    @defer.inlineCallbacks
    def main(reactor):
        network = Network(reactor, home, [address(addr)])
        try:
            host, port = address(addr)
            records = yield network._find_node(None, host, port, target)
            network.finder.learn(records)
            found = yield network.locate(target)
            return {"found": f"{found.host}:{found.port}" if found else None,
                    "lookups": network.finder.lookups}
        finally:
            network.close()
    out(run_reactor(main))


def cmd_discover(home, *addrs):
    @defer.inlineCallbacks
    def main(reactor):
        network = Network(reactor, home, [address(a) for a in addrs])
        try:
            yield network.discover()
            found = []
            for node_id in list(network.finder.records):
                located = yield network.locate(node_id)
                if located is not None:
                    found.append(node_id.hex())
            return {"known": [n.hex() for n in network.nodes],
                    "answered": [n.hex() for n in network.finder.answered],
                    "found": found}
        finally:
            network.close()
    out(run_reactor(main))


class HostileHandler:
    """Answers every PEERS and FIND_NODE with its own fakes only."""

    def __init__(self, fakes):
        self.fakes = fakes
        self.listeners = []

    def connection_ready(self, conn):
        pass

    def connection_lost(self, conn):
        pass

    def request_received(self, conn, rid, op, message, end):
        if op == Op.PEERS:
            conn.respond(rid, messages.PeerList([messages.PeerEntry(r) for r in self.fakes]))
        elif op == Op.FIND_NODE:
            target = int.from_bytes(message.target, "big")
            nearest = sorted(self.fakes, key=lambda r: int.from_bytes(r.node_id, "big") ^ target)
            conn.respond(rid, messages.FoundNodes(nearest[:messages.MAX_FOUND]))
        else:
            conn.respond(rid, messages.Empty())

    def request_data(self, conn, rid, data, end):
        pass

    def request_cancelled(self, conn, rid):
        pass


def cmd_hostile(home, portfile, count):
    from twisted.internet import reactor
    from flud.node.gate import GatedConnectionFactory
    from flud.protocol.party import load_party

    import time
    now = int(time.time())
    # Made-up nodes: real keys (their records verify), addresses where no
    # node listens (port 9 on loopback refuses).
    fakes = [sign_record(Identity.generate(), 1, now + 3600, [Address.tcp("127.0.0.1", 9)])
             for _ in range(int(count))]
    local = load_party(home, messages.ROLE_NODE, "127.0.0.1", 0)
    door = GatedConnectionFactory(local, HostileHandler(fakes), reactor)
    port = reactor.listenTCP(0, door, interface="127.0.0.1")
    local.listen_port = port.getHost().port
    with open(portfile + ".tmp", "w") as f:
        f.write(str(local.listen_port))
    os.replace(portfile + ".tmp", portfile)
    reactor.run()


COMMANDS = {"locate": cmd_locate, "discover": cmd_discover, "hostile": cmd_hostile}

if __name__ == "__main__":
    sys.exit(COMMANDS[sys.argv[1]](*sys.argv[2:]) or 0)
