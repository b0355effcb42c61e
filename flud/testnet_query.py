"""Asking a testnet's nodes over the wire: convergence and status."""
import os
import time

from twisted.internet import defer, task

from flud.client.net import ClientNet, NodeAddress
from flud.testnet import LaunchError, is_running, load

POLL_INTERVAL = 0.2
STATS_TIMEOUT = 5.0


def run_reactor(fn):
    """Run fn(reactor) -> Deferred under a fresh reactor; return its result."""
    from twisted.internet import reactor

    outcome = {}

    def start():
        d = defer.maybeDeferred(fn, reactor)
        d.addCallbacks(lambda r: outcome.setdefault("result", r),
                       lambda f: outcome.setdefault("failure", f))
        d.addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(start)
    reactor.run(installSignalHandlers=False)
    if "failure" in outcome:
        outcome["failure"].raiseException()
    return outcome.get("result")


def _address(node: dict) -> NodeAddress:
    return NodeAddress(bytes.fromhex(node["node_id"]), node["host"], node["port"])


def _stats(net: ClientNet, node: dict, reactor):
    d = net.peer(_address(node))
    d.addCallback(lambda peer: peer.stats())
    d.addTimeout(STATS_TIMEOUT, reactor)
    return d


def wait_converged(directory: str, nodes: list, deadline: float) -> None:
    want = len(nodes) - 1

    @defer.inlineCallbacks
    def poll(reactor):
        net = ClientNet(reactor, os.path.join(directory, ".launcher"))
        pending = list(nodes)
        try:
            while pending:
                results = yield defer.DeferredList(
                    [_stats(net, n, reactor) for n in pending], consumeErrors=True)
                pending = [n for n, (ok, value) in zip(pending, results)
                           if not ok or value.get("peers_known", 0) < want]
                if not pending:
                    break
                if time.monotonic() > deadline:
                    raise LaunchError(f"{len(pending)} node(s) still do not know every "
                                      f"other node; see their node.log files")
                yield task.deferLater(reactor, POLL_INTERVAL, lambda: None)
        finally:
            net.close()

    run_reactor(poll)


def collect_stats(directory: str, nodes: list) -> list:
    """[(node, stats or None)] for every node, asked in parallel."""

    @defer.inlineCallbacks
    def ask(reactor):
        net = ClientNet(reactor, os.path.join(directory, ".launcher"))
        try:
            results = yield defer.DeferredList(
                [_stats(net, n, reactor) if is_running(n) else defer.fail(Exception("down"))
                 for n in nodes], consumeErrors=True)
        finally:
            net.close()
        return [(n, value if ok else None) for n, (ok, value) in zip(nodes, results)]

    return run_reactor(ask)


def status(args) -> int:
    directory = os.path.abspath(args.dir)
    nodes = load(directory)["nodes"]
    if not nodes:
        print(f"no testnet in {directory}")
        return 1
    rows = collect_stats(directory, nodes)
    print(f"{'#':>3} {'node':12} {'port':>5} {'pid':>7} {'alive':5} {'peers':>5} "
          f"{'shares':>7} {'members':>7} {'stored':>10} {'rss':>8} {'peak rss':>8} "
          f"{'xfers':>5} {'buffered':>8} {'cpu s':>6}")
    alive = 0
    for i, (node, stats) in enumerate(rows):
        if stats is None:
            print(f"{i:>3} {node['node_id'][:12]} {node['port']:>5} {node['pid']:>7} {'no':5}")
            continue
        alive += 1
        store, memory = stats["store"], stats["memory"]
        print(f"{i:>3} {node['node_id'][:12]} {node['port']:>5} {node['pid']:>7} {'yes':5} "
              f"{stats['peers_known']:>5} {store['shares']:>7} {store['members']:>7} "
              f"{_mb(store['bytes_stored']):>10} {_mb(memory['rss']):>8} "
              f"{_mb(memory['peak_rss']):>8} {memory['active_transfers']:>5} "
              f"{_mb(memory['buffered_bytes']):>8} {stats['cpu_seconds']:>6.1f}")
    print(f"{alive} of {len(nodes)} nodes alive")
    return 0 if alive == len(nodes) else 1


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
