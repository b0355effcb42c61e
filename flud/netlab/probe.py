"""`python -m flud.netlab.probe HOME NODES_JSON [RELAYS_JSON]`: the STATS
of the given nodes as JSON on stdout ({name: stats or null}). The lab runs
it inside a namespace (flud/netlab/lab.py) so that it reaches the nodes the
way a host there would; HOME keeps the client identity that asks.

A node whose host is "relay:RELAY_ID_HEX" is reached through that relay;
RELAYS_JSON maps relay ids (hex) to [host, port]."""
import json
import os
import sys

STATS_TIMEOUT = 15.0


def main(argv) -> int:
    home, nodes = argv[0], json.loads(argv[1])
    relays = {bytes.fromhex(k): tuple(v) for k, v in json.loads(argv[2]).items()} \
        if len(argv) > 2 else {}
    from twisted.internet import defer, reactor

    from flud.protocol.client import ClientNet, NodeAddress

    net = ClientNet(reactor, os.path.join(home, ".launcher"))
    net.pool.resolve_relay = relays.get

    def ask(node):
        d = net.peer(NodeAddress(bytes.fromhex(node["node_id"]), node["host"], node["port"]))
        d.addCallback(lambda peer: peer.stats())
        d.addTimeout(STATS_TIMEOUT, reactor)
        return d

    outcome = []
    d = defer.DeferredList([ask(n) for n in nodes], consumeErrors=True)
    d.addBoth(outcome.append)
    d.addBoth(lambda _: reactor.stop())
    if not outcome:
        reactor.run(installSignalHandlers=False)
    net.close()
    json.dump({node["name"]: (value if ok else None)
               for node, (ok, value) in zip(nodes, outcome[0])}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
