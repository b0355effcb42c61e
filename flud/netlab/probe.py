"""`python -m flud.netlab.probe HOME NODES_JSON`: the STATS of the given
nodes as JSON on stdout ({name: stats or null}). The lab runs it inside a
namespace (flud/netlab/lab.py, Lab.stats) so that it reaches the nodes the
way a host there would; HOME keeps the client identity that asks."""
import json
import sys


def main(argv) -> int:
    home, nodes = argv[0], json.loads(argv[1])
    from twisted.internet import reactor

    from flud.testnet.query import collect_stats

    outcome = []
    d = collect_stats(reactor, home, nodes)
    d.addBoth(outcome.append)
    d.addBoth(lambda _: reactor.stop())
    if not outcome:
        reactor.run(installSignalHandlers=False)
    rows = outcome[0]
    if not isinstance(rows, list):
        rows.raiseException()
    json.dump({node["name"]: stats for node, stats in rows}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
