"""Asking a testnet's nodes over the wire: whether they have all met, and
their STATS. Each call returns a Deferred; the caller runs the reactor."""
import json
import os
import time

from twisted.internet import defer, task

from flud.protocol.client import ClientNet, NodeAddress
from flud.testnet.launch import LaunchError, node_running, testnet_file

POLL_INTERVAL = 0.2
STATS_TIMEOUT = 5.0
LAUNCHER_HOME = ".launcher"  # the client identity that asks, inside the testnet directory


def read_testnet(directory: str) -> list:
    """The nodes of a testnet directory, as NodeAddress."""
    path = testnet_file(directory)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise SystemExit(f"no testnet at {directory}: run `flud testnet up --dir {directory}` first") from None
    return [NodeAddress(bytes.fromhex(n["node_id"]), n["host"], n["port"]) for n in data["nodes"]]


def _address(node: dict) -> NodeAddress:
    return NodeAddress(bytes.fromhex(node["node_id"]), node["host"], node["port"])


def _stats(net: ClientNet, node: dict, reactor):
    d = net.peer(_address(node))
    d.addCallback(lambda peer: peer.stats())
    d.addTimeout(STATS_TIMEOUT, reactor)
    return d


# A node counts as joined once its DHT join is done and its routing table
# holds this many contacts (or every other node, in a smaller testnet).
from flud.testnet.crowd import JOINED_CONTACTS  # noqa: E402


def joined(stats: dict, others: int) -> bool:
    dht = stats.get("dht") or {}
    return bool(dht.get("joined")) and dht.get("contacts", 0) >= min(others, JOINED_CONTACTS)


@defer.inlineCallbacks
def wait_converged(reactor, directory: str, nodes: list, deadline: float):
    """Fires once every node has joined the DHT (joined() above: not once
    every node knows every other, which is what made a 200-node testnet
    take a minute); fails with LaunchError past deadline (a monotonic time)."""
    want = len(nodes) - 1
    net = ClientNet(reactor, os.path.join(directory, LAUNCHER_HOME))
    pending = list(nodes)
    try:
        while pending:
            results = yield defer.DeferredList(
                [_stats(net, n, reactor) for n in pending], consumeErrors=True)
            pending = [n for n, (ok, value) in zip(pending, results)
                       if not ok or not joined(value, want)]
            if not pending:
                break
            if time.monotonic() > deadline:
                raise LaunchError(f"{len(pending)} node(s) have not joined the DHT "
                                  f"yet (routing table of {min(want, JOINED_CONTACTS)}); see their node.log files")
            yield task.deferLater(reactor, POLL_INTERVAL, lambda: None)
    finally:
        net.close()


@defer.inlineCallbacks
def collect_stats(reactor, directory: str, nodes: list):
    """Fires with [(node, stats or None)] for every node, asked in parallel."""
    net = ClientNet(reactor, os.path.join(directory, LAUNCHER_HOME))
    try:
        results = yield defer.DeferredList(
            [_stats(net, n, reactor) if node_running(n) else defer.fail(Exception("down"))
             for n in nodes], consumeErrors=True)
    finally:
        net.close()
    return [(n, value if ok else None) for n, (ok, value) in zip(nodes, results)]
